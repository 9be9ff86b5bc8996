"""Group commit in the local SQLite tier (issue 9): the async face commits
the writes of concurrent runs together, each in a savepoint of its own.

Real SQLite files; no servers.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable.model.lease import Fence
from langgraph_durable.model.records import BlobRow, CheckpointRow
from langgraph_durable.tiers.sqlite.tier import AsyncSqliteTier, SqliteTier


def _row(thread: str, cid: str) -> tuple[CheckpointRow, list[BlobRow]]:
    return (
        CheckpointRow(thread, "", cid, None, "run", "{}", f"checkpoint {cid}".encode()),
        [BlobRow(thread, "", "messages", cid, f"value {cid}".encode())],
    )


def _stored(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT checkpoint_id FROM lgd_checkpoints")}


def _blobs(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT version FROM lgd_blobs")}


def _journal(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM lgd_journal").fetchone()[0])


def test_a_write_that_fails_in_a_group_leaves_nothing_and_the_others_are_committed(tmp_path: Path) -> None:
    path = tmp_path / "local.sqlite"
    tier = SqliteTier(str(path))
    tier.setup()
    try:
        bad_row, bad_blobs = _row("t", "c2")

        def half_written() -> None:
            with tier._tx() as conn:  # what a write does, then fails midway
                tier._insert_checkpoint(conn, bad_row, bad_blobs)
                raise ValueError("the serializer refused it")

        outcomes = tier.grouped(
            [
                lambda: tier.write_checkpoint(*_row("t", "c1"), journal=True),
                half_written,
                lambda: tier.write_checkpoint(*_row("t", "c3"), journal=True),
            ]
        )
        assert [ok for ok, _ in outcomes] == [True, False, True]
        assert isinstance(outcomes[1][1], ValueError)
        assert isinstance(outcomes[0][1], int) and isinstance(outcomes[2][1], int)  # journal entries
        assert _stored(path) == {"c1", "c3"} and _blobs(path) == {"c1", "c3"}
        assert _journal(path) == 2
        # The tier goes on as usual afterwards.
        tier.write_checkpoint(*_row("t", "c4"))
        assert _stored(path) == {"c1", "c3", "c4"}
    finally:
        tier.close()


def test_a_group_whose_transaction_fails_stores_none_of_its_writes(tmp_path: Path) -> None:
    """SQLite rolls a whole transaction back on some errors (a full disk):
    then no write of the group was stored, and the group raises."""
    path = tmp_path / "local.sqlite"
    tier = SqliteTier(str(path))
    tier.setup()
    try:

        def disk_full() -> None:
            with tier._tx() as conn:
                conn.execute("ROLLBACK")  # as SQLite does by itself on SQLITE_FULL
                raise sqlite3.OperationalError("database or disk is full")

        with pytest.raises(Exception, match="disk is full"):
            tier.grouped([lambda: tier.write_checkpoint(*_row("t", "c1"), journal=True), disk_full])
        assert _stored(path) == set() and _journal(path) == 0
        tier.write_checkpoint(*_row("t", "c2"))
        assert _stored(path) == {"c2"}
    finally:
        tier.close()


def test_concurrent_async_writes_are_committed_in_groups_each_on_its_own(tmp_path: Path) -> None:
    """60 tasks writing at once: every write lands (or fails alone), and
    they took fewer commits than writes. With ``fsync`` (write-behind), where
    a commit waits for the disk and the writes go to the worker; without it
    a free tier takes each write on the event loop's thread at once
    (test_sqlite_on_caller.py)."""
    path = tmp_path / "local.sqlite"
    tier = SqliteTier(str(path), fsync=True)
    tier.setup()
    groups: list[int] = []
    plain = tier.grouped

    def counted(calls: Any) -> Any:
        groups.append(len(calls))
        return plain(calls)

    tier.grouped = counted  # type: ignore[method-assign]
    face = AsyncSqliteTier(tier)
    refused = 7

    async def one(i: int) -> Any:
        row, blobs = _row(f"t{i % 5}", f"c{i:03d}")
        if i == refused:
            # A fenced write whose lease is not held here: refused, alone.
            return await face.write_checkpoint(row, blobs, fence=Fence("t2", "someone", 1, 30.0, "sqlite"))
        return await face.write_checkpoint(row, blobs, journal=True)

    async def main() -> list[Any]:
        return await asyncio.gather(*(one(i) for i in range(60)), return_exceptions=True)

    try:
        results = asyncio.run(main())
        failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
        assert failed == [refused], results
        assert _stored(path) == {f"c{i:03d}" for i in range(60) if i != refused}
        assert _journal(path) == 59
        assert sum(groups) == 60 and len(groups) < 60 and max(groups) > 1, groups
    finally:
        asyncio.run(face.close())
        tier.close()


def test_acknowledging_many_journal_entries_at_once_keeps_what_each_still_owes(tmp_path: Path) -> None:
    """`journal_acked_many` (a run's end acknowledges all it shipped in a few
    statements): each entry ends as acknowledging it alone, in order, would
    leave it."""
    from langgraph_durable.model.backlog import Owed

    tier = SqliteTier(str(tmp_path / "local.sqlite"))
    tier.setup()
    both = ("redis", "postgres")
    seqs = []
    for i, owed in enumerate([Owed(both), Owed(both), Owed(both), Owed(both), True]):
        row, blobs = _row("t", f"c{i}")
        seqs.append(tier.write_checkpoint(row, blobs, journal=owed))
    a, b, c, d, e = seqs
    tier.journal_acked_many(
        [
            (a, ["redis"]),  # still owes postgres, now acknowledged by one tier
            (b, ["redis", "postgres"]),  # owes nothing: gone
            (c, ["redis"]),
            (c, ["postgres"]),  # the same entry twice: the second sees the first
            (e, ["postgres"]),  # owed to every shared tier (no list): still owes redis
            (999_999, ["redis"]),  # not in the journal: nothing happens
        ],
        everyone=both,
    )
    with sqlite3.connect(tmp_path / "local.sqlite") as conn:
        left = {seq: (owed, acked) for seq, owed, acked in conn.execute("SELECT seq, owed, acked FROM lgd_journal")}
    assert left == {a: ("postgres", 1), d: ("redis,postgres", 0), e: ("redis", 1)}
    assert [entry.seq for entry in tier.pending_journal()] == [a, d, e]
    tier.close()
