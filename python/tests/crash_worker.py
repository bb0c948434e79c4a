"""A worker process for the crash test: python crash_worker.py URL AGENT DIR.

Its body journals a step (appending a line to DIR/step each time the step's
function runs), then asks. On a replay, while DIR/crashed does not exist, it
writes DIR/replaying and hangs, so the test can SIGKILL it mid-pass."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import nats

import interlock


async def main(url: str, agent: str, marks: Path) -> None:
    def charge() -> str:
        with (marks / "step").open("a") as f:
            f.write(f"{os.getpid()}\n")
        return "charge-1"

    async def body(inp: Any) -> Any:
        charged = await interlock.step("charge", charge)
        with interlock.tool_call("call_1"):
            if interlock.is_resuming() and not (marks / "crashed").exists():
                (marks / "replaying").write_text(str(os.getpid()))
                await asyncio.Event().wait()  # until killed
            d = interlock.interrupt(interlock.Request(message="ship it?"))
        return {"charged": charged, "answer": d.payload}

    nc = await nats.connect(url)
    w = interlock.Worker(nc, ack_wait=2.0, concurrency=1)
    w.register(agent, body)
    await w.start()
    (marks / f"ready-{os.getpid()}").write_text("")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
