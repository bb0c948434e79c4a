"""Exceptions of the Interlock SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._types import Decision, Verdict


class InterlockError(Exception):
    """Base class of every error the SDK raises."""


class InvalidToken(InterlockError, ValueError):
    """A value cannot be a subject token (agent name, run id, approver)."""


class ProtocolError(InterlockError, ValueError):
    """A wire message breaks the protocol; ``code`` is its rejection code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class NotInRun(InterlockError, RuntimeError):
    """``interrupt`` or ``step`` was called outside a pass of a run."""


class InvalidRequest(InterlockError, ValueError):
    """An interrupt request cannot be published; the run fails."""


class ToolCallMismatch(InvalidRequest):
    """A request names a tool call other than the one in scope."""


class Suspended(BaseException):
    """Control flow: the pass stops on interrupts. Raised by ``interrupt`` on
    the suspend pass; let it propagate out of the agent body. It derives from
    ``BaseException``, not :class:`InterlockError`, so that an agent's
    ``except Exception`` around a tool call does not swallow it, as with
    ``asyncio.CancelledError`` (catching it by name and returning normally
    still suspends: nothing pending is ever skipped)."""

    def __init__(self, interrupt_ids: list[str]) -> None:
        super().__init__("suspended on interrupt " + ", ".join(interrupt_ids))
        self.interrupt_ids = interrupt_ids


class CallMismatch(InterlockError):
    """On the replay, the call about to run is not the call its approvers
    approved: its digest differs from the decision's ``call_digest`` (or the
    decision approved no call). Nothing runs; letting it propagate fails the
    run (the Go SDK's ``ErrCallMismatch``).

    This check lives inside the agent: it stops mistakes (a prompt that
    changed, a model that chose other arguments on the replay), not a
    hostile agent, which can skip it. Only an executor outside the agent
    (the MCP proxy, or the tool's own service checking the digest and the
    execution key) enforces an approval."""

    def __init__(self, interrupt_id: str, approved: str, got: str) -> None:
        super().__init__(
            f"interrupt {interrupt_id}: call differs from the approved call: approved digest "
            f"{approved or '(none)'}, the call about to run has digest {got}"
        )
        self.interrupt_id = interrupt_id
        self.approved = approved
        self.got = got


class SuspensionTooLarge(InterlockError):
    """The worker refused to publish a pass's suspension: its run record,
    with the largest decision allowed for each interrupt, would be over what
    a run record may have (about three quarters of the NATS server's max
    payload: its sealed copy rides an event of the trail). The run fails with this reason instead of
    suspending (the Go SDK's ErrSuspensionTooLarge)."""


class Cancelled(InterlockError):
    """The interrupt's decision is ``cancelled``: a denial or an expiry. It is
    never an approval. Letting it propagate fails the run."""

    def __init__(self, decision: Decision) -> None:
        reason = decision.cancel_reason
        what = "expired" if reason == "expired" else "cancelled"
        msg = f"interrupt {decision.interrupt_id} {what}"
        if decision.approver:
            msg += f" by {decision.approver}"
        if decision.comment:
            msg += f": {decision.comment}"
        super().__init__(msg)
        self.decision = decision
        self.interrupt_id = decision.interrupt_id
        self.comment = decision.comment
        self.approver = decision.approver
        self.reason = reason


class Retry(InterlockError):
    """Raise from an agent body to run the pass again later instead of
    failing the run."""


class Rejected(InterlockError):
    """The coordinator rejected a decision; ``verdict.code`` says why."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"decision rejected: {verdict.code}: {verdict.detail}")
        self.verdict = verdict


class RunNotFound(InterlockError, LookupError):
    """No run record exists for the run id (yet: a run has a record once its
    first pass ends)."""
