"""The Strands adapter against a real server, with a scripted model: native
tool_context.interrupt() becomes an Interlock suspension, the decision comes
back as an interruptResponse, cancelled is a distinct value, and the agent's
state lives in JetStream so the replay runs in another worker."""

from __future__ import annotations

from typing import Any

import nats
from conftest import Server
from nats.aio.client import Client as NATS
from scripted import ScriptedModel
from strands import Agent, ToolContext, tool
from test_replay import suspended_at, worker

import interlock
from interlock import Client
from interlock.adapters.strands import StrandsAgent, is_cancelled

calls: list[str] = []
results: list[str] = []


@tool(context=True)
def delete(path: str, tool_context: ToolContext) -> str:
    """Delete a file."""
    calls.append(path)
    answer = tool_context.interrupt("approve-delete", reason=f"Delete {path}?")
    out = f"kept {path} ({answer['comment']})" if is_cancelled(answer) else f"deleted {path} ({answer})"
    results.append(out)
    return out


@tool(context=True)
def transfer(amount: int, tool_context: ToolContext) -> str:
    """Move money: asks the owner, then compliance."""
    owner = tool_context.interrupt("owner", reason=f"Transfer {amount}?")
    compliance = tool_context.interrupt("compliance", reason={"amount": amount, "owner": owner})
    results.append(f"transferred {amount}: owner={owner} compliance={compliance}")
    return results[-1]


def agent_factory(script: list[list[dict[str, Any]]], *tools: Any) -> Any:
    return lambda: Agent(model=ScriptedModel(script), tools=list(tools), callback_handler=None)


async def test_parallel_identical_tool_calls_suspend_together(
    nc: NATS, server: Server, client: Client, agent_name: str
) -> None:
    script: list[list[dict[str, Any]]] = [
        [
            {"tool": "delete", "id": "tool_1", "input": {"path": "/tmp/a"}},
            {"tool": "delete", "id": "tool_2", "input": {"path": "/tmp/a"}},
        ],
        [{"text": "one deleted, one kept"}],
    ]
    body = StrandsAgent(nc, agent_factory(script, delete))
    calls.clear()
    results.clear()
    async with worker(nc, agent_name, body):
        run = await client.start(agent_name, {"prompt": "clean up /tmp/a twice"})
        rec = await suspended_at(client, run)
    pending = rec.pending()
    assert len(pending) == 2, pending
    assert all(p["message"] == "Delete /tmp/a?" for p in pending)
    by_tool = {p["metadata"]["strands"]["id"].split(":")[2]: p["id"] for p in pending}
    assert set(by_tool) == {"tool_1", "tool_2"}
    # The replay runs in another worker, on another connection: the state is in JetStream.
    other = await nats.connect(server.url)
    try:
        async with worker(other, agent_name, StrandsAgent(other, agent_factory(script, delete))):
            await client.approve(run, by_tool["tool_1"], payload="ok")
            await client.deny(run, by_tool["tool_2"], comment="keep it")
            rec = await client.wait(run)
    finally:
        await other.close()
    assert rec.status == "completed", rec.error
    assert rec.result == "one deleted, one kept"
    snap = await nc.jetstream().key_value("interlock_strands")
    assert (await snap.get(f"{run}.0")).value, "the suspend pass's snapshot"
    assert calls == ["/tmp/a", "/tmp/a", "/tmp/a", "/tmp/a"], "each tool ran on the suspend pass and on the replay"
    assert sorted(results) == ["deleted /tmp/a (ok)", "kept /tmp/a (keep it)"], "cancelled is a distinct value"


async def test_sequential_interrupts_in_one_tool(nc: NATS, client: Client, agent_name: str) -> None:
    script: list[list[dict[str, Any]]] = [
        [{"tool": "transfer", "id": "tool_t", "input": {"amount": 40}}],
        [{"text": "transferred"}],
    ]
    seen: list[str] = []
    body = StrandsAgent(nc, agent_factory(script, transfer))

    async def recording(inp: Any) -> Any:
        try:
            return await body(inp)
        finally:
            info = interlock.run_info()
            assert info is not None
            seen.append(f"pass {info.pass_}")

    async with worker(nc, agent_name, recording):
        run = await client.start(agent_name, "send 40 to Bob")
        rec = await suspended_at(client, run, 0)
        (owner,) = rec.pending()
        assert owner["message"] == "Transfer 40?"
        await client.approve(run, owner["id"], payload=False)  # a falsy answer is an answer
        rec = await suspended_at(client, run, 1)
        (compliance,) = rec.pending()
        assert compliance["metadata"]["strands"]["reason"] == {"amount": 40, "owner": False}
        await client.approve(run, compliance["id"], payload={"ok": True})
        rec = await client.wait(run)
    assert rec.status == "completed" and rec.result == "transferred"
    assert seen == ["pass 0", "pass 1", "pass 2"]
    assert results[-1] == "transferred 40: owner=False compliance={'ok': True}"


keys: list[str] = []


@tool(context=True)
def refund(order: str, amount: float, tool_context: ToolContext) -> str:
    """Refund an order: two approvals bound to the call."""
    tool_context.interrupt("approve-refund", reason={"order": order, "amount": amount})
    from interlock.adapters.strands import execution_key

    keys.append(execution_key(tool_context))
    return f"refunded {order}"


def refund_request(i: Any) -> interlock.Request:
    return interlock.Request(
        message="Refund?",
        call=interlock.Call("refund", i.reason),
        policy=interlock.Policy(approvals=2),
    )


async def test_a_quorum_bound_to_the_call_with_its_execution_key(nc: NATS, client: Client, agent_name: str) -> None:
    script: list[list[dict[str, Any]]] = [
        [{"tool": "refund", "id": "tool_r", "input": {"order": "A-1", "amount": 42.5}}],
        [{"text": "refunded"}],
    ]
    keys.clear()
    body = StrandsAgent(nc, agent_factory(script, refund), request=refund_request)
    async with worker(nc, agent_name, body):
        run = await client.start(agent_name, "refund A-1")
        rec = await suspended_at(client, run)
        (p,) = rec.pending()
        digest = interlock.call_digest("refund", {"order": "A-1", "amount": 42.5})
        assert p["call"]["digest"] == digest
        # Strands takes a response of None as no answer: both approve "ok".
        v = await client.approve(run, p["id"], "ok", approver="bob", call_digest=digest)
        assert v.vote_recorded and v.tally is not None and v.tally.approvals_needed == 2
        assert (await client.approve(run, p["id"], "ok", approver="cy", call_digest=digest)).outcome == "accepted"
        rec = await client.wait(run)
    assert rec.status == "completed", rec.error
    # The tool got past its interrupt once, on the replay, with the key.
    assert len(keys) == 1 and len(keys[0]) == 64 and keys[0] != "", keys
