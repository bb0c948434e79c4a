"""Test fixtures: a real `interlock serve` built from this repository."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

import interlock

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def subscribed(nc: NATS) -> None:
    """Returns once the server has every subscription ``nc`` made so far, so
    that messages another connection publishes next reach them. One
    ``flush()`` does not prove it: nats-py (2.9 to 2.16) writes flush's PING
    straight to the socket, ahead of a SUB still queued for its flusher
    task, so the PONG can come back before the server has the
    subscription (about 3 in 1,000 under load, and then the message is
    simply not delivered). The flusher runs before that first PONG is
    read, so a second flush's PING follows the SUB on the wire."""
    await nc.flush()
    await nc.flush()


@pytest.fixture(scope="session")
def interlock_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interlock binary: $INTERLOCK_BIN, or `go build` of ./cmd/interlock once."""
    given = os.environ.get("INTERLOCK_BIN")
    if given:
        return Path(given)
    if shutil.which("go") is None:
        pytest.fail("go is needed to build interlock (or set INTERLOCK_BIN)")
    out = tmp_path_factory.mktemp("bin") / "interlock"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/interlock"], cwd=REPO, check=True)
    return out


class Server:
    """A running `interlock serve` with an embedded NATS server."""

    def __init__(self, binary: Path, data_dir: Path, *extra: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log: list[str] = []
        ready = threading.Event()
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--nats-listen", f"127.0.0.1:{self.port}", "--data-dir", str(data_dir), *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if "coordinator running" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("interlock serve did not start:\n" + "".join(self.log))

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the interlock CLI against this server."""
        return subprocess.run(
            [str(self.binary), "--nats-url", self.url, *args], capture_output=True, text=True, check=check, timeout=60
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def server(interlock_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(interlock_bin, tmp_path_factory.mktemp("data"))
    yield srv
    srv.stop()


@pytest.fixture
async def nc(server: Server) -> AsyncIterator[NATS]:
    conn = await nats.connect(server.url)
    yield conn
    await conn.close()


@pytest.fixture
async def client(nc: NATS) -> AsyncIterator[interlock.Client]:
    c = interlock.Client(nc, timeout=30, wait_timeout=60)
    yield c
    await c.close()


@pytest.fixture
def agent_name() -> str:
    """A fresh agent name per test: each test has its own consumer and work."""
    return "py_" + uuid.uuid4().hex[:12]


PYTHON = sys.executable
