"""A page of history (``list(config, limit=n)`` with ``checkpoint_ns``, what
``get_state_history`` and a DeltaChannel's ancestor walk read) costs one
round trip to each shared tier: the checkpoints and their pending writes
come together (`list_page`), and the local cache adds the writes it holds.

The pending writes a page serves are still the union of every tier's: a
write lost in ONE tier is served from another and copied back, and when the
tiers list different checkpoints (one lost a checkpoint row but kept its
writes) the read asks every tier for the writes as before.

The savers here give a run's lease back when it ends (``lease_linger=0``):
under a kept lease a page of the saver's own checkpoints comes from the
local cache alone (`test_local_history.py`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
import redis as redis_lib

from langgraph_durable import DurableSaver

from .conftest import REDIS_URL, SaverFactory
from .graphs import loop_graph
from .test_local_reads import count_shared_reads

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

SEP = "\x00"


def _page(
    saver: DurableSaver, thread: str, face: str, limit: int = 4, *, count: bool = False
) -> tuple[list[tuple[str, list[Any]]], Counter[str]]:
    """(checkpoint id, sorted pending writes) of the newest `limit`
    checkpoints, and (with `count`) the reads that reached the shared tiers."""
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    calls: Counter[str] = Counter()
    if face == "sync":
        if count:
            calls = count_shared_reads(saver, face)
        tuples = list(saver.list(config, limit=limit))
    else:

        async def collect() -> list[Any]:
            nonlocal calls
            if count:
                calls = count_shared_reads(saver, face)
            return [t async for t in saver.alist(config, limit=limit)]

        tuples = asyncio.run(collect())
    page = [(t.config["configurable"]["checkpoint_id"], sorted(map(repr, t.pending_writes or []))) for t in tuples]
    return page, calls


def _reference(saver: DurableSaver, thread: str, limit: int = 4) -> list[tuple[str, list[Any]]]:
    """The same page read the way every other list reads it (no limit: each
    tier's whole list, then every tier's writes), cut to `limit`."""
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    tuples = list(saver.list(config))[:limit]
    return [(t.config["configurable"]["checkpoint_id"], sorted(map(repr, t.pending_writes or []))) for t in tuples]


def _writes(postgres_url: str, thread: str) -> set[tuple[str, str, int]]:
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT checkpoint_id, task_id, idx FROM lgd_writes WHERE thread_id = %s", (thread,))
        return {(r[0], r[1], r[2]) for r in rows}


def _redis_writes(prefix: str, thread: str, cid: str) -> set[tuple[str, int]]:
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        fields = client.hkeys(f"{prefix}:{{{thread}}}:w:{SEP}{cid}")
    finally:
        client.close()
    return {(task, int(idx)) for task, idx in (f.decode().rsplit(SEP, 1) for f in fields)}


def _local_writes(path: str, thread: str) -> set[tuple[str, str, int]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT checkpoint_id, task_id, idx FROM lgd_writes WHERE thread_id = ?", (thread,))
        return {(r[0], r[1], r[2]) for r in rows}


def _drop_redis_checkpoint(prefix: str, thread: str, cid: str) -> None:
    """Redis loses a checkpoint's row and index entry (its writes stay)."""
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        client.zrem(f"{prefix}:{{{thread}}}:ids:", cid)
        client.hdel(f"{prefix}:{{{thread}}}:cp", f"{SEP}{cid}")
    finally:
        client.close()


def _drop_postgres_write(url: str, thread: str, key: tuple[str, str, int]) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "DELETE FROM lgd_writes WHERE thread_id = %s AND checkpoint_id = %s AND task_id = %s AND idx = %s",
            (thread, *key),
        )


def _drop_local_write(path: str, thread: str, key: tuple[str, str, int]) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "DELETE FROM lgd_writes WHERE thread_id = ? AND checkpoint_id = ? AND task_id = ? AND idx = ?",
            (thread, *key),
        )


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_page_is_one_call_per_shared_tier(make_saver: SaverFactory, face: str) -> None:
    with make_saver("sqlite+redis+postgres", lease_linger=0) as saver:
        saver.setup()
        loop_graph(6).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
        want = _reference(saver, "t")
        assert sum(1 for _, writes in want if writes) >= 3  # the page has pending writes to serve
        page, calls = _page(saver, "t", face, count=True)
        assert page == want
        assert dict(calls) == {"redis.list_page": 1, "postgres.list_page": 1}


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_write_lost_in_one_tier_is_served_and_copied_back(
    make_saver: SaverFactory, postgres_url: str, redis_prefix: str, face: str
) -> None:
    with make_saver("sqlite+redis+postgres", lease_linger=0) as saver:
        saver.setup()
        loop_graph(6).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
        want = _reference(saver, "t")
        stored = sorted(_writes(postgres_url, "t"))
        listed = {cid for cid, _ in want}
        lost = [w for w in stored if w[0] in listed][:3]
        assert len(lost) == 3
        # One write lost in each tier alone.
        _drop_postgres_write(postgres_url, "t", lost[0])
        client = redis_lib.Redis.from_url(REDIS_URL)
        client.hdel(f"{redis_prefix}:{{t}}:w:{SEP}{lost[1][0]}", f"{lost[1][1]}{SEP}{lost[1][2]}")
        client.close()
        _drop_local_write(saver.sqlite_path or "", "t", lost[2])
        assert _page(saver, "t", face)[0] == want
        assert set(stored) <= _writes(postgres_url, "t")
        assert (lost[1][1], lost[1][2]) in _redis_writes(redis_prefix, "t", lost[1][0])
        assert set(stored) <= _local_writes(saver.sqlite_path or "", "t")


@pytest.mark.parametrize("face", ["sync", "async"])
def test_tiers_that_list_different_checkpoints_still_serve_every_write(
    make_saver: SaverFactory, postgres_url: str, redis_prefix: str, face: str
) -> None:
    """Redis lost a checkpoint's row (the second newest) but kept its writes, and one of
    those writes is lost in Postgres and in the local cache: Redis alone has
    it, and its page does not name that checkpoint. The tiers' pages differ,
    so the writes are asked of every tier, and the union is served."""
    with make_saver("sqlite+redis+postgres", lease_linger=0) as saver:
        saver.setup()
        loop_graph(6).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
        want = _reference(saver, "t")
        lost_row = want[1][0]  # the newest has no pending writes
        _drop_redis_checkpoint(redis_prefix, "t", lost_row)
        lost = sorted(w for w in _writes(postgres_url, "t") if w[0] == lost_row)[0]
        _drop_postgres_write(postgres_url, "t", lost)
        _drop_local_write(saver.sqlite_path or "", "t", lost)
        page, calls = _page(saver, "t", face, count=True)
        assert page == want
        assert calls["postgres.read_writes"] == calls["redis.read_writes"] == 1  # asked again, every tier


def test_a_checkpoint_still_owed_gets_every_tiers_writes(
    make_saver: SaverFactory, postgres_url: str, redis_prefix: str
) -> None:
    """A checkpoint still owed to both shared tiers (in the local journal,
    not shipped) whose writes reached them already (LangGraph overlaps a
    step's writes with its put), and one of those writes lost in the local
    file: no shared tier lists the checkpoint, so none gave its writes with
    the page; the read asks every tier, and the task's writes are whole.
    (Sync face only: the state is made by hand, with newer checkpoints
    shipped, and the async face's first call in a new event loop ships what
    is owed, which drops such an entry as superseded. Both faces run the
    same reader, `reads_async.py` and its generated twin.)"""
    face = "sync"
    with make_saver("sqlite+redis+postgres", lease_linger=0) as saver:
        saver.setup()
        loop_graph(6).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
        saver._runtime.replicator.stop()  # nothing shipped from here on
        want = _reference(saver, "t")
        owed = want[1][0]  # the newest has no pending writes
        _drop_redis_checkpoint(redis_prefix, "t", owed)
        with psycopg.connect(postgres_url) as conn:
            conn.execute("DELETE FROM lgd_checkpoints WHERE thread_id = 't' AND checkpoint_id = %s", (owed,))
        lost = sorted(w for w in _writes(postgres_url, "t") if w[0] == owed)[0]
        with sqlite3.connect(saver.sqlite_path or "") as conn:
            conn.execute(
                "INSERT INTO lgd_journal (kind, thread_id, checkpoint_ns, checkpoint_id, task_id, created_at, owed, acked)"
                " VALUES ('checkpoint', 't', '', ?, NULL, ?, 'redis,postgres', 0)",
                (owed, time.time()),
            )
            conn.execute(
                "DELETE FROM lgd_writes WHERE thread_id = 't' AND checkpoint_id = ? AND task_id = ? AND idx = ?", lost
            )
        assert _page(saver, "t", face)[0] == want
