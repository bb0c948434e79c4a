"""The client: start runs, decide interrupts, read and wait for runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from . import _direct, _trace
from ._errors import ProtocolError, Rejected, RunNotFound
from ._ids import decision_attempt_msg_id, nonce, reply_token, start_msg_id, uuid7
from ._subjects import DEFAULT_PREFIX, NO_RUN, Namespace, inbox_prefix, validate_token
from ._types import NO_PAYLOAD, Event, PendingInterrupt, Run, Status, Verdict
from ._wire import decode_decision, decode_work, not_published, server_header, versioned


def finished(run: Run) -> bool:
    """For :meth:`Client.wait`: the run completed or failed."""
    return run.finished


def suspended(run: Run) -> bool:
    """For :meth:`Client.wait`: the run waits for decisions."""
    return run.status == "suspended"


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", re.IGNORECASE)
_NEVER = (datetime.max.replace(tzinfo=UTC), 0)


def _instant(t: Any) -> tuple[datetime, int]:
    """An RFC 3339 time as (whole seconds, nanoseconds), for ordering as Go
    orders times (Go trims trailing zeros of the fraction, so the strings
    alone do not sort); an unreadable one sorts last."""
    m = _RFC3339.fullmatch(t) if isinstance(t, str) else None
    if m is None:
        return _NEVER
    zone = "+00:00" if m.group(3) in ("Z", "z") else m.group(3)
    try:
        whole = datetime.fromisoformat(m.group(1) + zone).astimezone(UTC)
    except ValueError:
        return _NEVER
    return whole, int((m.group(2) or "").ljust(9, "0"))


# _CHECKS_IN_FLIGHT bounds the stored-header reads events() has in flight.
_CHECKS_IN_FLIGHT = 64


class Client:
    """Starts runs, decides interrupts and reads run records over NATS. It
    needs no coordinator or worker in the same process.

    The coordinator sends a decision's verdict only inside the sender's own
    inbox, ``_INBOX.<approver>`` (``_INBOX.anonymous`` for an anonymous
    decision): the client subscribes there. Where NATS permissions give each
    user an inbox prefix of its own, connect with ``inbox_prefix`` set to it
    and pass the same ``inbox_prefix`` here; a decision published as an
    identity whose inbox is not this client's then takes its verdict from
    the run's events instead.

    ``timeout`` (default 30 s, Go's ``processor.DefaultDecideTimeout``) bounds
    :meth:`decide` and each read; ``wait_timeout`` (default 600 s, Go's
    ``processor.DefaultWaitTimeout``) bounds :meth:`wait`. Each call may
    pass its own ``timeout``.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        prefix: str = DEFAULT_PREFIX,
        inbox_prefix: str | None = None,
        timeout: float = 30.0,
        wait_timeout: float = 600.0,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._ns = Namespace(prefix)
        self._inbox_prefix = inbox_prefix
        self._timeout = timeout
        self._wait_timeout = wait_timeout
        self._replies: dict[str, tuple[str, Any]] = {}  # allowed inbox prefix -> (reply prefix, subscription)
        self._waiting: dict[str, asyncio.Future[Verdict]] = {}
        self._lock = asyncio.Lock()

    @property
    def namespace(self) -> Namespace:
        return self._ns

    async def close(self) -> None:
        """Release the verdict subscriptions (the connection stays open)."""
        replies, self._replies = self._replies, {}
        for _, sub in replies.values():
            await sub.unsubscribe()

    async def start(
        self,
        agent: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        traceparent: str | None = None,
        requester: str | None = None,
    ) -> str:
        """Queue the first pass of a run of ``agent`` and return the run id
        (default a fresh UUIDv7). The start's message id holds a nonce of this
        call's (no other publisher can have it dropped as a duplicate); two
        calls for one run id queue two first passes, of which the coordinator
        records the first outcome and ignores the other as stale.

        ``requester`` starts the run as that identity, on
        ``<prefix>.start.<agent>.<requester>`` (protocol version 2): the NATS
        user must be allowed that subject (a user starting as itself, or a
        gateway for its session's identity). The run records it as its
        requester, whom a decision policy can exclude from approving."""
        run_id = run_id or uuid7()
        validate_token("run id", run_id)
        work: dict[str, Any] = {"version": 1, "runId": run_id, "agent": agent}
        if thread_id:
            work["threadId"] = thread_id
        work["pass"] = 0
        if input is not None:
            work["input"] = input
        data = json.dumps(work, separators=(",", ":"), allow_nan=False).encode()
        decode_work(data)
        await self._js.publish(
            self._ns.start_as(agent, requester) if requester else self._ns.start(agent),
            data,
            headers={"Nats-Msg-Id": start_msg_id(run_id, nonce()), "traceparent": _trace.child(traceparent)},
        )
        return run_id

    async def _await_reply(self, decision_id: str, approver: str) -> tuple[str | None, asyncio.Future[Verdict]]:
        """A future for the verdict of decision_id, published as approver,
        and the reply subject to name; None when this client cannot receive
        in the approver's inbox (the verdict then comes from the events)."""
        allowed = inbox_prefix(approver)
        fut: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        if self._inbox_prefix and self._inbox_prefix != allowed:
            return None, fut
        async with self._lock:
            if allowed not in self._replies:
                base = f"{allowed}.{os.urandom(11).hex()}"
                sub = await self._nc.subscribe(base + ".*", cb=self._on_reply)
                await self._nc.flush()
                self._replies[allowed] = (base, sub)
            base = self._replies[allowed][0]
            self._waiting[reply_token(decision_id)] = fut
            return f"{base}.{reply_token(decision_id)}", fut

    async def _on_reply(self, m: Msg) -> None:
        try:
            v = Verdict.from_wire(json.loads(m.data))
        except (ValueError, KeyError, TypeError):
            return
        fut = self._waiting.get(m.subject.rsplit(".", 1)[-1])
        if fut is not None and not fut.done():
            fut.set_result(v)

    async def decide(
        self,
        run_id: str,
        interrupt_id: str,
        status: Status = "resolved",
        *,
        payload: Any = NO_PAYLOAD,
        metadata: dict[str, Any] | None = None,
        approver: str | None = None,
        comment: str | None = None,
        decision_id: str | None = None,
        via: str = "sdk",
        timeout: float | None = None,
        call_digest: str | None = None,
        arguments: Any = NO_PAYLOAD,
        withdraw: bool = False,
    ) -> Verdict:
        """Publish a decision on the run's resume subject (the one for
        ``approver``, or the anonymous one) and return the coordinator's
        verdict. A rejected decision raises :class:`Rejected` carrying the
        verdict. ``payload`` may be any JSON value but None; ``False``, ``0``,
        ``""`` and ``{}`` are answers. Sending again with the same
        ``decision_id`` applies it once (the verdict is then ``duplicate``).
        Waits at most ``timeout`` seconds (default the client's) for the verdict.

        On an interrupt with a policy (protocol version 2) a decision is a
        vote: a vote that counts while the interrupt still waits returns the
        verdict with outcome ``vote_recorded`` (:attr:`Verdict.vote_recorded`)
        and its :attr:`Verdict.tally` (approvals so far and needed, who is
        still waited on); the vote that meets the quorum is ``accepted``.
        ``call_digest`` binds the vote to the call the approver saw (a vote
        for other arguments than the interrupt's is rejected
        ``call_mismatch``); ``arguments`` approves the interrupt's tool with
        edited arguments (its own digest: earlier votes do not count for
        it); ``withdraw`` takes back this approver's open vote where the
        policy allows changes (``status`` is then ignored)."""
        d: dict[str, Any] = {
            "version": 1,
            "decisionId": decision_id or uuid7(),
            "interruptId": interrupt_id,
            "status": status,
        }
        if payload is not NO_PAYLOAD:
            if payload is None:
                raise ValueError("payload None is not allowed: leave it out to send no payload")
            d["payload"] = payload
        if metadata is not None:
            d["metadata"] = metadata
        if approver:
            d["approver"] = approver
        if comment:
            d["comment"] = comment
        if withdraw:
            d["status"] = "withdrawn"
        if call_digest:
            d["callDigest"] = call_digest
        if arguments is not NO_PAYLOAD:
            if arguments is None:
                raise ValueError("arguments None is not allowed: leave it out to keep the call's arguments")
            d["arguments"] = arguments
        versioned("decision", d)
        subject = self._ns.resume(run_id, approver)
        # As UTF-8, not \u escapes: the coordinator keeps a payload's escapes
        # as they came, so 6 bytes for an "é" would count against the limit
        # (and the size check below would count 2).
        try:
            data = json.dumps(d, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode()
        except UnicodeEncodeError as e:
            bad = e.object[e.start : e.end]
            raise ValueError(f"the decision holds a lone surrogate ({bad!r}), which is not text") from None
        decode_decision(data)
        inbox, fut = await self._await_reply(d["decisionId"], approver or "")
        deadline = timeout if timeout is not None else self._timeout
        headers = {"Interlock-Via": via}
        if inbox is not None:
            headers["Interlock-Reply-To"] = inbox
        try:
            rejected = 0
            while True:
                headers["Nats-Msg-Id"] = decision_attempt_msg_id(approver or "", d["decisionId"], rejected, data)
                ack = await self._js.publish(subject, data, headers=headers)
                if not ack.duplicate:
                    break
                # The stream already holds this attempt (this very body), so
                # the coordinator will not see this copy: answer with what
                # became of the one it holds, which the ack names. If it was
                # rejected, this is a new attempt, which no rejection may
                # swallow.
                v = await asyncio.wait_for(self._verdict_of(run_id, ack.seq), deadline)
                if v.outcome != "rejected":
                    detail = "this decision was already accepted; nothing changed"
                    return Verdict.from_wire(dict(v.raw, outcome="duplicate", replay=False, detail=detail))
                rejected += 1
            try:
                waiting = asyncio.shield(fut) if inbox is not None else self._verdict_of(run_id, ack.seq)
                v = await asyncio.wait_for(waiting, deadline)
            except TimeoutError:
                raise TimeoutError(
                    f"decision {d['decisionId']} is stored; no verdict within {deadline}s (is a coordinator running?)"
                ) from None
        finally:
            self._waiting.pop(reply_token(d["decisionId"]), None)
        if v.outcome == "rejected":
            raise Rejected(v)
        return v

    async def approve(self, run_id: str, interrupt_id: str, payload: Any = NO_PAYLOAD, **kw: Any) -> Verdict:
        """:meth:`decide` with status ``resolved``."""
        return await self.decide(run_id, interrupt_id, "resolved", payload=payload, **kw)

    async def withdraw(self, run_id: str, interrupt_id: str, **kw: Any) -> Verdict:
        """:meth:`decide` taking back the approver's open vote (status
        ``withdrawn``, protocol version 2), where the interrupt's policy
        allows changes; the verdict is ``vote_recorded`` with the tally."""
        return await self.decide(run_id, interrupt_id, "resolved", withdraw=True, **kw)

    async def deny(self, run_id: str, interrupt_id: str, **kw: Any) -> Verdict:
        """:meth:`decide` with status ``cancelled``: the agent gets a distinct
        cancelled value, never an approval."""
        return await self.decide(run_id, interrupt_id, "cancelled", **kw)

    async def _verdict_of(self, run_id: str, seq: int) -> Verdict:
        """The verdict on the decision message the decisions stream holds at
        ``seq``, once the coordinator has recorded it: in the run's events,
        or under the no-run token ``_`` for a run that does not exist. The
        coordinator stores it with a message id naming that sequence
        (``<run>:seq<seq>:decision_<outcome>``, or ``:vote_recorded`` for a
        vote that counts), and only it writes there.
        Each look reads only the events recorded since the last."""
        marks = (f":seq{seq}:decision_", f":seq{seq}:vote_recorded")
        filters = [self._ns.run_events(run_id), self._ns.events(NO_RUN, "decision_rejected")]
        stream = self._ns.stream("EVENTS")
        cursors = [0, 0]
        while True:
            for i, subject_filter in enumerate(filters):
                msgs = await _direct.messages(self._nc, stream, subject_filter, cursors[i] + 1, None, self._timeout)
                for m in msgs:
                    cursors[i] = m.seq
                    if not any(mark in m.headers.get("Nats-Msg-Id", "") for mark in marks):
                        continue
                    # The coordinator's entry, or an answer the server stored
                    # there for another user, carrying the id it will take:
                    # only the stored headers tell (docs/security.md,
                    # "Answers the server sends for you").
                    stored = await _direct.stored_headers(self._nc, stream, m.seq, self._timeout)
                    if stored is None or not_published(stored) is not None:
                        continue
                    ev = self._ns.stored_event(m.subject, m.data or b"")
                    if ev is not None and isinstance(ev.get("verdict"), dict):
                        return Verdict.from_wire(ev["verdict"])
            await asyncio.sleep(0.1)

    async def run(self, run_id: str) -> Run:
        """The run's record; raises :class:`RunNotFound` before its first pass
        ends. Read with ``$JS.API.STREAM.MSG.GET.KV_<runs bucket>``, whose
        answer holds the record's headers as stored: a direct get's would
        not let nats-py (one value per header) tell the coordinator's write
        from an answer the server stored under the run's key."""
        validate_token("run id", run_id)
        bucket = self._ns.bucket("runs")
        m = await _direct.stored(self._nc, f"KV_{bucket}", {"last_by_subj": f"$KV.{bucket}.{run_id}"}, self._timeout)
        missing = RunNotFound(f"{run_id} (a run has a record once its first pass ends)")
        if m is None or (m.headers.get("KV-Operation") in ("DEL", "PURGE") and server_header(m.headers) is None):
            raise missing  # none, or a client's delete marker
        reason = not_published(m.headers)
        if reason is not None:
            # Every write of a record carries a message id and none of the
            # server's headers: this is an answer the server stored under the
            # run's key for another user (docs/security.md, "Answers the
            # server sends for you").
            raise ProtocolError(
                "not_allowed",
                f"run {run_id}: the run record is not a write of the coordinator's "
                "(an answer the server stored there for another user)",
            )
        if not m.data:
            raise missing
        return Run.from_bytes(m.data)

    async def wait(self, run_id: str, until: Callable[[Run], bool] = finished, *, timeout: float | None = None) -> Run:
        """Return the run's record once ``until`` is true for it, re-reading it
        whenever an event of the run is published (and every second).
        Raises TimeoutError after ``timeout`` seconds (default the client's
        ``wait_timeout``, 600 s). A run that waits for a person can wait far
        longer: pass the timeout you mean."""
        changed = asyncio.Event()

        async def on_event(_: Msg) -> None:
            changed.set()

        sub = await self._nc.subscribe(self._ns.run_events(run_id), cb=on_event)
        deadline = time.monotonic() + (timeout if timeout is not None else self._wait_timeout)
        last: Run | None = None
        refused: ProtocolError | None = None
        try:
            while True:
                changed.clear()
                try:
                    last, refused = await self.run(run_id), None
                    if until(last):
                        return last
                except RunNotFound:
                    pass
                except ProtocolError as e:
                    # What the coordinator did not write: before a run's
                    # first record, which replaces it, waited on as none.
                    if e.code != "not_allowed":
                        raise
                    refused = e
                left = deadline - time.monotonic()
                if left <= 0:
                    state = last.status if last else "no record"
                    why = f"; last read refused: {refused}" if refused else ""
                    raise TimeoutError(f"run {run_id}: condition not met in time (last seen: {state}{why})")
                try:
                    await asyncio.wait_for(changed.wait(), min(1.0, left))
                except TimeoutError:
                    pass
        finally:
            await sub.unsubscribe()

    async def pending(self) -> list[PendingInterrupt]:
        """Every interrupt waiting for a decision, oldest first, from the
        pending index (each entry's ``raw`` as ``interlock pending --json``
        prints it), read page by page: it costs what is pending, not every
        run."""
        latest: dict[tuple[str, str], PendingInterrupt] = {}
        after = 0
        while True:
            page, after = await self.pending_page(after, 256)
            for p in page:
                # An entry put again meanwhile (an escalation) comes once
                # more, later: the last one read is its current state.
                latest[(p.run_id, p.id)] = p
            if after == 0:
                break
        out = list(latest.values())
        out.sort(key=lambda p: (_instant(p.suspended_at), p.run_id + p.id))
        return out

    async def pending_page(self, after: int = 0, limit: int = 50) -> tuple[list[PendingInterrupt], int]:
        """Up to ``limit`` interrupts waiting for a decision after cursor
        ``after`` (0: from the start), in the order they entered the pending
        index, and the cursor of the next page (0: none follows). Entries
        added meanwhile come on later pages, removed ones are left out, none
        is skipped; an escalated entry moves to the end. One batched read per
        page (and one more for each run of removed entries it steps over),
        however many are pending, and one ``$JS.API.STREAM.MSG.GET`` per
        entry, 64 in flight, for its headers as stored (an answer the server
        stored in the index for another user is no entry)."""
        if limit < 1 or after < 0:
            raise ValueError(f"pending_page: limit must be at least 1 and after at least 0 (got {limit}, {after})")
        bucket = self._ns.bucket("pending")
        stream = "KV_" + bucket
        entries: list[PendingInterrupt] = []
        start = after + 1
        while len(entries) < limit:
            msgs, more = await _direct.batch(self._nc, stream, ">", start, limit - len(entries), self._timeout)
            if msgs:
                start = msgs[-1].seq + 1
            # Only the coordinator writes here, every put with its message id
            # on a key's subject: what has none, is on another subject (a
            # pull's answer keeps its work item's), carries the server's
            # headers as stored, or is no entry, is an answer the server
            # stored for another user (docs/security.md, "Answers the server
            # sends for you").
            candidates = [
                m
                for m in msgs
                if m.headers.get("KV-Operation") not in ("DEL", "PURGE")
                and m.data
                and m.headers.get("Nats-Msg-Id")
                and m.subject.startswith(f"$KV.{bucket}.")
            ]
            for m in await self._published_only(stream, candidates):
                try:
                    entries.append(PendingInterrupt.from_wire(json.loads(m.data)))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
            if not more:
                return entries, 0
        return entries, start - 1

    async def events(self, run_id: str) -> list[Event]:
        """The run's lifecycle and audit events, oldest first, read with
        batched direct gets (one request per 1,024 events), each checked
        against its stored headers (one ``$JS.API.STREAM.MSG.GET`` request
        per event, which readers of the trail hold): an answer the server
        stored on a run's events subject for another user is no entry of
        the trail, and nats-py keeps one value per header, so a direct
        get's answer alone cannot tell it from one."""
        events, _ = await self._events_after(run_id, 0)
        return [Event.from_wire(e) for e in events]

    async def _events_after(self, run_id: str, after: int) -> tuple[list[dict[str, Any]], int]:
        """The run's events stored after sequence ``after``, and the sequence
        of the last one read (``after`` when none)."""
        msgs = await _direct.messages(
            self._nc, self._ns.stream("EVENTS"), self._ns.run_events(run_id), after + 1, None, self._timeout
        )
        kept = await self._published_only(self._ns.stream("EVENTS"), msgs)
        if msgs:
            after = msgs[-1].seq
        # Type and run from where each entry was stored, not its body.
        return [ev for m in kept if (ev := self._ns.stored_event(m.subject, m.data or b"")) is not None], after

    async def _published_only(self, stream: str, msgs: list[_direct.Stored]) -> list[_direct.Stored]:
        """The messages of ``msgs`` (read from ``stream``) that were stored
        as a client's publish, in order, each checked against the headers
        it was stored with (one ``$JS.API.STREAM.MSG.GET`` request each,
        64 in flight): an answer the server stored for another user is
        none, and nats-py keeps one value per header, so a direct get's
        answer alone cannot tell it from one. One aged out since it was
        read is left out too."""
        room = asyncio.Semaphore(_CHECKS_IN_FLIGHT)

        async def published(m: _direct.Stored) -> bool:
            async with room:
                stored = await _direct.stored_headers(self._nc, stream, m.seq, self._timeout)
            return stored is not None and not_published(stored) is None

        # A task group: the first failure (a refused request) cancels the
        # rest, and is raised as it is.
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(published(m)) for m in msgs]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return [m for m, t in zip(msgs, tasks, strict=True) if t.result()]
