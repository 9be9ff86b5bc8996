"""The Postgres tier: the system of record.

Tables are keyed by thread first, so they partition cleanly by thread.
Schema changes go through `MIGRATIONS` (index = version, append only),
applied under an advisory lock so many replicas can call ``setup()`` at once.

This is the async source; ``postgres.py`` is generated from it by
``tools/generate_sync.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..records import BlobRow, CheckpointRow, WriteRow
from .base import BlobKey, QuarantinedRecord, ThreadRecords, redact, unavailable_on

DEFAULT_POOL_SIZE = 10
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# Any constant; it only has to be the same in every replica.
_MIGRATION_LOCK = 0x4C4744_5552

# Index = schema version. Append only; never edit a shipped entry.
MIGRATIONS: list[str] = [
    "",  # version 0: empty database
    """
    CREATE TABLE IF NOT EXISTS lgd_checkpoints (
        thread_id text NOT NULL,
        checkpoint_ns text NOT NULL,
        checkpoint_id text NOT NULL,
        parent_id text,
        run_id text,
        metadata jsonb NOT NULL,
        record bytea NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    CREATE INDEX IF NOT EXISTS lgd_checkpoints_run ON lgd_checkpoints (run_id)
        WHERE run_id IS NOT NULL;
    CREATE TABLE IF NOT EXISTS lgd_blobs (
        thread_id text NOT NULL,
        checkpoint_ns text NOT NULL,
        channel text NOT NULL,
        version text NOT NULL,
        record bytea NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
    );
    CREATE TABLE IF NOT EXISTS lgd_writes (
        thread_id text NOT NULL,
        checkpoint_ns text NOT NULL,
        checkpoint_id text NOT NULL,
        task_id text NOT NULL,
        idx integer NOT NULL,
        channel text NOT NULL,
        task_path text NOT NULL,
        record bytea NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    );
    """,
    """
    CREATE TABLE IF NOT EXISTS lgd_quarantine (
        id bigserial PRIMARY KEY,
        thread_id text NOT NULL,
        checkpoint_ns text NOT NULL,
        kind text NOT NULL,
        key text NOT NULL,
        reason text NOT NULL,
        record bytea NOT NULL,
        detected_at double precision NOT NULL DEFAULT extract(epoch FROM now())
    );
    CREATE INDEX IF NOT EXISTS lgd_quarantine_thread ON lgd_quarantine (thread_id);
    """,
    """
    CREATE TABLE IF NOT EXISTS lgd_ledger (
        thread_id text NOT NULL,
        key text NOT NULL,
        record bytea NOT NULL,
        PRIMARY KEY (thread_id, key)
    );
    """,
]

_CP_COLS = "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, metadata::text, record"
_W_COLS = "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, record"
_ERRORS = (psycopg.OperationalError,)


def _cp(r: TupleRow) -> CheckpointRow:
    return CheckpointRow(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]))


def _w(r: TupleRow) -> WriteRow:
    return WriteRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bytes(r[7]))


class AsyncPostgresTier:
    """Checkpoints in Postgres through a psycopg connection pool."""

    name = "postgres"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.where = redact(url)
        self.connect_timeout = connect_timeout
        self.pool = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=connect_timeout,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(connect_timeout))},
        )
        self._opened = False

    async def _open(self) -> None:
        if not self._opened:
            with unavailable_on("postgres", self.where, *_ERRORS):
                await self.pool.open(wait=True, timeout=self.connect_timeout)
            self._opened = True

    async def setup(self) -> None:
        await self._open()
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                await conn.execute("CREATE TABLE IF NOT EXISTS lgd_migrations (v integer PRIMARY KEY)")
                cur = await conn.execute("SELECT coalesce(max(v), 0) FROM lgd_migrations")
                row = await cur.fetchone()
                current = row[0] if row else 0
                for version in range(current + 1, len(MIGRATIONS)):
                    await conn.execute(MIGRATIONS[version])
                    await conn.execute("INSERT INTO lgd_migrations (v) VALUES (%s)", (version,))

    async def close(self) -> None:
        await self.pool.close()
        self._opened = False

    # -- writes ---------------------------------------------------------------------

    async def write_checkpoint(self, row: CheckpointRow, blobs: Sequence[BlobRow]) -> None:
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction(), conn.pipeline():
                await conn.execute(
                    "INSERT INTO lgd_checkpoints VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s) "
                    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                    "parent_id = EXCLUDED.parent_id, run_id = EXCLUDED.run_id, "
                    "metadata = EXCLUDED.metadata, record = EXCLUDED.record",
                    (
                        row.thread_id,
                        row.checkpoint_ns,
                        row.checkpoint_id,
                        row.parent_id,
                        row.run_id,
                        row.metadata_json,
                        row.envelope,
                    ),
                )
                if blobs:
                    async with conn.cursor() as cur:
                        await cur.executemany(
                            "INSERT INTO lgd_blobs VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                            [(b.thread_id, b.checkpoint_ns, b.channel, b.version, b.envelope) for b in blobs],
                        )

    async def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        if not blobs:
            return
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO lgd_blobs VALUES (%s, %s, %s, %s, %s) ON CONFLICT "
                    "(thread_id, checkpoint_ns, channel, version) DO UPDATE SET record = EXCLUDED.record",
                    [(b.thread_id, b.checkpoint_ns, b.channel, b.version, b.envelope) for b in blobs],
                )

    async def write_writes(self, rows: Sequence[WriteRow], upsert: bool) -> None:
        if not rows:
            return
        conflict = (
            "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
            "channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, record = EXCLUDED.record"
            if upsert
            else "DO NOTHING"
        )
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                await cur.executemany(
                    f"INSERT INTO lgd_writes VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT {conflict}",
                    [
                        (
                            w.thread_id,
                            w.checkpoint_ns,
                            w.checkpoint_id,
                            w.task_id,
                            w.idx,
                            w.channel,
                            w.task_path,
                            w.envelope,
                        )
                        for w in rows
                    ],
                )

    # -- reads ------------------------------------------------------------------------

    async def _fetchall(self, sql: str, params: Sequence[Any]) -> list[TupleRow]:
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchall()

    async def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        rows = await self._fetchall(
            f"SELECT {_CP_COLS} FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
            (thread_id, ns, checkpoint_id),
        )
        return _cp(rows[0]) if rows else None

    async def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        if not keys:
            return {}
        rows = await self._fetchall(
            "SELECT channel, version, record FROM lgd_blobs WHERE thread_id = %s AND checkpoint_ns = %s "
            "AND (channel, version) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
            (thread_id, ns, [c for c, _ in keys], [v for _, v in keys]),
        )
        return {(r[0], r[1]): BlobRow(thread_id, ns, r[0], r[1], bytes(r[2])) for r in rows}

    async def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        if not checkpoint_ids:
            return []
        rows = await self._fetchall(
            f"SELECT {_W_COLS} FROM lgd_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)",
            (thread_id, ns, list(checkpoint_ids)),
        )
        return [_w(r) for r in rows]

    async def latest_id(self, thread_id: str, ns: str) -> str | None:
        rows = await self._fetchall(
            "SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id, ns),
        )
        return rows[0][0] if rows else None

    async def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        wheres: list[str] = []
        params: list[Any] = []
        for column, value in (("thread_id", thread_id), ("checkpoint_ns", ns), ("checkpoint_id", checkpoint_id)):
            if value is not None:
                wheres.append(f"{column} = %s")
                params.append(value)
        if before is not None:
            wheres.append("checkpoint_id < %s")
            params.append(before)
        if filter:
            # Containment narrows the scan on the server; the chain re-checks
            # exact equality on the verified record.
            wheres.append("metadata @> %s")
            params.append(Jsonb(json.loads(json.dumps(filter, default=str))))
        sql = f"SELECT {_CP_COLS} FROM lgd_checkpoints"
        if wheres:
            sql += " WHERE " + " AND ".join(wheres)
        sql += " ORDER BY checkpoint_id DESC"
        if limit is not None and not filter:
            sql += " LIMIT %s"
            params.append(limit)
        return [_cp(r) for r in await self._fetchall(sql, params)]

    # -- deletes ----------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> None:
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction():
                for table in ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_quarantine", "lgd_ledger"):
                    await conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (thread_id,))

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "DELETE FROM lgd_writes w USING lgd_checkpoints c WHERE c.run_id = ANY(%s) "
                    "AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
                    "AND w.checkpoint_id = c.checkpoint_id",
                    (list(run_ids),),
                )
                await conn.execute("DELETE FROM lgd_checkpoints WHERE run_id = ANY(%s)", (list(run_ids),))

    async def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn:
                await conn.execute(
                    "DELETE FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
                    (thread_id, ns, checkpoint_id),
                )

    async def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO lgd_ledger VALUES (%s, %s, %s) ON CONFLICT (thread_id, key) DO UPDATE SET record = EXCLUDED.record",
                    (thread_id, key, envelope),
                )

    async def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        rows = await self._fetchall("SELECT key, record FROM lgd_ledger WHERE thread_id = %s", (thread_id,))
        return {r[0]: bytes(r[1]) for r in rows}

    async def thread_ids(self) -> list[str]:
        rows = await self._fetchall(
            "SELECT thread_id FROM lgd_checkpoints UNION SELECT thread_id FROM lgd_blobs "
            "UNION SELECT thread_id FROM lgd_writes ORDER BY 1",
            (),
        )
        return [r[0] for r in rows]

    async def thread_records(self, thread_id: str) -> ThreadRecords:
        """Every live record of one thread, for `verify` and `repair`."""
        cps = await self._fetchall(f"SELECT {_CP_COLS} FROM lgd_checkpoints WHERE thread_id = %s", (thread_id,))
        blobs = await self._fetchall(
            "SELECT thread_id, checkpoint_ns, channel, version, record FROM lgd_blobs WHERE thread_id = %s",
            (thread_id,),
        )
        writes = await self._fetchall(f"SELECT {_W_COLS} FROM lgd_writes WHERE thread_id = %s", (thread_id,))
        return ThreadRecords(
            [_cp(r) for r in cps],
            [BlobRow(r[0], r[1], r[2], r[3], bytes(r[4])) for r in blobs],
            [_w(r) for r in writes],
        )

    async def quarantine(self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes) -> None:
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO lgd_quarantine (thread_id, checkpoint_ns, kind, key, reason, record) "
                    "VALUES (%s, %s, %s, %s, %s, %s)",
                    (thread_id, ns, kind, key, reason, envelope),
                )

    async def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        sql = "SELECT thread_id, checkpoint_ns, kind, key, reason, record, detected_at FROM lgd_quarantine"
        if thread_id is None:
            rows = await self._fetchall(sql + " ORDER BY id", ())
        else:
            rows = await self._fetchall(sql + " WHERE thread_id = %s ORDER BY id", (thread_id,))
        return [QuarantinedRecord("postgres", r[0], r[1], r[2], r[3], r[4], bytes(r[5]), r[6]) for r in rows]

    async def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        kept_ns = [ns for ns, _ in keep]
        kept_ids = [cid for _, cid in keep]
        with unavailable_on("postgres", self.where, *_ERRORS):
            async with self.pool.connection() as conn, conn.transaction():
                for table in ("lgd_checkpoints", "lgd_writes"):
                    await conn.execute(
                        f"DELETE FROM {table} WHERE thread_id = %s AND (checkpoint_ns, checkpoint_id) NOT IN "
                        "(SELECT * FROM unnest(%s::text[], %s::text[]))",
                        (thread_id, kept_ns, kept_ids),
                    )
                await conn.execute(
                    "DELETE FROM lgd_blobs WHERE thread_id = %s AND (checkpoint_ns, channel, version) NOT IN "
                    "(SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
                    (thread_id, [b[0] for b in keep_blobs], [b[1] for b in keep_blobs], [b[2] for b in keep_blobs]),
                )
