"""Several worker processes, one Redis, one Postgres, threads handed from
process to process between runs (`tests/load.py`): a small run of the load
benchmark, asserting correctness only, never timings.

Each run checks every thread's latest state (every run's messages, in order,
each by the process it was sent to) through the shared tiers together, each
shared tier alone and each worker's SQLite file as a replica; that every
checkpoint a worker's ``put`` acknowledged is in each shared tier and in that
worker's own file; and that each thread's history is one chain.
"""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig

from langgraph_durable import DurableSaver, Integrity, Leases, ThreadBusy
from langgraph_durable.engine.leases.book import LeaseBook
from langgraph_durable.engine.replicator import Replicator
from langgraph_durable.model.lease import Lease
from langgraph_durable.validation import RUNTIME_KEY

from .conftest import REDIS_URL
from .graphs import loop_graph
from .load import LoadResult, count_forks, run_load
from .waiting import wait_until

WORKERS, THREADS, RUNS, STEPS = 3, 12, 3, 5


def _load(tmp_path: Path, redis_prefix: str, postgres_url: str, **options: Any) -> LoadResult:
    return run_load(
        WORKERS,
        THREADS,
        RUNS,
        STEPS,
        REDIS_URL,
        redis_prefix,
        postgres_url,
        tmp_path,
        seed=7,
        concurrency=4,
        timeout=120,
        **options,
    )


def _every_view_is_right(result: LoadResult) -> None:
    assert result.ok, result.summary()
    views = ["shared", "redis", "postgres", *(f"w{w} replica" for w in range(WORKERS))]
    assert sorted(result.wrong_states) == sorted(views), result.wrong_states
    assert set(result.lost) == {"shared", "redis", "postgres", *(f"w{w} file" for w in range(WORKERS))}
    assert set(result.forks) == set(result.unlinked) == {"shared", "redis", "postgres"}
    assert sorted(result.corrupt) == sorted(views)
    assert result.checkpoints == THREADS * RUNS * (STEPS + 2)  # input + start + one per step, each run
    assert all(w.runs > 0 for w in result.per_worker), result.summary()  # every process took runs
    assert sum(w.runs for w in result.per_worker) == THREADS * RUNS
    assert result.refused == 0 and all(w.owed_at_close == 0 for w in result.per_worker)


def test_threads_handed_between_processes_keep_one_history(
    tmp_path: Path, redis_prefix: str, postgres_url: str
) -> None:
    """write="shared" (the default), sync face: a run acknowledged by one
    process is seen whole by the next process the thread goes to."""
    result = _load(tmp_path, redis_prefix, postgres_url, write="shared", face="sync")
    _every_view_is_right(result)
    assert all(w.warnings == 0 for w in result.per_worker), [w.first_warnings for w in result.per_worker]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_write_behind_hand_off_keeps_one_history(
    tmp_path: Path, redis_prefix: str, postgres_url: str, face: str
) -> None:
    """write="local" (write-behind), the thread handed on as soon as its run
    returns, no drain: the run's lease is kept until the replicator has
    shipped the thread, so the next process, waiting for the lease
    (``on_busy="wait"``, as a replica taking write-behind threads from a
    load balancer should), sees the whole run, and nothing is refused or
    lost."""
    result = _load(
        tmp_path,
        redis_prefix,
        postgres_url,
        write="local",
        face=face,
        handoff_drain=False,
        saver_options={"on_busy": "wait"},
    )
    _every_view_is_right(result)
    assert all(w.warnings == 0 for w in result.per_worker), [w.first_warnings for w in result.per_worker]


# -- saver bugs the load test found, fixed -------------------------------------------------------


def test_a_refused_write_behind_checkpoint_stays_out_of_the_shared_history(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A runs the thread with write="local"; before A's replicator
    ships it, replica B takes the thread over (A keeps the lease until its
    run has shipped, but the lease expires first), so A's records are
    refused when shipped, as docs/concepts/write-modes.md says. B's run ships when B drains,
    which gives B's lease back.
    A then runs the thread again. Nothing A's refused run wrote may reach the
    shared history: every checkpoint there must have its parent and channel
    values. The load test hit this on its own (``handoff_drain=False``); here
    the background replicator is held back so only ``drain()`` ships."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    config: RunnableConfig = {"configurable": {"thread_id": "refused"}}
    a = DurableSaver(sqlite=str(tmp_path / "a.sqlite"), postgres=postgres_url, write="local", leases=Leases(ttl=1))
    b = DurableSaver(
        sqlite=str(tmp_path / "b.sqlite"), postgres=postgres_url, write="local", leases=Leases(on_busy="wait")
    )
    try:
        ga, gb = (loop_graph(3).compile(checkpointer=s) for s in (a, b))
        ga.invoke({"messages": [], "n": 0}, config, durability="sync")
        assert a.lag().records > 0  # the run returned unshipped, still holding the lease
        gb.invoke({"messages": [], "n": 0}, config, durability="sync")  # takes the thread over once it expires
        assert a.drain(5).caught_up  # A's run is refused: never in the shared tier
        assert b.drain(5).caught_up  # B's run ships, and B gives the lease back
        ga.invoke({"messages": ["again"], "n": 0}, config, durability="sync")
        assert a.drain(5).caught_up and b.drain(5).caught_up
    finally:
        a.close()
        b.close()
    events: list[Any] = []
    with DurableSaver(sqlite=None, postgres=postgres_url, integrity=Integrity(on_corruption=events.append)) as fresh:
        listed = [(c.config["configurable"]["checkpoint_id"], c.parent_config) for c in fresh.list(config)]
    assert events == []
    assert count_forks((cid, (p or {}).get("configurable", {}).get("checkpoint_id")) for cid, p in listed) == (0, 0)


def test_a_write_behind_run_returns_before_it_ships_and_keeps_its_lease_until_it_has(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write="local", sync face: the run's end does not wait for the shared
    tiers. Its thread's lease is kept until the replicator has shipped the
    run (here held back, so only ``drain()`` ships); meanwhile another
    replica is refused the thread, and afterwards it sees the whole run."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    config: RunnableConfig = {"configurable": {"thread_id": "kept"}}
    a = DurableSaver(sqlite=str(tmp_path / "a.sqlite"), postgres=postgres_url, write="local")
    b = DurableSaver(sqlite=str(tmp_path / "b.sqlite"), postgres=postgres_url)
    try:
        ga, gb = (loop_graph(3).compile(checkpointer=s) for s in (a, b))
        ga.invoke({"messages": [], "n": 0}, config, durability="sync")
        assert a.lag().records > 0  # returned unshipped
        with pytest.raises(ThreadBusy):
            gb.invoke({"messages": ["too soon"], "n": 0}, config, durability="sync")
        assert a.drain(5).caught_up  # ships the run, then gives the lease back
        assert a._runtime.leases.handoffs(time.monotonic()) == []
        state = gb.invoke(None, config, durability="sync")  # nothing left to run: the whole run is seen
        assert state["n"] == 3 and len(state["messages"]) == 3
    finally:
        a.close()
        b.close()


async def test_a_write_behind_async_run_keeps_its_lease_until_it_has_shipped(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async face of the test above: the lease is kept by the task the
    run's end schedules, given back by ``adrain()`` once the run shipped."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    config: RunnableConfig = {"configurable": {"thread_id": "kept"}}
    a = DurableSaver(sqlite=str(tmp_path / "a.sqlite"), postgres=postgres_url, write="local")
    b = DurableSaver(sqlite=str(tmp_path / "b.sqlite"), postgres=postgres_url, leases=Leases(wait=1, on_busy="wait"))
    try:
        ga, gb = (loop_graph(3).compile(checkpointer=s) for s in (a, b))
        await ga.ainvoke({"messages": [], "n": 0}, config, durability="sync")
        assert (await a.alag()).records > 0
        with pytest.raises(ThreadBusy):  # waited 1 s: the lease is kept
            await gb.ainvoke({"messages": ["too soon"], "n": 0}, config, durability="sync")
        assert (await a.adrain(5)).caught_up
        state = await gb.ainvoke(None, config, durability="sync")
        assert state["n"] == 3 and len(state["messages"]) == 3
    finally:
        await a.aclose()
        await b.aclose()


def test_runs_starting_together_in_a_fresh_process_keep_their_leases() -> None:
    """The load test saw `LeaseLost: ... it was released while the run was
    going` at the first write of a run, now and then, among the first runs
    of a fresh worker process (several runner threads start at once). The
    book is set up on first use (``_pid == -1``): thread B passes the pid
    check, thread A sets the book up and begins a run, then B clears it.
    Here B is held between the check and the lock (A holds the lock)."""
    book = LeaseBook()

    def writer(_: Any) -> None:
        pass

    runtime = types.SimpleNamespace(stream_writer=writer, control=None)
    lock = _SeesWaiters(book._lock)
    book._lock = lock  # type: ignore[assignment]
    with lock:  # A is inside _after_fork ...
        b = threading.Thread(target=lambda: book.holder)  # ... as B starts its first run
        b.start()
        # B passed the pid check and waits for the lock (or, the book set up
        # already, needed none and is done).
        wait_until(lambda: lock.waiting.is_set() or not b.is_alive(), "B neither waits for the lock nor ended")
        book._after_fork()  # A sets the book up
        book.begin(runtime, Lease("t", book.holder, 1, time.time() + 30))  # and begins its run
    b.join(60)  # a liveness bound: the lock is free now
    assert not b.is_alive()
    assert book.fence_for("t", {RUNTIME_KEY: runtime})[0] is not None


class _SeesWaiters:
    """A lock that tells (`waiting`) when another thread than its holder asks for it."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock  # reentrant
        self._owner: int | None = None
        self._depth = 0
        self.waiting = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._owner not in (None, threading.get_ident()):
            self.waiting.set()
        got = bool(self._lock.acquire(blocking, timeout))
        if got:
            self._owner = threading.get_ident()
            self._depth += 1
        return got

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
