"""The wire messages' decoders, protocol versions 1 and 2: the same rules and
rejection codes as the Go ``subjects`` package (checked by the shared
conformance vectors). Readers accept both versions and refuse a version 2
field in a message that says version 1; writers say the lowest version that
carries what they write (:func:`wire_version`)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from ._calldigest import call_digest, distinct
from ._errors import InvalidToken, ProtocolError
from ._subjects import validate_token
from ._types import POLICY_APPROVER

VERSION = 1
VERSION2 = 2
"""The protocol version of decision policies (quorum votes, approvals bound
to a tool call, operator rules, execution keys)."""
MAX_POLICY_VOTES = 32
MAX_MESSAGE_SIZE = 1 << 20
MAX_DECISION_SIZE = 64 << 10
MAX_ID_LEN = 256
# The allowances of a run record's bound (Go: subjects.RecordBound); see
# docs/protocol.md, "Limits".
RECORD_MARGIN = 8 << 10
DECISION_OVERHEAD = 2 << 10
TIMER_OVERHEAD = 1 << 10


MAX_DEPTH = 128
"""How deep any message nests objects and lists, counting its own (Go:
subjects.MaxDepth): every reader holds it (Python's decoder stops near 990)."""
MAX_DECISION_DEPTH = 64
"""How deep a decision nests (Go: subjects.MaxDecisionDepth): the
coordinator carries it up to four levels deeper in a work item."""


# The headers nats-server adds to a direct get's answer (a batch's too).
_SERVER_HEADERS = (
    "nats-stream",
    "nats-subject",
    "nats-sequence",
    "nats-time-stamp",
    "nats-num-pending",
    "nats-last-sequence",
)


def server_header(headers: dict[str, str] | None) -> str | None:
    """The first header among ``headers`` (as stored) that nats-server adds
    to a direct get's answer, or ``None``: a stored message carrying one is
    an answer the server sent to its subject, not a client's publish."""
    for k in headers or {}:
        if k.lower() in _SERVER_HEADERS:
            return k
    return None


def not_published(headers: dict[str, str] | None) -> str | None:
    """Why a stored message is not a client's publish, or ``None`` when it
    is one. nats-server sends a JetStream API answer to whatever reply
    subject the request names, with its own rights: a direct get's answer
    carries the server's headers, or, asked for without them, none; a
    client's publish of an Interlock input always carries its
    ``Nats-Msg-Id`` (docs/protocol.md, "Headers and deduplication")."""
    k = server_header(headers)
    if k is not None:
        return (
            f"not a client's publish: it carries {k}, which nats-server adds to a "
            "JetStream API answer it sent to this subject"
        )
    if not (headers or {}).get("Nats-Msg-Id"):
        return "not a client's publish: it carries no Nats-Msg-Id"
    return None


def _compact(v: Any) -> int:
    # A lone surrogate (from a "\ud800" escape) has no UTF-8; Go records it
    # as U+FFFD, 3 bytes, as surrogatepass counts it. Encoding it strictly
    # raised, and the pass ran again on every delivery.
    return len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def decision_allowance(interrupt: dict[str, Any]) -> int:
    """The most deciding ``interrupt`` can add to its run's record, under its
    own expiry policy (Go: subjects.DecisionAllowance)."""
    policy = interrupt.get("onExpiry") or {}
    action = policy.get("action") or ""
    decision = MAX_DECISION_SIZE
    if action == "resolve" and "payload" in policy:
        decision = max(decision, _compact(policy["payload"]) + DECISION_OVERHEAD)
    n = decision + DECISION_OVERHEAD
    if interrupt.get("policy") is not None:
        # Votes: up to approvals + denials - 1 open ones, then the one that
        # decides, kept both as a vote and as the final decision.
        pol = interrupt["policy"]
        votes = max(int(pol.get("approvals") or 1), 1) + max(int(pol.get("denials") or 1), 1)
        n += votes * (MAX_DECISION_SIZE + DECISION_OVERHEAD)
    deadlines = 1
    if action == "escalate":
        added = sum(len(a) + 3 for a in policy.get("approvers") or [])
        times = max(int(policy.get("times") or 0), 1)
        deadlines += times
        n += times * (TIMER_OVERHEAD + added)
    reminders = len(interrupt.get("remindBeforeSeconds") or [])
    return n + deadlines * (reminders + 1) * TIMER_OVERHEAD


RECORD_COPY_ROOM = 16 << 10
SEAL_OVERHEAD = 1 + 12 + 16


def record_limit(max_payload: int) -> int:
    """The largest run record a coordinator writes on a server whose max
    payload is ``max_payload``: one whose sealed copy (a third larger, as
    base64) fits, with room for the event's own fields, the event that
    carries it in the audit trail (Go: subjects.RecordLimit)."""
    return max(0, (max_payload - RECORD_COPY_ROOM) * 3 // 4 - SEAL_OVERHEAD)


def suspension_bound(work: dict[str, Any], suspension: dict[str, Any]) -> int:
    """What an agent can tell of the record its suspension makes: the work
    item, the suspension, each interrupt's allowance and the margin (Go:
    subjects.SuspensionBound)."""
    n = _compact(work) + _compact(suspension) + RECORD_MARGIN
    return n + sum(decision_allowance(i) for i in suspension.get("interrupts") or [])


# RFC 3339 as Go reads it: ASCII digits, upper-case T and Z, a real date and
# time (no month 13, February 30 or second 60), an offset of at most 24:60.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(Z|[+-]([0-9]{2}):([0-9]{2}))"
)

Check = Callable[[str, Any], None]


def _malformed(detail: str) -> ProtocolError:
    return ProtocolError("malformed", detail)


def _id(field: str, v: Any) -> None:
    if not isinstance(v, str):
        raise _malformed(f"field {field!r}: must be a string")
    if v == "":
        raise _malformed(f"{field} is required")
    raw = v.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_ID_LEN:
        raise _malformed(f"{field} is {len(raw)} bytes, longer than {MAX_ID_LEN}")
    for c in v:
        if unicodedata.category(c) == "Cc":
            raise _malformed(f"{field} has control character {c!r}")


def _token(field: str, v: Any) -> None:
    if not isinstance(v, str):
        raise _malformed(f"field {field!r}: must be a string")
    try:
        validate_token(field, v)
    except InvalidToken as e:
        raise _malformed(str(e)) from None


def _str(field: str, v: Any) -> None:
    if v is not None and not isinstance(v, str):
        raise _malformed(f"field {field!r}: must be a string")


def _bool(field: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise _malformed(f"{field} must be true or false")


def _opt_id(field: str, v: Any) -> None:
    if v is not None and v != "":
        _id(field, v)


_MAX_SAFE_INTEGER = 2**53 - 1  # what every reader holds exactly (JavaScript's doubles)


def _int(field: str, v: Any) -> None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise _malformed(f"field {field!r}: must be an integer")
    if isinstance(v, int) and abs(v) > _MAX_SAFE_INTEGER:
        raise _malformed(f"field {field!r}: {v} is beyond ±(2^53-1), which not every reader holds exactly")


def _pass(field: str, v: Any) -> None:
    _int(field, v)
    if isinstance(v, int) and v < 0:
        raise _malformed(f"pass {v} is negative")


def _unsigned(field: str, v: Any) -> None:
    _int(field, v)
    if isinstance(v, int) and v < 0:
        raise _malformed(f"field {field!r}: {v} is negative")


def _any(field: str, v: Any) -> None:
    return None


def _object(field: str, v: Any) -> None:
    # Present (even null) must be an object.
    if not isinstance(v, dict):
        raise _malformed(f"{field} must be a JSON object")


def _time(field: str, v: Any) -> None:
    if v is None:
        return
    m = _RFC3339.fullmatch(v) if isinstance(v, str) else None
    offset_ok = m is not None and int(m[9] or 0) <= 24 and int(m[10] or 0) <= 60
    if m is None or not offset_ok or not _real_time(*(int(g) for g in m.groups()[:6])):
        raise _malformed(f"field {field!r}: must be an RFC 3339 time")


def _real_time(y: int, mo: int, d: int, h: int, mi: int, s: int) -> bool:
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    return 1 <= mo <= 12 and 1 <= d <= days[mo - 1] and h <= 23 and mi <= 59 and s <= 59


def _list(item: Check) -> Check:
    def check(field: str, v: Any) -> None:
        if v is None:
            return
        if not isinstance(v, list):
            raise _malformed(f"field {field!r}: must be a list")
        for i, x in enumerate(v):
            item(f"{field}[{i}]", x)

    return check


def _journal(field: str, v: Any) -> None:
    if v is None:
        return
    if not isinstance(v, dict):
        raise _malformed(f"field {field!r}: must be an object")
    for k in v:
        _id("journal key", k)


def _fields(obj: Any, spec: dict[str, Check], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _malformed(f"{what} must be a JSON object")
    for k in obj:
        if k not in spec:
            raise _malformed(f"{what}: unknown field {k!r}")
    for k, check in spec.items():
        if k in obj:
            check(k, obj[k])
    return obj


def _expiry(field: str, v: Any) -> None:
    if v is None:
        return
    p = _fields(
        v,
        {
            "action": _str,
            "payload": _any,
            "approvers": _list(_id),
            "extendSeconds": _int,
            "times": _int,
        },
        "onExpiry",
    )
    action = p.get("action") or ""
    if action == "resolve":
        if "payload" not in p or p["payload"] is None:
            raise _malformed("onExpiry: resolve needs a payload (the answer to apply)")
    elif action == "escalate":
        if (p.get("extendSeconds") or 0) <= 0:
            raise _malformed("onExpiry: escalate needs extendSeconds > 0")
    elif action not in ("cancel", ""):
        raise _malformed(f"onExpiry.action {action!r} is not cancel, resolve or escalate")
    if (p.get("times") or 0) < 0:
        raise _malformed(f"onExpiry.times {p['times']} is negative")


def _positive_ints(field: str, v: Any) -> None:
    _list(_int)(field, v)
    for i, sec in enumerate(v or []):
        if sec is None or sec <= 0:  # null reads as 0 in Go
            raise _malformed(
                f"remindBeforeSeconds[{i}] is {sec}; reminders are seconds before the deadline, more than 0"
            )


_DIGEST = re.compile(r"[0-9a-f]{64}")


def _digest(field: str, v: Any) -> None:
    if v is None or v == "":
        return
    if not isinstance(v, str) or _DIGEST.fullmatch(v) is None:
        raise _malformed(f"{field} must be 64 lowercase hex digits")


def _call(field: str, v: Any) -> None:
    if v is None:
        return
    c = _fields(v, {"tool": _any, "arguments": _any, "digest": _any}, "call")
    _id("call.tool", c.get("tool", ""))
    if "arguments" in c and c["arguments"] is None:
        raise _malformed("call.arguments is null: omit it for no arguments")
    digest = c.get("digest")
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise _malformed("call.digest must be 64 lowercase hex digits")
    try:
        want = call_digest(c["tool"], c.get("arguments"))
    except ProtocolError as e:
        raise ProtocolError("call_mismatch", f"call.arguments have no digest: {e.detail}") from None
    if want != digest:
        raise ProtocolError(
            "call_mismatch",
            f"call.digest {digest} is not the digest of the call's tool and arguments ({want})",
        )


def _votes_count(field: str, v: Any) -> None:
    _int(field, v)
    if isinstance(v, int) and not 0 <= v <= MAX_POLICY_VOTES:
        raise _malformed(f"{field} {v} is not between 1 and {MAX_POLICY_VOTES}")


def _policy(field: str, v: Any) -> None:
    if v is None:
        return
    _fields(
        v,
        {
            "approvals": lambda f, x: _votes_count("policy.approvals", x),
            "denials": lambda f, x: _votes_count("policy.denials", x),
            "allowRequester": _bool,
            "allowChange": _bool,
            "rules": _list(_id),
        },
        "policy",
    )


_VOTE: dict[str, Check] = {
    "decisionId": _str,
    "approver": _str,
    "status": _str,
    "payload": _any,
    "comment": _str,
    "metadata": _any,
    "callDigest": _digest,
    "arguments": _any,
    "at": _time,
    "seq": _unsigned,
    "via": _str,
}


def _vote(field: str, v: Any) -> None:
    _fields(v, _VOTE, field)


_INTERRUPT: dict[str, Check] = {
    "id": _any,
    "reason": _any,
    "message": _str,
    "toolCallId": _str,
    "responseSchema": _object,
    "expiresAt": _time,
    "metadata": _object,
    "approvers": _list(_id),
    "approverGroups": _list(_id),
    "onExpiry": _expiry,
    "remindBeforeSeconds": _positive_ints,
    "oneClickLinks": _bool,
    "chatDecisions": _bool,
    "sensitive": _bool,
    "call": _call,
    "policy": _policy,
}


def validate_interrupt(obj: Any) -> dict[str, Any]:
    """Check one interrupt (as in a suspension); raise :class:`ProtocolError`."""
    d = _fields(obj, _INTERRUPT, "interrupt")
    _id("id", d.get("id", ""))
    _id("reason", d.get("reason", ""))
    return d


_DECISION: dict[str, Check] = {
    "version": _int,  # a published decision's is checked first; a work item's decisions' here
    "decisionId": _any,
    "interruptId": _any,
    "status": _str,
    "payload": _any,
    "metadata": _object,
    "approver": _opt_id,
    "comment": _str,
    "callDigest": _digest,
    "arguments": _any,
    "votes": _list(_vote),
    "executionKey": _digest,
    "rule": _str,
}


def _v2_interrupt(i: dict[str, Any]) -> str:
    for f in ("call", "policy"):
        if i.get(f) is not None:
            return f
    return ""


def _v2_decision(d: dict[str, Any]) -> str:
    if d.get("status") == "withdrawn":
        return "status withdrawn"
    for f in ("callDigest", "arguments", "votes", "executionKey", "rule"):
        if f in d and d[f] not in (None, "", []):
            return f
    return ""


def _v2_field(kind: str, m: dict[str, Any]) -> str:
    """The first version 2 field set in message ``m`` of ``kind``, or ""."""
    if kind == "decision":
        return _v2_decision(m)
    if kind in ("suspension", "run") and m.get("requester"):
        return "requester"
    if kind == "work":
        for i, d in enumerate(m.get("decisions") or []):
            if isinstance(d, dict) and (f := _v2_decision(d)):
                return f"decisions[{i}].{f}"
        return ""
    if kind == "verdict":
        if m.get("outcome") == "vote_recorded":
            return "outcome vote_recorded"
        for f in ("tally", "rule"):
            if m.get(f):
                return f
        return ""
    if kind == "notice" and m.get("tallies"):
        return "tallies"
    for i, x in enumerate(m.get("interrupts") or []):
        if not isinstance(x, dict):
            continue
        if f := _v2_interrupt(x):
            return f"interrupts[{i}].{f}"
        if kind == "run":
            if x.get("votes"):
                return f"interrupts[{i}].votes"
            if isinstance(x.get("decision"), dict) and (f := _v2_decision(x["decision"])):
                return f"interrupts[{i}].decision.{f}"
    return ""


def wire_version(kind: str, message: dict[str, Any]) -> int:
    """The version ``message`` (a ``decision``, ``suspension``, ``work``,
    ``run``, ``verdict`` or ``notice``) must say: 2 when it carries a
    version 2 field, 1 otherwise (Go: subjects.WireVersion). Writers set it
    just before encoding, so version 1 readers keep reading every message
    that needs nothing newer."""
    return VERSION2 if _v2_field(kind, message) else VERSION


def versioned(kind: str, message: dict[str, Any]) -> dict[str, Any]:
    """Set ``message["version"]`` (and each work item decision's) to
    :func:`wire_version`; return ``message``."""
    if kind == "work":
        for d in message.get("decisions") or []:
            d["version"] = wire_version("decision", d)
    message["version"] = wire_version(kind, message)
    return message


def _check_version(kind: str, m: dict[str, Any]) -> None:
    v = m.get("version")
    # A missing or non-integer version (a work item's decision) reads as 1.
    said = v if isinstance(v, int) and not isinstance(v, bool) else VERSION
    if said < VERSION2 and (f := _v2_field(kind, m)):
        raise _malformed(f"field {f} needs version {VERSION2} (the message says version {v})")


def _decision(obj: Any) -> dict[str, Any]:
    d = _fields(obj, _DECISION, "decision")
    _id("decisionId", d.get("decisionId", ""))
    _id("interruptId", d.get("interruptId", ""))
    status = d.get("status") or ""
    if status == "":
        raise _malformed('status is required: "resolved" or "cancelled"')
    if status not in ("resolved", "cancelled", "withdrawn"):
        raise _malformed(f'status {status!r} is not "resolved" or "cancelled"')
    if "payload" in d and d["payload"] is None:
        raise _malformed("payload is null: omit it to send no payload")
    if "arguments" in d and d["arguments"] is None:
        raise _malformed("arguments is null: omit it to keep the call's arguments")
    if "arguments" in d and not isinstance(d["arguments"], dict):
        raise _malformed("arguments must be a JSON object")
    _check_version("decision", d)
    return d


def _replayed(obj: Any) -> dict[str, Any]:
    """A decision a replay or an ask reply carries: one the coordinator
    applied, so resolved or cancelled (a withdrawal takes a vote back and
    never reaches a pass), in a version this build speaks (0 or none is 1)."""
    d = _decision(obj)
    if d["status"] not in ("resolved", "cancelled"):
        raise _malformed(f'status {d["status"]!r}: a replay carries decisions "resolved" or "cancelled" only')
    v = d.get("version")
    if v is not None and v not in (0, VERSION, VERSION2):
        raise ProtocolError(
            "unsupported_version", f"decision version {v}; this build speaks versions {VERSION} and {VERSION2}"
        )
    return d


def recorded_size(v: Any) -> int:
    """The size of ``v`` as the coordinator encodes it in a run record."""
    text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    escaped = sum(text.count(c) for c in "<>&")
    lines = text.count("\u2028") + text.count("\u2029")
    # A lone surrogate (from a "\ud800" escape) is recorded as U+FFFD: 3 bytes.
    return len(text.encode("utf-8", "surrogatepass")) + 5 * escaped + 3 * lines


_PASSREF: dict[str, Check] = {
    "version": _any,
    "runId": _any,
    "agent": _any,
    "threadId": _opt_id,
    "pass": _pass,
    "input": _any,
}


def _passref(d: dict[str, Any]) -> None:
    _token("runId", d.get("runId") or "")
    _token("agent", d.get("agent") or "")


def _not_json(name: str) -> Any:
    """Refuses NaN, Infinity and -Infinity, which Python's decoder takes
    and no other language's does."""
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all distinct: a key twice is ``malformed``,
    anywhere in a message (Go merged both copies into one struct, and this
    decoder kept the last, so the message meant two things)."""
    return distinct(pairs, lambda k: f"field {k!r} appears twice in one object")


def nested_deeper(v: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``v`` nests objects and lists more than ``limit`` levels."""
    level = [v]
    for _ in range(limit):
        level = [c for x in level if isinstance(x, (dict, list)) for c in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return False
    return any(isinstance(x, (dict, list)) for x in level)


def _head(data: bytes, limit: int, depth: int = MAX_DEPTH) -> Any:
    if len(data) > limit:
        raise ProtocolError("too_large", f"{len(data)} bytes, the limit is {limit}")
    try:
        # UTF-8 only: json.loads would also take UTF-16, UTF-32 and a byte
        # order mark, which Go and JavaScript refuse.
        text = data.decode("utf-8")
        obj = json.loads(text, parse_constant=_not_json, object_pairs_hook=_unique_keys)
    except ProtocolError:
        raise
    except (ValueError, UnicodeDecodeError) as e:
        raise _malformed(f"not a JSON object: {e}") from None
    except RecursionError:
        # Go's decoder allows 10000 levels; Python's stops at its recursion limit.
        raise _malformed("JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise _malformed("not a JSON object")
    if nested_deeper(obj, depth):
        raise _malformed(f"nested deeper than {depth} levels")
    v = obj.get("version")
    if v is None:
        raise _malformed(f"version is required (this build speaks version {VERSION})")
    if type(v) is not int or v not in (VERSION, VERSION2):
        raise ProtocolError(
            "unsupported_version", f"version {json.dumps(v)}; this build speaks versions {VERSION} and {VERSION2}"
        )
    return obj


def decode_decision(data: bytes) -> dict[str, Any]:
    """Parse and validate a decision as an approver publishes it (votes,
    executionKey and rule are the coordinator's to write)."""
    d = _decision(_head(data, MAX_DECISION_SIZE, MAX_DECISION_DEPTH))
    # The limit holds for the decision as the coordinator records it too
    # (Go's encoding escapes <, > and &, and U+2028/U+2029). It bounds what
    # approvers publish: a decision the coordinator writes (an expiry's
    # payload, a quorum's votes) is bounded by the message size only.
    if (n := recorded_size(d)) > MAX_DECISION_SIZE:
        raise ProtocolError(
            "too_large",
            f"{n} bytes as recorded (JSON re-encoded: <, > and & escaped), the limit is {MAX_DECISION_SIZE}",
        )
    for f in ("votes", "executionKey", "rule"):
        if d.get(f):
            raise _malformed(f"{f} is set by the coordinator only")
    return d


def decode_suspension(data: bytes) -> dict[str, Any]:
    """Parse and validate a suspension."""
    spec = dict(_PASSREF, interrupts=_any, journal=_journal, suspendedAt=_time, requester=_str)
    d = _fields(_head(data, MAX_MESSAGE_SIZE), spec, "suspension")
    _passref(d)
    ins = d.get("interrupts")
    if ins is not None and not isinstance(ins, list):
        raise _malformed("field 'interrupts': must be a list")
    if not ins:
        raise _malformed("interrupts is empty: a suspension needs at least one interrupt")
    seen: set[str] = set()
    for i, x in enumerate(ins):
        try:
            validate_interrupt(x)
        except ProtocolError as e:
            raise ProtocolError(e.code, f"interrupts[{i}]: {e.detail}") from None
        if x["id"] in seen:
            raise _malformed(f"interrupts[{i}]: id {x['id']!r} appears twice")
        seen.add(x["id"])
        if (x.get("policy") or {}).get("rules"):
            raise _malformed(f"interrupts[{i}]: policy.rules is set by the coordinator only")
    if d.get("requester"):
        if (d.get("pass") or 0) != 0:
            raise _malformed("requester is reported on pass 0 only")
        _id("requester", d["requester"])
    _check_version("suspension", d)
    return d


def decode_completion(data: bytes) -> dict[str, Any]:
    """Parse and validate a completion."""
    spec = dict(_PASSREF, result=_any, journal=_journal, completedAt=_time)
    d = _fields(_head(data, MAX_MESSAGE_SIZE), spec, "completion")
    _passref(d)
    return d


def decode_failure(data: bytes) -> dict[str, Any]:
    """Parse and validate a failure."""
    spec = dict(_PASSREF, error=_str, failedAt=_time)
    d = _fields(_head(data, MAX_MESSAGE_SIZE), spec, "failure")
    _passref(d)
    if not d.get("error"):
        raise _malformed("error is required")
    return d


def decode_work(data: bytes) -> dict[str, Any]:
    """Parse and validate a work item."""
    spec = dict(_PASSREF, decisions=_any, journal=_journal)
    d = _fields(_head(data, MAX_MESSAGE_SIZE), spec, "work item")
    _passref(d)
    ds = d.get("decisions")
    if ds is not None and not isinstance(ds, list):
        raise _malformed("field 'decisions': must be a list")
    for i, x in enumerate(ds or []):
        try:
            _replayed(x)
        except ProtocolError as e:
            raise ProtocolError(e.code, f"decisions[{i}]: {e.detail}") from None
    _check_version("work", d)
    return d


DECODERS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "decision": decode_decision,
    "suspension": decode_suspension,
    "completion": decode_completion,
    "failure": decode_failure,
    "work": decode_work,
}


def ask_message(run_id: str, agent: str, pass_: int, requester: str, interrupt: dict[str, Any]) -> dict[str, Any]:
    """The ask a worker sends on ``<prefix>.ask.<agent>.<run>`` before it
    suspends on ``interrupt`` (protocol version 2; Go: subjects.Ask): the
    requester goes on pass 0 only, as in a suspension."""
    msg: dict[str, Any] = {"version": VERSION2, "runId": run_id, "agent": agent, "pass": pass_}
    if pass_ == 0 and requester:
        msg["requester"] = requester
    msg["interrupt"] = interrupt
    return msg


def take_ask_reply(data: bytes, interrupt_id: str) -> dict[str, Any] | None:
    """The decision a coordinator's answer to an ask carries, or None when
    the pass must suspend as usual: only ``outcome: "decided"`` with a valid
    decision by ``interlock:policy`` on that very interrupt is taken (Go:
    the worker's asker). Anything else, malformed included, fails closed."""
    try:
        reply = _fields(
            _head(data, MAX_MESSAGE_SIZE),
            {"version": _any, "outcome": _str, "decision": _any, "detail": _str},
            "ask reply",
        )
        if reply.get("outcome") != "decided" or not isinstance(reply.get("decision"), dict):
            return None
        d = _replayed(reply["decision"])
    except ProtocolError:
        return None
    if d.get("interruptId") != interrupt_id or d.get("approver") != POLICY_APPROVER:
        return None
    return d
