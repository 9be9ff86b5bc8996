"""SQLite alone: a read is served again while nothing was committed to the file.

`read_cache.py` keeps what a read served under the file's version (this
tier's write transactions, SQLite's ``PRAGMA data_version`` for every other
connection). These tests watch the statements the tier's connection runs,
and change the file the ways a user can: through the saver, through another
saver on the same file, and by hand through another connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable import ConfigError, DurableSaver, Memory
from langgraph_durable.model.read_cache import ReadCache

from .conftest import SaverFactory
from .graphs import loop_graph
from .test_local_reads import damage_newest_local_value

FACES = ["sync", "async"]


@contextlib.contextmanager
def traced(saver: DurableSaver) -> Iterator[list[str]]:
    """The statements the local tier's connection runs meanwhile."""
    tier: Any = saver._sync_chain().raw_local
    statements: list[str] = []
    with tier._lock:
        tier._connect().set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        with tier._lock:
            tier._connect().set_trace_callback(None)


async def get(saver: DurableSaver, face: str, thread: str) -> CheckpointTuple | None:
    config: Any = {"configurable": {"thread_id": thread}}
    return saver.get_tuple(config) if face == "sync" else await saver.aget_tuple(config)


async def page(saver: DurableSaver, face: str, thread: str, limit: int = 10) -> list[CheckpointTuple]:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if face == "sync":
        return list(saver.list(config, limit=limit))
    return [t async for t in saver.alist(config, limit=limit)]


async def run(saver: DurableSaver, face: str, thread: str, steps: int, start: int = 0) -> None:
    """A run of the loop graph, and its end: the thread's writer lease given
    back (the async face gives it back soon after `ainvoke` returns, a write
    of the file like any other)."""
    graph = loop_graph(steps).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread}}
    state = {"messages": [], "n": start}
    if face == "sync":
        graph.invoke(state, config, durability="sync")
    else:
        await graph.ainvoke(state, config, durability="sync")
    await lease_given_back(saver, thread)


async def lease_given_back(saver: DurableSaver, thread: str) -> None:
    deadline = time.monotonic() + 10
    with contextlib.closing(sqlite3.connect(saver.sqlite_path or "")) as conn:
        while conn.execute("SELECT 1 FROM lgd_leases WHERE thread_id = ? AND expires_at > 0", (thread,)).fetchone():
            assert time.monotonic() < deadline, "the run's lease was never given back"
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("face", FACES)
async def test_a_read_again_runs_one_statement_and_serves_the_same(make_saver: SaverFactory, face: str) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite") as saver:
        await run(saver, face, thread, 3)
        latest, history = await get(saver, face, thread), await page(saver, face, thread)
        with traced(saver) as statements:
            assert await get(saver, face, thread) == latest
            assert await page(saver, face, thread) == history
        assert statements == ["PRAGMA data_version"] * 2
        assert latest is not None and latest.checkpoint["channel_values"]["n"] == 3
        assert [t.config for t in history][:1] == [latest.config] and len(history) == 5


@pytest.mark.parametrize("face", FACES)
async def test_what_is_served_again_is_a_fresh_copy(make_saver: SaverFactory, face: str) -> None:
    """A caller that changes what it was served changes nothing for the next."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite") as saver:
        await run(saver, face, thread, 2)
        first = await get(saver, face, thread)
        assert first is not None
        kept = copy.deepcopy(first)
        first.checkpoint["channel_values"]["messages"].append("planted")
        first.checkpoint["channel_versions"]["n"] = "planted"
        first.config["configurable"]["checkpoint_id"] = "planted"
        first.metadata["planted"] = True
        again = await get(saver, face, thread)
        assert again == kept
        again.checkpoint["channel_values"]["messages"].clear()
        assert await get(saver, face, thread) == kept


@pytest.mark.parametrize("face", FACES)
async def test_a_write_through_the_saver_is_read(make_saver: SaverFactory, face: str) -> None:
    """A pending write (no new checkpoint), a new checkpoint and a deleted
    thread are each served by the next read."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite") as saver:
        await run(saver, face, thread, 2)
        latest = await get(saver, face, thread)
        assert latest is not None and latest.pending_writes == []
        await page(saver, face, thread)
        if face == "sync":
            saver.put_writes(latest.config, [("n", 41)], task_id="task-1")
        else:
            await saver.aput_writes(latest.config, [("n", 41)], task_id="task-1")
        again = await get(saver, face, thread)
        assert again is not None and again.pending_writes == [("task-1", "n", 41)]
        assert (await page(saver, face, thread))[0].pending_writes == [("task-1", "n", 41)]
        await run(saver, face, thread, 4, start=2)
        newer = await get(saver, face, thread)
        assert newer is not None and newer.checkpoint["channel_values"]["n"] == 4
        if face == "sync":
            saver.delete_thread(thread)
        else:
            await saver.adelete_thread(thread)
        assert await get(saver, face, thread) is None
        assert await page(saver, face, thread) == []


@pytest.mark.parametrize("face", FACES)
async def test_a_commit_by_another_saver_on_the_file_is_read(make_saver: SaverFactory, face: str) -> None:
    """Another saver (another connection, as another process would have)
    writes the thread: its new checkpoints are served, not the kept read."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite") as mine, make_saver("sqlite") as other:
        await run(mine, face, thread, 2)
        assert (await get(mine, face, thread)).checkpoint["channel_values"]["n"] == 2  # type: ignore[union-attr]
        assert len(await page(mine, face, thread)) == 4
        await run(other, face, thread, 5, start=2)
        latest = await get(mine, face, thread)
        assert latest is not None and latest.checkpoint["channel_values"]["n"] == 5
        assert latest == await get(other, face, thread)
        history = await page(mine, face, thread)
        assert len(history) > 4 and history == await page(other, face, thread)


@pytest.mark.parametrize("face", FACES)
async def test_damage_committed_by_hand_is_found_by_the_next_read(make_saver: SaverFactory, face: str) -> None:
    """A value damaged through another connection after a read was kept: the
    next read meets it, reports it and falls back, as without the cache."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    events: list[Any] = []
    with make_saver("sqlite", on_corruption=events.append) as saver:
        await run(saver, face, thread, 3)
        assert (await get(saver, face, thread)).checkpoint["channel_values"]["n"] == 3  # type: ignore[union-attr]
        damage_newest_local_value(saver.sqlite_path or "", thread, "n")
        latest = await get(saver, face, thread)
        assert latest is not None and latest.checkpoint["channel_values"]["n"] == 2
    assert [(e.tier, e.kind) for e in events] == [("sqlite", "blob")]


@pytest.mark.parametrize("face", FACES)
async def test_a_row_removed_by_hand_is_not_served(make_saver: SaverFactory, face: str) -> None:
    """The newest checkpoint deleted through another connection (an operator
    rolling a thread back by hand): the kept read is not served."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite") as saver:
        await run(saver, face, thread, 3)
        newest = await get(saver, face, thread)
        assert newest is not None
        await page(saver, face, thread)
        with sqlite3.connect(saver.sqlite_path or "") as conn:
            conn.execute(
                "DELETE FROM lgd_checkpoints WHERE thread_id = ? AND checkpoint_id = ?",
                (thread, newest.config["configurable"]["checkpoint_id"]),
            )
        latest = await get(saver, face, thread)
        assert latest is not None and latest.config == newest.parent_config
        assert [t.config for t in await page(saver, face, thread)][:1] == [newest.parent_config]


def test_off_or_with_a_shared_tier_every_read_reads(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    # With a shared tier: the run's lease given back (a kept one is read under, from the cache).
    for tiers, options in (("sqlite", {"read_cache_bytes": 0}), ("sqlite+redis", {"lease_linger": 0})):
        # A file each: one written with SQLite alone holds a store of its own (`promote`).
        with make_saver(tiers, sqlite_name=f"{tiers}.sqlite", **options) as saver:
            loop_graph(2).compile(checkpointer=saver).invoke(
                {"messages": [], "n": 0}, {"configurable": {"thread_id": thread}}, durability="sync"
            )
            # The run's lease is given back when its stream writer is freed,
            # which a reference cycle can leave to the garbage collector: a
            # read while the lease is still held is served under it, from the
            # cache (what this test is not about).
            gc.collect()
            saver.get_tuple({"configurable": {"thread_id": thread}})
            with traced(saver) as statements:
                saver.get_tuple({"configurable": {"thread_id": thread}})
            assert "PRAGMA data_version" not in statements
            assert any(s.lstrip().startswith("SELECT") for s in statements), (tiers, statements)


@pytest.mark.parametrize("bad", [-1, 1.5, "32MB", True])  # None: its share of memory_budget
def test_read_cache_bytes_must_be_a_whole_number(tmp_path: Any, bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"Memory\(read_cache_bytes=\) must be a whole number of bytes"):
        DurableSaver(sqlite=str(tmp_path / "s.sqlite"), memory=Memory(read_cache_bytes=bad))
    assert not (tmp_path / "s.sqlite").exists()


def _tuple(n: int, size: int) -> CheckpointTuple:
    conf = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": f"{n:04d}"}
    checkpoint: Any = {"v": 4, "id": conf["checkpoint_id"], "channel_values": {"x": "y" * size}}
    return CheckpointTuple({"configurable": conf}, checkpoint, {"step": n}, None, [])


def test_the_cache_keeps_the_latest_used_within_its_bytes() -> None:
    serde = JsonPlusSerializer()
    probe = ReadCache(serde)
    probe.put(0, "v1", [_tuple(0, 200)])
    one = probe.size  # what one entry counts against the budget
    cache = ReadCache(serde, max_bytes=int(one * 4.5))  # room for four
    for n in range(4):
        cache.put(n, "v1", [_tuple(n, 200)])
    assert cache.get(0, "v1") == [_tuple(0, 200)]  # now the latest used
    cache.put(4, "v1", [_tuple(4, 200)])  # no room for a fifth: the least recently used goes
    assert cache.get(1, "v1") is None
    assert [cache.get(n, "v1") for n in (0, 2, 3, 4)] == [[_tuple(n, 200)] for n in (0, 2, 3, 4)]
    assert cache.get(0, "v2") is None  # another version of the file
    cache.put(5, "v1", [_tuple(5, one + 200)])  # more than a quarter of the budget: not kept
    assert cache.get(5, "v1") is None and cache.size <= cache.max_bytes
    assert [cache.get(n, "v1") is not None for n in (0, 2, 3, 4)] == [True] * 4


def test_many_small_entries_stay_within_the_budget() -> None:
    """Each entry counts its key and a fixed overhead, not only its bytes: a
    caller asking with ever new long keys cannot grow the process past it."""
    cache = ReadCache(JsonPlusSerializer(), max_bytes=100_000)
    for n in range(2_000):
        cache.put(("list", "t" * 1000, "", None, f"{n:08d}", 10, None), "v1", [_tuple(n, 1)])
    assert cache.size <= cache.max_bytes
    assert len(cache) <= 100_000 // 1000
    cache.put(("list", "t", "", None, "x", 10, None), "v1", [])  # found nothing: not kept
    assert cache.get(("list", "t", "", None, "x", 10, None), "v1") is None


@pytest.mark.parametrize("face", FACES)
async def test_a_bytearray_value_is_served_as_a_bytearray_again(make_saver: SaverFactory, face: str) -> None:
    """Serialized whole, a bytearray channel or write value would come back
    as bytes: such a read is not kept."""
    with make_saver("sqlite") as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"b": bytearray(b"abc")}
        checkpoint["channel_versions"] = {"b": 1}
        stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"b": 1})
        saver.put_writes(stored, [("b", bytearray(b"def"))], task_id="task-1")
        for _ in range(2):
            tup = await get(saver, face, "t")
            assert tup is not None
            assert type(tup.checkpoint["channel_values"]["b"]) is bytearray
            assert [type(w[2]) for w in tup.pending_writes or ()] == [bytearray]
            assert [type(t.checkpoint["channel_values"]["b"]) for t in await page(saver, face, "t")] == [bytearray]


@pytest.mark.parametrize("face", FACES)
async def test_a_delta_channel_thread_read_again_runs_no_select(make_saver: SaverFactory, face: str) -> None:
    """A `DeltaChannel` read is the latest checkpoint, its parent pointer and
    pages of ancestors: read again, the checkpoint and the pages are kept
    and the parent pointer remembered, so only the version is asked."""
    from .test_delta import RUNS, delta_graph

    thread = f"t-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 200}
    with make_saver("sqlite") as saver:
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], config) if face == "sync" else await graph.ainvoke(RUNS[0], config)
        await lease_given_back(saver, thread)
        first = graph.get_state(config).values if face == "sync" else (await graph.aget_state(config)).values
        with traced(saver) as statements:
            again = graph.get_state(config).values if face == "sync" else (await graph.aget_state(config)).values
        assert again == first and len(first["items"]) == RUNS[0]["limit"]
        assert statements and set(statements) == {"PRAGMA data_version"}, statements
