"""Decision policies (protocol version 2) in the Python SDK: the shared
vectors of testdata/conformance/policies.json (call digests, the votes and
verdicts of the tallies), the writers' versions, and the replay's check of
the approved call. No server: the end-to-end flows are in test_quorum.py."""

from __future__ import annotations

import contextvars
import json
from pathlib import Path
from typing import Any

import pytest

import interlock
from interlock._run import _current, _Pass, _to_wire, _tool_call
from interlock._wire import DECODERS, decode_decision, versioned, wire_version

VECTORS = Path(__file__).resolve().parents[2] / "testdata" / "conformance"
POLICIES = json.loads((VECTORS / "policies.json").read_text())

REFUND = {"order": "A-1001", "amount": 42.5}
REFUND_DIGEST = "1f475ff1f0bbac2c9780c24f3e23b28529523abdf58f64dc1e92dbbc3e69f128"


@pytest.mark.parametrize("v", POLICIES["callDigests"], ids=lambda v: str(v["name"]))
def test_call_digests(v: dict[str, Any]) -> None:
    args = interlock.raw_json(v["arguments"])
    if "error" in v:
        with pytest.raises(interlock.ProtocolError) as e:
            interlock.call_digest(v["tool"], args)
        assert e.value.code == v["error"]
        return
    canonical = '{"arguments":' + interlock.canonicalize(args) + ',"tool":' + json.dumps(v["tool"], ensure_ascii=False)
    assert canonical + "}" == v["canonical"]
    assert interlock.call_digest(v["tool"], args) == v["digest"]


@pytest.mark.parametrize(
    "v", [v for v in POLICIES["callDigests"] if "error" not in v and v["arguments"]], ids=lambda v: str(v["name"])
)
def test_call_digests_of_values(v: dict[str, Any]) -> None:
    """The digest of the parsed value is the digest of its text: an agent
    passes its arguments as Python values."""
    value = json.loads(v["arguments"])
    assert interlock.call_digest(v["tool"], value) == v["digest"]


def test_call_digest_refuses_what_json_cannot_carry() -> None:
    for bad in ({"x": float("nan")}, {"x": float("inf")}, {"x": 10**400}, {"x": {1, 2}}, {1: "x"}):
        with pytest.raises(interlock.ProtocolError):
            interlock.call_digest("t", bad)
    deep: Any = 1
    for _ in range(65):
        deep = [deep]
    with pytest.raises(interlock.ProtocolError):
        interlock.call_digest("t", deep)
    assert interlock.call_digest("t", None) == interlock.call_digest("t", {})


@pytest.mark.parametrize("v", POLICIES["tallies"], ids=lambda v: str(v["name"]))
def test_tally_votes_and_verdicts_read(v: dict[str, Any]) -> None:
    """Each vote of a tally is a decision this SDK can write and the
    coordinator reads; each verdict it gets reads as a Verdict with its
    tally. (The tally itself is the coordinator's: Go processor/rules.)"""
    for i, step in enumerate(v["steps"]):
        vote = dict(step["vote"])
        approver = vote.pop("approver")
        d = versioned("decision", dict(vote, interruptId="int-1"))
        decode_decision(json.dumps(d).encode())
        want = step["want"]
        verdict = interlock.Verdict.from_wire(
            dict(want, decisionId=vote["decisionId"], approver=approver, runId="run-1", interruptId="int-1")
        )
        assert verdict.outcome == want["outcome"], i
        if "tally" in want:
            assert verdict.tally is not None
            assert verdict.tally.approvals_needed == want["tally"]["approvalsNeeded"]
            assert verdict.vote_recorded == (want["outcome"] == "vote_recorded")
            assert "approvals" in verdict.tally.remaining


@pytest.mark.parametrize("v", POLICIES["unsatisfiable"], ids=lambda v: str(v["name"]))
def test_unsatisfiable_policies_are_valid_requests(v: dict[str, Any]) -> None:
    """Whether a policy can be met is the coordinator's to say (it knows the
    groups and the requester); each is a request the SDK writes and the
    wire reads."""
    p = v["policy"]
    req = interlock.Request(
        approvers=v.get("approvers") or [],
        approver_groups=v.get("approverGroups") or [],
        policy=interlock.Policy(
            approvals=p.get("approvals", 1),
            denials=p.get("denials", 1),
            allow_requester=p.get("allowRequester", False),
        ),
    )
    wire = _to_wire("int-1", "", req)
    assert wire["policy"].get("approvals", 1) == p.get("approvals", 1)
    susp = versioned("suspension", {"runId": "r", "agent": "a", "pass": 0, "interrupts": [wire]})
    assert susp["version"] == 2
    DECODERS["suspension"](json.dumps(susp).encode())


def test_writers_use_the_lowest_version() -> None:
    plain = _to_wire("int-1", "call_1", interlock.Request(message="ok?"))
    assert wire_version("suspension", {"interrupts": [plain]}) == 1
    bound = _to_wire("int-1", "call_1", interlock.Request(call=interlock.Call("issue_refund", REFUND)))
    assert bound["call"] == {"tool": "issue_refund", "arguments": REFUND, "digest": REFUND_DIGEST}
    assert wire_version("suspension", {"interrupts": [plain, bound]}) == 2
    assert wire_version("decision", {"status": "resolved"}) == 1
    assert wire_version("decision", {"status": "withdrawn"}) == 2
    assert wire_version("notice", {"kind": "reminder"}) == 1
    assert wire_version("notice", {"kind": "reminder", "tallies": {"int-1": {"approvals": 1}}}) == 2
    assert wire_version("decision", {"status": "resolved", "callDigest": REFUND_DIGEST}) == 2
    work = versioned("work", {"decisions": [{"status": "resolved"}, {"status": "resolved", "executionKey": "k"}]})
    assert [d["version"] for d in work["decisions"]] == [1, 2]
    assert work["version"] == 2
    assert wire_version("verdict", {"outcome": "accepted"}) == 1
    assert wire_version("verdict", {"outcome": "vote_recorded"}) == 2


def test_request_with_arguments_without_digest_is_refused() -> None:
    with pytest.raises(interlock.InvalidRequest):
        _to_wire("int-1", "", interlock.Request(call=interlock.Call("pay", {"amount": float("nan")})))
    with pytest.raises(interlock.InvalidRequest):
        _to_wire("int-1", "", interlock.Request(policy=interlock.Policy(approvals=33)))


def _replay(decision: dict[str, Any], fn: Any) -> Any:
    """Run fn inside a replay pass holding decision, in tool call call_1."""
    info = interlock.RunInfo(run_id="run-1", agent="refunds", pass_=1)
    iid = interlock.interrupt_id("run-1", "call_1", 0)
    p = _Pass(info, [dict(decision, interruptId=iid)], {})
    ctx = contextvars.copy_context()
    ctx.run(_current.set, p)
    ctx.run(_tool_call.set, "call_1")
    return ctx.run(fn)


KEY = "9" * 64


def approved(**extra: Any) -> dict[str, Any]:
    return dict(
        {"version": 2, "decisionId": "d3", "status": "resolved", "callDigest": REFUND_DIGEST, "executionKey": KEY},
        **extra,
    )


def refund_request(args: Any = None) -> interlock.Request:
    return interlock.Request(call=interlock.Call("issue_refund", REFUND if args is None else args))


def test_replay_runs_the_approved_call_and_exposes_its_key() -> None:
    votes = [
        {"decisionId": "d1", "approver": "bob", "status": "resolved", "callDigest": REFUND_DIGEST, "at": "t1"},
        {"decisionId": "d3", "approver": "cy", "status": "resolved", "callDigest": REFUND_DIGEST, "at": "t2"},
    ]

    def body() -> tuple[interlock.Decision, str]:
        # Key order and number spelling do not change the call.
        d = interlock.interrupt(refund_request({"amount": 42.50, "order": "A-1001"}))
        return d, interlock.execution_key()

    d, key = _replay(approved(votes=votes), body)
    assert key == KEY == d.execution_key
    assert [(v.approver, v.at, v.status) for v in d.votes] == [("bob", "t1", "resolved"), ("cy", "t2", "resolved")]


def test_replay_refuses_another_call() -> None:
    """Before: interrupt returned the approval whatever the call about to run."""

    def body() -> Any:
        return interlock.interrupt(refund_request({"order": "A-1001", "amount": 4250}))

    with pytest.raises(interlock.CallMismatch) as e:
        _replay(approved(), body)
    assert e.value.approved == REFUND_DIGEST
    assert e.value.got != REFUND_DIGEST
    # Nothing was exposed for a call that does not run.
    assert _replay(approved(), lambda: _swallow(body)) == ""


def _swallow(fn: Any) -> str:
    """fn's CallMismatch swallowed; the execution key after it."""
    try:
        fn()
    except interlock.CallMismatch:
        pass
    return interlock.execution_key()


def test_replay_refuses_a_decision_that_approved_no_call() -> None:
    """A version 1 approval (no callDigest) approves no call: fail closed."""
    with pytest.raises(interlock.CallMismatch):
        _replay({"version": 1, "decisionId": "d1", "status": "resolved"}, lambda: interlock.interrupt(refund_request()))


def test_replay_runs_edited_arguments() -> None:
    edited = {"order": "A-1001", "amount": 40}
    digest = interlock.call_digest("issue_refund", edited)

    def body() -> Any:
        req = refund_request()
        d = interlock.interrupt(req)
        assert req.call is not None
        return interlock.approved_arguments(d, req.call.arguments)

    assert _replay(approved(callDigest=digest, arguments=edited), body) == edited
    # An edit whose digest is not the decision's is refused.
    with pytest.raises(interlock.CallMismatch):
        _replay(approved(arguments=edited), body)


def test_check_call() -> None:
    d = interlock.Decision.from_wire(dict(approved(), interruptId="int-1"))
    interlock.check_call(d, "issue_refund", REFUND)
    with pytest.raises(interlock.CallMismatch):
        interlock.check_call(d, "issue_credit", REFUND)
    with pytest.raises(interlock.InvalidRequest):
        interlock.check_call(d, "issue_refund", {"x": float("nan")})
    assert issubclass(interlock.CallMismatch, interlock.InterlockError)


def test_client_writes_votes_under_version_2() -> None:
    """A vote bound to a call says version 2; a plain decision keeps 1."""
    d = versioned("decision", {"decisionId": "d", "interruptId": "i", "status": "resolved"})
    assert d["version"] == 1
    vote = {"decisionId": "d", "interruptId": "i", "status": "resolved", "callDigest": REFUND_DIGEST}
    d = versioned("decision", vote)
    assert d["version"] == 2
    decode_decision(json.dumps(d).encode())


def test_a_work_item_decision_with_an_odd_version_is_malformed_not_a_crash() -> None:
    work = {
        "version": 2,
        "runId": "r",
        "agent": "a",
        "pass": 1,
        "decisions": [{"version": "1", "decisionId": "d", "interruptId": "i", "status": "withdrawn"}],
    }
    with pytest.raises(interlock.ProtocolError) as e:
        DECODERS["work"](json.dumps(work).encode())
    assert e.value.code == "malformed"
