"""Values the SDK hands to agent bodies and clients."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

Status = Literal["resolved", "cancelled"]

POLICY_APPROVER = "interlock:policy"
"""The approver of decisions an operator rule made (protocol version 2)."""

EXPIRY_APPROVER = "interlock:expiry"
"""The approver of the decisions the coordinator's expiry applies (Go:
``subjects.ExpiryApprover``); the coordinator refuses it from anyone else."""


class _Missing:
    """The absence of a payload (distinct from every JSON value)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_PAYLOAD"

    def __bool__(self) -> bool:
        return False


NO_PAYLOAD: Any = _Missing()
"""Sentinel for "no payload": ``false``, ``0``, ``""`` and ``{}`` are answers."""


@dataclass(frozen=True)
class ExpiryPolicy:
    """What happens to an interrupt nobody decided by its deadline."""

    action: Literal["cancel", "resolve", "escalate"] = "cancel"
    payload: Any = NO_PAYLOAD
    approvers: list[str] = field(default_factory=list)
    extend: timedelta | None = None
    times: int = 0

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.payload is not NO_PAYLOAD:
            out["payload"] = self.payload
        if self.approvers:
            out["approvers"] = list(self.approvers)
        if self.extend is not None:
            out["extendSeconds"] = round(self.extend.total_seconds())
        if self.times:
            out["times"] = self.times
        return out


@dataclass(frozen=True)
class Call:
    """A tool call an interrupt gates (protocol version 2): the tool's name
    and the arguments it is called with (any JSON value; None is ``{}``).
    The interrupt carries its call digest; every vote is bound to it, and on
    the replay :func:`~interlock.interrupt` checks that the call about to
    run is the approved one (:class:`~interlock.CallMismatch` otherwise)."""

    tool: str
    arguments: Any = None


@dataclass(frozen=True)
class Policy:
    """How many votes decide an interrupt (protocol version 2): approvals of
    distinct identities for the same answer that resolve it, denials that
    cancel it, whether the run's requester may vote and whether a voter may
    change or withdraw its vote. Operator rules can make it stricter, never
    weaker."""

    approvals: int = 1
    denials: int = 1
    allow_requester: bool = False
    allow_change: bool = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.approvals != 1:
            out["approvals"] = self.approvals
        if self.denials != 1:
            out["denials"] = self.denials
        if self.allow_requester:
            out["allowRequester"] = True
        if self.allow_change:
            out["allowChange"] = True
        if not out:
            # An empty policy still asks for votes (one approval settles).
            out["approvals"] = 1
        return out


@dataclass(frozen=True)
class Vote:
    """One vote on an interrupt with a policy, as the final decision carries
    it (protocol version 2): who (``approver``), when (``at``, RFC 3339;
    ``seq`` its place in the decisions stream) and what (``status``,
    ``payload``, ``comment``, and the call it approved: ``call_digest``,
    edited ``arguments``)."""

    decision_id: str
    approver: str
    status: str
    at: str = ""
    payload: Any = None
    comment: str = ""
    metadata: dict[str, Any] | None = None
    call_digest: str = ""
    arguments: Any = None
    seq: int = 0
    via: str = ""

    @classmethod
    def from_wire(cls, v: dict[str, Any]) -> Vote:
        return cls(
            decision_id=v.get("decisionId", ""),
            approver=v.get("approver", ""),
            status=v.get("status", ""),
            at=v.get("at", ""),
            payload=v.get("payload"),
            comment=v.get("comment", ""),
            metadata=v.get("metadata"),
            call_digest=v.get("callDigest", ""),
            arguments=v.get("arguments"),
            seq=int(v.get("seq") or 0),
            via=v.get("via", ""),
        )


@dataclass(frozen=True)
class Tally:
    """Where an interrupt's votes stand after a vote (protocol version 2)."""

    approvals: int
    approvals_needed: int
    denials: int
    denials_needed: int
    call_digest: str = ""
    waiting_on: list[str] = field(default_factory=list)

    @property
    def remaining(self) -> str:
        """A sentence saying what the tally still needs ("1 of 2 approvals
        for this answer; 0 of 1 denials; waiting on ['cy']")."""
        s = f"{self.approvals} of {self.approvals_needed} approvals"
        if self.approvals_needed > 1:
            s += " for this answer"
        s += f"; {self.denials} of {self.denials_needed} denials"
        if self.waiting_on:
            s += f"; waiting on {self.waiting_on}"
        return s

    @classmethod
    def from_wire(cls, t: dict[str, Any]) -> Tally:
        return cls(
            approvals=int(t.get("approvals") or 0),
            approvals_needed=int(t.get("approvalsNeeded") or 0),
            denials=int(t.get("denials") or 0),
            denials_needed=int(t.get("denialsNeeded") or 0),
            call_digest=t.get("callDigest", ""),
            waiting_on=list(t.get("waitingOn") or []),
        )


@dataclass(frozen=True)
class Request:
    """What an agent asks a person. Read only on the suspend pass, but for
    ``call``: on the replay pass ``interrupt`` returns the decision, after
    checking that it approved ``call`` when the request has one."""

    message: str = ""
    reason: str = ""
    tool_call_id: str = ""
    response_schema: dict[str, Any] | None = None
    expires_at: datetime | None = None
    timeout: timedelta | None = None
    metadata: dict[str, Any] | None = None
    approvers: list[str] = field(default_factory=list)
    approver_groups: list[str] = field(default_factory=list)
    on_expiry: ExpiryPolicy | None = None
    remind_before: list[timedelta] = field(default_factory=list)
    # False turns one-click decision links off for this interrupt: its
    # approvers decide in the inbox or with the CLI.
    one_click_links: bool | None = None
    # False forbids deciding this interrupt from a chat (Slack buttons and
    # forms): its message shows the question and the inbox link only.
    chat_decisions: bool | None = None
    # True: the answer is never shown in reads, events, logs or
    # notifications, only that it was given. None: the server's default
    # (true for reason input_required, false otherwise).
    sensitive: bool | None = None
    # The tool call this interrupt gates (protocol version 2): approvers see
    # it and vote on its digest; on the replay interrupt() checks that this
    # call (give it on the replay too) is the approved one.
    call: Call | None = None
    # A quorum (protocol version 2): how many approvals and denials decide.
    policy: Policy | None = None


@dataclass(frozen=True)
class Decision:
    """The answer an interrupt returns on the replay pass. ``payload`` is
    ``None`` when the approver sent none (a payload is never JSON null, so
    ``None`` means only that, and a body may return it as is, as Go's nil
    payload marshals to null); ``has_payload`` tells it from the falsy
    answers ``False``, ``0``, ``""``, ``{}`` and ``[]``."""

    interrupt_id: str
    status: Status
    payload: Any = None
    metadata: dict[str, Any] | None = None
    approver: str = ""
    comment: str = ""
    # Protocol version 2: the digest of the call this decision approved, the
    # approvers' edited arguments (None: the call's own), every vote counted
    # (oldest first), the approved call's execution key, and the operator
    # rule that made the decision (approver interlock:policy).
    call_digest: str = ""
    arguments: Any = None
    votes: list[Vote] = field(default_factory=list)
    execution_key: str = ""
    rule: str = ""

    @property
    def cancelled(self) -> bool:
        return self.status == "cancelled"

    @property
    def has_payload(self) -> bool:
        """True when the approver sent a payload (even a falsy one)."""
        return self.payload is not None

    @property
    def cancel_reason(self) -> str:
        """``"expired"`` for a cancellation the coordinator's expiry applied
        (approver :data:`EXPIRY_APPROVER`, which no approver can take), else
        ``"denied"``. It comes from who cancelled, never from ``metadata``,
        which any approver writes."""
        if self.approver == EXPIRY_APPROVER:
            return "expired"
        return "denied"

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Decision:
        return cls(
            interrupt_id=d["interruptId"],
            status=d["status"],
            payload=d.get("payload"),
            metadata=d.get("metadata"),
            approver=d.get("approver") or "",
            comment=d.get("comment") or "",
            call_digest=d.get("callDigest") or "",
            arguments=d.get("arguments"),
            votes=[Vote.from_wire(v) for v in d.get("votes") or []],
            execution_key=d.get("executionKey") or "",
            rule=d.get("rule") or "",
        )


@dataclass(frozen=True)
class Verdict:
    """What became of one decision (the coordinator's answer). On an
    interrupt with a policy (protocol version 2) a decision is a vote:
    ``outcome`` ``vote_recorded`` says it counts and the interrupt still
    waits, and ``tally`` says what is still needed."""

    outcome: Literal["accepted", "rejected", "duplicate", "vote_recorded"]
    decision_id: str = ""
    run_id: str = ""
    interrupt_id: str = ""
    approver: str = ""
    via: str = ""
    code: str = ""
    detail: str = ""
    replay: bool = False
    at: str = ""
    tally: Tally | None = None
    rule: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def vote_recorded(self) -> bool:
        """The vote counts and the interrupt still waits for more."""
        return self.outcome == "vote_recorded"

    @classmethod
    def from_wire(cls, v: dict[str, Any]) -> Verdict:
        return cls(
            outcome=v["outcome"],
            decision_id=v.get("decisionId", ""),
            run_id=v.get("runId", ""),
            interrupt_id=v.get("interruptId", ""),
            approver=v.get("approver", ""),
            via=v.get("via", ""),
            code=v.get("code", ""),
            detail=v.get("detail", ""),
            replay=bool(v.get("replay", False)),
            at=v.get("at", ""),
            tally=Tally.from_wire(v["tally"]) if isinstance(v.get("tally"), dict) else None,
            rule=v.get("rule", ""),
            raw=v,
        )


@dataclass(frozen=True)
class RunInfo:
    """The run and pass an agent body is running for."""

    run_id: str
    agent: str
    pass_: int
    thread_id: str = ""
    traceparent: str = ""


@dataclass(frozen=True)
class Run:
    """A run record, as the coordinator keeps it in the runs bucket."""

    run_id: str
    agent: str
    status: Literal["suspended", "resuming", "completed", "failed"]
    pass_: int
    raw: dict[str, Any] = field(repr=False)

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed")

    @property
    def result(self) -> Any:
        return self.raw.get("result")

    @property
    def error(self) -> str:
        return str(self.raw.get("error", ""))

    @property
    def interrupts(self) -> list[dict[str, Any]]:
        return list(self.raw.get("interrupts") or [])

    def pending(self) -> list[dict[str, Any]]:
        """The interrupts that wait for a decision."""
        if self.status != "suspended":
            return []
        return [i for i in self.interrupts if "decision" not in i]

    @classmethod
    def from_bytes(cls, data: bytes) -> Run:
        raw = json.loads(data)
        return cls(run_id=raw["runId"], agent=raw["agent"], status=raw["status"], pass_=raw["pass"], raw=raw)


@dataclass(frozen=True)
class PendingInterrupt:
    """An interrupt waiting for a decision, with its run: one entry of the
    pending index (Go: ``subjects.PendingInterrupt``), as
    :meth:`Client.pending` returns it. Times are RFC 3339 strings as
    stored; ``raw`` is the entry as read (schema ``pending.schema.json``)."""

    run_id: str
    agent: str
    id: str
    reason: str
    pass_: int
    suspended_at: str
    thread_id: str = ""
    message: str = ""
    tool_call_id: str = ""
    response_schema: dict[str, Any] | None = None
    expires_at: str = ""
    metadata: dict[str, Any] | None = None
    approvers: list[str] = field(default_factory=list)
    approver_groups: list[str] = field(default_factory=list)
    escalations: int = 0
    reminders: int = 0
    sensitive: bool | None = None
    one_click_links: bool | None = None
    # Protocol version 2: the gated call (tool, arguments, digest), the
    # effective policy, and the votes so far.
    call: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    votes: list[Vote] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> PendingInterrupt:
        return cls(
            run_id=d.get("runId", ""),
            agent=d.get("agent", ""),
            id=d.get("id", ""),
            reason=d.get("reason", ""),
            pass_=int(d.get("pass") or 0),
            suspended_at=d.get("suspendedAt", ""),
            thread_id=d.get("threadId", ""),
            message=d.get("message", ""),
            tool_call_id=d.get("toolCallId", ""),
            response_schema=d.get("responseSchema"),
            expires_at=d.get("expiresAt", ""),
            metadata=d.get("metadata"),
            approvers=list(d.get("approvers") or []),
            approver_groups=list(d.get("approverGroups") or []),
            escalations=int(d.get("escalations") or 0),
            reminders=int(d.get("reminders") or 0),
            sensitive=d.get("sensitive"),
            one_click_links=d.get("oneClickLinks"),
            call=d.get("call"),
            policy=d.get("policy"),
            votes=[Vote.from_wire(v) for v in d.get("votes") or [] if isinstance(v, dict)],
            raw=d,
        )


@dataclass(frozen=True)
class Event:
    """One lifecycle or audit event of a run (Go: ``subjects.Event``), as
    :meth:`Client.events` returns it: ``type`` and ``run_id`` from the
    subject it was stored under, never its body. Fields a type does not
    carry are empty; ``raw`` is the entry as read (schema
    ``event.schema.json``)."""

    type: str
    run_id: str
    at: str
    pass_: int = 0
    version: int = 1
    agent: str = ""
    observer: str = ""
    interrupt_ids: list[str] = field(default_factory=list)
    verdict: Verdict | None = None
    code: str = ""
    detail: str = ""
    subject: str = ""
    sink: str = ""
    attempts: int = 0
    identity: str = ""
    address: str = ""
    request: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, e: dict[str, Any]) -> Event:
        v = e.get("verdict")
        return cls(
            type=e.get("type", ""),
            run_id=e.get("runId", ""),
            at=e.get("at", ""),
            pass_=int(e.get("pass") or 0),
            version=int(e.get("version", 1)),
            agent=e.get("agent", ""),
            observer=e.get("observer", ""),
            interrupt_ids=list(e.get("interruptIds") or []),
            verdict=Verdict.from_wire(v) if isinstance(v, dict) and "outcome" in v else None,
            code=e.get("code", ""),
            detail=e.get("detail", ""),
            subject=e.get("subject", ""),
            sink=e.get("sink", ""),
            attempts=int(e.get("attempts") or 0),
            identity=e.get("identity", ""),
            address=e.get("address", ""),
            request=e.get("request", ""),
            raw=e,
        )
