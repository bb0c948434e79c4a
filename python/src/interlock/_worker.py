"""The worker: runs the passes of registered agents."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import api

from . import _direct, _trace
from ._errors import InterlockError, InvalidToken, ProtocolError, Retry, Suspended, SuspensionTooLarge
from ._ids import dead_letter_msg_id, outcome_msg_id, pass_key
from ._pull import CONFIG_READ, Backoff, Puller
from ._run import _current, _Pass, _tool_call
from ._subjects import DEFAULT_PREFIX, Namespace, validate_token, worker_durable
from ._types import RunInfo
from ._wire import (
    MAX_DEPTH,
    ask_message,
    decode_work,
    nested_deeper,
    not_published,
    record_limit,
    suspension_bound,
    take_ask_reply,
    versioned,
)

AgentFunc = Callable[[Any], Awaitable[Any]]
"""An agent body: one pass of a run, given the run's input. It runs again
from the top on every replay."""

_log = logging.getLogger("interlock.worker")


class _PassTimeout(Exception):
    pass


class Worker:
    """Consumes work items of registered agents, runs the body, and publishes
    the pass's one outcome (suspension, completion or failure).

    It binds to the durable consumer ``worker_<agent>`` on the work stream
    (creating it when it does not exist and ``create_consumers`` is true), so
    it shares an agent's work with the Go workers of that agent. It holds at
    most ``concurrency`` work items per agent (no prefetch), asked for in one
    long-lived pull request at a time for all its free room (each item is
    handled as it arrives; the next request goes when that one is filled or
    ends, after 10 s or two missed heartbeats), sends a
    heartbeat (``+WPI``) every half of the consumer's ack wait (read when it
    binds and every 30 s; ``ack_wait`` sets it on a consumer it creates)
    while a pass runs, cancels a
    pass after ``pass_timeout`` seconds (default 300, Go's
    ``processor.DefaultPassTimeout``; None: no limit; the pass is retried later, like
    :class:`Retry`; on the last attempt the run fails, as with the Go
    worker), and before running a pass checks that the pass has not
    already reported (the runs stream holds its outcome), on every delivery.

    With ``ask_rules`` (protocol version 2; Go: ``WorkerConfig.AskRules``),
    :func:`interrupt_async` asks the coordinator, before suspending, whether
    an operator rule settles the interrupt: a settled interrupt costs one
    round trip instead of a suspension and a replay. Without an answer
    within ``ask_timeout`` seconds the pass suspends as usual. Turn it on
    where operator rules settle many calls (``interlock serve --policies``);
    without rules it is one wasted round trip per interrupt.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int = 4,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
        pass_timeout: float | None = 300.0,
        backoff: tuple[float, ...] = (0.1, 1.0, 5.0, 30.0),
        create_consumers: bool = True,
        logger: logging.Logger | None = None,
        ask_rules: bool = False,
        ask_timeout: float = 2.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._nc = nc
        self._js = nc.jetstream()
        self._ns = Namespace(prefix)
        self._concurrency = concurrency
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver
        self._pass_timeout = pass_timeout
        self._backoff = backoff
        self._create = create_consumers
        self._log = logger or _log
        self._ask_rules = ask_rules
        self._ask_timeout = ask_timeout
        self._agents: dict[str, AgentFunc] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._active: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()

    def register(self, name: str, fn: AgentFunc) -> None:
        """Add an agent. Register before :meth:`start`."""
        validate_token("agent", name)
        if self._loops:
            raise RuntimeError("register agents before start")
        self._agents[name] = fn

    def agent(self, name: str) -> Callable[[AgentFunc], AgentFunc]:
        """Decorator form of :meth:`register`."""

        def deco(fn: AgentFunc) -> AgentFunc:
            self.register(name, fn)
            return fn

        return deco

    async def start(self) -> None:
        """Bind a consumer per agent and start taking work. Raises
        :class:`InterlockError` when nats-py reads headers as an e-mail's
        (see :func:`_check_header_reader`)."""
        if self._loops:
            raise RuntimeError("worker already started")
        _check_header_reader()
        for name, fn in self._agents.items():
            sub = await self._bind(name)
            self._loops.append(asyncio.create_task(self._loop(name, fn, sub), name=f"interlock-worker-{name}"))

    async def _bind(self, agent: str) -> Puller:
        stream, durable = self._ns.stream("WORK"), worker_durable(agent)
        puller = Puller(self._nc, stream, durable)
        try:
            await puller.read_limits()
        except nats.js.errors.NotFoundError:
            if not self._create:
                raise
            await self._js.add_consumer(
                stream,
                api.ConsumerConfig(
                    durable_name=durable,
                    filter_subjects=self._ns.agent_work(agent),
                    ack_policy=api.AckPolicy.EXPLICIT,
                    ack_wait=self._ack_wait,
                    max_deliver=self._max_deliver,
                    max_ack_pending=1024,
                    deliver_policy=api.DeliverPolicy.ALL,
                ),
            )
        return puller

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking work and wait for the passes under way; after
        ``timeout`` seconds cancel them (their work items come back later)."""
        self._stopping.set()
        if self._loops:
            await asyncio.gather(*self._loops, return_exceptions=True)
            self._loops = []
        if self._active:
            _, late = await asyncio.wait(set(self._active), timeout=timeout)
            for t in late:
                t.cancel()
            if late:
                await asyncio.gather(*late, return_exceptions=True)

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _loop(self, agent: str, fn: AgentFunc, puller: Puller) -> None:
        # One pull request at a time for all the free room: messages are
        # handled as they arrive on it, and room they free waits for the next
        # request, sent when this one is filled or ends (issue 25: on a
        # cluster every request is two Raft entries of the consumer).
        mine: set[asyncio.Task[None]] = set()
        backoff = Backoff()
        # The consumer read again every CONFIG_READ, also while every place is
        # taken or a request waits: an operator may have changed its ack wait.
        reread = asyncio.create_task(self._reread(agent, puller))
        try:
            await self._pull_loop(agent, fn, puller, mine, backoff)
        finally:
            reread.cancel()
            await asyncio.gather(reread, return_exceptions=True)

    async def _reread(self, agent: str, puller: Puller) -> None:
        while not self._stopping.is_set():
            await self._pause(CONFIG_READ)
            await self._relimit(agent, puller)

    async def _pull_loop(
        self, agent: str, fn: AgentFunc, puller: Puller, mine: set[asyncio.Task[None]], backoff: Backoff
    ) -> None:
        while not self._stopping.is_set():
            free = self._concurrency - len(mine)
            if free == 0:
                stop = asyncio.ensure_future(self._stopping.wait())
                await asyncio.wait(mine | {stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                continue
            if not self._nc.is_connected and not self._nc.is_closed:
                await self._pause(0.5)  # reconnecting: a request now would wait in the client's buffer
                continue
            got = 0
            try:
                async with contextlib.aclosing(puller.messages(puller.room(free), self._stopping)) as msgs:
                    async for m in msgs:
                        got += 1
                        if self._stopping.is_set():
                            await _quiet(m.nak())
                            continue
                        t = asyncio.create_task(self._handle(agent, fn, m, puller))
                        mine.add(t)
                        self._active.add(t)
                        t.add_done_callback(mine.discard)
                        t.add_done_callback(self._active.discard)
                backoff.reset()
            except nats.errors.ConnectionClosedError:
                return
            except Exception as e:  # refused (409, 503: no consumer leader yet), or a hiccup
                if got:  # it was working: ask again at once
                    backoff.reset()
                    continue
                wait, warn = backoff.failed()
                self._log.log(
                    logging.WARNING if warn else logging.DEBUG,
                    "pull request for %s failed %d times in a row; asking again in %.1fs: %s",
                    agent,
                    backoff.streak,
                    wait,
                    e,
                )
                await self._pause(wait)
                await self._relimit(agent, puller)

    async def _relimit(self, agent: str, puller: Puller) -> None:
        """Read the consumer's request limits and ack wait again (after a
        failed request, and every ``CONFIG_READ`` seconds): an operator may
        have changed them. Not while stopping or reconnecting, and briefly:
        the next request or read is what matters."""
        if self._stopping.is_set() or not self._nc.is_connected:
            return
        ack_wait = puller.ack_wait
        try:
            changed = await puller.read_limits(timeout=1.0)
        except Exception:  # gone or unreachable: the next request says so
            return
        if ack_wait is not None and puller.ack_wait != ack_wait:
            self._log.warning(
                "the consumer of %s now waits %.1fs for acks; heartbeats follow",
                agent,
                puller.ack_wait or self._ack_wait,
            )
        if changed:
            self._log.warning(
                "the consumer of %s allows %s messages and %.1fs per pull request; asking within that",
                agent,
                puller.max_batch or "any number of",
                puller.expires,
            )

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when the worker stops."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    async def _handle(self, agent: str, fn: AgentFunc, m: Msg, puller: Puller) -> None:
        deliveries = m.metadata.num_delivered
        try:
            # A start or replay is a client's or the coordinator's publish,
            # never an API answer another user had the server send here.
            reason = not_published(m.headers)
            if reason is not None:
                await self._dead_letter(agent, m, f"work item: {reason}")
                return
            try:
                work = decode_work(m.data)
            except ProtocolError as e:
                await self._dead_letter(agent, m, f"work item: {e}")
                return
            if work["agent"] != agent:
                await self._dead_letter(agent, m, f"work item for agent {work['agent']!r} arrived on {m.subject}")
                return
            first_pass = (work.get("pass") or 0) == 0 and not work.get("decisions") and not work.get("journal")
            try:
                requester = self._ns.requester_of(agent, m.subject)
            except InvalidToken as e:
                await self._dead_letter(agent, m, f"work item on {m.subject}: {e}")
                return
            if requester is not None and not first_pass:
                # Only the coordinator publishes replays (on the work
                # subject): whoever may start a run may not hand a body
                # decisions.
                await self._dead_letter(
                    agent,
                    m,
                    f"malformed: a work item on {m.subject} must be a first pass; replays come from the coordinator",
                )
                return
            key = pass_key((m.headers or {}).get("Nats-Msg-Id", ""), m.data)
            if await self._pass_done(work, key):
                await m.ack()
                return
            heartbeat = asyncio.create_task(self._heartbeat(m, puller))
            traceparent = (m.headers or {}).get("traceparent")
            try:
                subject, data, traceparent = await self._run_pass(agent, fn, work, traceparent, requester or "")
            except _PassTimeout as e:
                if deliveries < self._max_deliver:
                    raise
                # The last attempt timed out too: the run fails, as with Go.
                self._log.warning("pass timed out on its last attempt; the run fails: %s", e)
                failed = _PassTimeout(
                    f"pass timed out after {self._pass_timeout}s (attempt {deliveries} of {self._max_deliver})"
                )
                subject, msg = self._outcome(
                    work, _Pass(_run_info(agent, work, traceparent or ""), [], {}), None, failed
                )
                data = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode()
            finally:
                heartbeat.cancel()
            await self._js.publish(
                subject,
                data,
                headers={
                    "Nats-Msg-Id": outcome_msg_id(work["runId"], work.get("pass") or 0, key),
                    "traceparent": traceparent,
                },
            )
            await m.ack()
        except (Retry, _PassTimeout) as e:
            await self._retry(agent, m, deliveries, e)
        except asyncio.CancelledError:
            # Handed back, but never after its last delivery: the server
            # would not deliver it again, and nothing would dead-letter it.
            if deliveries >= self._max_deliver:
                await self._dead_letter(agent, m, f"gave up after {deliveries} deliveries: the worker stopped")
            else:
                await _quiet(m.nak())
            raise
        except Exception as e:
            self._log.warning("pass failed to report; will retry: %s", e)
            await self._retry(agent, m, deliveries, e)

    async def _retry(self, agent: str, m: Msg, deliveries: int, err: Exception) -> None:
        if deliveries >= self._max_deliver:
            await self._dead_letter(agent, m, f"gave up after {deliveries} deliveries: {err}")
            return
        delay = self._backoff[min(deliveries - 1, len(self._backoff) - 1)]
        await _quiet(m.nak(delay=delay))

    async def _heartbeat(self, m: Msg, puller: Puller) -> None:
        """Every half of the consumer's ack wait (as last read; the
        worker's own until it was), so that an item held under an ack wait
        an operator set shorter than ``ack_wait`` is not handed on; at once
        when a read finds it changed."""
        while True:
            changed = puller.ack_wait_changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max((puller.ack_wait or self._ack_wait) / 2, 0.01))
            await _quiet(m.in_progress())

    async def _pass_done(self, work: dict[str, Any], key: str) -> bool:
        """Whether this pass (with ``key``) was already reported, from the
        run's last message on the agent's own subjects of the runs stream, as
        the Go worker decides: this pass's outcome (told by its message id,
        which only a holder of the work item can compute), an outcome of a
        later pass, or a coordinator's notice about this pass or a later one.
        A forged outcome of this pass does not count."""
        runs = self._ns.stream("RUNS")
        last = await _direct.last(self._nc, runs, self._ns.run_outcomes(work["agent"], work["runId"]), 5.0)
        if last is None:
            return False
        done, notice, got = self._judge_pass(work, key, last)
        if not notice or done or got >= int(work.get("pass") or 0):
            return done
        # A notice about an earlier pass: the coordinator publishes an
        # expiry's after it queued the replay, whose outcome can be stored
        # before it. Judge by the run's last outcome instead.
        outcomes = [
            await _direct.last(self._nc, runs, subject(work["agent"], work["runId"]), 5.0)
            for subject in (self._ns.suspended, self._ns.completed, self._ns.failed)
        ]
        stored = [o for o in outcomes if o is not None]
        if not stored:
            return False
        return self._judge_pass(work, key, max(stored, key=lambda o: o.seq))[0]

    def _judge_pass(self, work: dict[str, Any], key: str, last: _direct.Stored) -> tuple[bool, bool, int]:
        """``_pass_done``'s rules applied to ``last``: whether the pass is
        done, whether ``last`` is a coordinator's notice, and its pass."""
        want = int(work.get("pass") or 0)
        try:
            head = json.loads(last.data or b"")
            got = int(head.get("pass") or 0)
        except (ValueError, TypeError, AttributeError):
            return False, False, 0
        tokens = (last.subject or "").split(".")
        prefix = len(self._ns.prefix.split("."))
        if len(tokens) != prefix + 3 or tokens[prefix + 1] != work["agent"] or tokens[prefix + 2] != work["runId"]:
            return False, False, 0
        notice = tokens[prefix] in ("reminder", "escalated", "expired")
        if got != want:
            return got > want, notice, got
        if notice:
            return True, True, got
        return last.headers.get("Nats-Msg-Id") == outcome_msg_id(work["runId"], want, key), False, got

    async def _run_pass(
        self, agent: str, fn: AgentFunc, work: dict[str, Any], traceparent: str | None, requester: str = ""
    ) -> tuple[str, bytes, str]:
        tp = _trace.child(traceparent)
        info = _run_info(agent, work, tp)
        p = _Pass(info, work.get("decisions") or [], work.get("journal") or {})
        if self._ask_rules:
            p.ask = self._asker(agent, work, requester)
        ctx = contextvars.copy_context()
        ctx.run(_current.set, p)
        ctx.run(_tool_call.set, "")
        task = asyncio.create_task(_call(fn, work.get("input")), context=ctx)
        result: Any = None
        err: BaseException | None = None
        try:
            result = await asyncio.wait_for(task, self._pass_timeout)
        except TimeoutError:
            raise _PassTimeout(f"pass {info.pass_} of run {info.run_id} ran over {self._pass_timeout}s") from None
        except Retry:
            with p.lock:
                if not p.pending:
                    raise
        except (Suspended, Exception) as e:
            err = e
        except asyncio.CancelledError as e:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the worker stops: the pass is handed back
            # Raised by the body itself (it awaited a task it cancelled):
            # the body's error, not the worker's stop.
            err = e
        subject, msg = self._outcome(work, p, result, err, requester)
        return subject, json.dumps(msg, separators=(",", ":"), allow_nan=False).encode(), tp

    def _asker(
        self, agent: str, work: dict[str, Any], requester: str
    ) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]:
        subject = self._ns.ask(agent, work["runId"])

        async def ask(interrupt: dict[str, Any]) -> dict[str, Any] | None:
            msg = ask_message(work["runId"], agent, work.get("pass") or 0, requester, interrupt)
            try:
                reply = await self._nc.request(
                    subject, json.dumps(msg, separators=(",", ":"), allow_nan=False).encode(), timeout=self._ask_timeout
                )
            except Exception as e:  # no coordinator, no rules, a timeout: suspend
                self._log.debug(
                    "ask unanswered; suspending: run %s interrupt %s: %s", work["runId"], interrupt["id"], e
                )
                return None
            return take_ask_reply(reply.data, interrupt["id"])

        return ask

    def _outcome(
        self, work: dict[str, Any], p: _Pass, result: Any, err: BaseException | None, requester: str = ""
    ) -> tuple[str, dict[str, Any]]:
        ref: dict[str, Any] = {"version": 1, "runId": work["runId"], "agent": work["agent"]}
        if work.get("threadId"):
            ref["threadId"] = work["threadId"]
        ref["pass"] = work.get("pass") or 0
        if "input" in work and work["input"] is not None:
            ref["input"] = work["input"]
        now = _now()
        with p.lock:
            if p.request_errors:
                # A request that could not be published fails the run rather
                # than let the pass end without asking.
                err = p.request_errors[0]
            elif p.pending:
                msg = dict(ref, interrupts=list(p.pending))
                if p.journal:
                    msg["journal"] = dict(p.journal)
                msg["suspendedAt"] = now
                if requester and (work.get("pass") or 0) == 0:
                    # Who started the run, as the start subject's last token
                    # says (NATS permissions bind it); never a body field.
                    msg["requester"] = requester
                versioned("suspension", msg)
                if nested_deeper(msg):
                    err = ValueError(_too_deep("suspension (its journal)"))
                else:
                    bound, limit = suspension_bound(work, msg), record_limit(self._nc.max_payload)
                    if bound <= limit:
                        return self._ns.suspended(work["agent"], work["runId"]), msg
                    # Refused here: the run fails with the reason instead of
                    # waiting on questions whose answers its record could not take.
                    err = SuspensionTooLarge(
                        f"suspension too large: with the largest decision allowed for each of its "
                        f"{len(p.pending)} interrupts the run record could reach {bound} bytes, over the "
                        f"{limit} a run record may have on a server whose max payload is "
                        f"{self._nc.max_payload} bytes; ask with less (message, metadata, schema, "
                        f"journal) or fewer interrupts per pass"
                    )
                self._log.warning("suspension refused: %s", err)
            elif err is None:
                msg = dict(ref, result=result)
                if p.journal:
                    msg["journal"] = dict(p.journal)
                msg["completedAt"] = now
                try:
                    if nested_deeper(msg):
                        raise ValueError(_too_deep("completion (its result or journal)"))
                    json.dumps(result, allow_nan=False)
                except (TypeError, ValueError) as e:
                    err = TypeError(f"result cannot be marshalled: {e}")
                else:
                    return self._ns.completed(work["agent"], work["runId"]), msg
        if isinstance(err, Suspended):
            text = "the body raised Suspended without an interrupt"
        else:
            text = str(err) or type(err).__name__
        return self._ns.failed(work["agent"], work["runId"]), dict(ref, error=text, failedAt=now)

    async def _dead_letter(self, agent: str, m: Msg, reason: str) -> None:
        meta = m.metadata
        headers = {k: v for k, v in (m.headers or {}).items() if k != "Nats-Msg-Id"}
        headers.update(
            {
                "Interlock-Dlq-Reason": reason,
                "Interlock-Dlq-Subject": m.subject,
                "Interlock-Dlq-Stream": meta.stream,
                "Interlock-Dlq-Sequence": str(meta.sequence.stream),
                "Interlock-Dlq-Deliveries": str(meta.num_delivered),
                "Interlock-Dlq-Consumer": worker_durable(agent),
                # A nonce of its own: a predictable id could be stored first by
                # anyone who may write the dead-letter stream.
                "Nats-Msg-Id": dead_letter_msg_id(worker_durable(agent), meta.stream, meta.sequence.stream)
                + ":"
                + secrets.token_hex(16),
            }
        )
        try:
            await self._js.publish(self._ns.dead_letter(worker_durable(agent)), m.data, headers=headers)
        except Exception as e:
            self._log.error("dead-letter failed; will retry: %s", e)
            await _quiet(m.nak(delay=self._backoff[-1]))
            return
        self._log.warning("dead-lettered %s: %s", m.subject, reason)
        await _quiet(m.term())


async def _call(fn: AgentFunc, input_: Any) -> Any:
    return await fn(input_)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


async def _quiet(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception as e:  # acks are best effort: the server redelivers
        _log.debug("ack failed: %s", e)


def _run_info(agent: str, work: dict[str, Any], traceparent: str) -> RunInfo:
    return RunInfo(
        run_id=work["runId"],
        agent=agent,
        pass_=work.get("pass") or 0,
        thread_id=work.get("threadId") or "",
        traceparent=traceparent,
    )


def _too_deep(what: str) -> str:
    # Refused here rather than by the coordinator, which refuses a message
    # nested deeper than every reader takes: the run fails with the reason.
    return f"the {what} nests objects and lists deeper than the protocol's {MAX_DEPTH} levels"


def _check_header_reader() -> None:
    """Refuse to take work when nats-py reads a message's headers with the
    optional ``fast_mail_parser``: an e-mail's headers end at the first
    blank line, and nats-server appends the headers that tell an answer it
    stored from a client's publish after whatever was stored, a blank line
    included. A work item of another user's making would pass for one
    (docs/security.md, "Answers the server sends for you"); nats-py's own
    line reader reads the whole block."""
    import nats.aio.client as nats_client

    if getattr(nats_client, "parse_email", None) is not None:
        raise InterlockError(
            "nats-py reads message headers with fast_mail_parser, which stops at a blank line and so cannot see "
            "the headers nats-server adds to an answer it stored; uninstall fast-mail-parser to run an Interlock worker"
        )
