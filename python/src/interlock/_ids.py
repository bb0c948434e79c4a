"""Deterministic ids and message ids, byte-identical to the Go SDK's."""

from __future__ import annotations

import hashlib
import os
import time
import uuid


def well_formed(s: str) -> str:
    """``s`` with each lone surrogate (from a ``"\\ud800"`` escape) as U+FFFD,
    as Go decodes it and records it: a key or id computed from ``s`` matches
    the record's, so a replay finds its step (it ran again, before)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def interrupt_id(run_id: str, tool_call_id: str, ordinal: int) -> str:
    """The id of the ordinal-th interrupt (from 0) raised within a tool call.

    ``"int-"`` and the first 24 hex digits of SHA-256 over the run id, the
    tool call id (``""`` outside any tool call) and the ordinal in decimal
    ASCII, separated by NUL bytes.
    """
    if ordinal < 0:
        raise ValueError("ordinal must be >= 0")
    h = hashlib.sha256()
    h.update(well_formed(run_id).encode())
    h.update(b"\x00")
    h.update(well_formed(tool_call_id).encode())
    h.update(b"\x00")
    h.update(str(ordinal).encode())
    return "int-" + h.hexdigest()[:24]


def step_key(tool_call_id: str, name: str, ordinal: int) -> str:
    """The journal key of the ordinal-th call of step ``name`` in a tool call."""
    return f"{well_formed(tool_call_id)}/{well_formed(name)}#{ordinal}"


def work_msg_id(run_id: str, pass_: int) -> str:
    """``Nats-Msg-Id`` of a work item."""
    return f"{run_id}:{pass_}:work"


def nonce() -> str:
    """32 hex digits from the operating system's random source."""
    return os.urandom(16).hex()


def start_msg_id(run_id: str, nonce_: str) -> str:
    """``Nats-Msg-Id`` of a start (a run's first work item): the run,
    ``":0:start:"`` and a fresh :func:`nonce` per start call, reused only by
    that call's retries, so no other publisher can store a message with it
    first and have the start dropped as a duplicate."""
    return f"{run_id}:0:start:{nonce_}"


def pass_key(work_msg_id_: str, work: bytes) -> str:
    """The key of the pass a work item starts, from the work item as stored:
    the first 32 hex digits of SHA-256 over ``"interlock pass key"``, NUL,
    the item's ``Nats-Msg-Id``, NUL and its body. A work item without an id
    gets a fresh :func:`nonce` per attempt."""
    if not work_msg_id_:
        return nonce()
    return hashlib.sha256(b"interlock pass key\x00" + work_msg_id_.encode() + b"\x00" + work).hexdigest()[:32]


def outcome_msg_id(run_id: str, pass_: int, key: str) -> str:
    """``Nats-Msg-Id`` of a pass outcome (suspension, completion or failure)
    of the pass with ``key`` (:func:`pass_key`)."""
    return f"{run_id}:{pass_}:{key}"


def emit_msg_id(run_id: str, n: int, key: str) -> str:
    """``Nats-Msg-Id`` of the n-th AG-UI event (from 0) of a run, emitted by
    the pass with ``key``."""
    return f"{run_id}:emit:{n}:{key}"


def decision_msg_id(approver: str, decision_id: str) -> str:
    """``Nats-Msg-Id`` of a decision published as ``approver`` (``""``:
    anonymous): the decision id, prefixed with ``"<approver>:"`` when there is
    one, so that one identity's decision id never deduplicates another's
    decision away before the coordinator sees and audits it."""
    return f"{approver}:{decision_id}" if approver else decision_id


def decision_attempt_msg_id(approver: str, decision_id: str, rejected: int, body: bytes) -> str:
    """``Nats-Msg-Id`` of a decision whose body is ``body``, sent after
    ``rejected`` rejected attempts with the same decision id:
    :func:`decision_msg_id`, then ``":<rejected>"`` when there were any, then
    ``":"`` and the first 32 hex digits of SHA-256(body). A rejected attempt
    so never deduplicates a later one away, and a decision id reused with
    another body reaches the coordinator, which refuses it
    (``decision_id_reused``); copies of one attempt still dedup."""
    base = decision_msg_id(approver, decision_id)
    if rejected:
        base = f"{base}:{rejected}"
    return f"{base}:{hashlib.sha256(body).hexdigest()[:32]}"


def dead_letter_msg_id(consumer: str, stream: str, sequence: int) -> str:
    """``Nats-Msg-Id`` of a dead letter: one per consumer that gave up on a
    message, so two consumers giving up on one message leave two."""
    return f"dlq-{consumer}-{stream}-{sequence}"


def pending_key(run_id: str, interrupt_id_: str) -> str:
    """Key of an interrupt in the pending bucket: run id, '.', and the first
    12 bytes of SHA-256 of the interrupt id in hex."""
    return run_id + "." + hashlib.sha256(interrupt_id_.encode()).hexdigest()[:24]


def reply_token(decision_id: str) -> str:
    """Last token of the reply subject a client awaits a verdict on."""
    return hashlib.sha256(decision_id.encode()).hexdigest()[:24]


def uuid7() -> str:
    """A fresh UUIDv7 (time-ordered), as the Go SDK uses for run and decision ids."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))
