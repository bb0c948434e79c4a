"""The worker's lifetimes against a real server: bounded concurrency,
heartbeats, the pass timeout, retries and a graceful stop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client as NATS
from test_replay import worker

import interlock
from interlock import Client, Worker


async def eventually(cond: Any, what: str, timeout: float = 30) -> None:
    """Poll a condition on the server (it has no event to wait on), with a deadline."""
    try:
        async with asyncio.timeout(timeout):
            while not await cond():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise TimeoutError(what) from None


async def test_concurrency_bounds_what_a_worker_holds(nc: NATS, client: Client, agent_name: str) -> None:
    release = asyncio.Event()
    running, peak = 0, 0

    async def body(inp: Any) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return inp

    js = nc.jetstream()
    async with worker(nc, agent_name, body, concurrency=2):
        runs = [await client.start(agent_name, i) for i in range(5)]

        async def two_held() -> bool:
            info = await js.consumer_info("INTERLOCK_WORK", "worker_" + agent_name)
            return running == 2 and info.num_ack_pending == 2 and info.num_pending == 3

        await eventually(two_held, "two passes running, three left in the stream")
        release.set()
        results = [(await client.wait(r)).result for r in runs]
    assert results == list(range(5)) and peak == 2


async def test_heartbeats_keep_a_long_pass_from_redelivery(nc: NATS, client: Client, agent_name: str) -> None:
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        await asyncio.sleep(3)  # the body's own work, three times the ack wait
        return "done"

    async with worker(nc, agent_name, body, ack_wait=1.0, concurrency=2):
        rec = await client.wait(await client.start(agent_name))
    assert rec.result == "done" and calls == 1


async def test_pass_timeout_cancels_the_body_and_fails_the_run_at_the_last_attempt(
    nc: NATS, client: Client, agent_name: str
) -> None:
    cancelled = 0

    async def body(inp: Any) -> Any:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise

    async with worker(nc, agent_name, body, pass_timeout=0.3, max_deliver=2, backoff=(0.1,)):
        rec = await client.wait(await client.start(agent_name), timeout=30)
    # As with the Go worker: retried, then the run fails saying why.
    assert rec.status == "failed"
    assert "pass timed out after 0.3s (attempt 2 of 2)" in (rec.error or "")
    assert cancelled == 2


async def test_retry_runs_the_pass_again(nc: NATS, client: Client, agent_name: str) -> None:
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise interlock.Retry("the model service is busy")
        return calls

    async with worker(nc, agent_name, body, backoff=(0.05,)):
        rec = await client.wait(await client.start(agent_name))
    assert rec.result == 2


async def test_body_error_fails_the_run(nc: NATS, client: Client, agent_name: str) -> None:
    async def body(inp: Any) -> Any:
        raise ValueError("no such order")

    async with worker(nc, agent_name, body):
        rec = await client.wait(await client.start(agent_name))
    assert rec.status == "failed" and rec.error == "no such order"


async def test_stop_lets_the_pass_under_way_finish_and_takes_no_more(nc: NATS, client: Client, agent_name: str) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def body(inp: Any) -> Any:
        started.set()
        await release.wait()
        return "finished"

    w = Worker(nc)
    w.register(agent_name, body)
    await w.start()
    run = await client.start(agent_name)
    await asyncio.wait_for(started.wait(), 30)
    stopping = asyncio.create_task(w.stop())
    await asyncio.sleep(0)
    assert not stopping.done()
    later = await client.start(agent_name)
    release.set()
    await asyncio.wait_for(stopping, 30)
    assert (await client.wait(run)).result == "finished"
    info = await nc.jetstream().consumer_info("INTERLOCK_WORK", "worker_" + agent_name)
    assert info.num_pending + info.num_ack_pending == 1, "the later run waits for another worker"
    async with worker(nc, agent_name, body):
        assert (await client.wait(later)).result == "finished"


async def test_a_pass_that_already_reported_is_not_run_again(nc: NATS, client: Client, agent_name: str) -> None:
    """The outcome is stored but the ack was lost (a crash in between): the
    redelivered work item is acked without running the body."""
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        return "ran"

    js = nc.jetstream()
    run = await client.start(agent_name, {"n": 1})
    # The pass's key comes from its work item's message id, as the worker
    # that reported it computed it.
    item = await js.get_last_msg("INTERLOCK_WORK", f"interlock.start.{agent_name}")
    key = interlock.pass_key((item.headers or {})["Nats-Msg-Id"], item.data or b"")
    done = {"version": 1, "runId": run, "agent": agent_name, "pass": 0, "result": "reported before"}
    await js.publish(
        f"interlock.completed.{agent_name}.{run}",
        json.dumps(done).encode(),
        headers={"Nats-Msg-Id": interlock.outcome_msg_id(run, 0, key)},
    )
    async with worker(nc, agent_name, body):
        rec = await client.wait(run)

        async def acked() -> bool:
            info = await js.consumer_info("INTERLOCK_WORK", "worker_" + agent_name)
            return bool(info.num_pending == 0 and info.num_ack_pending == 0)

        await eventually(acked, "the work item acked")
    assert rec.result == "reported before" and calls == 0


async def test_a_forged_outcome_does_not_count_as_reported(nc: NATS, client: Client, agent_name: str) -> None:
    """An outcome of the pass with a message id the pass would not write
    (anyone may publish one; found item 6) is not taken for the pass's own:
    the body runs and the run completes with its result."""
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        return "ran"

    js = nc.jetstream()
    run = await client.start(agent_name, {"n": 1})
    forged = {"version": 1, "runId": run, "agent": agent_name, "pass": 0, "result": "forged"}
    await js.publish(
        f"interlock.completed.{agent_name}.{run}",
        json.dumps(forged).encode(),
        headers={"Nats-Msg-Id": f"{run}:0"},
    )
    async with worker(nc, agent_name, body):

        async def ran() -> bool:
            return calls > 0

        await eventually(ran, "the body ran")
    assert calls == 1
