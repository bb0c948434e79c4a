"""The Python drivers of the peer comparison (bench/peers): one cycle per
system, start -> durable wait for a decision -> decision -> completion,
spoken to the runner in the protocol bench/peers/protocol.go describes.

    python drivers.py interlock-py|langgraph-sqlite|langgraph-postgres|dbos

Each uses the system's published package and its documented durable
setting; the runner starts the servers (interlock serve, PostgreSQL) and
passes their addresses in the environment.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

WARMUP = int(os.environ["PEERS_WARMUP"])
CYCLES = int(os.environ["PEERS_CYCLES"])
RESUMES = int(os.environ["PEERS_RESUMES"])
CONCURRENCY = int(os.environ["PEERS_CONCURRENCY"])

# run id -> when the waiting code ran again (time.perf_counter()).
resumed_at: dict[str, float] = {}


def mark(name: str) -> None:
    print(f"MARK {name}", flush=True)
    sys.stdin.readline()


def resume_sample(seconds: float) -> None:
    print(f"RESUME {int(seconds * 1e6)}", flush=True)


class Seq:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            self.n += 1
            return f"p{self.n:07d}-{os.getpid()}"


# --- threaded systems: a cycle is a blocking call returning the resume time --


def run_threaded(cycle: Callable[[str], float]) -> None:
    seq = Seq()

    def batch(n: int) -> None:
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            for f in [pool.submit(cycle, seq.next()) for _ in range(n)]:
                f.result()

    batch(WARMUP)
    mark("start")
    batch(CYCLES)
    mark("end")
    for _ in range(RESUMES):
        resume_sample(cycle(seq.next()))
    print("DONE", flush=True)


def langgraph(saver: Any) -> Callable[[str], float]:
    from typing import TypedDict

    from langgraph.config import get_config
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    class State(TypedDict):
        answer: str

    def ask(state: State) -> State:
        answer = interrupt("ok?")
        resumed_at[get_config()["configurable"]["thread_id"]] = time.perf_counter()
        return {"answer": answer}

    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    graph = g.compile(checkpointer=saver)

    def cycle(run: str) -> float:
        config = {"configurable": {"thread_id": run}}
        # durability="sync": each checkpoint is written before the step
        # returns (LangGraph's durable mode); the run stops at the interrupt.
        out = graph.invoke({"answer": ""}, config, durability="sync")
        assert "__interrupt__" in out, out
        decided = time.perf_counter()
        done = graph.invoke(Command(resume="yes"), config, durability="sync")
        assert done["answer"] == "yes", done
        return resumed_at.pop(run) - decided

    return cycle


def langgraph_sqlite() -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(os.environ["PEERS_SQLITE"], check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    saver = SqliteSaver(conn)
    saver.setup()
    # setup() may set its own pragmas: say what is in force.
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    if mode != "wal" or sync != 2:
        conn.execute("PRAGMA synchronous=FULL")
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    print(f"sqlite journal_mode={mode} synchronous={sync} (2 = FULL)", file=sys.stderr, flush=True)
    run_threaded(langgraph(saver))


def langgraph_postgres() -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(
        os.environ["PEERS_PG"],
        min_size=CONCURRENCY,
        max_size=CONCURRENCY,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=True,
    )
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    saver.setup()
    run_threaded(langgraph(saver))


def dbos() -> None:
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {
        "name": "peers",
        "system_database_url": os.environ["PEERS_PG"].rsplit("/", 1)[0] + "/peers_dbos_sys",
        "run_admin_server": False,
    }
    DBOS(config=config)

    @DBOS.workflow()
    def approval(run: str) -> str:
        # The question, visible to whoever decides (DBOS's documented way for
        # a workflow to publish its state), then the durable wait.
        DBOS.set_event("waiting", True)
        answer = DBOS.recv("decision", timeout_seconds=600)
        resumed_at[run] = time.perf_counter()
        return str(answer)

    DBOS.launch()

    def cycle(run: str) -> float:
        h = DBOS.start_workflow(approval, run)
        wf = h.get_workflow_id()
        assert DBOS.get_event(wf, "waiting", timeout_seconds=60) is True
        decided = time.perf_counter()
        DBOS.send(wf, "yes", "decision")
        assert h.get_result() == "yes"
        return resumed_at.pop(run) - decided

    try:
        run_threaded(cycle)
    finally:
        DBOS.destroy()


# --- Interlock through `interlock serve` and the Python SDK (asyncio) --------


async def interlock_py() -> None:
    import nats

    import interlock
    from interlock import Client, Request, Worker
    from interlock._ids import interrupt_id

    nc = await nats.connect(os.environ["NATS_URL"])
    worker = Worker(nc, concurrency=CONCURRENCY)

    async def agent(_: Any) -> Any:
        with interlock.tool_call("call"):
            d = interlock.interrupt(Request(message="ok?"))
        info = interlock.run_info()
        assert info is not None
        resumed_at[info.run_id] = time.perf_counter()
        return d.payload

    worker.register("peers", agent)
    client = Client(nc)
    seq = Seq()

    async def cycle(run: str) -> float:
        await client.start("peers", run_id=run)
        await client.wait(run, interlock.suspended, timeout=60)
        decided = time.perf_counter()
        await client.decide(run, interrupt_id(run, "call", 0), payload=True)
        await client.wait(run, timeout=60)
        return resumed_at.pop(run) - decided

    async def batch(n: int) -> None:
        ids = [seq.next() for _ in range(n)]

        async def lane() -> None:
            while ids:
                await cycle(ids.pop())

        await asyncio.gather(*(lane() for _ in range(CONCURRENCY)))

    async with worker:
        await batch(WARMUP)
        await asyncio.to_thread(mark, "start")
        await batch(CYCLES)
        await asyncio.to_thread(mark, "end")
        for _ in range(RESUMES):
            resume_sample(await cycle(seq.next()))
    await client.close()
    await nc.close()
    print("DONE", flush=True)


def main() -> None:
    system = sys.argv[1] if len(sys.argv) == 2 else ""
    if system == "interlock-py":
        asyncio.run(interlock_py())
    elif system == "langgraph-sqlite":
        langgraph_sqlite()
    elif system == "langgraph-postgres":
        langgraph_postgres()
    elif system == "dbos":
        dbos()
    else:
        sys.exit("usage: drivers.py interlock-py|langgraph-sqlite|langgraph-postgres|dbos")


if __name__ == "__main__":
    main()
