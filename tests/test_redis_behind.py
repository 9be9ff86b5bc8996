"""The default write mode with all three tiers: Redis ships behind (issue 9).

``write="shared"`` acknowledges a write once the lease's tier (Postgres)
took it, fenced, and the local journal owes it to Redis. The replicator ships
it to Redis within a pass, and a run's end ships what its thread still owes
before the lease is given back. Real servers only: Redis and Postgres, with
Postgres behind a TCP proxy the test cuts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import DurableSaver, Tiers
from langgraph_durable.engine.leases.keeper import LeaseKeeper
from langgraph_durable.engine.leases.keeper_async import AsyncLeaseKeeper
from langgraph_durable.engine.replicator import Replicator
from langgraph_durable.model.backlog import JournalEntry, Outbox
from langgraph_durable.model.records import BlobRow, CheckpointRow, WriteRow
from tests.conftest import REDIS_URL
from tests.flat_options import durable_options
from tests.graphs import looping
from tests.proxy import TcpProxy
from tests.test_local_reads import damage_newest_local_value
from tests.test_outages import _postgres_ids, _redis_ids, _sqlite_ids
from tests.waiting import await_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

STEPS = 6


# One key of the user's for every saver here: Redis opened alone (to see
# what it holds) cannot reach the store's own key, which Postgres keeps.
KEY = "k" * 32


def _saver(tmp_path: Path, name: str, postgres: str, prefix: str, **options: Any) -> DurableSaver:
    options.setdefault("connect_timeout", 2)
    options.setdefault("signing_key", KEY)
    options["redis_key_prefix"] = prefix
    return DurableSaver(sqlite=str(tmp_path / name), redis=REDIS_URL, postgres=postgres, **durable_options(options))


def _invoke(graph: Any, saver: DurableSaver, thread: str, face: str) -> dict[str, Any]:
    """A run to its end, lease given back: the sync face does that before
    ``invoke`` returns, the async face in a task the run's end schedules on
    its loop (waited for here, on that loop)."""
    config = {"configurable": {"thread_id": thread}}
    if face == "sync":
        return graph.invoke({"messages": [], "n": 0}, config, durability="sync")

    async def run() -> dict[str, Any]:
        out = await graph.ainvoke({"messages": [], "n": 0}, config, durability="sync")
        keeper = saver._async_leases()
        await await_until(
            lambda: saver._runtime.leases.held(thread) is None and not keeper._to_release and not keeper._releasing,
            "the run's lease was not given back",
        )
        return out

    return asyncio.run(run())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_write_is_acknowledged_before_redis_has_it_and_the_runs_end_ships_it(
    tmp_path: Path, postgres_url: str, redis_prefix: str, face: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the replicator held back, each step of a run sees its previous
    checkpoint in Postgres and the local tier, not in Redis: Redis is off the
    acknowledgement path. When the run ends, Redis holds every checkpoint of
    it, before anything else ships (and `lag()` owes nothing)."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    seen: list[tuple[int, int, int]] = []
    thread = f"behind-{face}"

    def step(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(
            (
                len(_postgres_ids(postgres_url, thread)),
                len(_sqlite_ids(tmp_path / "a.sqlite", thread)),
                len(_redis_ids(REDIS_URL, redis_prefix, thread)),
            )
        )
        return {"messages": ["m"], "n": state.get("n", 0) + 1}

    saver = _saver(tmp_path, "a.sqlite", postgres_url, redis_prefix)
    try:
        out = _invoke(looping(step, STEPS).compile(checkpointer=saver), saver, thread, face)
        assert out["n"] == STEPS
        # Step k runs after k+2 checkpoints were acknowledged (the input's,
        # the first loop's and one per step before it): in Postgres and the
        # local tier, never yet in Redis.
        assert seen == [(k + 2, k + 2, 0) for k in range(STEPS)], seen
        written = _sqlite_ids(tmp_path / "a.sqlite", thread)
        assert len(written) == STEPS + 2
        assert _redis_ids(REDIS_URL, redis_prefix, thread) == written
        assert _postgres_ids(postgres_url, thread) == written
        assert saver.lag().caught_up
    finally:
        saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_postgres_lost_right_after_a_run_another_replica_resumes_it_whole_from_redis(
    tmp_path: Path,
    postgres_proxy: tuple[TcpProxy, str],
    postgres_url: str,
    redis_prefix: str,
    face: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replica A runs a thread (nothing shipped to Redis during the run), and
    Postgres is cut off the moment the run has ended. Replica B, on its own
    SQLite file, reads the thread from Redis: the whole run, not the state
    before it, and carries it on from there."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    proxy, proxied = postgres_proxy
    thread = f"handover-{face}"
    graph = looping(lambda s: {"messages": ["m"], "n": s.get("n", 0) + 1}, STEPS)
    a = _saver(tmp_path, "a.sqlite", proxied, redis_prefix)
    b = _saver(tmp_path, "b.sqlite", proxied, redis_prefix)
    try:
        assert _invoke(graph.compile(checkpointer=a), a, thread, face)["n"] == STEPS
        proxy.cut()
        config = {"configurable": {"thread_id": thread}}
        state = graph.compile(checkpointer=b).get_state(config)
        assert state.values.get("n") == STEPS and len(state.values.get("messages", [])) == STEPS
        more = looping(lambda s: {"messages": ["m"], "n": s["n"] + 1}, STEPS + 2).compile(checkpointer=b)
        out = more.invoke({"messages": ["on b"]}, config)
        assert out["n"] == STEPS + 2 and len(out["messages"]) == STEPS + 3
    finally:
        proxy.restore()
        a.close()
        b.close()  # drains: B's checkpoints reach Postgres, back now
    # A's run (its input, first loop and steps) and B's (the same, two steps).
    assert len(_postgres_ids(postgres_url, thread)) == (STEPS + 2) + (2 + 2)


def test_without_redis_off_the_path_nothing_changes_for_one_shared_tier(tmp_path: Path, postgres_url: str) -> None:
    """sqlite+postgres: the one shared tier is the lease's tier; nothing is
    left owed after a write."""
    saver = DurableSaver(sqlite=str(tmp_path / "a.sqlite"), postgres=postgres_url, signing_key=KEY)
    try:
        graph = looping(lambda s: {"messages": ["m"], "n": s.get("n", 0) + 1}, STEPS).compile(checkpointer=saver)
        assert _invoke(graph, saver, "one", "sync")["n"] == STEPS
        assert saver.lag().records == 0
    finally:
        saver.close()


def test_the_outbox_serves_an_entry_only_under_its_own_seq_and_key_and_stays_bounded() -> None:
    row = CheckpointRow("t", "", "c1", None, "run", "{}", b"c" * 100)
    blobs = [BlobRow("t", "", "messages", "1", b"b" * 100)]
    writes = [WriteRow("t", "", "c1", "task", 0, "messages", "", b"w" * 100)]
    box = Outbox(max_entries=3, max_bytes=1000)
    box.keep_checkpoint(1, row, blobs)
    box.keep_writes(2, writes, True)
    cp = JournalEntry(1, "checkpoint", "t", "", "c1", None, ("redis",), True, None, 0.0)
    wr = JournalEntry(2, "writes", "t", "", "c1", "task", ("redis",), True, None, 0.0)
    assert box.get(cp) == (row, blobs) and box.get(wr) == ("writes", writes, True)
    assert box.holds("t", "", "c1") and not box.holds("t", "", "c2") and not box.holds("u", "", "c1")
    # Another record under a kept seq (another file, another thread) is not served.
    assert box.get(dataclasses.replace(cp, checkpoint_id="c2")) is None
    assert box.get(dataclasses.replace(cp, seq=2, kind="checkpoint", task_id=None)) is None
    assert box.get(dataclasses.replace(wr, seq=1)) is None
    box.done([1])
    assert box.get(cp) is None and len(box) == 1
    assert not box.holds("t", "", "c1")  # its writes are still kept, not the checkpoint
    for seq in range(3, 6):  # at most 3 entries: the oldest go first
        box.keep_checkpoint(seq, row, blobs)
    assert len(box) == 3 and box.get(wr) is None
    assert box.holds("t", "", "c1")
    big = CheckpointRow("t", "", "c9", None, "run", "{}", b"x" * 900)
    box.keep_checkpoint(9, big, [])  # at most 1000 bytes
    assert len(box) == 1 and box.get(dataclasses.replace(cp, seq=9, checkpoint_id="c9")) == (big, [])
    assert box.holds("t", "", "c9") and not box.holds("t", "", "c1")  # let go with the entries evicted
    box.forget()
    assert len(box) == 0 and not box.holds("t", "", "c9")


def test_a_background_pass_leaves_a_running_threads_newest_records_to_its_run(
    tmp_path: Path, postgres_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a run is going, a background replicator pass leaves its records
    younger than RUN_SHIPS_ITS_OWN_S to the run's end; older ones, and any
    pass that is not a background one (drain, close), ship them."""
    import langgraph_durable.faces.runtime as faces_runtime

    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    thread = "running"
    seen: dict[str, int] = {}

    def step(state: dict[str, Any]) -> dict[str, Any]:
        n = state.get("n", 0)
        if n == 2:
            saver._runtime.replicate(background=True)
            seen["young, background pass"] = len(_redis_ids(REDIS_URL, redis_prefix, thread))
            monkeypatch.setattr(faces_runtime, "RUN_SHIPS_ITS_OWN_S", 0.0)
            saver._runtime.replicate(background=True)
            seen["old enough"] = len(_redis_ids(REDIS_URL, redis_prefix, thread))
        if n == 4:
            saver._runtime.replicate(background=False)
            seen["drain"] = len(_redis_ids(REDIS_URL, redis_prefix, thread))
        return {"messages": ["m"], "n": n + 1}

    saver = _saver(tmp_path, "a.sqlite", postgres_url, redis_prefix)
    try:
        _invoke(looping(step, STEPS).compile(checkpointer=saver), saver, thread, "sync")
        assert seen == {"young, background pass": 0, "old enough": 4, "drain": 6}, seen
    finally:
        saver.close()


def _whole(tup: Any) -> tuple[Any, ...]:
    """What a reader is served of a checkpoint: id, parent, values, writes."""
    return (
        tup.config["configurable"]["checkpoint_id"],
        tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None,
        tup.checkpoint["channel_values"],
        sorted((w[0], w[1], repr(w[2])) for w in tup.pending_writes or []),
    )


def _read_through_then_alone(full: DurableSaver, alone: DurableSaver, config: Any, face: str) -> tuple[Any, Any]:
    """The latest checkpoint read through every tier (which copies it where
    it lacks), then from Redis alone."""
    if face == "sync":
        return full.get_tuple(config), alone.get_tuple(config)

    async def read() -> tuple[Any, Any]:
        return await full.aget_tuple(config), await alone.aget_tuple(config)

    return asyncio.run(read())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_read_repair_copies_a_checkpoint_into_a_tier_that_lacks_it_whole(
    tmp_path: Path, postgres_url: str, redis_prefix: str, face: str
) -> None:
    """A checkpoint that SQLite and Postgres hold and Redis lacks (written
    while Redis was not configured, or by a replica whose journal has not
    shipped it yet) is copied into Redis by the next read, with its channel
    values (list pieces with what they are rebuilt from) and its pending
    writes: Redis alone then serves it whole. A row copied alone was a
    checkpoint Redis could not serve: read from Redis alone it was withdrawn
    as damaged and the read failed with no intact ancestor."""
    thread = f"repair-{face}"
    config: Any = {"configurable": {"thread_id": thread}}
    before = DurableSaver(sqlite=str(tmp_path / "a.sqlite"), postgres=postgres_url, signing_key=KEY)
    try:
        graph = looping(lambda s: {"messages": [f"m{s.get('n', 0)}" * 50], "n": s.get("n", 0) + 1}, 12)
        graph.compile(checkpointer=before).invoke({"messages": [], "n": 0}, config, durability="sync")
        head = before.get_tuple(config)
        assert head is not None
        before.put_writes(head.config, [("messages", ["pending"]), ("n", 99)], "task-1")
    finally:
        before.close()
    assert _redis_ids(REDIS_URL, redis_prefix, thread) == set()

    full = _saver(tmp_path, "a.sqlite", postgres_url, redis_prefix)
    alone = DurableSaver(sqlite=None, redis=REDIS_URL, signing_key=KEY, tiers=Tiers(redis_key_prefix=redis_prefix))
    try:
        served, from_redis = _read_through_then_alone(full, alone, config, face)
        assert served is not None and from_redis is not None
        assert _whole(served)[2]["n"] == 12 and len(_whole(served)[3]) == 2
        assert _whole(from_redis) == _whole(served)
        assert alone.corruptions_detected == 0
    finally:
        full.close()
        alone.close()


def test_a_read_leaves_to_the_journal_a_checkpoint_this_saver_still_ships(
    tmp_path: Path, postgres_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of a thread whose newest records this saver has not shipped to
    Redis yet does not copy them there itself (out of order, ahead of their
    ancestors): the journal ships them, oldest first."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    monkeypatch.setattr(LeaseKeeper, "_ship_behind", lambda self, thread_id: None)
    monkeypatch.setattr(AsyncLeaseKeeper, "_ship_behind", _no_ship)
    thread = "owed"
    config: Any = {"configurable": {"thread_id": thread}}
    saver = _saver(tmp_path, "a.sqlite", postgres_url, redis_prefix)
    try:
        looping(lambda s: {"messages": ["m"], "n": s.get("n", 0) + 1}, STEPS).compile(checkpointer=saver).invoke(
            {"messages": [], "n": 0}, config, durability="sync"
        )
        written = _sqlite_ids(tmp_path / "a.sqlite", thread)
        assert len(written) == STEPS + 2 and _redis_ids(REDIS_URL, redis_prefix, thread) == set()
        head = saver.get_tuple(config)
        assert head is not None and head.checkpoint["channel_values"]["n"] == STEPS
        assert _redis_ids(REDIS_URL, redis_prefix, thread) == set()
        assert saver.drain(timeout=60).caught_up
        assert _redis_ids(REDIS_URL, redis_prefix, thread) == written
    finally:
        saver.close()


async def _no_ship(self: Any, thread_id: str) -> None:
    return None


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_checkpoint_copied_into_a_tier_that_lacks_it_takes_no_damaged_value_along(
    tmp_path: Path, postgres_url: str, redis_prefix: str, face: str
) -> None:
    """As above, and the local copy of one of the head's channel values is
    damaged: the read serves Postgres' intact copy, puts it back in SQLite
    (the bad one quarantined), and Redis gets the checkpoint with the intact
    value, so Redis alone serves it whole."""
    thread = f"repair-bad-{face}"
    config: Any = {"configurable": {"thread_id": thread}}
    path = tmp_path / "a.sqlite"
    before = DurableSaver(sqlite=str(path), postgres=postgres_url, signing_key=KEY)
    try:
        graph = looping(lambda s: {"messages": ["m"], "n": s.get("n", 0) + 1}, 4)
        graph.compile(checkpointer=before).invoke({"messages": [], "n": 0}, config, durability="sync")
    finally:
        before.close()
    version, record = damage_newest_local_value(path, thread, "n")

    full = _saver(tmp_path, "a.sqlite", postgres_url, redis_prefix)
    alone = DurableSaver(sqlite=None, redis=REDIS_URL, signing_key=KEY, tiers=Tiers(redis_key_prefix=redis_prefix))
    try:
        served, from_redis = _read_through_then_alone(full, alone, config, face)
        assert served is not None and served.checkpoint["channel_values"]["n"] == 4
        assert full.corruptions_detected == 1
        assert [q.tier for q in full.quarantined(thread)] == ["sqlite"]
        assert from_redis is not None and _whole(from_redis) == _whole(served)
        assert alone.corruptions_detected == 0
        with sqlite3.connect(path) as conn:
            (now,) = conn.execute(
                "SELECT record FROM lgd_blobs WHERE thread_id = ? AND channel = 'n' AND version = ?", (thread, version)
            ).fetchone()
        assert bytes(now) == bytes(record)  # the intact copy is back
    finally:
        full.close()
        alone.close()
