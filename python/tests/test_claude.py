"""The Claude Agent SDK adapter against a real server: the can_use_tool
callback asks through Interlock and answers allow, deny or edited input; the
question and the decision survive the asking process. The callback is
called as the SDK calls it; nothing reaches the model service."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import nats
from claude_agent_sdk import ClaudeAgentOptions, PermissionResultAllow, PermissionResultDeny, ToolPermissionContext
from conftest import Server
from nats.aio.client import Client as NATS
from test_replay import worker
from test_worker import eventually

import interlock
from interlock import Client
from interlock.adapters.claude import ClaudePermissions, permission_run_id


async def asking(perms: ClaudePermissions, tool_use_id: str, **ctx: Any) -> asyncio.Task[Any]:
    return asyncio.create_task(
        perms("Bash", {"command": "rm -rf build"}, ToolPermissionContext(tool_use_id=tool_use_id, **ctx))
    )


async def test_allow_deny_and_edited_input(nc: NATS, server: Server, client: Client, agent_name: str) -> None:
    session = str(uuid.uuid4())
    perms = ClaudePermissions(nc, session_id=session, agent=agent_name)
    ClaudeAgentOptions(can_use_tool=perms)  # the SDK takes it as its callback
    async with worker(nc, agent_name, perms.agent):
        allow = await asking(perms, "toolu_1", title="Claude wants to run rm -rf build")
        edit = await asking(perms, "toolu_2")
        deny = await asking(perms, "toolu_3")
        runs = {t: permission_run_id(session, t) for t in ("toolu_1", "toolu_2", "toolu_3")}
        for run in runs.values():
            await client.wait(run, interlock.suspended)

        # The index entry may trail the record by a moment (protocol.md):
        # a run seen suspended is listed once its entry is put.
        async def listed() -> bool:
            return sorted(p.run_id for p in await perms.pending()) == sorted(runs.values())

        await eventually(listed, "the three questions listed as pending")
        waiting = await perms.pending()
        first = next(p for p in waiting if p.run_id == runs["toolu_1"])
        assert first.message == "Claude wants to run rm -rf build"
        assert (first.metadata or {})["arguments"] == {"command": "rm -rf build"}
        assert first.tool_call_id == "toolu_1"

        await client.approve(runs["toolu_1"], first.id, approver="ada")
        edited = await asyncio.to_thread(
            server.cli, "approve", runs["toolu_2"], "--arguments", '{"command": "rm -rf build/tmp"}'
        )
        assert edited.returncode == 0, edited.stderr
        await client.deny(runs["toolu_3"], interlock.interrupt_id(runs["toolu_3"], "toolu_3", 0), comment="too risky")

        assert await asyncio.wait_for(allow, 30) == PermissionResultAllow(updated_input=None)
        assert await asyncio.wait_for(edit, 30) == PermissionResultAllow(updated_input={"command": "rm -rf build/tmp"})
        result = await asyncio.wait_for(deny, 30)
        assert isinstance(result, PermissionResultDeny) and result.message == "too risky"
    await perms.close()


async def test_the_question_outlives_the_asking_process(server: Server, client: Client, agent_name: str) -> None:
    session = str(uuid.uuid4())
    run = permission_run_id(session, "toolu_9")
    first_nc = await nats.connect(server.url)
    perms = ClaudePermissions(first_nc, session_id=session, agent=agent_name)
    async with worker(first_nc, agent_name, perms.agent):
        task = await asking(perms, "toolu_9")
        rec = await client.wait(run, interlock.suspended)
    task.cancel()  # the asking process dies with its connection
    await asyncio.gather(task, return_exceptions=True)
    await first_nc.close()

    (question,) = [p for p in await client.pending() if p.run_id == run]
    # The question gates the call: an edit is an approval of the edited call.
    assert question.raw["call"]["digest"] == interlock.call_digest("Bash", {"command": "rm -rf build"})
    await client.approve(run, question.id, arguments={"command": "rm -rf build/cache"}, approver="ada")

    second_nc = await nats.connect(server.url)
    try:
        again = ClaudePermissions(second_nc, session_id=session, agent=agent_name)
        async with worker(second_nc, agent_name, again.agent):
            result = await asyncio.wait_for(
                again("Bash", {"command": "rm -rf build"}, ToolPermissionContext(tool_use_id="toolu_9")), 30
            )
        await again.close()
    finally:
        await second_nc.close()
    assert result == PermissionResultAllow(updated_input={"command": "rm -rf build/cache"})
    # The same tool use id with another input never borrows that approval.
    third_nc = await nats.connect(server.url)
    try:
        other = ClaudePermissions(third_nc, session_id=session, agent=agent_name)
        swapped = await asyncio.wait_for(
            other("Bash", {"command": "rm -rf /"}, ToolPermissionContext(tool_use_id="toolu_9")), 30
        )
        await other.close()
    finally:
        await third_nc.close()
    assert isinstance(swapped, PermissionResultDeny) and "different tool call" in swapped.message
    rec = await client.run(run)
    assert len(rec.interrupts) == 1, "asking again found the same question"
    assert rec.interrupts[0]["decision"]["approver"] == "ada"


async def test_silence_is_denial(nc: NATS, agent_name: str) -> None:
    perms = ClaudePermissions(nc, session_id=str(uuid.uuid4()), agent=agent_name, timeout=1.0)
    async with worker(nc, agent_name, perms.agent):
        result = await perms("Write", {"path": "/etc/hosts"}, ToolPermissionContext(tool_use_id="toolu_x"))
    assert isinstance(result, PermissionResultDeny) and "silence is not approval" in result.message
    await perms.close()


async def test_session_store_passes_the_sdk_conformance_suite(nc: NATS) -> None:
    from claude_agent_sdk.testing import run_session_store_conformance

    from interlock.adapters.claude import JetStreamSessionStore

    # One tenant per store: the suite wants each store isolated.
    await run_session_store_conformance(lambda: JetStreamSessionStore(nc, tenant="t" + uuid.uuid4().hex[:12]))


async def test_session_store_drops_a_resent_entry(nc: NATS) -> None:
    from interlock.adapters.claude import JetStreamSessionStore

    store = JetStreamSessionStore(nc, tenant="t" + uuid.uuid4().hex[:12])
    key: Any = {"project_key": "p", "session_id": "s"}
    entry: Any = {"type": "user", "uuid": "u-1", "message": "hi"}
    await store.append(key, [entry])
    title: Any = {"type": "title", "title": "x"}
    await store.append(key, [entry, title])
    assert await store.load(key) == [entry, title]
    ClaudeAgentOptions(session_store=store)


async def test_an_edit_sent_as_the_answer_is_a_denial(nc: NATS, client: Client, agent_name: str) -> None:
    """The question gates the call: an edit sent as the answer (a version 1
    edit) is bound to no digest, so it denies rather than run the asked
    input and ignore it."""
    session = str(uuid.uuid4())
    perms = ClaudePermissions(nc, session_id=session, agent=agent_name)
    async with worker(nc, agent_name, perms.agent):
        task = await asking(perms, "toolu_e")
        run = permission_run_id(session, "toolu_e")
        rec = await client.wait(run, interlock.suspended)
        await client.approve(run, rec.pending()[0]["id"], payload={"command": "rm -rf build/tmp"}, approver="ada")
        result = await asyncio.wait_for(task, 30)
    assert isinstance(result, PermissionResultDeny) and "arguments" in result.message
    await perms.close()
