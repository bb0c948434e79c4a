"""Interlock for Python: durable human-in-the-loop interrupts for AI agent
runs, on NATS JetStream.

An agent body runs again from the top on every replay pass. Inside it,
:func:`interrupt` suspends the run on the first pass and returns the decision
on the replay; :func:`is_resuming` is the same predicate; :func:`step` runs
work once per run; :func:`tool_call` scopes interrupts to one tool call.
A :class:`Worker` runs the passes; a :class:`Client` starts runs and decides.
"""

from ._calldigest import call_digest, canonicalize, raw_json
from ._client import Client, finished, suspended
from ._errors import (
    CallMismatch,
    Cancelled,
    InterlockError,
    InvalidRequest,
    InvalidToken,
    NotInRun,
    ProtocolError,
    Rejected,
    Retry,
    RunNotFound,
    Suspended,
    SuspensionTooLarge,
    ToolCallMismatch,
)
from ._ids import emit_msg_id, interrupt_id, outcome_msg_id, pass_key, pending_key, start_msg_id, step_key, work_msg_id
from ._run import (
    approved_arguments,
    check_call,
    current_tool_call,
    execution_key,
    gather,
    interrupt,
    interrupt_async,
    is_resuming,
    run_info,
    step,
    tool_call,
)
from ._subjects import DEFAULT_PREFIX, Namespace, inbox_prefix, validate_token
from ._types import (
    NO_PAYLOAD,
    POLICY_APPROVER,
    Call,
    Decision,
    Event,
    ExpiryPolicy,
    PendingInterrupt,
    Policy,
    Request,
    Run,
    RunInfo,
    Tally,
    Verdict,
    Vote,
)
from ._worker import AgentFunc, Worker

__all__ = [
    "DEFAULT_PREFIX",
    "NO_PAYLOAD",
    "POLICY_APPROVER",
    "AgentFunc",
    "Call",
    "CallMismatch",
    "Cancelled",
    "Client",
    "Decision",
    "Event",
    "ExpiryPolicy",
    "InterlockError",
    "InvalidRequest",
    "InvalidToken",
    "Namespace",
    "NotInRun",
    "PendingInterrupt",
    "Policy",
    "ProtocolError",
    "Rejected",
    "Request",
    "Retry",
    "Run",
    "RunInfo",
    "RunNotFound",
    "Suspended",
    "SuspensionTooLarge",
    "Tally",
    "ToolCallMismatch",
    "Verdict",
    "Vote",
    "Worker",
    "approved_arguments",
    "call_digest",
    "canonicalize",
    "check_call",
    "current_tool_call",
    "emit_msg_id",
    "execution_key",
    "finished",
    "gather",
    "inbox_prefix",
    "interrupt",
    "interrupt_async",
    "interrupt_id",
    "is_resuming",
    "outcome_msg_id",
    "pass_key",
    "pending_key",
    "raw_json",
    "run_info",
    "start_msg_id",
    "step",
    "step_key",
    "suspended",
    "tool_call",
    "validate_token",
    "work_msg_id",
]

__version__ = "0.1.0"
