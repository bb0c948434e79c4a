"""Batched direct gets: many stored messages of a stream for one request.

A request on ``$JS.API.DIRECT.GET.<stream>`` (nats-server 2.11+, the stream
allowing direct gets) with ``batch`` set is answered by the stream with the
matching messages, each carrying its ``Nats-Sequence`` and ``Nats-Subject``,
then an end-of-batch status (``204``) whose ``Nats-Num-Pending`` says how many
match after the last one sent; ``404`` when nothing matches at all. The server
ends a batch early once it has sent ``max_bytes``: the reader asks again from
the next sequence. docs/protocol.md describes the exchange.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS

from ._errors import InterlockError

#: What one batch may carry at most: it keeps a reader's memory bounded and
#: stays far below the server's slow-consumer limit.
BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class Stored:
    """A stored message as a direct get returns it."""

    subject: str
    seq: int
    headers: dict[str, str]
    data: bytes


async def batch(
    nc: NATS, stream: str, subject_filter: str, start: int, limit: int, timeout: float
) -> tuple[list[Stored], bool]:
    """Up to ``limit`` messages of ``stream`` on subjects matching
    ``subject_filter``, oldest first, from sequence ``start`` on (0: the
    first), with one request; and whether matching messages remain after
    the last one returned."""
    if limit < 1:
        raise ValueError(f"read {stream}: a batch of {limit} messages")
    req: dict[str, object] = {"next_by_subj": subject_filter, "batch": limit, "max_bytes": BATCH_BYTES}
    if start > 0:
        req["seq"] = start
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, pending_msgs_limit=limit + 1)
    deadline = time.monotonic() + timeout
    out: list[Stored] = []
    try:
        await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(req).encode(), reply=inbox)
        while True:
            try:
                m = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.001))
            except nats.errors.TimeoutError:
                # NATS answers a refused publish with no reply, only an error
                # on the connection: say what the likely causes are.
                raise InterlockError(
                    f"read {stream}: no answer to $JS.API.DIRECT.GET.{stream} in {timeout}s: the request may be "
                    f"refused by NATS permissions (the user needs $JS.API.DIRECT.GET.{stream}, the bare subject), "
                    "or the server is overloaded"
                ) from None
            h = m.headers or {}
            # A stored message carries its sequence; only a reply without
            # one is the server's status (a publisher may have stored a
            # Status header of its own, which is data).
            seq = h.get("Nats-Sequence")
            if seq is None:
                status = h.get("Status")
                if status == "204":
                    return out, h.get("Nats-Num-Pending") != "0"
                if status == "404":
                    return [], False
                if status == "503":
                    raise InterlockError(f"read {stream}: no such stream, or it allows no direct gets (status 503)")
                raise InterlockError(f"read {stream}: status {status} {h.get('Description', '')}".rstrip())
            out.append(Stored(subject=h.get("Nats-Subject", ""), seq=int(seq), headers=h, data=m.data))
    finally:
        with contextlib.suppress(nats.errors.ConnectionClosedError):
            await sub.unsubscribe()


async def messages(
    nc: NATS, stream: str, subject_filter: str, start: int, limit: int | None, timeout: float
) -> list[Stored]:
    """The messages :func:`batch` reads, going on past batches the server
    ends early, up to ``limit`` (None: all that match)."""
    out: list[Stored] = []
    per_batch = 1024
    while limit is None or len(out) < limit:
        want = per_batch if limit is None else min(per_batch, limit - len(out))
        got, more = await batch(nc, stream, subject_filter, start, want, timeout)
        out.extend(got)
        if not more or not got:
            break
        start = got[-1].seq + 1
    return out


async def last(nc: NATS, stream: str, subject: str, timeout: float) -> Stored | None:
    """The last message of ``stream`` on ``subject`` (wildcards allowed), or
    None, with one direct get whose API subject names the subject:
    ``$JS.API.DIRECT.GET.<stream>.<subject>``. NATS permissions can so
    confine a user's reads to subjects of its own (an agent's to
    ``<prefix>.*.<agent>.*``); it needs no ``STREAM.INFO``."""
    api = f"$JS.API.DIRECT.GET.{stream}.{subject}"
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, max_msgs=1)
    try:
        await nc.publish(api, b"", reply=inbox)
        try:
            m = await sub.next_msg(timeout=timeout)
        except nats.errors.TimeoutError:
            raise InterlockError(
                f"read {stream}: no answer to {api} in {timeout}s: the request may be refused by NATS "
                "permissions, or the server is overloaded"
            ) from None
    finally:
        with contextlib.suppress(nats.errors.ConnectionClosedError, nats.errors.BadSubscriptionError):
            await sub.unsubscribe()
    h = m.headers or {}
    seq = h.get("Nats-Sequence")
    if seq is None:
        status = h.get("Status")
        if status == "404":
            return None
        if status == "503":
            raise InterlockError(
                f"read {stream} on {subject}: no such stream, or it allows no direct gets "
                "(run `interlock provision` with admin credentials)"
            )
        raise InterlockError(f"read {stream} on {subject}: status {status} {h.get('Description', '')}".rstrip())
    return Stored(subject=h.get("Nats-Subject", ""), seq=int(seq), headers=h, data=m.data)


async def stored_headers(nc: NATS, stream: str, seq: int, timeout: float) -> dict[str, str] | None:
    """The headers the message of ``stream`` at ``seq`` was stored with, or
    None when the stream no longer holds it (aged out); see
    :func:`stored`."""
    m = await stored(nc, stream, {"seq": seq}, timeout)
    return None if m is None else m.headers


async def stored(nc: NATS, stream: str, request: dict[str, Any], timeout: float) -> Stored | None:
    """The message of ``stream`` that ``request`` names (``{"seq": n}``, or
    ``{"last_by_subj": subject}``) with the headers it was stored with
    alone, asked of ``$JS.API.STREAM.MSG.GET.<stream>``; None when the
    stream holds none. A direct get appends the server's headers
    (``Nats-Stream``, ``Nats-Subject``, ...) after the stored ones and
    nats-py keeps one value per name, so a message the server stored from
    an answer it sent (which carries those headers as stored) looks like
    any other there."""
    api = f"$JS.API.STREAM.MSG.GET.{stream}"
    what = " ".join(f"{k} {v}" for k, v in request.items())
    try:
        m = await nc.request(api, json.dumps(request).encode(), timeout=timeout)
    except nats.errors.TimeoutError:
        raise InterlockError(
            f"read {stream} at {what}: no answer to {api} in {timeout}s: the request may be refused by NATS "
            f"permissions (the user needs {api}), or the server is overloaded"
        ) from None
    try:
        answer = json.loads(m.data)
    except ValueError:
        raise InterlockError(f"read {stream} at {what}: {api} answered {m.data[:200]!r}") from None
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict) and answer["error"].get("code") == 404:
        return None
    if not isinstance(answer, dict) or "error" in answer or not isinstance(answer.get("message"), dict):
        err = answer.get("error") if isinstance(answer, dict) else answer
        raise InterlockError(f"read {stream} at {what}: {api} answered {err}")
    msg = answer["message"]
    raw = base64.b64decode(msg.get("hdrs") or "")
    headers: dict[str, str] = {}
    for line in raw.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().decode("ascii", "replace")] = value.strip().decode("utf-8", "replace")
    return Stored(
        subject=str(msg.get("subject", "")),
        seq=int(msg.get("seq", 0)),
        headers=headers,
        data=base64.b64decode(msg.get("data") or ""),
    )
