"""The replay model inside an agent body: interrupt, is_resuming, tool-call
scopes and journaled steps. State lives in context variables, so it follows
the body into the tasks it starts."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from ._calldigest import call_digest
from ._errors import CallMismatch, Cancelled, InvalidRequest, NotInRun, ProtocolError, Suspended, ToolCallMismatch
from ._ids import interrupt_id, step_key
from ._types import Decision, Request, RunInfo
from ._wire import validate_interrupt

T = TypeVar("T")


class _Pass:
    """The state of one pass of a run."""

    def __init__(self, info: RunInfo, decisions: list[dict[str, Any]], journal: dict[str, Any]) -> None:
        self.info = info
        self.decisions = {d["interruptId"]: d for d in decisions}
        self.journal: dict[str, Any] = dict(journal)
        self.ordinals: dict[str, int] = {}
        self.steps: dict[str, int] = {}
        self.pending: list[dict[str, Any]] = []
        self.request_errors: list[Exception] = []
        # By tool call: the execution key of the last approved call
        # interrupt() returned in it.
        self.keys: dict[str, str] = {}
        # Set by a worker with ask_rules: asks the coordinator whether an
        # operator rule settles an interrupt (its wire form) before the pass
        # suspends on it; the rule's decision, or None to suspend.
        self.ask: Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]] | None = None
        self.lock = threading.Lock()  # bodies may call from threads too


_current: ContextVar[_Pass | None] = ContextVar("interlock_pass", default=None)
_tool_call: ContextVar[str] = ContextVar("interlock_tool_call", default="")


def run_info() -> RunInfo | None:
    """The run and pass the caller runs in, or None outside a run."""
    p = _current.get()
    return p.info if p else None


@contextlib.contextmanager
def tool_call(tool_call_id: str) -> Iterator[None]:
    """Scope interrupts and steps to one tool call: two identical gated calls
    in one turn, each in its own scope, get their own interrupts and
    decisions. Within a scope, interrupts are matched by the order raised."""
    if not isinstance(tool_call_id, str):
        raise TypeError("tool_call_id must be a string")
    token = _tool_call.set(tool_call_id)
    try:
        yield
    finally:
        _tool_call.reset(token)


def current_tool_call() -> str:
    """The tool call in scope ("" outside any)."""
    return _tool_call.get()


def is_resuming() -> bool:
    """Whether the next ``interrupt`` in this scope returns a decision rather
    than suspend: the predicate ``interrupt`` itself uses. False on the first
    pass, true on a replay once that interrupt is decided, false outside a run."""
    p = _current.get()
    if p is None:
        return False
    scope = _tool_call.get()
    with p.lock:
        ordinal = p.ordinals.get(scope, 0)
        return _decided(p, interrupt_id(p.info.run_id, scope, ordinal)) is not None


def interrupt(request: Request | None = None) -> Decision:
    """Ask a person for a decision.

    On the suspend pass it records ``request`` and raises :class:`Suspended`;
    let it propagate: the pass ends, and every interrupt raised in it is
    published in one suspension. On the replay pass, when this interrupt's
    decision is present, it returns the :class:`Decision` **without reading
    ``request``** (pass None if you like); a cancelled decision raises
    :class:`Cancelled` instead, never an approval. Outside a run it raises
    :class:`NotInRun`.

    A request with a ``call`` (protocol version 2) binds the approval to
    that call: give the same request on the replay, and ``interrupt``
    checks that the call about to run (the request's, or the approvers'
    edit of it, :func:`approved_arguments`) has the approved digest, raising
    :class:`CallMismatch` otherwise (run nothing then). The approved call's
    execution key is then :func:`execution_key` in this tool-call scope.
    """
    p, scope, iid, found = _lookup()
    if found is not None:
        return _answer(p, scope, found, request)
    _pend(p, _wire_of(p, iid, scope, request))
    raise Suspended([iid])


async def interrupt_async(request: Request | None = None) -> Decision:
    """:func:`interrupt`, awaited, for a pass that may be settled in one
    round trip (protocol version 2).

    In a worker made with ``ask_rules=True`` it asks the coordinator,
    before suspending, whether an operator rule settles the interrupt
    (``interlock serve --policies``): a rule's approval is returned (and a
    rule's denial raises :class:`Cancelled`) in the same pass, with no
    suspension and no replay. The decision is journaled under
    ``ask/<interrupt id>``, so every later pass of the run returns it
    without asking again. Without a rule that settles it, or without an
    answer within the worker's ``ask_timeout``, it suspends exactly as
    :func:`interrupt` does (it fails closed: it never approves on its own).
    Elsewhere it is :func:`interrupt`."""
    p, scope, iid, found = _lookup()
    if found is not None:
        return _answer(p, scope, found, request)
    wire = _wire_of(p, iid, scope, request)
    if p.ask is not None:
        decided = await p.ask(wire)
        if decided is not None:
            # Journaled with the pass's outcome: every later pass returns
            # this decision without asking again.
            with p.lock:
                p.journal[ask_key(iid)] = copy.deepcopy(decided)
            return _answer(p, scope, decided, request)
    _pend(p, wire)
    raise Suspended([iid])


def ask_key(interrupt_id: str) -> str:
    """The journal key of the decision an operator rule made on
    ``interrupt_id`` when asked (:func:`interrupt_async`)."""
    return "ask/" + interrupt_id


def _lookup() -> tuple[_Pass, str, str, dict[str, Any] | None]:
    """The pass, tool-call scope and id of the next interrupt, with its
    decision when the coordinator sent one or a rule settled it when asked."""
    p = _current.get()
    if p is None:
        raise NotInRun("interrupt: not inside an Interlock run")
    scope = _tool_call.get()
    with p.lock:
        ordinal = p.ordinals.get(scope, 0)
        p.ordinals[scope] = ordinal + 1
        iid = interrupt_id(p.info.run_id, scope, ordinal)
        found = _decided(p, iid)
    return p, scope, iid, found


def _decided(p: _Pass, iid: str) -> dict[str, Any] | None:
    """The decision interrupt ``iid`` of pass ``p`` has (``p.lock`` held):
    the one the replay carries, or one an operator rule made when asked
    (journaled). What ``interrupt`` returns and ``is_resuming`` predicts."""
    found = p.decisions.get(iid)
    if found is None:
        asked = p.journal.get(ask_key(iid))
        if isinstance(asked, dict) and asked.get("interruptId") == iid:
            found = asked
    return found


def _answer(p: _Pass, scope: str, found: dict[str, Any], request: Request | None) -> Decision:
    d = Decision.from_wire(found)
    if d.cancelled:
        raise Cancelled(d)
    if request is not None and request.call is not None:
        check_call(d, request.call.tool, approved_arguments(d, request.call.arguments))
    if d.execution_key:
        with p.lock:
            p.keys[scope] = d.execution_key
    return d


def _wire_of(p: _Pass, iid: str, scope: str, request: Request | None) -> dict[str, Any]:
    try:
        return _to_wire(iid, scope, request or Request())
    except InvalidRequest as e:
        with p.lock:
            p.request_errors.append(e)
        raise


def _pend(p: _Pass, wire: dict[str, Any]) -> None:
    with p.lock:
        p.pending.append(wire)


def check_call(decision: Decision, tool: str, arguments: Any = None) -> None:
    """Raise :class:`CallMismatch` unless ``decision`` approved calling
    ``tool`` with ``arguments`` (its call digest is theirs). A decision that
    approved no call (no ``call_digest``), or was not an approval, approves
    none: a tool that requires an approved call fails closed. Arguments
    with no digest raise :class:`InvalidRequest`.

    A check inside the agent stops mistakes, not a hostile agent: only an
    executor outside it enforces an approval."""
    try:
        got = call_digest(tool, arguments)
    except ProtocolError as e:
        raise InvalidRequest(f"call {tool!r}: {e.detail}") from None
    if decision.status != "resolved" or decision.call_digest != got:
        raise CallMismatch(decision.interrupt_id, decision.call_digest, got)


def approved_arguments(decision: Decision, requested: Any) -> Any:
    """The arguments the approvers approved: their edited ``arguments`` when
    they edited them, ``requested`` otherwise."""
    return decision.arguments if decision.arguments is not None else requested


def execution_key(tool_call_id: str | None = None) -> str:
    """The execution key of the last approved call :func:`interrupt` returned
    in this tool-call scope (or in ``tool_call_id``'s), "" outside a run or
    before one (protocol version 2). It is the same on every replay of the
    run and nobody without the coordinator's key can compute it: pass it to
    the outside system as the idempotency key of the call's side effect, so
    a crash after the side effect and before the pass's outcome does not do
    it twice. :attr:`Decision.execution_key` is the same key."""
    p = _current.get()
    if p is None:
        return ""
    scope = _tool_call.get() if tool_call_id is None else tool_call_id
    with p.lock:
        return p.keys.get(scope, "")


def _to_wire(iid: str, scope: str, req: Request) -> dict[str, Any]:
    if req.tool_call_id and req.tool_call_id != scope:
        raise ToolCallMismatch(
            f"interrupt {iid}: request names tool call {req.tool_call_id!r}, scope has {scope!r} (use tool_call())"
        )
    out: dict[str, Any] = {"id": iid, "reason": req.reason or ("tool_call" if scope else "confirmation")}
    if req.message:
        out["message"] = req.message
    if scope:
        out["toolCallId"] = scope
    if req.response_schema is not None:
        if not isinstance(req.response_schema, dict):
            raise InvalidRequest(f"interrupt {iid}: response_schema must be a JSON Schema object")
        out["responseSchema"] = req.response_schema
    if req.expires_at is not None:
        out["expiresAt"] = _rfc3339(req.expires_at)
    elif req.timeout is not None:
        out["expiresAt"] = _rfc3339(datetime.now(UTC) + req.timeout)
    if req.metadata:
        out["metadata"] = req.metadata
    if req.approvers:
        out["approvers"] = list(req.approvers)
    if req.approver_groups:
        out["approverGroups"] = list(req.approver_groups)
    if req.on_expiry is not None:
        out["onExpiry"] = req.on_expiry.to_wire()
    if req.remind_before:
        out["remindBeforeSeconds"] = [round(d.total_seconds()) for d in req.remind_before]
    if req.one_click_links is not None:
        out["oneClickLinks"] = req.one_click_links
    if req.chat_decisions is not None:
        out["chatDecisions"] = req.chat_decisions
    if req.sensitive is not None:
        out["sensitive"] = req.sensitive
    if req.call is not None:
        try:
            digest = call_digest(req.call.tool, req.call.arguments)
        except ProtocolError as e:
            raise InvalidRequest(f"interrupt {iid}: call: {e.detail}") from None
        call: dict[str, Any] = {"tool": req.call.tool}
        if req.call.arguments is not None:
            call["arguments"] = req.call.arguments
        call["digest"] = digest
        out["call"] = call
    if req.policy is not None:
        out["policy"] = req.policy.to_wire()
    try:
        json.dumps(out, allow_nan=False)
        validate_interrupt(out)
    except (TypeError, ValueError) as e:
        detail = e.detail if isinstance(e, ProtocolError) else str(e)
        raise InvalidRequest(f"interrupt {iid}: {detail}") from None
    return out


def _rfc3339(t: datetime) -> str:
    if t.tzinfo is None:
        raise InvalidRequest("expires_at must be timezone-aware")
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


@overload
async def step(name: str, fn: Callable[[], Awaitable[T]]) -> T: ...
@overload
async def step(name: str, fn: Callable[[], T]) -> T: ...
async def step(name: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` once per run: the first pass records its result (which must
    be JSON) in the journal, and every replay returns the recorded result
    without calling ``fn``. Steps are keyed by tool call, name and how many
    times the name was used before in that tool call. A failed ``fn`` is not
    recorded. The journal is stored with the pass's outcome, so a step whose
    pass crashed before it ended runs again on the retry. Outside a run it
    raises :class:`NotInRun`."""
    p = _current.get()
    if p is None:
        raise NotInRun(f"step {name!r}: not inside an Interlock run")
    scope = _tool_call.get()
    with p.lock:
        n = p.steps.get(scope + "\x00" + name, 0)
        p.steps[scope + "\x00" + name] = n + 1
        key = step_key(scope, name, n)
        if key in p.journal:
            return copy.deepcopy(p.journal[key])
    result = fn()
    if inspect.isawaitable(result):
        result = await result
    try:
        raw = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"step {name!r}: result cannot be journaled: {e}") from e
    value = json.loads(raw)  # the first pass sees what every replay will
    with p.lock:
        p.journal[key] = copy.deepcopy(value)
    return value


async def gather(*aws: Awaitable[Any]) -> list[Any]:
    """Run parallel tool calls to the end, so every interrupt they raise goes
    in the same suspension; then raise :class:`Suspended` if any suspended,
    else the first other error, else return the results in order."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    suspended = [r for r in results if isinstance(r, Suspended)]
    if suspended:
        raise Suspended([i for s in suspended for i in s.interrupt_ids])
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)
