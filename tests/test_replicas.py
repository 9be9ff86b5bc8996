"""What one replica deletes, no other replica's local cache serves afterwards;
what one replica writes, another whose cache is behind reads at once."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_durable import CorruptionEvent

from .conftest import REDIS_URL
from .graphs import loop_graph
from .tamper import CHECKPOINT, Rec, open_stores
from .test_local_reads import count_shared_reads

TIERS = ["sqlite+redis+postgres", "sqlite+postgres", "sqlite+redis"]


def _run(saver: Any, thread: str, run_id: str | None = None) -> list[Any]:
    cfg: Any = {"configurable": {"thread_id": thread}, **({"metadata": {"run_id": run_id}} if run_id else {})}
    loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg)
    return [t.config for t in saver.list({"configurable": {"thread_id": thread}})]


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", TIERS)
async def test_a_thread_pruned_away_through_one_replica_is_not_written_back_by_another(
    tiers: str, face: str, make_saver: Any
) -> None:
    """``prune(strategy="delete")`` deletes the thread as ``delete_thread``
    does, with its marker. Without it, B's cache took the thread for one the
    shared tiers had lost, served it and wrote it back into them."""
    events: list[CorruptionEvent] = []
    with (
        make_saver(tiers, sqlite_name="a.sqlite") as a,
        make_saver(tiers, sqlite_name="b.sqlite", on_corruption=events.append) as b,
    ):
        configs = _run(b, "t")
        if face == "sync":
            a.prune(["t"], strategy="delete")
        else:
            await a.aprune(["t"], strategy="delete")
        assert b.get_tuple({"configurable": {"thread_id": "t"}}) is None
        assert list(b.list({"configurable": {"thread_id": "t"}})) == []
        for config in configs:  # nothing was copied back into the shared tiers
            assert a.get_tuple(config) is None
    assert events == []


@pytest.mark.parametrize("tiers", TIERS)
def test_a_thread_deleted_through_one_replica_is_not_served_by_id_from_another(
    tiers: str, make_saver: Any, tmp_path: Path
) -> None:
    events: list[CorruptionEvent] = []
    with (
        make_saver(tiers, sqlite_name="a.sqlite") as a,
        make_saver(tiers, sqlite_name="b.sqlite", on_corruption=events.append) as b,
    ):
        configs = _run(b, "t")  # B wrote it: B's local cache holds every record
        a.delete_thread("t")
        for config in configs:
            assert b.get_tuple(config) is None
        assert b.get_tuple({"configurable": {"thread_id": "t"}}) is None
        assert list(b.list({"configurable": {"thread_id": "t"}})) == []
        for config in configs:  # nothing was copied back into the shared tiers
            assert a.get_tuple(config) is None
    assert events == []
    local = sqlite3.connect(tmp_path / "b.sqlite")
    assert local.execute("SELECT COUNT(*) FROM lgd_checkpoints WHERE thread_id = 't'").fetchone() == (0,)


def test_runs_deleted_through_one_replica_are_not_served_by_id_from_another(make_saver: Any) -> None:
    with (
        make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a,
        make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b,
    ):
        doomed = _run(b, "t", run_id="run-1")
        kept = _run(b, "u", run_id="run-2")
        a.delete_for_runs(["run-1"])
        assert all(b.get_tuple(config) is None for config in doomed)
        assert all(b.get_tuple(config) is not None for config in kept)


def test_a_new_thread_under_a_deleted_id_is_served(make_saver: Any) -> None:
    with (
        make_saver("sqlite+postgres", sqlite_name="a.sqlite") as a,
        make_saver("sqlite+postgres", sqlite_name="b.sqlite") as b,
    ):
        _run(b, "t")
        a.delete_thread("t")
        again = _run(a, "t")  # the id is used again, with newer checkpoints
        assert all(b.get_tuple(config) is not None for config in again)
        assert b.get_tuple({"configurable": {"thread_id": "t"}}) is not None


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_replica_whose_cache_is_behind_reads_the_newest_state_from_the_heads(
    make_saver: Any, face: str
) -> None:
    """A writes a thread, B runs it one step further, A reads it: A's local
    copy is one checkpoint behind. Every shared tier's head names B's
    checkpoint and carries its row and pending writes, so A asks each tier
    for its head and the values it lacks, not for the checkpoint or its
    writes again; it serves B's state and keeps a whole copy of it."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    async with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a:
        async with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            ga, gb = loop_graph(2).compile(checkpointer=a), loop_graph(3).compile(checkpointer=b)
            if face == "sync":
                ga.invoke({"messages": [], "n": 0}, config)
                gb.invoke({"messages": [], "n": 2}, config)
            else:
                await ga.ainvoke({"messages": [], "n": 0}, config)
                await gb.ainvoke({"messages": [], "n": 2}, config)
                await run_ended(b, thread)  # with B's run shipped to Redis: just after ainvoke returns
            newest = b.get_tuple(config)
            calls = count_shared_reads(a, face)
            got = a.get_tuple(config) if face == "sync" else await a.aget_tuple(config)
        assert newest is not None and got is not None
        assert got.checkpoint == newest.checkpoint and got.pending_writes == newest.pending_writes
        assert got.checkpoint["channel_values"]["n"] == 3
        assert calls["redis.read_checkpoint"] == calls["postgres.read_checkpoint"] == 0, calls
        assert calls["redis.read_writes"] == calls["postgres.read_writes"] == 0, calls
        assert calls["redis.head"] == calls["postgres.head"] == 1, calls
        # A's cache took the whole checkpoint: the next read agrees everywhere and reads no values remotely.
        calls.clear()
        again = a.get_tuple(config) if face == "sync" else await a.aget_tuple(config)
        assert again == got and calls["redis.read_blobs"] == calls["postgres.read_blobs"] == 0, calls


async def run_ended(saver: Any, thread: str) -> None:
    """The end of the saver's async run on `thread` was handled: what the
    thread owed was shipped, and its lease given back, or kept (``lease_linger``)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(saver.postgres_url, autocommit=True) as conn:
        while (
            saver._runtime.leases.kept(thread, time.monotonic()) is None
            and conn.execute("SELECT 1 FROM lgd_leases WHERE thread_id = %s AND expires_at > 0", (thread,)).fetchone()
        ):
            assert time.monotonic() < deadline, "the run's lease was neither given back nor kept"
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("where", ["redis", "postgres"])
def test_a_replica_whose_cache_is_behind_reads_around_a_newest_checkpoint_damaged_in_one_tier(
    make_saver: Any, where: str
) -> None:
    """The same read, with B's checkpoint damaged in one shared tier only: A
    serves the intact copy from the other, copies that into its cache,
    repairs the bad one and reports it; nothing older is served."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    events: list[CorruptionEvent] = []
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", on_corruption=events.append) as a:
        with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            loop_graph(2).compile(checkpointer=a).invoke({"messages": [], "n": 0}, config)
            loop_graph(3).compile(checkpointer=b).invoke({"messages": [], "n": 2}, config)
            newest = b.get_tuple(config)
        assert newest is not None
        rec = Rec(CHECKPOINT, "", (newest.checkpoint["id"],))
        stores = {s.name: s for s in open_stores(a, REDIS_URL)}
        try:
            intact = stores[where].get(thread, rec)
            assert intact is not None
            stores[where].flip_field(thread, rec, len(intact.raw) - 1, 0x01, intact)
            got = a.get_tuple(config)
            assert got is not None and got.checkpoint == newest.checkpoint
            assert got.pending_writes == newest.pending_writes
            assert [(e.tier, e.kind) for e in events] == [(where, "checkpoint")]
            for store in stores.values():  # repaired where it was bad, copied into A's cache
                now = store.get(thread, rec)
                assert now is not None and now.same_record(intact), store.name
        finally:
            for s in stores.values():
                s.close()
