"""The UiPath example (examples/notify_once.py): a person is notified on
the suspend pass only, with is_resuming() and with step, across a replay."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from test_replay import suspended_at, worker

import interlock
from interlock import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import notify_once


@pytest.mark.parametrize(
    "make", [notify_once.refund_tool_with_is_resuming, notify_once.refund_tool_with_step], ids=["is_resuming", "step"]
)
async def test_the_person_is_notified_once(nc: NATS, client: Client, agent_name: str, make: object) -> None:
    sent: list[tuple[str, str]] = []

    async def notify(to: str, text: str) -> str:
        sent.append((to, text))
        return f"notice-{len(sent)}"

    assert callable(make)
    async with worker(nc, agent_name, make(notify)):
        approved = await client.start(agent_name, {"id": "A-1", "amount": 40})
        await suspended_at(client, approved)
        assert sent == [("finance", "Please approve the refund of 40 for A-1")]
        await client.approve(approved, interlock.interrupt_id(approved, "call_issue_refund", 0), approver="ada")
        rec = await client.wait(approved)
        assert rec.result["refunded"] is True and rec.result["by"] == "ada"
        denied = await client.start(agent_name, {"id": "A-2", "amount": 5})
        await suspended_at(client, denied)
        await client.deny(denied, interlock.interrupt_id(denied, "call_issue_refund", 0), comment="no")
        rec = await client.wait(denied)
        assert rec.result["refunded"] is False and rec.result["why"] == "no"
    assert [t for _, t in sent] == [
        "Please approve the refund of 40 for A-1",
        "Please approve the refund of 5 for A-2",
    ], "one notice per run, none on the replays"
    if make is notify_once.refund_tool_with_step:
        assert rec.result["notice"] == "notice-2", "the replay got the recorded notice id"
