"""Defects outside clients ran into (issue 27, item 5), each held by a test."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from test_replay import suspended_at, worker

import interlock
from interlock._wire import decode_work, validate_interrupt


async def test_unknown_run_verdict_from_the_no_run_trail(nc: NATS) -> None:
    """A decision for a run that does not exist is recorded under ``_``, not
    on an events subject of the id it claims; a client waiting on the events
    (its inbox is not the approver's) still gets its ``unknown_run`` verdict,
    and so does a resend of the same decision id."""
    run = "py-missing-" + uuid.uuid4().hex
    for inbox in (None, "_INBOX.someone_else"):
        c = interlock.Client(nc, inbox_prefix=inbox, timeout=10)
        try:
            for _ in range(2):  # the second is deduplicated by the stream
                began = time.monotonic()
                with pytest.raises(interlock.Rejected) as rej:
                    await c.approve(run, "int-x", decision_id="d-" + (inbox or "own"), approver="ada")
                assert rej.value.verdict.code == "unknown_run"
                assert rej.value.verdict.run_id == run
                assert time.monotonic() - began < 5
        finally:
            await c.close()
    assert await interlock.Client(nc).events(run) == []


async def test_decision_id_reused_with_another_body_is_refused(
    nc: NATS, client: interlock.Client, agent_name: str
) -> None:
    """The same identity sending its decision id again with another body gets
    a verdict of its own, ``decision_id_reused``; the same body again is a
    duplicate; the first decision stands."""

    async def body(inp: Any) -> Any:
        with interlock.tool_call("a"):
            interlock.interrupt()
        with interlock.tool_call("b"):
            return interlock.interrupt().payload

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        rec = await suspended_at(client, run)
        first = rec.pending()[0]["id"]
        v = await client.approve(run, first, "yes", decision_id="d-py-reused")
        assert v.outcome == "accepted"
        with pytest.raises(interlock.Rejected) as rej:
            await client.approve(run, first, "no", decision_id="d-py-reused", timeout=10)
        assert rej.value.verdict.code == "decision_id_reused"
        # Sent again (the stream drops the copy): the answer is that of the
        # very message it holds, not the accepted decision's.
        with pytest.raises(interlock.Rejected) as rej:
            await client.approve(run, first, "no", decision_id="d-py-reused", timeout=10)
        assert rej.value.verdict.code == "decision_id_reused"
        v = await client.approve(run, first, "yes", decision_id="d-py-reused", timeout=10)
        assert v.outcome == "duplicate"
        rec = await client.run(run)
        assert rec.interrupts[0]["decision"]["payload"] == "yes"


def test_validate_interrupt_knows_sensitive() -> None:
    """An interrupt carrying ``sensitive`` (the server's own field) is valid;
    one whose ``sensitive`` is not a boolean is malformed."""
    ok = {"id": "int-1", "reason": "input_required", "sensitive": True}
    assert validate_interrupt(ok)["sensitive"] is True
    with pytest.raises(interlock.ProtocolError) as e:
        validate_interrupt({"id": "int-1", "reason": "tool_call", "sensitive": "yes"})
    assert e.value.code == "malformed"


async def test_sensitive_request_reaches_the_record(nc: NATS, client: interlock.Client, agent_name: str) -> None:
    """Request(sensitive=True) is sent as the interrupt's ``sensitive``; the
    pending entry carries it."""

    async def body(inp: Any) -> Any:
        return interlock.interrupt(interlock.Request(message="pin?", sensitive=True)).payload

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        (p,) = [p for p in await client.pending() if p.run_id == run]
        assert p.sensitive is True


async def test_approval_without_payload_returns_serializable(
    nc: NATS, client: interlock.Client, agent_name: str
) -> None:
    """An approval without payload hands the body ``None`` (``has_payload``
    False): returning it completes the run (Go's decision payload is nil)."""

    async def body(inp: Any) -> Any:
        d = interlock.interrupt(interlock.Request(message="ok?"))
        return {"payload": d.payload, "has": d.has_payload}

    async with worker(nc, agent_name, body):
        run = await client.start(agent_name)
        await suspended_at(client, run)
        await client.approve(run, interlock.interrupt_id(run, "", 0))
        rec = await client.wait(run, timeout=30)
    assert rec.status == "completed", rec.error
    assert rec.result == {"payload": None, "has": False}


def test_defaults_match_go() -> None:
    """The Python defaults are Go's (processor.DefaultPassTimeout 5 min,
    DefaultDecideTimeout 30 s, DefaultWaitTimeout 10 min)."""
    import inspect

    worker_defaults = inspect.signature(interlock.Worker.__init__).parameters
    assert worker_defaults["pass_timeout"].default == 300.0
    assert worker_defaults["concurrency"].default == 4
    assert worker_defaults["ack_wait"].default == 30.0
    assert worker_defaults["max_deliver"].default == 10
    client_defaults = inspect.signature(interlock.Client.__init__).parameters
    assert client_defaults["timeout"].default == 30.0
    assert client_defaults["wait_timeout"].default == 600.0


def test_wire_input_with_nan_is_malformed() -> None:
    """Python's decoder takes NaN and the infinities; the wire never carries
    them (Go's and JavaScript's decoders refuse them), so neither does this."""
    for bad in (b"NaN", b"Infinity", b"-Infinity"):
        with pytest.raises(interlock.ProtocolError, match="not JSON"):
            decode_work(b'{"version":1,"runId":"r","agent":"a","input":' + bad + b"}")
