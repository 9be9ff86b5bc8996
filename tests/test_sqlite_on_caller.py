"""The async face of the SQLite tier runs a run's short calls on the event
loop's thread when they can start at once (issue 9), and hands everything
that would wait to its worker: the loop is never held by a lock.

Real SQLite files (and the test Postgres where a run uses it); the lock is
taken by a second connection, as another process on the same file would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable.errors import TierUnavailable
from langgraph_durable.model.records import BlobRow, CheckpointRow
from langgraph_durable.tiers.sqlite.tier import AsyncSqliteTier, SqliteTier

from .conftest import SaverFactory
from .graphs import looping
from .waiting import await_until


def _row(cid: str) -> tuple[CheckpointRow, list[BlobRow]]:
    return (
        CheckpointRow("t", "", cid, None, "run", "{}", f"checkpoint {cid}".encode()),
        [BlobRow("t", "", "messages", cid, f"value {cid}".encode())],
    )


def _stored(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT checkpoint_id FROM lgd_checkpoints")}


@contextmanager
def tier_at(
    path: Path, *, fsync: bool = False, busy_timeout: float = 5.0
) -> Iterator[tuple[SqliteTier, AsyncSqliteTier]]:
    tier = SqliteTier(str(path), fsync=fsync, busy_timeout=busy_timeout)
    tier.setup()
    face = AsyncSqliteTier(tier)
    try:
        yield tier, face
    finally:
        asyncio.run(face.close())
        tier.close()


@contextmanager
def threads_of_statements(tier: SqliteTier) -> Iterator[list[tuple[int, str]]]:
    """(thread ident, statement) for each statement the tier's connection runs meanwhile."""
    seen: list[tuple[int, str]] = []
    with tier._lock:
        tier._connect().set_trace_callback(lambda sql: seen.append((threading.get_ident(), sql)))
    try:
        yield seen
    finally:
        with tier._lock:
            tier._connect().set_trace_callback(None)


@asynccontextmanager
async def loop_ticks() -> AsyncIterator[list[int]]:
    """How many times a task asking to run every 10 ms ran meanwhile: whether
    the event loop went on serving other tasks (``[count]``, read after the block)."""
    ticks = [0]
    stop = asyncio.Event()

    async def tick() -> None:
        while not stop.is_set():
            ticks[0] += 1
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(tick())
    try:
        yield ticks
    finally:
        stop.set()
        await ticking


# How long a lock holder below holds on unless told to let go: a liveness
# bound (a test that never lets go fails after it), not a measure of speed.
HOLD_AT_MOST_S = 60.0


@contextmanager
def write_lock_held(path: Path) -> Iterator[threading.Event]:
    """Another connection holds the file's write lock until the event is set
    (or `HOLD_AT_MOST_S` passed)."""
    release, taken = threading.Event(), threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        taken.set()
        release.wait(HOLD_AT_MOST_S)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    try:
        yield release
    finally:
        release.set()
        holder.join(30)
        assert not holder.is_alive()


@pytest.mark.parametrize("fsync", [False, True], ids=["plain", "fsync"])
def test_a_free_tier_runs_short_calls_on_the_event_loop_thread(tmp_path: Path, fsync: bool) -> None:
    """A step's write and the reads of the latest state run on the loop's
    thread; with ``fsync`` (write-behind) a write waits for the disk and
    goes to the worker, the reads still do not."""
    with tier_at(tmp_path / "local.sqlite", fsync=fsync) as (tier, face):
        loop_thread = threading.get_ident()

        async def main() -> None:
            with threads_of_statements(tier) as seen:
                await face.write_checkpoint(*_row("c1"), journal=True)
            writers = {ident for ident, _ in seen}
            assert seen and (writers == {loop_thread}) != fsync, seen
            with threads_of_statements(tier) as seen:
                head = await face.head("t", "")
                assert head.checkpoint_id == "c1"
                assert await face.read_checkpoint("t", "", "c1") is not None
                await face.version()
            assert seen and {ident for ident, _ in seen} == {loop_thread}, seen
            # Anything else still goes to the worker.
            with threads_of_statements(tier) as seen:
                assert len(await face.pending_journal()) == 1
            assert seen and loop_thread not in {ident for ident, _ in seen}, seen

        asyncio.run(main())
        assert _stored(tmp_path / "local.sqlite") == {"c1"}


def test_run_now_leaves_a_call_alone_while_another_thread_holds_the_tier(tmp_path: Path) -> None:
    with tier_at(tmp_path / "local.sqlite") as (tier, _):
        ran: list[str] = []
        inside, done = threading.Event(), threading.Event()

        def long_write() -> None:
            with tier._tx():
                inside.set()
                done.wait(10)

        writer = threading.Thread(target=long_write)
        writer.start()
        try:
            assert inside.wait(5)
            assert tier.run_now(lambda: ran.append("write"), writes=True) == (False, None)
            assert tier.run_now(lambda: ran.append("read"), writes=False) == (False, None)
            assert ran == []
        finally:
            done.set()
            writer.join(30)
        assert not writer.is_alive()
        assert tier.run_now(lambda: ran.append("read"), writes=False) == (True, None)
        assert ran == ["read"]


def test_a_write_that_would_wait_for_another_connection_goes_to_the_worker(tmp_path: Path) -> None:
    """Another connection holds the write lock: `run_now` says so at once
    (it does not wait out the busy timeout), restores the busy timeout, and
    the async write waits on the worker while the event loop runs other
    tasks; the write lands once the lock is given back."""
    path = tmp_path / "local.sqlite"
    # A busy timeout longer than the lock is held at most: a `run_now` that
    # waited it out would get the lock in the end, and run the write.
    with tier_at(path, busy_timeout=2 * HOLD_AT_MOST_S) as (tier, face):
        with write_lock_held(path) as release:
            assert tier.run_now(lambda: tier.write_checkpoint(*_row("c0")), writes=True) == (False, None)
            with tier._lock:
                busy_ms = tier._connect().execute("PRAGMA busy_timeout").fetchone()[0]
                assert busy_ms == 2 * HOLD_AT_MOST_S * 1000

            async def main() -> tuple[list[str], Any]:
                order: list[str] = []

                async def let_go_after_ticks() -> None:
                    # Only a loop that runs other tasks while the write waits
                    # gets here (a blocked loop: the holder lets go at last).
                    await await_until(lambda: ticks[0] >= 5, "the event loop did not tick")
                    order.append("released")
                    release.set()

                async with loop_ticks() as ticks:
                    releasing = asyncio.create_task(let_go_after_ticks())
                    seq = await face.write_checkpoint(*_row("c1"), journal=True)
                    order.append("written")
                    await releasing
                return order, seq

            order, seq = asyncio.run(main())
        # The loop ran on while the write waited: the lock was given back from
        # the loop, and only then did the write land.
        assert order == ["released", "written"], order
        assert isinstance(seq, int)
        assert _stored(path) == {"c1"}


def test_a_call_that_fails_on_the_loop_thread_raises_as_on_the_worker(tmp_path: Path) -> None:
    """An error that is not a busy lock is the call's own: raised, not retried on the worker."""
    path = tmp_path / "local.sqlite"
    with tier_at(path) as (tier, face):
        with tier._lock:
            tier._connect().execute("DROP TABLE lgd_blobs")  # the file damaged under the saver

        async def main() -> None:
            with pytest.raises(TierUnavailable, match="no such table"):
                await face.write_checkpoint(*_row("c1"))

        asyncio.run(main())
        assert _stored(path) == set()


def test_under_a_host_that_forbids_blocking_calls_on_its_loop_every_call_goes_to_the_worker(tmp_path: Path) -> None:
    """``langgraph dev`` watches its event loop with blockbuster, which fails
    a run that calls SQLite there. With it active, the async face still
    writes and reads, all of it from the worker."""
    from blockbuster import BlockBuster  # installed with langgraph-cli[inmem], a test extra

    with tier_at(tmp_path / "local.sqlite") as (tier, face):
        loop_thread = threading.get_ident()

        async def main() -> None:
            with threads_of_statements(tier) as seen:
                await face.write_checkpoint(*_row("c1"), journal=True)
                assert (await face.head("t", "")).checkpoint_id == "c1"
                await face.version()
            assert seen and loop_thread not in {ident for ident, _ in seen}, seen

        watcher = BlockBuster()
        watcher.activate()
        try:
            asyncio.run(main())
        finally:
            watcher.deactivate()
        assert _stored(tmp_path / "local.sqlite") == {"c1"}


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+postgres"])
async def test_an_async_run_whose_file_another_process_locks_mid_run_waits_and_ends_right(
    make_saver: SaverFactory, tiers: str
) -> None:
    """A real graph on the async face. At step 3 another connection (as
    another process on the same file would) takes the write lock for 0.4 s.
    The run's writes then go to the worker and wait for it, the event loop
    keeps serving other tasks meanwhile, and the run ends with every step
    stored in order, as a run that met no lock does."""
    held, release = threading.Event(), threading.Event()
    # What the run saw: whether the lock was given back by the time step 4 ran.
    released_before: dict[int, bool] = {}
    let_go: list[asyncio.Task[None]] = []

    async def step(state: dict[str, Any]) -> dict[str, Any]:
        n = state.get("n", 0)
        released_before[n] = release.is_set()
        if n == 3:
            threading.Thread(target=hold_lock, daemon=True).start()
            assert await asyncio.to_thread(held.wait, 30)
            let_go.append(asyncio.create_task(let_go_after_ticks()))
        return {"messages": [f"message {n}"], "n": n + 1}

    async def let_go_after_ticks() -> None:
        # Runs only while the loop serves other tasks (the run's step-3
        # checkpoint meanwhile waits for the lock, on the worker).
        start = ticks[0]
        await await_until(lambda: ticks[0] >= start + 5, "the event loop did not tick")
        release.set()

    def hold_lock() -> None:
        conn = sqlite3.connect(saver.sqlite_path or "", isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        given_back.append(release.wait(60))  # False: the loop never let go (a liveness bound)
        conn.execute("COMMIT")
        conn.close()

    given_back: list[bool] = []
    async with make_saver(tiers) as saver:
        graph = looping(step, 6).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "locked-mid-run"}}
        async with loop_ticks() as ticks:
            out = await graph.ainvoke({"messages": [], "n": 0}, config, durability="sync")
            await let_go[0]
        # The run did meet the lock: step 3's checkpoint (durability="sync")
        # could only be stored once the lock was given back, before step 4.
        assert released_before == {0: False, 1: False, 2: False, 3: False, 4: True, 5: True}, released_before
        # The loop ran on while the write waited: a task on it gave the lock back.
        assert given_back == [True]
        assert out == {"messages": [f"message {i}" for i in range(6)], "n": 6}
        history = [t async for t in saver.alist(config)]
        assert [t.checkpoint["channel_values"].get("n") for t in history][:7] == [6, 5, 4, 3, 2, 1, 0]
        assert (await graph.aget_state(config)).values == out
