"""Separate processes: a worker killed mid-pass, and the cross-language
tests (a Python worker decided with the Go CLI, a Go worker decided by the
Python client)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from conftest import Server
from nats.aio.client import Client as NATS
from test_replay import suspended_at, worker

import interlock
from interlock import Client, Request

HERE = Path(__file__).resolve().parent


def wait_for(cond: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


@contextlib.contextmanager
def crash_worker(server: Server, agent: str, marks: Path) -> Any:
    proc = subprocess.Popen([sys.executable, str(HERE / "crash_worker.py"), server.url, agent, str(marks)])
    try:
        wait_for(lambda: (marks / f"ready-{proc.pid}").exists() or proc.poll() is not None, "worker ready")
        assert proc.poll() is None, "the worker exited"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def test_step_runs_once_across_a_worker_crash(
    server: Server, client: Client, agent_name: str, tmp_path: Path
) -> None:
    with crash_worker(server, agent_name, tmp_path) as first:
        run = await client.start(agent_name, {"order": 1})
        await suspended_at(client, run)
        await client.approve(run, interlock.interrupt_id(run, "call_1", 0), payload="yes")
        await asyncio.to_thread(wait_for, (tmp_path / "replaying").exists, "the replay started")
        os.kill(first.pid, signal.SIGKILL)  # mid-pass, the work item not acked
        first.wait()
    (tmp_path / "crashed").write_text("")
    with crash_worker(server, agent_name, tmp_path):
        rec = await client.wait(run, timeout=60)
    assert rec.status == "completed", rec.error
    assert rec.result == {"charged": "charge-1", "answer": "yes"}
    assert len((tmp_path / "step").read_text().splitlines()) == 1, "the journaled step ran once"


async def test_python_worker_decided_with_the_go_cli(nc: NATS, server: Server, client: Client, agent_name: str) -> None:
    async def body(inp: Any) -> Any:
        with interlock.tool_call("call_refund"):
            try:
                d = interlock.interrupt(
                    Request(
                        message="Refund?", response_schema={"type": "object", "required": ["amount"]}, approvers=["ada"]
                    )
                )
            except interlock.Cancelled as c:
                return {"denied": c.comment}
        return {"amount": d.payload["amount"], "approver": d.approver}

    async with worker(nc, agent_name, body):
        approved, denied = await client.start(agent_name), await client.start(agent_name)
        await suspended_at(client, approved)
        await suspended_at(client, denied)
        pending = await asyncio.to_thread(server.cli, "pending", "--agent", agent_name, "--json")
        assert pending.returncode == 0, pending.stderr
        assert {approved, denied} <= {p["runId"] for p in json.loads(pending.stdout)}
        wrong = await asyncio.to_thread(
            server.cli, "approve", approved, "--payload", '{"amount": 5}', "--approver", "bob"
        )
        assert wrong.returncode == 3, (wrong.stdout, wrong.stderr)  # not_allowed
        ok = await asyncio.to_thread(
            server.cli, "approve", approved, "--payload", '{"amount": 35}', "--approver", "ada", "--json"
        )
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["outcome"] == "accepted"
        no = await asyncio.to_thread(server.cli, "deny", denied, "--approver", "ada", "--comment", "not eligible")
        assert no.returncode == 0, no.stderr
        a, d = await client.wait(approved), await client.wait(denied)
    assert a.result == {"amount": 35, "approver": "ada"}
    assert d.result == {"denied": "not eligible"}
    show = await asyncio.to_thread(server.cli, "show", approved, "--json")
    assert show.returncode == 0 and json.loads(show.stdout)["status"] == "completed"


async def test_go_worker_decided_by_the_python_client(server: Server, client: Client) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(server.binary),
        "demo",
        "--nats-url",
        server.url,
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        events = _lines(proc)
        started = await asyncio.wait_for(anext(events), 120)
        assert started["event"] == "started"
        susp = await asyncio.wait_for(anext(events), 60)
        assert susp["event"] == "suspended"
        run, iid = susp["runId"], susp["interrupt"]["id"]
        assert iid == interlock.interrupt_id(run, "call_issue_refund", 0), "the Go SDK's id, derived in Python"
        v = await client.approve(run, iid, payload={"amount": 40}, approver="py-approver")
        assert v.outcome == "accepted" and v.replay
        done = await asyncio.wait_for(anext(events), 60)
        assert done["event"] == "completed", done
        assert done["result"] == {"refunded": True, "amount": 40, "approver": "py-approver"}
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _lines(proc: asyncio.subprocess.Process) -> AsyncIterator[dict[str, Any]]:
    assert proc.stdout is not None
    async for line in proc.stdout:
        yield json.loads(line)


async def test_the_readme_example_runs_against_interlock_serve(server: Server) -> None:
    example = HERE.parent / "examples" / "refund_agent.py"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-u",
        str(example),
        env=dict(os.environ, NATS_URL=server.url),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        while not lines or not lines[-1].strip().startswith("interlock approve"):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, "the example exited early: " + "".join(lines)
            lines.append(line.decode())
        run = lines[-1].split()[2]
        ok = await asyncio.to_thread(server.cli, "approve", run, "--payload", '{"amount": 35}')
        assert ok.returncode == 0, ok.stderr
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    text = "".join(lines) + out.decode()
    assert text.count("asking a person") == 1, text
    assert "completed: {'refunded': True, 'amount': 35, 'ticket': 'T-A-1', 'approver': ''}" in text, text
