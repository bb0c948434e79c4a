"""A sample agent for `interlock serve`: it looks up an order once (a
journaled step), tells a person on the suspend pass only, asks before it
refunds, and takes the amount the approver decides.

    interlock serve &                       # NATS on 127.0.0.1:4222 and the coordinator
    python examples/refund_agent.py         # starts a worker and one run, waits
    interlock approve <run> --payload '{"amount": 35}'   # in another terminal
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import nats

import interlock
from interlock import Cancelled, Client, Request, Worker


async def refund_agent(order: dict[str, Any]) -> dict[str, Any]:
    # Journaled: runs on the first pass; every replay gets the recorded result.
    ticket = await interlock.step("open-ticket", lambda: f"T-{order['id']}")
    with interlock.tool_call("call_issue_refund"):
        if not interlock.is_resuming():
            print(f"asking a person to approve the refund for {order['id']} (once, on the suspend pass)")
        try:
            d = interlock.interrupt(
                Request(
                    message=f"Refund {order['amount']:.2f} for order {order['id']}?",
                    response_schema={"type": "object", "required": ["amount"]},
                )
            )
        except Cancelled as c:
            return {"refunded": False, "ticket": ticket, "why": c.comment or c.reason}
    return {"refunded": True, "amount": d.payload["amount"], "ticket": ticket, "approver": d.approver}


async def main() -> None:
    nc = await nats.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    worker = Worker(nc)
    worker.register("py_refunds", refund_agent)
    client = Client(nc)
    async with worker:
        run = await client.start("py_refunds", {"id": "A-1", "amount": 40})
        rec = await client.wait(run, interlock.suspended, timeout=30)
        print(f"run {run} waits for a decision:")
        print(f"  interlock approve {run} --payload '{{\"amount\": 35}}'")
        print(f"  interlock deny {run} --comment 'not eligible'")
        rec = await client.wait(run, timeout=3600)
        print(f"{rec.status}: {rec.result or rec.error}")
    await client.close()
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
