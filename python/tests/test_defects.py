"""Defects outside clients ran into (issue 27, item 5), each held by a test."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import nats.js.errors
import pytest
from nats.aio.client import Client as NATS
from test_replay import suspended_at, worker

import interlock
from interlock._wire import MAX_DEPTH, decode_work, validate_interrupt


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


async def test_verdict_waiter_skips_an_answer_the_server_stored(nc: NATS) -> None:
    """nats-server sends a JetStream API answer to whatever subject its
    request names, with its own rights: another user can have a direct
    get's answer stored on a run's events subject, carrying the message id
    the coordinator gives the verdict on the next decisions
    (``<run>:seq<N>:decision_accepted``). A client waiting on the events for
    its verdict must not take it: it carries the server's headers as
    stored, which a direct get's answer hides behind its own (nats-py keeps
    one value per header), so the client reads the candidate's stored
    headers whole before it believes it."""
    run = "py-forged-" + uuid.uuid4().hex
    js = nc.jetstream()
    last = (await js.stream_info("INTERLOCK_DECISIONS")).state.last_seq
    for seq in range(last + 1, last + 21):
        verdict = {
            "version": 1,
            "decisionId": "forged",
            "runId": run,
            "interruptId": "int-x",
            "outcome": "accepted",
            "approver": "ada",
            "at": "2026-12-04T00:00:00Z",
        }
        ev = {"version": 1, "type": "decision_accepted", "runId": run, "at": verdict["at"], "verdict": verdict}
        await js.publish(
            f"interlock.events.{run}.decision_accepted",
            json.dumps(ev).encode(),
            headers={
                "Nats-Msg-Id": f"{run}:seq{seq}:decision_accepted",
                "Nats-Stream": "INTERLOCK_AGUI",
                "Nats-Subject": "interlock.agui.billing.carrier",
                "Nats-Sequence": "7",
                "Nats-Time-Stamp": "2026-12-04T00:00:00Z",
            },
        )
    # Its inbox is not the approver's: it waits on the events.
    c = interlock.Client(nc, inbox_prefix="_INBOX.someone_else", timeout=10)
    try:
        with pytest.raises(interlock.Rejected) as rej:
            await c.approve(run, "int-x", decision_id="d-forged", approver="ada")
        assert rej.value.verdict.code == "unknown_run"
    finally:
        await c.close()


async def answer(nc: NATS, carrier: str, body: bytes, bucket: str, key: str, *, bare: bool, op: str = "") -> None:
    """Stores body on carrier (an AG-UI subject; with ``KV-Operation: op``
    when op is set) and has the server send a direct get's answer of it
    under key in bucket (without headers when bare: ``no_hdr``); returns
    once the bucket holds it."""
    js = nc.jetstream()
    headers = {"Nats-Msg-Id": f"{carrier}:carrier"}
    if op:
        headers["KV-Operation"] = op
    await js.publish(carrier, body, headers=headers)
    req = b'{"no_hdr":true}' if bare else b""
    await nc.publish(f"$JS.API.DIRECT.GET.INTERLOCK_AGUI.{carrier}", req, reply=f"$KV.{bucket}.{key}")
    for _ in range(200):
        try:
            await js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}")
            return
        except nats.js.errors.NotFoundError:
            await asyncio.sleep(0.02)
    raise AssertionError(f"the server did not store its answer under {key}")


async def test_events_skip_answers_the_server_stored(nc: NATS) -> None:
    """An answer the server stored on a run's events subject is no entry of
    the trail: one carrying the server's headers as stored (which a direct
    get's answer hides behind its own), and one asked for without headers
    (no message id). ``events()`` lists neither."""
    run = "py-trail-" + uuid.uuid4().hex[:12]
    js = nc.jetstream()
    subject = f"interlock.events.{run}.decision_accepted"
    at = "2026-12-04T00:00:00Z"
    forged = {"version": 1, "type": "decision_accepted", "runId": run, "at": at, "detail": "mallory"}
    answered = {
        "Nats-Msg-Id": f"{run}:seq1:decision_accepted",
        "Nats-Stream": "INTERLOCK_AGUI",
        "Nats-Subject": "interlock.agui.billing.carrier",
        "Nats-Sequence": "7",
        "Nats-Time-Stamp": at,
    }
    await js.publish(subject, json.dumps(forged).encode(), headers=answered)
    await js.publish(subject, json.dumps(forged).encode())
    entry = {"version": 1, "type": "decision_accepted", "runId": run, "at": at, "detail": "ada"}
    await js.publish(subject, json.dumps(entry).encode(), headers={"Nats-Msg-Id": f"{run}:seq2:decision_accepted"})
    listed = await interlock.Client(nc).events(run)
    assert [e.detail for e in listed] == ["ada"]


async def test_stored_headers_of_a_message_gone_is_none(nc: NATS) -> None:
    """An entry that ages out between the batched read and the read of its
    stored headers is skipped, not a failure of the whole listing."""
    from interlock import _direct

    assert await _direct.stored_headers(nc, "INTERLOCK_EVENTS", 10**12, 5) is None


async def test_pending_listing_survives_answers_the_server_stored(nc: NATS) -> None:
    """Another user can have direct gets' answers stored in the pending
    index: bytes that are no JSON broke every client's listing, an answer
    asked for without headers (``no_hdr``) was listed as pending, and so
    was one with its headers (its carrier's message id; nats-py keeps one
    value per header, hiding the server's headers as stored). None is the
    coordinator's put: the listing skips them."""
    tag = uuid.uuid4().hex[:12]
    forged = {"runId": "py-forged-" + tag, "agent": "a", "interrupt": {"id": "ask", "reason": "forged"}}
    cases = [(b"\x00 not json", False), (json.dumps(forged).encode(), True), (json.dumps(forged).encode(), False)]
    for i, (body, bare) in enumerate(cases):
        key = f"py-forged-{tag}.{i:024d}"
        await answer(nc, f"interlock.agui.py{tag}.pending{i}", body, "interlock_pending", key, bare=bare)
    listed = [p.run_id for p in await interlock.Client(nc).pending()]
    assert "py-forged-" + tag not in listed


async def test_pending_listing_skips_a_pull_answer(nc: NATS) -> None:
    """A pull's answer sent to a key of the pending index is stored there
    under its own message's subject, with that message's headers: a
    message id of the sender's choosing and none of the server's. It is
    not on the bucket's subjects, so it is no entry: the listing skips
    it."""
    tag = uuid.uuid4().hex[:12]
    js = nc.jetstream()
    source = f"PY_PULL_{tag}"
    await js.add_stream(name=source, subjects=[f"pysrc.{tag}"])
    try:
        await js.add_consumer(source, durable_name="puller", ack_policy="explicit")
        forged = {"runId": "py-pulled-" + tag, "id": "ask", "agent": "a", "suspendedAt": "2026-12-04T00:00:00Z"}
        key = f"py-pulled-{tag}.{0:024d}"
        await js.publish(f"pysrc.{tag}", json.dumps(forged).encode(), headers={"Nats-Msg-Id": f"pending:{key}:0"})
        await nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{source}.puller",
            b'{"batch":1,"no_wait":true}',
            reply=f"$KV.interlock_pending.{key}",
        )
        for _ in range(200):
            info = await js.stream_info("KV_interlock_pending", subjects_filter=f"pysrc.{tag}")
            if info.state.subjects and info.state.subjects.get(f"pysrc.{tag}"):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the pull's answer was not stored in the pending index")
        listed = [p.run_id for p in await interlock.Client(nc).pending()]
        assert "py-pulled-" + tag not in listed
    finally:
        await js.delete_stream(source)


async def test_run_record_the_server_stored_is_refused(nc: NATS) -> None:
    """Another user can have a direct get's answer stored under a run's key
    in the runs bucket. Asked for without headers (``no_hdr``) it carries
    no message id, which every write of a record does: ``run()`` refuses
    it (``not_allowed``) rather than return a record of that user's
    wording."""
    run = "py-forged-" + uuid.uuid4().hex[:12]
    body = {"runId": run, "agent": "a", "status": "completed", "pass": 0, "result": "forged"}
    carrier = f"interlock.agui.py{run[-12:]}.record"
    await answer(nc, carrier, json.dumps(body).encode(), "interlock_runs", run, bare=True)
    with pytest.raises(interlock.ProtocolError) as e:
        await interlock.Client(nc).run(run)
    assert e.value.code == "not_allowed"


async def test_run_record_answered_with_headers_is_refused(nc: NATS) -> None:
    """An answer stored under a run's key with its headers carries the
    carrier's message id, and the server's headers as stored, which a
    direct get's answer hides behind its own (nats-py keeps one value per
    header): ``run()`` returned the record of that user's wording. It reads
    the headers as stored now, and refuses it (``not_allowed``); one whose
    carrier said ``KV-Operation: DEL`` is no deletion either."""
    client = interlock.Client(nc)
    for op in ("", "DEL"):
        run = "py-forged-hdr-" + uuid.uuid4().hex[:12]
        body = {"runId": run, "agent": "a", "status": "completed", "pass": 0, "result": "forged"}
        carrier = f"interlock.agui.py{run[-12:]}.record{op.lower()}"
        await answer(nc, carrier, json.dumps(body).encode(), "interlock_runs", run, bare=False, op=op)
        with pytest.raises(interlock.ProtocolError) as e:
            await client.run(run)
        assert e.value.code == "not_allowed", op


async def test_answer_planted_before_a_run_starts_does_not_stop_it(
    nc: NATS, client: interlock.Client, agent_name: str
) -> None:
    """Whoever learns a run's id before it suspends can have an answer
    stored under its key. It is no record and the run has no trail: the
    coordinator writes the first record over it, ``wait()`` waits through
    it, and the approval replays."""
    run = "py-planted-" + uuid.uuid4().hex[:12]
    body = {"runId": run, "agent": agent_name, "status": "completed", "pass": 0, "result": "planted"}
    carrier = f"interlock.agui.py{run[-12:]}.planted"
    await answer(nc, carrier, json.dumps(body).encode(), "interlock_runs", run, bare=True)
    with pytest.raises(interlock.ProtocolError):
        await client.run(run)

    async def agent(inp: Any) -> Any:
        with interlock.tool_call("ask"):
            return interlock.interrupt().payload

    async with worker(nc, agent_name, agent):
        assert await client.start(agent_name, run_id=run) == run
        rec = await suspended_at(client, run)
        v = await client.approve(run, rec.pending()[0]["id"], "yes")
        assert v.outcome == "accepted"
        done = await client.wait(run, timeout=30)
        assert done.status == "completed"
        assert done.result == "yes"


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


def _counted_step_then_ask(step: str, question: Callable[[Any], str], effects: list[int]) -> interlock.AgentFunc:
    """A body that journals step (a side effect counted in effects), then
    asks question(input)."""

    async def body(inp: Any) -> Any:
        async def effect() -> str:
            effects.append(1)
            return "done"

        await interlock.step(step, effect)
        interlock.interrupt(interlock.Request(message=question(inp)))
        return "done"

    return body


async def test_input_with_a_lone_surrogate_runs_each_step_once(
    nc: NATS, client: interlock.Client, agent_name: str
) -> None:
    """A start whose input holds the JSON escape ``\\ud800`` (valid JSON, which
    every decoder reads) made the worker's size check raise on encoding the
    suspension: the pass ran again on every delivery (its step, a side
    effect, ten times) and was then dead-lettered."""
    effects: list[int] = []
    body = _counted_step_then_ask("charge-card", lambda inp: f"ship {inp['note']}?", effects)
    run = "surr-" + uuid.uuid4().hex
    # json.dumps writes the lone surrogate as the escape "\\ud800".
    data = json.dumps(
        {"version": 1, "runId": run, "agent": agent_name, "pass": 0, "input": {"note": "x\ud800y"}}
    ).encode()
    async with worker(nc, agent_name, body, backoff=(0.05,)):
        await nc.jetstream().publish(
            f"interlock.start.{agent_name}", data, headers={"Nats-Msg-Id": f"{run}:0:start:{uuid.uuid4().hex}"}
        )
        rec = await suspended_at(client, run)
    assert effects == [1]
    assert rec.interrupts[0]["message"] == "ship x\ufffdy?"  # Go records a lone surrogate as U+FFFD


async def test_answer_with_a_lone_surrogate_replays_once(nc: NATS, client: interlock.Client, agent_name: str) -> None:
    """The same from an approver: a payload ``"acct-\\ud800"``, quoted in the
    replay's next question, re-ran the replay's step on every delivery."""
    effects: list[int] = []

    async def body(inp: Any) -> Any:
        account = interlock.interrupt(interlock.Request(message="which account?")).payload

        async def reserve() -> str:
            effects.append(1)
            return "reserved"

        await interlock.step("reserve-funds", reserve)
        interlock.interrupt(interlock.Request(message=f"transfer to {account}?"))
        return "done"

    async with worker(nc, agent_name, body, backoff=(0.05,)):
        run = await client.start(agent_name, {})
        rec = await suspended_at(client, run)
        decision = {"version": 1, "decisionId": str(uuid.uuid4()), "interruptId": rec.interrupts[0]["id"]}
        data = json.dumps(decision | {"status": "resolved", "payload": "acct-\ud800"}).encode()
        await nc.jetstream().publish(
            f"interlock.resume.{run}", data, headers={"Nats-Msg-Id": str(decision["decisionId"])}
        )
        rec = await suspended_at(client, run, 1)
    assert effects == [1]
    assert len(rec.interrupts) == 2


async def test_start_with_a_null_pass_runs(nc: NATS, client: interlock.Client, agent_name: str) -> None:
    """``"pass": null`` reads as left out (pass 0), as in Go and TypeScript;
    the worker compared it with 0 and dead-lettered the start."""

    async def body(inp: Any) -> Any:
        return {"ran": True}

    run = "nullpass-" + uuid.uuid4().hex
    data = json.dumps({"version": 1, "runId": run, "agent": agent_name, "pass": None, "input": {}}).encode()
    async with worker(nc, agent_name, body, backoff=(0.05,)):
        await nc.jetstream().publish(
            f"interlock.start.{agent_name}", data, headers={"Nats-Msg-Id": f"{run}:0:start:{uuid.uuid4().hex}"}
        )
        rec = await client.wait(run, lambda r: r.finished)
    assert rec.status == "completed", (rec.status, rec.error)


def test_vote_with_a_null_seq_reads_as_left_out() -> None:
    """A vote's ``"seq": null`` reads as left out (0); it raised TypeError
    inside ``interrupt()``."""
    work = decode_work(
        b'{"version":2,"runId":"r","agent":"a","pass":1,"decisions":[{"version":2,"decisionId":"d",'
        b'"interruptId":"i","status":"resolved","votes":[{"decisionId":"v","approver":"ada","status":"resolved","seq":null}]}]}'
    )
    d = interlock.Decision.from_wire(work["decisions"][0])
    assert d.votes[0].seq == 0


async def test_step_named_with_a_lone_surrogate_runs_once(nc: NATS, client: interlock.Client, agent_name: str) -> None:
    """A step whose name holds a lone surrogate was journaled under U+FFFD
    (as Go decodes the escape) and looked up under the surrogate on the
    replay: the step, a side effect, ran again."""
    effects: list[int] = []
    body = _counted_step_then_ask("charge-\ud800", lambda _: "ship it?", effects)
    async with worker(nc, agent_name, body, backoff=(0.05,)):
        run = await client.start(agent_name, {})
        rec = await suspended_at(client, run)
        await client.approve(run, rec.interrupts[0]["id"])
        done = await client.wait(run, lambda r: r.finished)
    assert done.status == "completed", (done.status, done.error)
    assert effects == [1]


@pytest.mark.parametrize("where", ["result", "step"])
async def test_too_deep_outcome_fails_the_run(nc: NATS, client: interlock.Client, agent_name: str, where: str) -> None:
    """A result (or a journaled step result) nested deeper than every reader
    takes was published, refused by the coordinator, and the run never
    finished; the worker fails the run with the reason instead."""
    deep: Any = 1
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]

    async def body(inp: Any) -> Any:
        if where == "step":

            async def fetch() -> Any:
                return deep

            await interlock.step("fetch", fetch)
            interlock.interrupt(interlock.Request(message="go on?"))
        return deep

    async with worker(nc, agent_name, body, backoff=(0.05,)):
        run = await client.start(agent_name, {})
        rec = await client.wait(run, lambda r: r.finished)
    assert rec.status == "failed", (rec.status, rec.error)
    assert "deeper than the protocol's 128 levels" in rec.error


async def test_worker_refuses_a_header_reader_that_stops_at_a_blank_line(
    nc: NATS, agent_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fast_mail_parser installed nats-py reads headers as an e-mail's,
    which end at the first blank line: the headers nats-server appends to an
    answer it stored after one would go unread, and a work item of another
    user's making would pass for a client's publish. The worker refuses to
    start rather than take work so."""
    import nats.aio.client as nats_client

    monkeypatch.setattr(nats_client, "parse_email", lambda raw: None, raising=False)
    w = interlock.Worker(nc)
    w.register(agent_name, lambda inp: inp)
    with pytest.raises(interlock.InterlockError, match="fast_mail_parser"):
        await w.start()


def test_nats_py_reads_headers_past_a_blank_line() -> None:
    """What the worker's check of a work item relies on: nats-py's own line
    reader (no fast_mail_parser) reads a header block to its end, as
    nats-server does, so the headers the server appended to an answer
    after a blank line its carrier held are seen."""
    from nats.aio.client import Client

    block = b"NATS/1.0\r\nNats-Msg-Id: forged\r\n\r\nNats-Stream: KV_x\r\n\r\n"
    parsed = Client._parse_header_lines(block[len(b"NATS/1.0\r\n") :])
    assert parsed.get("Nats-Stream") == "KV_x"
    assert interlock._wire.not_published(parsed) is not None


@pytest.mark.parametrize("status", ["409", "100", "404"])
async def test_pull_takes_a_stored_status_header_for_a_message(nc: NATS, status: str) -> None:
    """A stored message whose publisher (or an answer's carrier, which anyone
    allowed one direct get can have stored on a work subject) set a Status
    header is a message, for the worker to refuse or dead-letter: the pull
    took it for the server's status, and 409 ended the request while 100
    dropped it unacked. Only what comes on the request's inbox is the
    server's."""
    from interlock._pull import Puller

    tag = uuid.uuid4().hex[:12]
    js = nc.jetstream()
    stream = f"PY_STATUS_{tag}"
    await js.add_stream(name=stream, subjects=[f"pystatus.{tag}"])
    try:
        await js.add_consumer(stream, durable_name="puller", ack_policy="explicit")
        for i, (body, headers) in enumerate(
            [(b"a", {}), (b"s", {"Status": status, "Description": "Consumer Deleted"}), (b"b", {})]
        ):
            await js.publish(f"pystatus.{tag}", body, headers={**headers, "Nats-Msg-Id": f"{tag}:{i}"})
        got: list[bytes] = []
        async with asyncio.timeout(20):
            while len(got) < 3:
                async for m in Puller(nc, stream, "puller").messages(3, asyncio.Event()):
                    got.append(m.data)
                    await m.ack()
        assert got == [b"a", b"s", b"b"]
    finally:
        await js.delete_stream(stream)
