"""One round trip for a settled gate (protocol version 2), end to end
against a real `interlock serve --policies` built from this tree: a worker
with ask_rules asks before suspending, and an operator rule's approval lets
the pass go on with no suspension and no replay; a rule's denial raises
Cancelled in the same pass; with no rule the pass suspends as usual. The
ask bodies are held to testdata/conformance/ask.json."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from conftest import Server
from nats.aio.client import Client as NATS

import interlock
from interlock import Client, Worker
from interlock._run import ask_key
from interlock._wire import ask_message, take_ask_reply

ASK = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "conformance" / "ask.json").read_text())

POLICIES = """
rules:
  - name: small-refunds
    match: 'tool == "issue_refund" && arguments.amount < 20'
    action: approve
  - name: no-wires
    match: 'tool == "wire"'
    action: deny
"""


@pytest.mark.parametrize("v", ASK["requests"], ids=lambda v: str(v["name"]))
def test_ask_request_vectors(v: dict[str, Any]) -> None:
    got = ask_message(v["runId"], v["agent"], v["pass"], v["requester"], v["interrupt"])
    assert got == v["body"]


@pytest.mark.parametrize("v", ASK["replies"], ids=lambda v: str(v["name"]))
def test_ask_reply_vectors(v: dict[str, Any]) -> None:
    raw = v["raw"] if "raw" in v else json.dumps(v["reply"])
    got = take_ask_reply(raw.encode(), v["interruptId"])
    assert (got is not None) == v["takes"]
    if got is not None:
        assert got == json.loads(raw)["decision"]


def test_ask_journal_key_vectors() -> None:
    assert ASK["journalKeys"]
    for v in ASK["journalKeys"]:
        assert ask_key(v["interruptId"]) == v["key"]


@pytest.fixture(scope="module")
def ruled(interlock_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("ruled")
    (d / "policies.yaml").write_text(POLICIES)
    srv = Server(interlock_bin, d / "data", "--policies", str(d / "policies.yaml"))
    yield srv
    srv.stop()


@pytest.fixture
async def rnc(ruled: Server) -> AsyncIterator[NATS]:
    conn = await nats.connect(ruled.url)
    yield conn
    await conn.close()


@pytest.fixture
async def rclient(rnc: NATS) -> AsyncIterator[Client]:
    c = Client(rnc, timeout=30, wait_timeout=60)
    yield c
    await c.close()


@contextlib.asynccontextmanager
async def asking(nc: NATS, agent: str, fn: interlock.AgentFunc) -> AsyncIterator[Worker]:
    w = Worker(nc, ask_rules=True)
    w.register(agent, fn)
    await w.start()
    try:
        yield w
    finally:
        await w.stop(timeout=10)


def agent_of(tool: str, args: dict[str, Any], passes: list[int]) -> interlock.AgentFunc:
    async def body(_: Any) -> Any:
        info = interlock.run_info()
        assert info is not None
        passes.append(info.pass_)
        with interlock.tool_call("call_1"):
            try:
                d = await interlock.interrupt_async(interlock.Request(message="Go?", call=interlock.Call(tool, args)))
            except interlock.Cancelled as e:
                return {"cancelled": True, "by": e.decision.approver, "rule": e.decision.rule}
            return {"by": d.approver, "rule": d.rule, "key": interlock.execution_key()}

    return body


async def test_rule_approves_in_one_round_trip(rnc: NATS, rclient: Client, agent_name: str) -> None:
    client = rclient
    passes: list[int] = []
    async with asking(rnc, agent_name, agent_of("issue_refund", {"amount": 5}, passes)):
        run = await client.start(agent_name, {})
        rec = await client.wait(run)
        assert rec.status == "completed", rec.error
        assert rec.pass_ == 0, "settled without a suspension and a replay"
        assert passes == [0]
        assert rec.result["by"] == interlock.POLICY_APPROVER
        assert rec.result["rule"] == "small-refunds"
        assert len(rec.result["key"]) == 64
        events = await client.events(run)
        kinds = [e.type for e in events]
        assert "suspended" not in kinds
        assert any(
            e.type == "decision_accepted"
            and e.verdict is not None
            and e.verdict.approver == interlock.POLICY_APPROVER
            and e.verdict.rule == "small-refunds"
            for e in events
        ), kinds


async def test_rule_denies_in_one_round_trip(rnc: NATS, rclient: Client, agent_name: str) -> None:
    client = rclient
    passes: list[int] = []
    async with asking(rnc, agent_name, agent_of("wire", {"amount": 5}, passes)):
        run = await client.start(agent_name, {})
        rec = await client.wait(run)
        assert rec.status == "completed", rec.error
        assert rec.pass_ == 0 and passes == [0]
        assert rec.result == {"cancelled": True, "by": interlock.POLICY_APPROVER, "rule": "no-wires"}
        assert "suspended" not in [e.type for e in await client.events(run)]


async def test_no_rule_suspends_as_usual(rnc: NATS, rclient: Client, agent_name: str) -> None:
    client = rclient
    passes: list[int] = []
    async with asking(rnc, agent_name, agent_of("issue_refund", {"amount": 500}, passes)):
        run = await client.start(agent_name, {})
        rec = await client.wait(run, lambda r: r.finished or r.status == "suspended")
        assert rec.status == "suspended", rec.error
        iid = rec.pending()[0]["id"]
        digest = rec.pending()[0]["call"]["digest"]
        await client.approve(run, iid, approver="ada", call_digest=digest)
        rec = await client.wait(run)
        assert rec.status == "completed", rec.error
        assert rec.pass_ == 1 and passes == [0, 1]
        assert rec.result["by"] == "ada"


async def test_unanswered_ask_suspends(nc: NATS, client: Client, agent_name: str) -> None:
    """Against a coordinator without rules the ask is answered "suspend":
    the pass suspends (fails closed), never approves."""
    passes: list[int] = []
    async with asking(nc, agent_name, agent_of("issue_refund", {"amount": 5}, passes)):
        run = await client.start(agent_name, {})
        rec = await client.wait(run, lambda r: r.finished or r.status == "suspended")
        assert rec.status == "suspended", rec.error
        assert passes == [0]


async def test_replay_reuses_the_journaled_decision(rnc: NATS, rclient: Client, agent_name: str) -> None:
    """A rule's decision is journaled under ask/<id>: the replay after a
    later suspension returns it without asking again (one policy decision in
    the audit trail), to the synchronous interrupt() too."""
    client = rclient
    passes: list[int] = []
    resuming: list[bool] = []

    async def body(_: Any) -> Any:
        info = interlock.run_info()
        assert info is not None
        passes.append(info.pass_)
        with interlock.tool_call("small"):
            resuming.append(interlock.is_resuming())
            small = interlock.Request(message="5?", call=interlock.Call("issue_refund", {"amount": 5}))
            first = interlock.interrupt(small) if info.pass_ > 0 else await interlock.interrupt_async(small)
        with interlock.tool_call("big"):
            big = interlock.Request(message="500?", call=interlock.Call("issue_refund", {"amount": 500}))
            second = await interlock.interrupt_async(big)
        return [first.approver, second.approver]

    async with asking(rnc, agent_name, body):
        run = await client.start(agent_name, {})
        rec = await client.wait(run, lambda r: r.finished or r.status == "suspended")
        assert rec.status == "suspended", rec.error
        pending = rec.pending()
        assert len(pending) == 1 and pending[0]["toolCallId"] == "big"
        await client.approve(run, pending[0]["id"], approver="ada", call_digest=pending[0]["call"]["digest"])
        rec = await client.wait(run)
        assert rec.status == "completed", rec.error
        assert rec.result == [interlock.POLICY_APPROVER, "ada"]
        assert passes == [0, 1]
        assert resuming == [False, True], "is_resuming sees the rule's journaled decision"
        by_rule = [
            e
            for e in await client.events(run)
            if e.type == "decision_accepted"
            and e.verdict is not None
            and e.verdict.approver == interlock.POLICY_APPROVER
        ]
        assert len(by_rule) == 1, "asked once: the replay reads the journal"
