"""The worker's lifetimes against a real server: bounded concurrency,
heartbeats, the pass timeout, retries and a graceful stop."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

import pytest
from conftest import subscribed
from nats.aio.client import Client as NATS
from test_replay import worker

import interlock
import interlock._worker
from interlock import Client, Worker
from interlock._pull import Backoff


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


async def test_heartbeats_follow_the_consumers_ack_wait(nc: NATS, client: Client, agent_name: str) -> None:
    """A worker left at its default ``ack_wait`` (30 s) bound to a consumer
    an operator gave 2 s beats every half of the consumer's: it beat every
    15 s, and the server handed the running pass to another handler."""
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        await asyncio.sleep(5)  # the body's own work, over twice the consumer's ack wait
        return "done"

    await _create_consumer(nc, agent_name, ack_wait=2_000_000_000)
    async with worker(nc, agent_name, body, concurrency=2):
        rec = await client.wait(await client.start(agent_name), timeout=30)
    assert rec.result == "done" and calls == 1


async def test_heartbeats_follow_an_ack_wait_lowered_while_a_pass_runs(
    nc: NATS, client: Client, agent_name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker reads its consumer again while a pass runs: an ack wait
    lowered from 30 s to 3 s is followed at once by the item it holds, whose
    next heartbeat was 15 s away (the server would have handed it on)."""
    monkeypatch.setattr(interlock._worker, "CONFIG_READ", 0.2)
    calls = 0
    started, lowered = asyncio.Event(), asyncio.Event()

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        started.set()
        await lowered.wait()
        await asyncio.sleep(7)  # the body's own work, over twice the new ack wait
        return "done"

    await _create_consumer(nc, agent_name, ack_wait=30_000_000_000)
    with caplog.at_level(logging.WARNING, logger="interlock"):
        # Room for another item: a pull request open to take it if the
        # server hands the running one out again.
        async with worker(nc, agent_name, body, concurrency=2):
            run = await client.start(agent_name)
            await asyncio.wait_for(started.wait(), 30)
            api = "$JS.API.CONSUMER.{}.INTERLOCK_WORK.worker_" + agent_name
            info = json.loads((await nc.request(api.format("INFO"), b"", timeout=5)).data)
            update = {
                "stream_name": "INTERLOCK_WORK",
                "config": {**info["config"], "ack_wait": 3_000_000_000},
                "action": "update",
            }
            reply = await nc.request(api.format("CREATE"), json.dumps(update).encode(), timeout=5)
            assert "error" not in json.loads(reply.data), reply.data

            async def read() -> bool:
                return any("now waits 3.0s" in r.getMessage() for r in caplog.records)

            await eventually(read, "the worker reads the lowered ack wait", timeout=3)
            lowered.set()
            rec = await client.wait(run, timeout=30)
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


async def _nan_result(inp: Any) -> Any:
    return {"score": float("nan")}


async def _nan_step(inp: Any) -> Any:
    return await interlock.step("score", lambda: float("inf"))


async def _nan_metadata(inp: Any) -> Any:
    interlock.interrupt(interlock.Request(message="ok?", metadata={"score": float("nan")}))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_nan_result, "result cannot be marshalled"),
        (_nan_step, "cannot be journaled"),
        (_nan_metadata, "interrupt"),
    ],
    ids=["result", "step", "interrupt-metadata"],
)
async def test_a_value_json_cannot_carry_fails_the_run(
    nc: NATS, client: Client, agent_name: str, body: Any, error: str
) -> None:
    """NaN and the infinities are not JSON: Python's encoder writes them
    anyway, the coordinator refuses the outcome, and the run waited forever
    with its work item acknowledged. The run fails with the reason instead,
    as in Go and TypeScript."""
    async with worker(nc, agent_name, body):
        rec = await client.wait(await client.start(agent_name), timeout=30)
    assert rec.status == "failed", rec.status
    assert error in rec.error, rec.error


async def test_a_start_with_a_value_json_cannot_carry_is_refused(client: Client, agent_name: str) -> None:
    with pytest.raises(ValueError, match="JSON"):
        await client.start(agent_name, {"score": float("nan")})


async def test_a_body_raising_cancelled_error_fails_the_run_once(nc: NATS, client: Client, agent_name: str) -> None:
    """A CancelledError the body raises itself (awaiting a task it
    cancelled) is the body's error, not the worker's stop: the run fails
    with it, and the body runs once, as an error in Go and TypeScript
    does. It used to put the item back at once, run the body again up to
    max_deliver times, and then leave it neither redelivered nor
    dead-lettered."""
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        t = asyncio.create_task(asyncio.sleep(10))
        t.cancel()
        await t

    async with worker(nc, agent_name, body):
        rec = await client.wait(await client.start(agent_name), timeout=30)
    assert rec.status == "failed", rec.status
    assert "CancelledError" in rec.error, rec.error
    assert calls == 1


async def test_a_pass_stopped_on_its_last_delivery_is_dead_lettered(nc: NATS, agent_name: str) -> None:
    """A worker that stops while a pass runs on its item's last delivery
    dead-letters the item, as Go's does: handed back, the server would
    never deliver it again, and nothing would dead-letter it."""
    started = asyncio.Event()

    async def body(inp: Any) -> Any:
        started.set()
        await asyncio.sleep(60)

    dlq = await nc.subscribe(f"interlock.dlq.worker_{agent_name}", max_msgs=1)
    await subscribed(nc)
    client = interlock.Client(nc)
    w = Worker(nc, max_deliver=1)
    w.register(agent_name, body)
    await w.start()
    try:
        await client.start(agent_name)
        await asyncio.wait_for(started.wait(), 30)
    finally:
        await w.stop(timeout=0.1)
    m = await dlq.next_msg(timeout=30)
    assert m.headers is not None
    assert m.headers["Interlock-Dlq-Reason"].startswith("gave up after 1 deliveries"), m.headers


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


@pytest.mark.parametrize(
    "tail",
    ["", ".ada", ".ada@corp", "." + "a" * 129],
    ids=["bare", "requester", "invalid-requester", "oversized-requester"],
)
async def test_a_replay_on_a_start_subject_is_dead_lettered_never_run(nc: NATS, agent_name: str, tail: str) -> None:
    """Only the coordinator publishes replays, on the work subject. A work
    item carrying decisions on any start subject of the agent, a requester
    token the protocol refuses included (whoever may start a run may
    publish there), is dead-lettered and its body never runs."""
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        return "ran"

    run = "forged-" + agent_name
    work = {
        "version": 1,
        "runId": run,
        "agent": agent_name,
        "pass": 1,
        "decisions": [
            {
                "version": 1,
                "decisionId": "d",
                "interruptId": interlock.interrupt_id(run, "", 0),
                "status": "resolved",
                "payload": True,
            }
        ],
    }
    dlq = await nc.subscribe(f"interlock.dlq.worker_{agent_name}", max_msgs=1)
    await subscribed(nc)
    async with worker(nc, agent_name, body):
        await nc.jetstream().publish(
            f"interlock.start.{agent_name}{tail}",
            json.dumps(work).encode(),
            headers={"Nats-Msg-Id": f"{run}:0:start:{uuid.uuid4().hex}"},
        )
        m = await dlq.next_msg(timeout=30)
    assert m.headers is not None
    assert m.headers["Interlock-Dlq-Consumer"] == f"worker_{agent_name}"
    assert "first pass" in m.headers["Interlock-Dlq-Reason"] or "requester" in m.headers["Interlock-Dlq-Reason"]
    assert calls == 0


async def test_an_oversized_suspension_fails_the_run_instead(nc: NATS, client: Client, agent_name: str) -> None:
    # Under the 1 MiB message limit, but with the largest decision allowed
    # the run record would not fit the server's max payload (1 MiB).
    async def body(inp: Any) -> Any:
        interlock.interrupt(interlock.Request(message="pay?", metadata={"blob": "x" * 980_000}))

    async with worker(nc, agent_name, body):
        rec = await client.wait(await client.start(agent_name))
    assert rec.status == "failed", rec.status
    assert rec.error.startswith("suspension too large") and "max payload" in rec.error


async def _count_pulls(nc: NATS, agent: str) -> tuple[list[bytes], Any]:
    """A monitor of the pull requests sent for ``worker_<agent>`` (each one
    is two Raft entries of the consumer on a cluster: its arrival and its end)."""
    seen: list[bytes] = []

    async def on_pull(m: Any) -> None:
        seen.append(m.data)

    sub = await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_WORK.worker_{agent}", cb=on_pull)
    await subscribed(nc)
    return seen, sub


async def test_pull_requests_one_per_batch_not_per_message(nc: NATS, client: Client, agent_name: str) -> None:
    """Issue 25: twenty work items handled one after another, with room for
    five, take one pull request per five (and the one still open), where a
    request per fetch took one per item and one per idle second; and each
    item is handled as it arrives, not when its request fills or ends."""

    async def body(inp: Any) -> Any:
        return inp

    seen, sub = await _count_pulls(nc, agent_name)
    n, room = 20, 5
    loop = asyncio.get_running_loop()
    async with worker(nc, agent_name, body, concurrency=room):
        began = loop.time()
        for i in range(n):
            assert (await client.wait(await client.start(agent_name, i))).result == i
        took = loop.time() - began
    await sub.unsubscribe()
    assert len(seen) <= n // room + 2, f"{len(seen)} pull requests for {n} items handled one at a time: {seen}"
    # Under one open request's wait (10 s) for all twenty: none waited for
    # its request to fill or expire.
    assert took < 10, f"{n} items one at a time took {took:.1f}s"


async def test_an_idle_worker_keeps_one_pull_request_open(nc: NATS, agent_name: str) -> None:
    """Issue 25: an idle worker keeps one long-lived pull request open (its
    heartbeats tell it the request still stands), not one a second."""

    async def body(inp: Any) -> Any:
        return inp

    seen, sub = await _count_pulls(nc, agent_name)
    async with worker(nc, agent_name, body, concurrency=3):

        async def asked() -> bool:
            return len(seen) > 0

        await eventually(asked, "the worker's first pull request")
        first = json.loads(seen[0])
        # The window measured: four idle seconds, well within one request's wait.
        await asyncio.sleep(4)
    await sub.unsubscribe()
    assert len(seen) == 1, f"{len(seen)} pull requests in four idle seconds: {seen}"
    assert first["batch"] == 3 and first.get("idle_heartbeat"), first


async def test_a_pull_request_nobody_holds_is_replaced(nc: NATS, client: Client, agent_name: str) -> None:
    """Issue 25: a request lost in a failover gets no heartbeats; after two
    missed ones (2 s) the worker asks again instead of waiting out the
    request's 10 s. Here the request is lost with its consumer: deleted, it
    answers nothing, so the worker asks again every two seconds, and once
    the consumer is back its next request takes the work."""

    async def body(inp: Any) -> Any:
        return inp

    js = nc.jetstream()
    durable = "worker_" + agent_name
    seen, sub = await _count_pulls(nc, agent_name)
    async with worker(nc, agent_name, body, concurrency=2):

        def asked(n: int) -> Any:
            async def cond() -> bool:
                return len(seen) >= n

            return cond

        await eventually(asked(1), "the worker's first pull request")
        info = await js.consumer_info("INTERLOCK_WORK", durable)
        await js.delete_consumer("INTERLOCK_WORK", durable)
        # Asked again twice: once the first request ended (or went silent),
        # and again when that one, to no consumer, missed its heartbeats:
        # within 8 s, under one request's 10 s wait.
        await eventually(asked(3), "requests sent again while the consumer is gone", timeout=8)
        await js.add_consumer("INTERLOCK_WORK", info.config)
        rec = await client.wait(await client.start(agent_name, "back"))
    await sub.unsubscribe()
    assert rec.result == "back"


def test_pull_backoff() -> None:
    """Failed pull requests in a row wait 0.1 s, 0.2 s, 0.4 s, ... up to 2 s;
    the fourth failure is a warning, and every 30th after it; a request
    filled or expired starts again from nothing."""
    b = Backoff()
    steps = [b.failed() for _ in range(70)]
    assert [w for w, _ in steps[:7]] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert [i + 1 for i, (_, warn) in enumerate(steps) if warn] == [4, 34, 64]
    b.reset()
    assert b.failed() == (0.1, False)


async def _create_consumer(nc: NATS, agent: str, **extra: Any) -> None:
    """Create ``worker_<agent>`` as an operator would, with settings
    nats-py's ConsumerConfig does not have (the API request by hand)."""
    durable = "worker_" + agent
    filters = [f"interlock.work.{agent}", f"interlock.start.{agent}"]
    config = {"durable_name": durable, "filter_subjects": filters, "ack_policy": "explicit", **extra}
    reply = await nc.request(
        f"$JS.API.CONSUMER.CREATE.INTERLOCK_WORK.{durable}",
        json.dumps({"stream_name": "INTERLOCK_WORK", "config": config}).encode(),
        timeout=10,
    )
    assert "error" not in json.loads(reply.data), reply.data


async def test_refused_pull_requests_back_off_and_say_why(
    nc: NATS, agent_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer an operator made one of priority groups refuses every
    pull request that names no group (status 400). The worker asked again
    every 0.1 s and logged it at debug level; it waits longer after each
    refusal (0.1 s doubling to 2 s) and warns, naming the server's reason."""

    async def body(inp: Any) -> Any:
        return inp

    await _create_consumer(nc, agent_name, priority_policy="overflow", priority_groups=["jobs"])
    seen, sub = await _count_pulls(nc, agent_name)
    with caplog.at_level(logging.DEBUG, logger="interlock"):
        async with worker(nc, agent_name, body, concurrency=3):
            # The window measured: three seconds of refusals.
            await asyncio.sleep(3)
    await sub.unsubscribe()
    assert 0 < len(seen) <= 8, f"{len(seen)} pull requests in 3 s while the server refuses every one"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "Priority Group" in r.getMessage()]
    assert warned, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize(
    ("limits", "later"),
    [
        ({"max_batch": 1}, False),
        ({"max_expires": 2_000_000_000}, False),
        ({"max_batch": 2, "max_expires": 1_000_000_000}, True),
    ],
    ids=["batch", "expires", "both-set-while-it-runs"],
)
async def test_pull_requests_stay_within_the_consumers_limits(
    nc: NATS, client: Client, agent_name: str, caplog: pytest.LogCaptureFixture, limits: dict[str, int], later: bool
) -> None:
    """A worker asks within the limits an operator set on its consumer
    (``max_batch``, ``max_expires``). It asked for all its room in a request
    of ten seconds, which the server refuses every time (status 409
    "Exceeded MaxRequestBatch"), so it got no work at all. Limits found when
    it binds are followed from the first request; limits set while it runs,
    from the request after the first one refused."""

    async def body(inp: Any) -> Any:
        return inp

    durable = f"worker_{agent_name}"
    await _create_consumer(nc, agent_name, **({} if later else limits))
    n = 6
    with caplog.at_level(logging.DEBUG, logger="interlock"):
        async with worker(nc, agent_name, body, concurrency=4):
            if later:
                api = "$JS.API.CONSUMER.{}.INTERLOCK_WORK." + durable
                info = json.loads((await nc.request(api.format("INFO"), b"", timeout=5)).data)
                update = {"stream_name": "INTERLOCK_WORK", "config": {**info["config"], **limits}, "action": "update"}
                reply = await nc.request(api.format("CREATE"), json.dumps(update).encode(), timeout=5)
                assert "error" not in json.loads(reply.data), reply.data
            runs = [await client.start(agent_name, i, run_id=f"{agent_name}-{i}") for i in range(n)]
            results = await asyncio.wait_for(asyncio.gather(*(client.wait(r, timeout=30) for r in runs)), 40)
    assert [r.result for r in results] == list(range(n))
    if not later:
        refused = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert not refused, "no request beyond the consumer's limits"


async def test_a_late_notice_does_not_hide_a_reported_pass(nc: NATS, agent_name: str) -> None:
    """The coordinator publishes an expiry's notice (about the pass that
    waited) after it queued the replay, so the replay's completion can be
    stored first. A redelivered replay then found the notice last, a pass
    before its own, and ran again; it is done: its outcome is there."""
    js = nc.jetstream()
    run, key = "late-notice-1", "the-pass-key"
    work = {"agent": agent_name, "runId": run, "pass": 1}
    w = Worker(nc)
    assert not await w._pass_done(work, key)
    done = {"version": 1, "runId": run, "agent": agent_name, "pass": 1, "result": 1}
    await js.publish(
        f"interlock.completed.{agent_name}.{run}",
        json.dumps(done).encode(),
        headers={"Nats-Msg-Id": interlock.outcome_msg_id(run, 1, key)},
    )
    assert await w._pass_done(work, key)
    notice = {"version": 1, "runId": run, "agent": agent_name, "pass": 0, "kind": "expired"}
    await js.publish(f"interlock.expired.{agent_name}.{run}", json.dumps(notice).encode())
    assert await w._pass_done(work, key), "a late notice about the pass that waited hides nothing"
    assert not await w._pass_done({**work, "pass": 2}, key), "a later pass is not done behind it"


@pytest.mark.parametrize(
    "headers",
    [None, {"Nats-Msg-Id": "x", "Nats-Stream": "INTERLOCK_RUNS", "Nats-Sequence": "7"}],
    ids=["no-message-id", "server-headers"],
)
async def test_an_api_answer_on_a_work_subject_is_dead_lettered_never_run(
    nc: NATS, agent_name: str, headers: dict[str, str] | None
) -> None:
    """nats-server sends a JetStream API answer to whatever reply subject
    the request names: another user could have a direct get's answer (a
    start, or a replay carrying decisions) stored on this agent's subjects.
    It carries the server's headers, or none: the worker dead-letters it
    and its body never runs."""
    calls = 0

    async def body(inp: Any) -> Any:
        nonlocal calls
        calls += 1
        return "ran"

    run = "answered-" + agent_name
    work = {"version": 1, "runId": run, "agent": agent_name, "pass": 0, "input": {}}
    dlq = await nc.subscribe(f"interlock.dlq.worker_{agent_name}", max_msgs=1)
    await subscribed(nc)
    async with worker(nc, agent_name, body):
        await nc.jetstream().publish(f"interlock.start.{agent_name}", json.dumps(work).encode(), headers=headers)
        m = await dlq.next_msg(timeout=30)
    assert m.headers is not None
    assert "not a client's publish" in m.headers["Interlock-Dlq-Reason"]
    assert calls == 0


def test_record_limit_is_the_coordinators() -> None:
    """The worker refuses a suspension at the limit the coordinator applies
    (Go: subjects.RecordLimit, TestRecordLimit): a record's sealed copy
    rides an event of the audit trail."""
    from interlock._wire import record_limit

    assert record_limit(1 << 20) == 774_115
    assert record_limit(16 << 10) == 0
