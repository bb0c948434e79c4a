"""Pull requests of a worker's bounded consumer: one long-lived request at a
time, covering all the room the worker has, within the consumer's limits.

On a cluster nats-server proposes every pull request to the consumer's Raft
group when it arrives and again when it ends, so each request costs about
six fsyncs on three nodes (issue 25, docs/benchmarks.md). A request per
fetch that expires after a second cost two Raft entries per message and two
per idle second; one request that waits ``EXPIRES`` seconds and is asked
again only when it is filled or ends costs two per batch. The server's idle
heartbeats (every ``HEARTBEAT`` seconds) tell a request lost in a failover
from one that waits: after two missed ones it is given up and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

EXPIRES = 10.0
"""How long one pull request waits at the server for messages, in seconds."""

CONFIG_READ = 30.0
"""How often, in seconds, a worker reads its consumer's configuration again
(its ack wait and request limits), as the Go worker does."""

HEARTBEAT = 1.0
"""How often the server says it still holds an idle request, in seconds."""

RETRY_FIRST = 0.1
"""The wait after a failed pull request, in seconds; it doubles with each
failure in a row, up to ``RETRY_MOST``: a failover (a consumer without a
leader for a second or two) delays work by at most about that, and a
refusal for good costs one request every ``RETRY_MOST`` seconds."""

RETRY_MOST = 2.0

WARN_AFTER = 4
"""The failure in a row that is worth a warning (and every ``WARN_EVERY``-th
after it); the ones before are logged at debug level."""

WARN_EVERY = 30

_NANOS = 1_000_000_000
_STATUS_HEARTBEAT = "100"  # the status of an idle heartbeat
_STATUS_EXPIRED = "408"  # the status of a request that expired


class RequestEnded(Exception):
    """The server ended a pull request before it was filled or expired
    (status 409: a leadership change, the consumer deleted, too many
    requests waiting; or another status), given as ``status``."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"pull request ended: {status} {description}".strip())
        self.status = status


class Backoff:
    """The waits between pull requests that fail in a row (see
    ``RETRY_FIRST``): a server that refuses every request (a consumer that
    cannot take the worker's requests, such as one of priority groups)
    would otherwise be asked again at once, for good."""

    def __init__(self) -> None:
        self.wait = 0.0
        self.streak = 0

    def failed(self) -> tuple[float, bool]:
        """One more failure: the wait before the next request, in seconds,
        and whether the failure is worth a warning."""
        self.streak += 1
        self.wait = min(max(2 * self.wait, RETRY_FIRST), RETRY_MOST)
        over = self.streak - WARN_AFTER
        return self.wait, over >= 0 and over % WARN_EVERY == 0

    def reset(self) -> None:
        """A request was filled or expired: the next one goes at once."""
        self.wait, self.streak = 0.0, 0


class Puller:
    """Sends the pull requests of one durable consumer, one at a time, each
    from an inbox of its own: messages of a request given up on go nowhere
    (the server redelivers them after the ack wait), so the worker never
    holds more than it asked for.

    A request stays within what the consumer allows (``max_batch``,
    ``max_expires``, set by an operator; asked for more, the server refuses
    every request with status 409), read by :meth:`read_limits` when the
    worker binds, again after a refused request, and every
    :data:`CONFIG_READ` seconds whatever the worker is doing; the
    consumer's ack wait with them, which the worker's heartbeats follow."""

    def __init__(self, nc: NATS, stream: str, durable: str, api_prefix: str = "$JS.API") -> None:
        self._nc = nc
        self._subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._info = f"{api_prefix}.CONSUMER.INFO.{stream}.{durable}"
        self.max_batch = 0
        """The most messages one request may ask for; 0: no limit."""
        self.expires = EXPIRES
        """How long one request waits at the server, in seconds."""
        self.ack_wait: float | None = None
        """The consumer's ack wait in seconds, as last read (None: not read)."""
        self.ack_wait_changed = asyncio.Event()
        """Set (and replaced by a new one) when a read finds another ack wait:
        a heartbeat waiting out the old one beats at once."""

    async def read_limits(self, timeout: float = 5.0) -> bool:
        """Read the consumer's request limits; True when they changed.
        Raises ``nats.js.errors.NotFoundError`` when the consumer does not
        exist (nats-py's ConsumerConfig has no ``max_batch``, so the API
        request is made by hand)."""
        reply = await self._nc.request(self._info, b"", timeout=timeout)
        info = json.loads(reply.data)
        if "error" in info:
            err = info["error"]
            if err.get("code") == 404:
                raise nats.js.errors.NotFoundError(**err)
            raise nats.js.errors.APIError(**err)
        config = info.get("config", {})
        ack_wait = int(config.get("ack_wait", 0)) / _NANOS or None
        if ack_wait != self.ack_wait:
            was, self.ack_wait = self.ack_wait, ack_wait
            if was is not None:
                changed_event, self.ack_wait_changed = self.ack_wait_changed, asyncio.Event()
                changed_event.set()
        max_batch = max(int(config.get("max_batch", 0)), 0)
        max_expires = int(config.get("max_expires", 0)) / _NANOS
        expires = min(EXPIRES, max_expires) if max_expires > 0 else EXPIRES
        changed = (max_batch, expires) != (self.max_batch, self.expires)
        self.max_batch, self.expires = max_batch, expires
        return changed

    def room(self, free: int) -> int:
        """How many of ``free`` places one request may ask for."""
        return min(free, self.max_batch) if self.max_batch else free

    async def messages(self, batch: int, stopping: asyncio.Event) -> AsyncGenerator[Msg, None]:
        """Ask for ``batch`` messages in one request and yield each as it
        arrives. It ends when the request is filled or expires, when two
        heartbeats are missed (the request is lost), or when ``stopping`` is
        set (then it yields what had already arrived, for the caller to hand
        back); it raises :class:`RequestEnded` when the server ends the
        request otherwise."""
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        stop = asyncio.ensure_future(stopping.wait())
        # The server refuses a heartbeat over half the wait.
        heartbeat = min(HEARTBEAT, self.expires / 4)
        try:
            request = {"batch": batch, "expires": int(self.expires * _NANOS), "idle_heartbeat": int(heartbeat * _NANOS)}
            await self._nc.publish(self._subject, json.dumps(request).encode(), reply=inbox)
            got = 0
            while got < batch:
                nxt = asyncio.ensure_future(sub.next_msg(timeout=2 * heartbeat))
                await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()
                    await asyncio.gather(nxt, return_exceptions=True)
                    async for m in _queued(sub, inbox):
                        yield m
                    return
                try:
                    m = nxt.result()
                except nats.errors.TimeoutError:
                    return  # two heartbeats missed: the request is lost
                # Only a message on the inbox is the server's status: a
                # stored one comes on its own subject, whatever headers its
                # publisher (or an answer's carrier) stored.
                status = (m.headers or {}).get("Status") if m.subject == inbox else None
                if status == _STATUS_HEARTBEAT:
                    continue
                if status == _STATUS_EXPIRED:
                    return
                if status:
                    raise RequestEnded(status, (m.headers or {}).get("Description", ""))
                got += 1
                yield m
        finally:
            stop.cancel()
            with contextlib.suppress(nats.errors.Error):  # closed: nothing to unsubscribe from
                await sub.unsubscribe()


async def _queued(sub: Subscription, inbox: str) -> AsyncGenerator[Msg, None]:
    """The data messages already delivered to ``sub``, without waiting."""
    while sub.pending_msgs > 0:
        m = await sub.next_msg(timeout=None)
        if m.subject != inbox or not (m.headers or {}).get("Status"):
            yield m
