"""The client's reads cost what they return: a page of the pending index and a
run's events are batched direct gets, however much the server holds."""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from conftest import Server, subscribed
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

import interlock

#: The client connection's inbox prefix: its requests are told from the
#: coordinator's by their reply subjects (the coordinator reads the pending
#: index's marker every two seconds).
CLIENT_INBOX = "_INBOX_CLIENT"


@pytest.fixture
async def own(interlock_bin: Path, tmp_path: Path) -> AsyncIterator[tuple[NATS, NATS]]:
    """A server of this test's own (the test writes the pending index and
    events directly), with two connections: the client's, and one that
    watches the client's requests."""
    srv = Server(interlock_bin, tmp_path)
    conns: list[NATS] = []
    try:
        conns = [await nats.connect(srv.url, inbox_prefix=CLIENT_INBOX), await nats.connect(srv.url)]
        yield conns[0], conns[1]
    finally:
        for c in conns:
            await c.close()
        srv.stop()


class Requests:
    """Counts JetStream API requests by kind, seen on the server."""

    def __init__(self, client: NATS, watcher: NATS) -> None:
        self.by_kind: collections.Counter[str] = collections.Counter()
        self.client = client
        self.watcher = watcher
        self.subs: list[Subscription] = []

    async def settled(self) -> None:
        """Waits until every request the client's connection sent so far is
        counted. A flush of the watcher does not prove it: the server runs
        a direct get inline but sends its answer from another goroutine, so
        the client can have the answer before the server has copied the
        request to the watcher. A sentinel the client publishes after its
        requests is copied to the watcher after them, by the same read loop
        of the server; once it is seen, what remains is each
        subscription's queue, drained by its callback task."""
        seen = asyncio.get_running_loop().create_future()

        async def on_sentinel(_: Msg) -> None:
            if not seen.done():
                seen.set_result(None)

        sentinel = self.client.new_inbox()
        sub = await self.watcher.subscribe(sentinel, cb=on_sentinel)
        try:
            await subscribed(self.watcher)
            await self.client.publish(sentinel, b"")
            await self.client.flush()
            await asyncio.wait_for(seen, 10)
        finally:
            await sub.unsubscribe()
        deadline = asyncio.get_running_loop().time() + 10
        while any(sub.pending_msgs for sub in self.subs):
            assert asyncio.get_running_loop().time() < deadline, "requests never counted"
            await asyncio.sleep(0.001)

    async def clear(self) -> None:
        """Forgets what was counted so far, once all of it was: a request
        whose copy the watcher gets late (put_pending's STREAM.INFO, say)
        is not counted against what comes next."""
        await self.settled()
        self.by_kind.clear()

    async def on(self, m: Msg) -> None:
        if not m.reply.startswith(CLIENT_INBOX + "."):
            return
        # $JS.API.DIRECT.GET.<stream>[.<subject>] -> DIRECT.GET
        self.by_kind[".".join(m.subject.split(".")[2:4])] += 1


async def counting(client: NATS, watcher: NATS) -> Requests:
    """Counts the requests ``client`` sends on the two streams it reads,
    seen by ``watcher`` (the coordinator's own requests, such as its
    reads of the index's marker, are not counted)."""
    r = Requests(client, watcher)
    for stream in ("KV_interlock_pending", "INTERLOCK_EVENTS"):
        r.subs.append(await watcher.subscribe(f"$JS.API.*.*.{stream}", cb=r.on))
        r.subs.append(await watcher.subscribe(f"$JS.API.*.*.{stream}.>", cb=r.on))
        r.subs.append(await watcher.subscribe(f"$JS.API.STREAM.MSG.GET.{stream}", cb=r.on))
    await subscribed(watcher)
    return r


async def put_entry(nc: NATS, key: str, entry: dict[str, Any]) -> None:
    """Puts entry under key in the pending index as the coordinator does:
    with a message id (a listing skips what has none: an answer the server
    stored there for another user)."""
    await nc.jetstream().publish(
        f"$KV.interlock_pending.{key}", json.dumps(entry).encode(), headers={"Nats-Msg-Id": f"pending:{key}:test"}
    )


async def put_pending(nc: NATS, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        run = f"r{i:06d}"
        entry = {"runId": run, "id": "i0", "agent": "a", "suspendedAt": f"2026-12-01T00:00:{i % 60:02d}.{i:06d}Z"}
        await put_entry(nc, f"{run}.{i:024x}", entry)


async def test_pending_pages_cost_what_they_return(own: tuple[NATS, NATS]) -> None:
    nc, watcher = own
    client = interlock.Client(nc, timeout=10)
    kv = await nc.jetstream().key_value("interlock_pending")
    await put_pending(nc, 300)
    for i in range(0, 300, 3):  # every third decided: markers the pages step over
        await kv.delete(f"r{i:06d}.{i:024x}")
    seen = await counting(nc, watcher)
    everything = await client.pending()
    await seen.settled()
    assert len(everything) == 200
    assert all(isinstance(p, interlock.PendingInterrupt) for p in everything)
    assert everything == sorted(everything, key=lambda p: (p.suspended_at, p.run_id + p.id))
    assert {p.run_id for p in everything} == {f"r{i:06d}" for i in range(300) if i % 3}
    # 300 messages in the bucket's stream, 256 entries a page: a couple of
    # batched reads, no consumer, no read per key; and each entry listed
    # checked against its headers as stored (what a page returns).
    assert set(seen.by_kind) == {"DIRECT.GET", "STREAM.MSG"}, seen.by_kind
    assert 1 <= seen.by_kind["DIRECT.GET"] <= 3, seen.by_kind
    assert seen.by_kind["STREAM.MSG"] == 200, seen.by_kind

    # A page of 50 is one read at 200 entries and at 3,200. The first page
    # from the start may take a second: the index's marker (key _.index,
    # a delete marker the coordinator writes when it builds the index) is
    # one message of the stream, skipped like every removed key.
    for more in (0, 3000):
        await put_pending(nc, more, 1000)
        await seen.clear()
        page, cursor = await client.pending_page(0, 50)
        await seen.settled()
        assert len(page) == 50 and cursor > 0
        assert seen.by_kind in ({"DIRECT.GET": 1, "STREAM.MSG": 50}, {"DIRECT.GET": 2, "STREAM.MSG": 50}), seen.by_kind
        # The next page starts after it and repeats nothing.
        await seen.clear()
        following, _ = await client.pending_page(cursor, 50)
        await seen.settled()
        assert len(following) == 50
        assert not {p.run_id for p in page} & {p.run_id for p in following}
        assert 1 <= seen.by_kind["DIRECT.GET"] <= 2, seen.by_kind
        assert seen.by_kind["STREAM.MSG"] == 50, seen.by_kind


async def test_events_in_batched_reads_each_entry_checked(own: tuple[NATS, NATS]) -> None:
    nc, watcher = own
    client = interlock.Client(nc, timeout=10)
    js = nc.jetstream()
    for i in range(1500):
        ev = {"v": 1, "type": "suspended", "runId": "many", "pass": i, "at": "2026-12-01T00:00:00Z"}
        await js.publish(
            "interlock.events.many.suspended", json.dumps(ev).encode(), headers={"Nats-Msg-Id": f"many:{i}"}
        )
        if i % 10 == 0:  # another run's events in between
            await js.publish(
                "interlock.events.other.suspended",
                b'{"v":1,"type":"suspended","runId":"other"}',
                headers={"Nats-Msg-Id": f"other:{i}"},
            )
    seen = await counting(nc, watcher)
    events = await client.events("many")
    await seen.settled()
    assert all(isinstance(e, interlock.Event) for e in events)
    assert [e.pass_ for e in events] == list(range(1500))
    assert {(e.type, e.run_id) for e in events} == {("suspended", "many")}
    # 1,024 events a read, and each entry's stored headers checked.
    assert seen.by_kind == {"DIRECT.GET": 2, "STREAM.MSG": 1500}, seen.by_kind
    assert await client.events("nobody") == []


async def test_pending_order_and_bad_pages(own: tuple[NATS, NATS]) -> None:
    nc, _ = own
    client = interlock.Client(nc, timeout=10)
    # Go trims a fraction's trailing zeros: 05.5Z is later than 05Z though
    # it sorts first as a string; an offset is the same instant in UTC.
    times = {"late": "2026-12-01T00:00:05.5Z", "early": "2026-12-01T00:00:05Z", "zone": "2026-12-01T01:00:04+01:00"}
    for run, at in times.items():
        await put_entry(nc, f"{run}.0", {"runId": run, "id": "i", "suspendedAt": at})
    assert [p.run_id for p in await client.pending()] == ["zone", "early", "late"]
    with pytest.raises(ValueError):
        await client.pending_page(0, 0)
    with pytest.raises(ValueError):
        await client.pending_page(-1, 10)


async def test_reads_of_a_missing_stream_fail_clearly(own: tuple[NATS, NATS]) -> None:
    nc, _ = own
    client = interlock.Client(nc, prefix="nothing.here", timeout=5)
    with pytest.raises(interlock.InterlockError, match="no such stream"):
        await client.events("r1")
    with pytest.raises(interlock.InterlockError, match="no such stream"):
        await client.pending()
