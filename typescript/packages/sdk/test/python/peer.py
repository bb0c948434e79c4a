"""The Python side of typescript/packages/sdk/test/python.test.ts.

  peer.py client AGENT   start a run of AGENT (a TypeScript worker's), wait
                         until it suspends, approve its one interrupt with a
                         falsy payload (0), print the run's record as JSON
  peer.py worker AGENT   run a Python worker for AGENT (it asks once, and
                         returns the decision or the cancellation), print
                         "ready" once it runs, stop when stdin closes

NATS_URL names the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import interlock
import nats
from interlock import Cancelled, Client, Request, Worker


async def client(nc: Any, agent: str) -> None:
    c = Client(nc)
    run = await c.start(agent, {"order": "A-1", "amount": 40})
    rec = await c.wait(run, interlock.suspended, timeout=30)
    [pending] = rec.pending()
    await c.approve(run, pending["id"], 0, approver="py-ada", comment="from Python")
    rec = await c.wait(run, timeout=30)
    print(
        json.dumps(
            {
                "run": run,
                "interrupt": pending["id"],
                "message": pending["message"],
                "status": rec.status,
                "result": rec.result,
            }
        )
    )
    await c.close()


async def body(order: dict[str, Any]) -> dict[str, Any]:
    with interlock.tool_call("call_refund"):
        try:
            d = interlock.interrupt(Request(message=f"Refund {order['amount']} for {order['order']}?"))
        except Cancelled as e:
            return {"refunded": False, "reason": e.reason, "comment": e.comment, "by": e.approver}
    return {"refunded": True, "payload": d.payload, "by": d.approver, "language": "python"}


async def worker(nc: Any, agent: str) -> None:
    w = Worker(nc)
    w.register(agent, body)
    async with w:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def main() -> None:
    mode, agent = sys.argv[1], sys.argv[2]
    nc = await nats.connect(os.environ["NATS_URL"])
    try:
        await (client if mode == "client" else worker)(nc, agent)
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
