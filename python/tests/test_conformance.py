"""The shared conformance vectors in testdata/conformance, which the Go tests
read too (subjects/conformance_test.go, processor/conformance_test.go)."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import interlock
from interlock import _ids
from interlock._subjects import worker_durable
from interlock._wire import DECODERS

VECTORS = Path(__file__).resolve().parents[2] / "testdata" / "conformance"


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


IDS = load("ids.json")
SUBJECTS = load("subjects.json")
MESSAGES = load("messages.json")


@pytest.mark.parametrize("v", IDS["interruptIds"], ids=lambda v: f"{v['runId']}/{v['toolCallId']}/{v['ordinal']}")
def test_interrupt_ids(v: dict[str, Any]) -> None:
    assert interlock.interrupt_id(v["runId"], v["toolCallId"], v["ordinal"]) == v["id"]


def test_message_ids_and_keys() -> None:
    for v in IDS["stepKeys"]:
        assert interlock.step_key(v["toolCallId"], v["name"], v["ordinal"]) == v["key"]
    for v in IDS["workMsgIds"]:
        assert interlock.work_msg_id(v["runId"], v["pass"]) == v["msgId"]
    for v in IDS["outcomeMsgIds"]:
        assert interlock.outcome_msg_id(v["runId"], v["pass"], v["key"]) == v["msgId"]
    assert IDS["startMsgIds"] and IDS["passKeys"] and IDS["emitMsgIds"]
    for v in IDS["startMsgIds"]:
        assert interlock.start_msg_id(v["runId"], v["nonce"]) == v["msgId"]
    for v in IDS["passKeys"]:
        assert interlock.pass_key(v["workMsgId"], v["work"].encode()) == v["key"]
    for v in IDS["emitMsgIds"]:
        assert interlock.emit_msg_id(v["runId"], v["n"], v["key"]) == v["msgId"]
    for v in IDS["pendingKeys"]:
        assert _ids.pending_key(v["runId"], v["interruptId"]) == v["key"]
    assert IDS["decisionMsgIds"] and IDS["deadLetterMsgIds"]
    for v in IDS["decisionMsgIds"]:
        assert _ids.decision_msg_id(v["approver"], v["decisionId"]) == v["msgId"]
    assert IDS["decisionAttemptMsgIds"]
    for v in IDS["decisionAttemptMsgIds"]:
        assert (
            _ids.decision_attempt_msg_id(v["approver"], v["decisionId"], v["rejected"], v["body"].encode())
            == v["msgId"]
        )
    for v in IDS["deadLetterMsgIds"]:
        assert _ids.dead_letter_msg_id(v["consumer"], v["stream"], v["sequence"]) == v["msgId"]


@pytest.mark.parametrize("v", SUBJECTS["tokens"], ids=lambda v: repr(v["token"])[:20])
def test_tokens(v: dict[str, Any]) -> None:
    if v["valid"]:
        interlock.validate_token("token", v["token"])
    else:
        with pytest.raises(interlock.InvalidToken):
            interlock.validate_token("token", v["token"])


def build(prefix: str, op: str, args: list[str]) -> str:
    ns = interlock.Namespace(prefix)
    ops: dict[str, Callable[..., str]] = {
        "work": ns.work,
        "start": ns.start,
        "startAs": ns.start_as,
        "suspended": ns.suspended,
        "completed": ns.completed,
        "failed": ns.failed,
        "resume": ns.resume,
        "resumeAs": ns.resume,
        "events": ns.events,
        "runEvents": ns.run_events,
        "runOutcomes": ns.run_outcomes,
        "agui": ns.agui,
        "deadLetter": ns.dead_letter,
    }
    return ops[op](*args)


def test_inbox_prefixes() -> None:
    assert SUBJECTS["inboxPrefixes"]
    for v in SUBJECTS["inboxPrefixes"]:
        assert interlock.inbox_prefix(v["identity"]) == v["prefix"]


@pytest.mark.parametrize("v", SUBJECTS["workers"], ids=lambda v: f"{v['prefix']}:{v['agent']}")
def test_workers(v: dict[str, Any]) -> None:
    ns = interlock.Namespace(v["prefix"])
    if "error" in v:
        with pytest.raises(interlock.InvalidToken):
            ns.agent_work(v["agent"])
        return
    assert ns.agent_work(v["agent"]) == v["subjects"]
    assert worker_durable(v["agent"]) == v["durable"]


@pytest.mark.parametrize("v", SUBJECTS["backlog"], ids=lambda v: v["prefix"])
def test_backlog(v: dict[str, Any]) -> None:
    assert interlock.Namespace(v["prefix"]).backlog() == v["subjects"]


@pytest.mark.parametrize("v", SUBJECTS["subjects"], ids=lambda v: f"{v['prefix']}:{v['op']}:{'.'.join(v['args'])}")
def test_subjects(v: dict[str, Any]) -> None:
    if "error" in v:
        with pytest.raises(interlock.InvalidToken):
            build(v["prefix"], v["op"], v["args"])
    else:
        assert build(v["prefix"], v["op"], v["args"]) == v["subject"]


def message_bytes(case: dict[str, Any]) -> bytes:
    if "rawBase64" in case:
        return base64.b64decode(case["rawBase64"])
    if "raw" in case:
        return str(case["raw"]).encode()
    msg = copy.deepcopy(case["message"])
    if "pad" in case:
        at = msg
        for step in case["pad"].get("in", []):
            at = at[step]
        at[case["pad"]["field"]] = "x" * case["pad"]["bytes"]
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("case", MESSAGES["cases"], ids=lambda c: f"{c['kind']}: {c['name']}")
def test_messages(case: dict[str, Any]) -> None:
    decode = DECODERS[case["kind"]]
    data = message_bytes(case)
    if case["code"] is None:
        decode(data)
    else:
        with pytest.raises(interlock.ProtocolError) as e:
            decode(data)
        assert e.value.code == case["code"], e.value.detail


def test_decoders_only_ever_raise_protocol_errors() -> None:
    """A seeded mutation fuzz of every vector: whatever the bytes, a decoder
    returns a message or raises ProtocolError with a known code."""
    import random

    rng = random.Random(15)
    codes = {"malformed", "unsupported_version", "too_large", "call_mismatch"}
    seeds = [(c["kind"], message_bytes(c)) for c in MESSAGES["cases"] if "pad" not in c]
    alphabet = b'{}[]",:0123456789.-eE truefalsnul\\\x00\x7f\xc3\xa9\xff'
    for _ in range(20000):
        kind, data = rng.choice(seeds)
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            op, at = rng.randrange(3), rng.randrange(len(buf) + 1)
            if op == 0 and buf:
                del buf[min(at, len(buf) - 1)]
            elif op == 1:
                buf.insert(at, rng.choice(alphabet))
            elif buf:
                buf[min(at, len(buf) - 1)] = rng.choice(alphabet)
        try:
            DECODERS[kind](bytes(buf))
        except interlock.ProtocolError as e:
            assert e.code in codes, (kind, bytes(buf), e)


EVENTS = load("events.json")


@pytest.mark.parametrize("case", EVENTS["cases"], ids=lambda c: str(c["name"]))
def test_stored_events(case: dict[str, Any]) -> None:
    data = case["raw"].encode() if "raw" in case else json.dumps(case["data"]).encode()
    assert interlock.Namespace().stored_event(case["subject"], data) == case["event"]


def test_one_click_links_off_on_the_wire() -> None:
    """``Request(one_click_links=False)`` asks for no one-click links:
    ``oneClickLinks: false`` on the interrupt; unset, the field is absent."""
    from interlock._run import _to_wire

    off = _to_wire("int-1", "", interlock.Request(one_click_links=False))
    assert off["oneClickLinks"] is False
    assert "oneClickLinks" not in _to_wire("int-1", "", interlock.Request())


def test_chat_decisions_off_on_the_wire() -> None:
    """``Request(chat_decisions=False)`` forbids deciding from a chat:
    ``chatDecisions: false`` on the interrupt; unset, the field is absent."""
    from interlock._run import _to_wire

    off = _to_wire("int-1", "", interlock.Request(chat_decisions=False))
    assert off["chatDecisions"] is False
    assert "chatDecisions" not in _to_wire("int-1", "", interlock.Request())
