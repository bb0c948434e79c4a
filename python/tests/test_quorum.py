"""Decision policies (protocol version 2) end to end, against a real
`interlock serve` built from this tree: a quorum of votes with the requester
excluded, votes bound to the call's digest, the replay's check of the
approved call, every vote and the execution key on the replay."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from test_worker import eventually

import interlock
from interlock import Client, Run, Worker

REFUND = {"order": "A-1001", "amount": 42.5}


@contextlib.asynccontextmanager
async def worker(nc: NATS, agent: str, fn: interlock.AgentFunc) -> AsyncIterator[Worker]:
    w = Worker(nc)
    w.register(agent, fn)
    await w.start()
    try:
        yield w
    finally:
        await w.stop(timeout=10)


def refund_request(args: dict[str, Any]) -> interlock.Request:
    return interlock.Request(
        message="Refund?",
        approvers=["ada", "bob", "cy"],
        call=interlock.Call("issue_refund", args),
        policy=interlock.Policy(approvals=2),
    )


async def refund_agent(input: Any) -> Any:
    with interlock.tool_call("call_1"):
        d = interlock.interrupt(refund_request(REFUND))
        return {
            "key": interlock.execution_key(),
            "digest": d.call_digest,
            "arguments": interlock.approved_arguments(d, REFUND),
            "votes": [{"approver": v.approver, "at": v.at, "status": v.status} for v in d.votes],
        }


async def suspended(client: Client, run: str) -> Run:
    rec = await client.wait(run, lambda r: r.finished or r.status == "suspended")
    assert rec.status == "suspended", (rec.status, rec.error)
    return rec


async def test_two_of_three_requester_excluded(nc: NATS, client: Client, agent_name: str) -> None:
    async with worker(nc, agent_name, refund_agent):
        run = await client.start(agent_name, {}, requester="ada")
        rec = await suspended(client, run)
        assert rec.raw["requester"] == "ada"
        pending = rec.pending()[0]
        digest = pending["call"]["digest"]
        assert digest == interlock.call_digest("issue_refund", REFUND)
        iid = pending["id"]

        with pytest.raises(interlock.Rejected) as e:
            await client.approve(run, iid, approver="ada", call_digest=digest)
        assert e.value.verdict.code == "requester_excluded"

        v = await client.approve(run, iid, approver="bob", call_digest=digest)
        assert v.outcome == "vote_recorded" and v.vote_recorded

        # The pending index shows the call, the policy and the votes so far.
        async def voted() -> interlock.PendingInterrupt | None:
            return next((p for p in await client.pending() if p.run_id == run and p.votes), None)

        await eventually(voted, "the pending entry with bob's vote")
        entry = await voted()
        assert entry is not None and entry.call is not None and entry.policy is not None
        assert entry.call["digest"] == digest and entry.policy["approvals"] == 2
        assert [x.approver for x in entry.votes] == ["bob"]
        assert v.tally is not None
        assert (v.tally.approvals, v.tally.approvals_needed) == (1, 2)
        assert "cy" in v.tally.waiting_on

        with pytest.raises(interlock.Rejected) as e:
            await client.approve(run, iid, approver="bob", call_digest=digest)
        assert e.value.verdict.code == "already_voted"

        stale = interlock.call_digest("issue_refund", {"order": "A-1001", "amount": 4250})
        with pytest.raises(interlock.Rejected) as e:
            await client.approve(run, iid, approver="cy", call_digest=stale)
        assert e.value.verdict.code == "call_mismatch"

        v = await client.approve(run, iid, approver="cy", call_digest=digest)
        assert v.outcome == "accepted"

        done = await client.wait(run)
        assert done.status == "completed", done.error
        out = done.result
        assert out["digest"] == digest
        assert re.fullmatch("[0-9a-f]{64}", out["key"])
        assert out["arguments"] == REFUND
        assert [x["approver"] for x in out["votes"]] == ["bob", "cy"]
        assert all(x["at"] and x["status"] == "resolved" for x in out["votes"])


async def test_replay_refuses_another_call(nc: NATS, client: Client, agent_name: str) -> None:
    """The pass that runs the approved call asks for other arguments: it
    fails closed with CallMismatch instead of running them."""

    async def drifting(input: Any) -> Any:
        info = interlock.run_info()
        assert info is not None
        args = REFUND if info.pass_ == 0 else {"order": "A-1001", "amount": 4250}
        with interlock.tool_call("call_1"):
            req = refund_request(args)
            interlock.interrupt(interlock.Request(call=req.call, policy=interlock.Policy(approvals=1)))
            return "refunded"

    async with worker(nc, agent_name, drifting):
        run = await client.start(agent_name, {})
        rec = await suspended(client, run)
        iid = rec.pending()[0]["id"]
        v = await client.approve(run, iid, approver="bob")
        assert v.outcome == "accepted"
        done = await client.wait(run)
        assert done.status == "failed"
        assert "call differs from the approved call" in done.error


async def test_edited_arguments_are_the_approved_call(nc: NATS, client: Client, agent_name: str) -> None:
    async def agent(input: Any) -> Any:
        with interlock.tool_call("call_1"):
            req = interlock.Request(call=interlock.Call("issue_refund", REFUND))
            d = interlock.interrupt(req)
            return {"arguments": interlock.approved_arguments(d, REFUND), "key": interlock.execution_key()}

    async with worker(nc, agent_name, agent):
        run = await client.start(agent_name, {})
        rec = await suspended(client, run)
        iid = rec.pending()[0]["id"]
        edited = {"order": "A-1001", "amount": 40}
        v = await client.approve(run, iid, approver="bob", arguments=edited)
        assert v.outcome == "accepted"
        done = await client.wait(run)
        assert done.status == "completed", done.error
        assert done.result["arguments"] == edited
        assert re.fullmatch("[0-9a-f]{64}", done.result["key"])
