"""Values the SDK hands to agent bodies and clients."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

Status = Literal["resolved", "cancelled"]

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
class Request:
    """What an agent asks a person. Read only on the suspend pass: on the
    replay pass ``interrupt`` returns the decision without looking at it."""

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
        )


@dataclass(frozen=True)
class Verdict:
    """What became of one decision (the coordinator's answer)."""

    outcome: Literal["accepted", "rejected", "duplicate"]
    decision_id: str = ""
    run_id: str = ""
    interrupt_id: str = ""
    approver: str = ""
    via: str = ""
    code: str = ""
    detail: str = ""
    replay: bool = False
    at: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

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
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> PendingInterrupt:
        return cls(
            run_id=d.get("runId", ""),
            agent=d.get("agent", ""),
            id=d.get("id", ""),
            reason=d.get("reason", ""),
            pass_=int(d.get("pass", 0)),
            suspended_at=d.get("suspendedAt", ""),
            thread_id=d.get("threadId", ""),
            message=d.get("message", ""),
            tool_call_id=d.get("toolCallId", ""),
            response_schema=d.get("responseSchema"),
            expires_at=d.get("expiresAt", ""),
            metadata=d.get("metadata"),
            approvers=list(d.get("approvers") or []),
            approver_groups=list(d.get("approverGroups") or []),
            escalations=int(d.get("escalations", 0)),
            reminders=int(d.get("reminders", 0)),
            sensitive=d.get("sensitive"),
            one_click_links=d.get("oneClickLinks"),
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
            pass_=int(e.get("pass", 0)),
            version=int(e.get("version", 1)),
            agent=e.get("agent", ""),
            observer=e.get("observer", ""),
            interrupt_ids=list(e.get("interruptIds") or []),
            verdict=Verdict.from_wire(v) if isinstance(v, dict) and "outcome" in v else None,
            code=e.get("code", ""),
            detail=e.get("detail", ""),
            subject=e.get("subject", ""),
            sink=e.get("sink", ""),
            attempts=int(e.get("attempts", 0)),
            identity=e.get("identity", ""),
            address=e.get("address", ""),
            request=e.get("request", ""),
            raw=e,
        )
