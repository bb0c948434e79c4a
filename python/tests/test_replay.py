"""The replay model against a real `interlock serve`: interrupt, is_resuming,
step, tool-call scopes, cancelled and falsy answers, parallel and sequential
interrupts."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from test_schemas import validator

import interlock
from interlock import Cancelled, Client, Request, Run, Worker


@contextlib.asynccontextmanager
async def worker(nc: NATS, agent: str, fn: interlock.AgentFunc, **kw: Any) -> AsyncIterator[Worker]:
    w = Worker(nc, **kw)
    w.register(agent, fn)
    await w.start()
    try:
        yield w
    finally:
        await w.stop(timeout=10)


def at_pass(n: int) -> Any:
    def done(r: Run) -> bool:
        return r.finished or (r.status == "suspended" and r.pass_ == n)

    return done


async def suspended_at(client: Client, run: str, n: int = 0) -> Run:
    rec = await client.wait(run, at_pass(n))
    assert rec.status == "suspended", (rec.status, rec.error)
    return rec


def test_outside_a_run() -> None:
    assert interlock.is_resuming() is False
    assert interlock.run_info() is None
    with pytest.raises(interlock.NotInRun):
        interlock.interrupt(Request(message="?"))
    with interlock.tool_call("t1"):
        assert interlock.is_resuming() is False
        with pytest.raises(interlock.NotInRun):
            interlock.interrupt()


def test_suspended_passes_through_except_exception() -> None:
    # Control flow an agent body must not swallow: a broad handler around a
    # tool call lets it through, as asyncio.CancelledError.
    assert not issubclass(interlock.Suspended, Exception)
    with pytest.raises(interlock.Suspended):
        try:
            raise interlock.Suspended(["i1"])
        except Exception:
            pass


async def test_broad_handler_does_not_catch_the_suspension(nc: NATS, client: Client, agent_name: str) -> None:
    handled: list[str] = []

    async def body(inp: Any) -> Any:
        try:
            interlock.interrupt(Request(message="ok?"))
        except Exception as e:  # an author's catch-all around a tool call
            handled.append(type(e).__name__)
            return "went on"
        return "approved"

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        await client.approve(run, interlock.interrupt_id(run, "", 0))
        rec = await client.wait(run)
    assert rec.status == "completed" and rec.result == "approved", (rec.status, rec.result, rec.error)
    assert handled == []


async def test_step_outside_a_run() -> None:
    with pytest.raises(interlock.NotInRun):
        await interlock.step("s", lambda: 1)


async def test_approve_replays_with_the_decision(nc: NATS, client: Client, agent_name: str) -> None:
    calls: dict[str, int] = {"step": 0, "body": 0, "notified": 0}

    async def body(inp: Any) -> Any:
        calls["body"] += 1

        def look_up() -> dict[str, Any]:
            calls["step"] += 1
            return {"order": inp["order"], "total": 42.5}

        order = await interlock.step("look-up", look_up)
        with interlock.tool_call("call_refund"):
            if not interlock.is_resuming():
                calls["notified"] += 1
            d = interlock.interrupt(
                Request(
                    message=f"Refund {order['total']}?",
                    response_schema={"type": "object", "required": ["amount"]},
                    metadata={"tool": "refund"},
                )
            )
        return {"amount": d.payload["amount"], "approver": d.approver, "order": order["order"]}

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name, {"order": "A-1"})
        rec = await suspended_at(client, run)
        (pending,) = rec.pending()
        assert pending["id"] == interlock.interrupt_id(run, "call_refund", 0)
        assert pending["toolCallId"] == "call_refund" and pending["reason"] == "tool_call"
        listed = [p for p in await client.pending() if p.run_id == run]
        assert [p.id for p in listed] == [pending["id"]]
        assert listed[0].tool_call_id == "call_refund" and listed[0].reason == "tool_call"
        validator("pending").validate(listed[0].raw)
        validator("run").validate(rec.raw)
        with pytest.raises(interlock.Rejected) as rej:
            await client.approve(run, pending["id"], payload={"amt": 1}, approver="ada", decision_id="d-" + run)
        assert rej.value.verdict.code == "schema_mismatch"
        # A rejected attempt never burns its decision id: the corrected
        # answer under the same id is a new attempt, checked afresh.
        v = await client.approve(run, pending["id"], payload={"amount": 40}, approver="ada", decision_id="d-" + run)
        assert v.outcome == "accepted" and v.replay and v.approver == "ada" and v.via == "sdk"
        again = await client.approve(run, pending["id"], payload={"amount": 40}, approver="ada", decision_id="d-" + run)
        assert again.outcome == "duplicate"
        rec = await client.wait(run)
    assert rec.status == "completed", rec.error
    assert rec.result == {"amount": 40, "approver": "ada", "order": "A-1"}
    assert calls == {"step": 1, "body": 2, "notified": 1}
    validator("run").validate(rec.raw)
    validator("verdict").validate(v.raw)
    events = await client.events(run)
    for e in events:
        validator("event").validate(e.raw)
    # What the Python worker and client published satisfies the schemas too.
    js = nc.jetstream()
    for kind, schema in (("suspended", "suspension"), ("completed", "completion")):
        m = await js.get_last_msg("INTERLOCK_RUNS", f"interlock.{kind}.{agent_name}.{run}")
        validator(schema).validate(json.loads(m.data or b""))
    decisions = await js.get_last_msg("INTERLOCK_DECISIONS", f"interlock.resume.{run}.ada")
    validator("decision").validate(json.loads(decisions.data or b""))
    types = [e.type for e in events]
    assert types[0] == "suspended" and "decision_rejected" in types and types[-1] == "completed"


async def test_cancelled_is_distinct_from_an_empty_approval(nc: NATS, client: Client, agent_name: str) -> None:
    async def body(inp: Any) -> Any:
        try:
            d = interlock.interrupt(Request(message="ok?"))
        except Cancelled as c:
            return {"cancelled": True, "comment": c.comment, "reason": c.reason, "by": c.approver}
        return {"cancelled": False, "has_payload": d.has_payload}

    async with worker(nc, agent_name, body):
        denied = await client.start(agent_name)
        empty = await client.start(agent_name)
        for run in (denied, empty):
            await suspended_at(client, run)
        iid = interlock.interrupt_id
        await client.deny(denied, iid(denied, "", 0), comment="not eligible")
        await client.approve(empty, iid(empty, "", 0))
        d, e = await client.wait(denied), await client.wait(empty)
    assert d.result == {"cancelled": True, "comment": "not eligible", "reason": "denied", "by": ""}
    assert e.result == {"cancelled": False, "has_payload": False}


async def test_cancel_reason_comes_from_who_cancelled(nc: NATS, client: Client, agent_name: str) -> None:
    """Issue 23, finding 10: bob's cancel with metadata {"reason": "expired"}
    reached the body as an expiry. The reason comes from who cancelled."""

    async def body(inp: Any) -> Any:
        try:
            interlock.interrupt(Request(message="ok?"))
        except Cancelled as c:
            return {"reason": c.reason, "by": c.approver}
        return "approved"

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        v = await client.deny(run, interlock.interrupt_id(run, "", 0), approver="bob", metadata={"reason": "expired"})
        assert v.outcome == "accepted"
        rec = await client.wait(run)
    assert rec.result == {"reason": "denied", "by": "bob"}


async def test_uncaught_cancel_fails_the_run(nc: NATS, client: Client, agent_name: str) -> None:
    async def body(inp: Any) -> Any:
        interlock.interrupt(Request(message="ok?"))
        return "approved"

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        await client.deny(run, interlock.interrupt_id(run, "", 0))
        rec = await client.wait(run)
    assert rec.status == "failed" and "cancelled" in rec.error


@pytest.mark.parametrize(
    "payload", [False, 0, "", {}, []], ids=["false", "zero", "empty-string", "empty-object", "empty-list"]
)
async def test_falsy_payloads_are_answers(nc: NATS, client: Client, agent_name: str, payload: Any) -> None:
    async def body(inp: Any) -> Any:
        d = interlock.interrupt(Request(message="?"))
        return {"has": d.has_payload, "payload": d.payload}

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        await client.approve(run, interlock.interrupt_id(run, "", 0), payload=payload)
        rec = await client.wait(run)
    assert rec.result == {"has": True, "payload": payload}


async def test_parallel_identical_calls_are_independent(nc: NATS, client: Client, agent_name: str) -> None:
    passes: list[int] = []

    async def gated(call: str) -> Any:
        with interlock.tool_call(call):
            d = interlock.interrupt(Request(message="delete /tmp/x?", metadata={"tool": "rm", "path": "/tmp/x"}))
            return d.payload

    async def body(inp: Any) -> Any:
        info = interlock.run_info()
        assert info is not None
        passes.append(info.pass_)
        return await interlock.gather(gated("call_1"), gated("call_2"))

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        rec = await suspended_at(client, run)
        ids = sorted(p["id"] for p in rec.pending())
        assert ids == sorted([interlock.interrupt_id(run, "call_1", 0), interlock.interrupt_id(run, "call_2", 0)])
        first = await client.approve(run, interlock.interrupt_id(run, "call_1", 0), payload="yes-1")
        assert not first.replay
        second = await client.approve(run, interlock.interrupt_id(run, "call_2", 0), payload="yes-2")
        assert second.replay
        rec = await client.wait(run)
    assert rec.result == ["yes-1", "yes-2"]
    assert passes == [0, 1], "one suspension with both interrupts, one replay"


async def test_sequential_interrupts_suspend_one_after_another(nc: NATS, client: Client, agent_name: str) -> None:
    async def body(inp: Any) -> Any:
        with interlock.tool_call("call_x"):
            a = interlock.interrupt(Request(message="first?"))
            b = interlock.interrupt(None)  # never read on a replay; here it is the suspend pass
            return [a.payload, b.payload]

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        rec = await suspended_at(client, run, 0)
        assert [p["id"] for p in rec.pending()] == [interlock.interrupt_id(run, "call_x", 0)]
        await client.approve(run, interlock.interrupt_id(run, "call_x", 0), payload=1)
        rec = await suspended_at(client, run, 1)
        assert [p["id"] for p in rec.pending()] == [interlock.interrupt_id(run, "call_x", 1)]
        await client.approve(run, interlock.interrupt_id(run, "call_x", 1), payload=2)
        rec = await client.wait(run)
    assert rec.result == [1, 2] and rec.pass_ == 2


async def test_invalid_request_fails_the_run(nc: NATS, client: Client, agent_name: str) -> None:
    async def body(inp: Any) -> Any:
        with interlock.tool_call("a"):
            interlock.interrupt(Request(tool_call_id="b"))
        return None

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        rec = await client.wait(run)
    assert rec.status == "failed" and "tool call" in rec.error


async def test_non_ascii_answer_sized_as_recorded(nc: NATS, client: Client, agent_name: str) -> None:
    # 10,000 "é" and 1,000 "<": 26 KB as the coordinator records it. The
    # client sent "é" as \u00e9 (6 bytes), which the coordinator keeps in a
    # payload, so it recorded 66 KB and refused what the client's own check
    # (26 KB) let through. Sent as UTF-8, both agree, and the answer lands.
    answer = "é" * 10_000 + "<" * 1_000

    async def body(inp: Any) -> Any:
        d = interlock.interrupt(Request(message="?"))
        return {"length": len(d.payload)}

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        await client.approve(run, interlock.interrupt_id(run, "", 0), payload=answer)
        rec = await client.wait(run)
    assert rec.result == {"length": len(answer)}


def test_recorded_size_counts_a_lone_surrogate() -> None:
    # "\ud800" (an escape no UTF-8 text holds) is recorded as U+FFFD: 3 bytes.
    from interlock._wire import recorded_size

    assert recorded_size("\ud800") == len('"\ufffd"'.encode())
