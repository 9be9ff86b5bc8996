"""`list` of a thread without ``checkpoint_ns`` (``saver.list({"configurable":
{"thread_id": t}}, limit=10)``): the newest checkpoints across the thread's
namespaces, read from an index in SQLite and Postgres, not sorted from every
checkpoint of the thread. Without that index, such a call on a thread of
10,000 checkpoints read them all (52 ms against 1 ms for 100, SQLite alone).

Here: the answer is right on every tier (newest first across namespaces,
with ``before`` and ``limit``), and the statements the tiers run are served
in order by an index (their query plans), not timed.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_durable import DurableSaver
from langgraph_durable.tiers.postgres.tier_async import MIGRATIONS

from .conftest import SaverFactory

NAMESPACES = ["", "child:1", "child:2"]


def _fill(saver: DurableSaver, thread: str, count: int) -> list[tuple[str, str]]:
    """`count` checkpoints spread over three namespaces, in id order; their
    (namespace, id), oldest first."""
    written = []
    for i in range(count):
        ns = NAMESPACES[i % len(NAMESPACES)]
        cp = generate_checkpoint(channel_values={"k": i})
        cp["channel_versions"] = {"k": f"{i + 1:032}.0"}
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        saver.put(config, cp, generate_metadata(step=i), {"k": cp["channel_versions"]["k"]})
        written.append((ns, cp["id"]))
    return written


def _listed(saver: DurableSaver, thread: str, **kwargs: Any) -> list[tuple[str, str]]:
    return [
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
        for t in saver.list({"configurable": {"thread_id": thread}}, **kwargs)
    ]


@pytest.mark.parametrize("tiers", ["sqlite", "postgres", "redis", "sqlite+redis+postgres"])
def test_a_thread_listed_without_a_namespace_is_newest_first_across_them(make_saver: SaverFactory, tiers: str) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver(tiers) as saver:
        written = _fill(saver, thread, 30)
        newest_first = written[::-1]
        assert _listed(saver, thread, limit=10) == newest_first[:10]
        assert _listed(saver, thread) == newest_first
        before = {"configurable": {"thread_id": thread, "checkpoint_id": newest_first[11][1]}}
        assert _listed(saver, thread, limit=5, before=before) == newest_first[12:17]


def test_sqlite_lists_a_thread_without_a_namespace_from_an_index(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite") as saver:
        _fill(saver, thread, 3)
        tier: Any = saver._sync_chain().raw_local or saver._sync_chain().raw_shared[0]
        statements: list[str] = []
        with tier._lock:
            tier._connect().set_trace_callback(statements.append)
        try:
            _listed(saver, thread, limit=10)
            before = {"configurable": {"thread_id": thread, "checkpoint_id": "ffffffff-ffff-ffff-ffff-ffffffffffff"}}
            _listed(saver, thread, limit=10, before=before)
        finally:
            with tier._lock:
                tier._connect().set_trace_callback(None)
        listing = [s for s in statements if s.lstrip().startswith("SELECT") and "FROM lgd_checkpoints" in s]
        assert len(listing) == 2, statements
        with sqlite3.connect(saver.sqlite_path or "") as conn:
            for statement in listing:
                plan = " / ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement))
                assert "lgd_checkpoints_thread_recent" in plan and "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_postgres_lists_a_thread_without_a_namespace_from_an_index(
    make_saver: SaverFactory, monkeypatch: pytest.MonkeyPatch, face: str
) -> None:
    """With sorting made prohibitive, the plan of each statement the tier
    sends for such a listing (with and without ``before``), with its own
    parameters, reads the index in order."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    sent: list[tuple[str, tuple[Any, ...]]] = []
    execute, aexecute = psycopg.Cursor.execute, psycopg.AsyncCursor.execute

    def recording(cur: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((str(query), tuple(params or ())))
        return execute(cur, query, params, **kwargs)

    async def arecording(cur: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((str(query), tuple(params or ())))
        return await aexecute(cur, query, params, **kwargs)

    before = {"configurable": {"thread_id": thread, "checkpoint_id": "ffffffff-ffff-ffff-ffff-ffffffffffff"}}
    async with make_saver("postgres") as saver:
        _fill(saver, thread, 3)
        url = saver._sync_chain().raw_shared[0].url
        # Caught at the driver, not rebuilt here, so a change to the tier's
        # statement (or to which statement it picks) is what gets planned.
        monkeypatch.setattr(psycopg.Cursor, "execute", recording)
        monkeypatch.setattr(psycopg.AsyncCursor, "execute", arecording)
        for kwargs in ({}, {"before": before}):
            if face == "sync":
                _listed(saver, thread, limit=10, **kwargs)
            else:
                [t async for t in saver.alist({"configurable": {"thread_id": thread}}, limit=10, **kwargs)]
        monkeypatch.undo()
    listing = [(q, p) for q, p in sent if q.lstrip().startswith("SELECT") and "FROM lgd_checkpoints" in q]
    assert len(listing) == 2, sent
    assert before["configurable"]["checkpoint_id"] in listing[1][1], listing  # `before` reached the server
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET enable_sort = off")
        conn.execute("SET enable_seqscan = off")
        for statement, params in listing:
            plan = " / ".join(r[0] for r in conn.execute("EXPLAIN " + statement, params).fetchall())
            assert "lgd_checkpoints_thread_recent" in plan and "Sort" not in plan, (statement, plan)


def test_an_index_left_invalid_by_a_failed_concurrent_build_is_built_again(make_saver: SaverFactory) -> None:
    """An operator's ``CREATE INDEX CONCURRENTLY`` that failed leaves the index
    INVALID, which ``CREATE INDEX IF NOT EXISTS`` takes for built: after the
    upgrade the index is valid and the planner reads it."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("postgres") as saver:
        _fill(saver, thread, 3)
        url = saver._sync_chain().raw_shared[0].url
    recent = "'lgd_checkpoints_thread_recent'::regclass"
    with psycopg.connect(url, autocommit=True) as conn:
        # Back to before the upgrade that brings the index, with a failed build's leftover.
        conn.execute("DELETE FROM lgd_migrations WHERE v >= %s", (len(MIGRATIONS) - 2,))
        conn.execute(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = {recent}")
    with make_saver("postgres") as saver:
        saver.setup()
        assert len(_listed(saver, thread, limit=2)) == 2
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(f"SELECT indisvalid FROM pg_index WHERE indexrelid = {recent}").fetchone() == (True,)
        versions = [r[0] for r in conn.execute("SELECT v FROM lgd_migrations ORDER BY v").fetchall()]
        assert versions == list(range(1, len(MIGRATIONS)))
