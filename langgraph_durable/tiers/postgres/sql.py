"""The SQL of the Postgres tier (`tier_async.py`), apart from its I/O.

One constant per statement, the schema as `MIGRATIONS`; statements that
depend on their arguments (which parts a query has, a table's name) are
small pure functions returning the text. Placeholders are psycopg's ``%s``.
Statements with an ``{ok}`` slot in their WHERE are parts of one fenced
statement: `chained` or `fenced` fills the slot and joins them.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

# -- schema -------------------------------------------------------------------

# The migration lock's key. Any constant; it only has to be the same in every replica.
MIGRATION_LOCK = 0x4C4744_5552

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
    # A quarantined copy keeps the fields of its row (msgpack), so it can be
    # put back; the store's key fingerprint; per-thread writer leases.
    """
    ALTER TABLE lgd_quarantine ADD COLUMN IF NOT EXISTS fields bytea;
    CREATE TABLE IF NOT EXISTS lgd_meta (
        key text PRIMARY KEY,
        value text NOT NULL
    );
    CREATE TABLE IF NOT EXISTS lgd_leases (
        thread_id text PRIMARY KEY,
        holder text NOT NULL,
        token bigint NOT NULL,
        expires_at double precision NOT NULL
    );
    """,
    # A thread's newest checkpoints across its namespaces (`list` without
    # checkpoint_ns): read from this index, not sorted from all of them.
    # On a large table, create it first with CREATE INDEX CONCURRENTLY
    # under this name: the migration then finds it.
    """
    CREATE INDEX IF NOT EXISTS lgd_checkpoints_thread_recent ON lgd_checkpoints (thread_id, checkpoint_id);
    """,
    # A CREATE INDEX CONCURRENTLY that failed (cancelled, a deadlock, the
    # server restarted) leaves its index INVALID: never used by a query but
    # still kept up to date by every write, and taken by IF NOT EXISTS above
    # for one that exists. Build it again. (Non-concurrently: this holds the
    # table's writes meanwhile, as the migration above would have.)
    """
    DO $$
    BEGIN
        IF EXISTS (
            SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'lgd_checkpoints'::regclass
                AND c.relname = 'lgd_checkpoints_thread_recent' AND NOT i.indisvalid
        ) THEN
            DROP INDEX lgd_checkpoints_thread_recent;
        END IF;
    END $$;
    CREATE INDEX IF NOT EXISTS lgd_checkpoints_thread_recent ON lgd_checkpoints (thread_id, checkpoint_id);
    """,
    # A thread's notes of deleted checkpoints (`mark_gone`) go with the
    # thread (`DELETE_GONE_NOTES`): found by their keys' prefix, byte-wise
    # whatever the database's collation.
    """
    CREATE INDEX IF NOT EXISTS lgd_meta_key_bytes ON lgd_meta (key text_pattern_ops);
    """,
]

# Taken by the transaction that migrates, so replicas migrate one at a time
# (transaction-scoped: works behind a pooler in transaction mode).
LOCK_MIGRATIONS = "SELECT pg_advisory_xact_lock(%s)"
CREATE_MIGRATIONS_TABLE = "CREATE TABLE IF NOT EXISTS lgd_migrations (v integer PRIMARY KEY)"
# The schema version applied (0: none).
# Whether the store's tables are there at all (a read-only setup).
MIGRATIONS_TABLE = "SELECT to_regclass('lgd_migrations')"
SELECT_SCHEMA_VERSION = "SELECT coalesce(max(v), 0) FROM lgd_migrations"
INSERT_SCHEMA_VERSION = "INSERT INTO lgd_migrations (v) VALUES (%s)"

# -- fragments ----------------------------------------------------------------

_CP_COLS = "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, metadata::text, record"
_W_COLS = "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, record"
_NOW = "extract(epoch FROM clock_timestamp())::double precision"  # the server's clock
_UPDATE_CHECKPOINT = (
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    "parent_id = EXCLUDED.parent_id, run_id = EXCLUDED.run_id, "
    "metadata = EXCLUDED.metadata, record = EXCLUDED.record"
)

# -- writes (each with an {ok} slot: see `chained` and `fenced`) ---------------

# The new blobs of one checkpoint (thread, ns; channels, versions, records as arrays).
INSERT_CHECKPOINT_BLOBS = (
    "INSERT INTO lgd_blobs SELECT %s, %s, c, v, r FROM unnest(%s::text[], %s::text[], %s::bytea[]) AS u(c, v, r) "
    "WHERE {ok} ON CONFLICT DO NOTHING"
)
UPSERT_CHECKPOINT = (
    "INSERT INTO lgd_checkpoints SELECT %s, %s, %s, %s, %s, %s::jsonb, %s WHERE {ok} " + _UPDATE_CHECKPOINT
)
# Blobs of several checkpoints of one thread (thread; the rest as arrays).
INSERT_BATCH_BLOBS = (
    "INSERT INTO lgd_blobs SELECT %s, n, c, v, r "
    "FROM unnest(%s::text[], %s::text[], %s::text[], %s::bytea[]) AS u(n, c, v, r) "
    "WHERE {ok} ON CONFLICT DO NOTHING"
)
# Several checkpoints of one thread (thread; the rest as arrays).
UPSERT_BATCH_CHECKPOINTS = (
    "INSERT INTO lgd_checkpoints SELECT %s, n, i, p, ru, m::jsonb, r "
    "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[]) "
    "AS u(n, i, p, ru, m, r) WHERE {ok} " + _UPDATE_CHECKPOINT
)
# Pending writes of several checkpoints of one thread (thread; the rest as arrays), insert-or-ignore.
INSERT_BATCH_WRITES = (
    "INSERT INTO lgd_writes SELECT %s, n, ci, t, i, c, p, r FROM unnest("
    "%s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::text[], %s::bytea[]"
    ") AS u(n, ci, t, i, c, p, r) WHERE {ok} ON CONFLICT DO NOTHING"
)
_CHECKPOINT_WRITES = (
    "INSERT INTO lgd_writes SELECT %s, %s, %s, t, i, c, p, r "
    "FROM unnest(%s::text[], %s::int[], %s::text[], %s::text[], %s::bytea[]) AS u(t, i, c, p, r) "
    "WHERE {ok} ON CONFLICT "
)
# Pending writes of one checkpoint (thread, ns, checkpoint id; the rest as arrays), insert-or-ignore.
INSERT_WRITES = _CHECKPOINT_WRITES + "DO NOTHING"
# Pending writes of one checkpoint, replacing those under the same (task, idx).
UPSERT_WRITES = (
    _CHECKPOINT_WRITES + "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
    "channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, record = EXCLUDED.record"
)
# Up to this many rows a write passes them as VALUES rows, not as arrays
# unnested on the server: psycopg adapts a list parameter in Python, element
# by element, at several times the cost of scalars (`blobs_values`,
# `writes_values`). One statement text per row count, prepared once each.
VALUES_MAX_ROWS = 8


@functools.lru_cache(maxsize=256)
def _values(n: int, casts: Sequence[str]) -> str:
    row = "(" + ", ".join(f"%s::{c}" for c in casts) + ")"
    return ", ".join([row] * n)


@functools.lru_cache(maxsize=256)
def blobs_values(n: int) -> str:
    """`INSERT_CHECKPOINT_BLOBS` for `n` blobs (``n`` >= 1) given as rows:
    (thread, ns, channel, version, record) each."""
    return (
        f"INSERT INTO lgd_blobs SELECT * FROM (VALUES {_values(n, ('text',) * 4 + ('bytea',))}) AS u "
        "WHERE {ok} ON CONFLICT DO NOTHING"
    )


@functools.lru_cache(maxsize=256)
def writes_values(n: int, upsert: bool) -> str:
    """`INSERT_WRITES` / `UPSERT_WRITES` for `n` writes given as rows:
    (thread, ns, checkpoint id, task, idx, channel, task path, record) each."""
    casts = ("text", "text", "text", "text", "int", "text", "text", "bytea")
    head = f"INSERT INTO lgd_writes SELECT * FROM (VALUES {_values(n, casts)}) AS u WHERE {{ok}} ON CONFLICT "
    return head + (
        "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
        "channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, record = EXCLUDED.record"
        if upsert
        else "DO NOTHING"
    )


# One blob (executemany), replacing any copy under its key (read-repair).
UPSERT_BLOB = (
    "INSERT INTO lgd_blobs VALUES (%s, %s, %s, %s, %s) ON CONFLICT "
    "(thread_id, checkpoint_ns, channel, version) DO UPDATE SET record = EXCLUDED.record"
)


@functools.lru_cache(maxsize=256)
def chained(inserts: Sequence[str]) -> str:
    """`inserts` (each with an ``{ok}`` slot) as one unfenced statement: all
    but the last as CTEs."""
    parts = [q.format(ok="true") for q in inserts]
    ctes = ", ".join(f"w{i} AS ({q})" for i, q in enumerate(parts[:-1]))
    return f"WITH {ctes} {parts[-1]}" if ctes else parts[-1]


@functools.lru_cache(maxsize=256)
def fenced(inserts: Sequence[str], *, renew: bool = True) -> str:
    """`inserts` as one statement that first renews the lease if it still
    matches the fence, inserts nothing otherwise, and returns how many lease
    rows matched. Params: token, ttl, thread, holder, late, token, late,
    token, then the inserts'.

    Without `renew` the lease row is only share-locked (FOR SHARE), not
    renewed: a takeover's UPDATE still waits for the write to commit (and a
    write waits for a takeover under way, then sees the new holder), but two
    fenced writes of one run (a step's ``put_writes`` and ``put``) no longer
    wait for each other's commit. The params are the same (token and ttl
    unused)."""
    ok = "EXISTS (SELECT 1 FROM fence)"
    match = (
        "WHERE thread_id = %s AND holder = %s AND ((NOT %s AND token = %s AND expires_at > 0) OR (%s AND token >= %s))"
    )
    if renew:
        head = (
            "WITH fence AS (UPDATE lgd_leases SET expires_at = "
            f"CASE WHEN token = %s AND expires_at > 0 THEN {_NOW} + %s ELSE expires_at END {match} RETURNING token)"
        )
    else:
        head = f"WITH fence AS (SELECT token FROM lgd_leases, (SELECT %s::bigint, %s::float8) AS unused {match} FOR SHARE OF lgd_leases)"
    return (
        head + "".join(f", w{i} AS ({q.format(ok=ok)})" for i, q in enumerate(inserts)) + " SELECT count(*) FROM fence"
    )


# Group commit (`group.py`): most fenced writes a statement carries, and most rows.
GROUP_MAX_WRITES = 64
GROUP_MAX_ROWS = 4096
_GROUP_MATCH = "x.thread_id = f.t AND x.holder = f.h AND ((NOT f.l AND x.token = f.k AND x.expires_at > 0) OR (f.l AND x.token >= f.k))"
_GROUP_OK = "u.t IN (SELECT thread_id FROM fence)"
# Fenced writes of several threads as one statement, one transaction (group
# commit). Each thread's lease is checked as `fenced` checks one (renewed
# where its row says so, else share-locked), and a row is written only if
# its thread's lease matched. Returns the threads whose lease matched. One
# text for any number of rows (arrays, unnested on the server), so it is
# parsed and prepared once. Params, each an array: the fences (thread,
# holder, late, token, ttl, renew), one per thread; the blobs (thread, ns,
# channel, version, record); the checkpoints (thread, ns, id, parent, run,
# metadata JSON, record); the pending writes inserted-or-ignored, then those
# replacing (thread, ns, checkpoint id, task, idx, channel, task path,
# record).
GROUPED = (
    "WITH f AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::bool[], %s::int8[], %s::float8[], %s::bool[]) "
    "AS f(t, h, l, k, ttl, rn)), "
    "fr AS (UPDATE lgd_leases AS x SET expires_at = CASE WHEN x.token = f.k AND x.expires_at > 0 "
    f"THEN {_NOW} + f.ttl ELSE x.expires_at END FROM f WHERE f.rn AND {_GROUP_MATCH} RETURNING x.thread_id), "
    f"fs AS (SELECT x.thread_id FROM lgd_leases AS x, f WHERE NOT f.rn AND {_GROUP_MATCH} FOR SHARE OF x), "
    "fence AS (SELECT thread_id FROM fr UNION ALL SELECT thread_id FROM fs), "
    "b AS (INSERT INTO lgd_blobs SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[]) "
    f"AS u(t, n, c, v, r) WHERE {_GROUP_OK} ON CONFLICT DO NOTHING), "
    "c AS (INSERT INTO lgd_checkpoints SELECT u.t, u.n, u.i, u.p, u.ru, u.m::jsonb, u.r FROM unnest("
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[]) "
    f"AS u(t, n, i, p, ru, m, r) WHERE {_GROUP_OK} {_UPDATE_CHECKPOINT}), "
    "w AS (INSERT INTO lgd_writes SELECT * FROM unnest("
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::text[], %s::bytea[]) "
    f"AS u(t, n, ci, tk, i, c, p, r) WHERE {_GROUP_OK} ON CONFLICT DO NOTHING), "
    "wu AS (INSERT INTO lgd_writes SELECT * FROM unnest("
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::text[], %s::bytea[]) "
    f"AS u(t, n, ci, tk, i, c, p, r) WHERE {_GROUP_OK} ON CONFLICT "
    "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
    "channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, record = EXCLUDED.record) "
    "SELECT thread_id FROM fence"
)

# -- reads --------------------------------------------------------------------

SELECT_CHECKPOINT = (
    f"SELECT {_CP_COLS} FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
)
# The blobs of (thread, ns) under these (channels, versions) arrays.
SELECT_BLOBS = (
    "SELECT channel, version, record FROM lgd_blobs WHERE thread_id = %s AND checkpoint_ns = %s "
    "AND (channel, version) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
)
# The pending writes of (thread, ns) of these checkpoint ids (an array).
SELECT_WRITES = (
    f"SELECT {_W_COLS} FROM lgd_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)"
)


def select_page(before: bool) -> str:
    """The newest checkpoints of (thread, ns) (older than one, if `before`)
    up to a limit, newest first, each joined with its pending writes.
    Params: thread, ns, [before], limit."""
    older = " AND checkpoint_id < %s" if before else ""
    return (
        f"WITH c AS (SELECT {_CP_COLS} FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s{older} "
        "ORDER BY checkpoint_id DESC LIMIT %s) "
        "SELECT c.*, w.task_id, w.idx, w.channel, w.task_path, w.record FROM c LEFT JOIN lgd_writes w "
        "ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id "
        "ORDER BY c.checkpoint_id DESC"
    )


def select_checkpoints(
    *, thread_id: bool, ns: bool, checkpoint_id: bool, before: bool, filter: bool, limit: bool
) -> str:
    """Checkpoints newest first, narrowed by the parts given, whose params
    come in this order: thread, ns, checkpoint id, before, the metadata
    `filter` (jsonb containment), the limit."""
    wheres: list[str] = []
    for column, given in (("thread_id", thread_id), ("checkpoint_ns", ns), ("checkpoint_id", checkpoint_id)):
        if given:
            wheres.append(f"{column} = %s")
    if before:
        wheres.append("checkpoint_id < %s")
    if filter:
        wheres.append("metadata @> %s")
    sql = f"SELECT {_CP_COLS} FROM lgd_checkpoints"
    if wheres:
        sql += " WHERE " + " AND ".join(wheres)
    sql += " ORDER BY checkpoint_id DESC"
    if limit:
        sql += " LIMIT %s"
    return sql


# The newest checkpoint of (thread, ns), the value of one meta key (the
# thread's deletion marker) and the checkpoint's pending writes: one row per
# write, at least one row (all NULL but the marker when there is no checkpoint).
SELECT_HEAD = (
    f"WITH h AS (SELECT {_CP_COLS} FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s "
    "ORDER BY checkpoint_id DESC LIMIT 1) "
    "SELECT h.*, (SELECT value FROM lgd_meta WHERE key = %s), "
    "w.task_id, w.idx, w.channel, w.task_path, w.record "
    "FROM (SELECT 1) AS one LEFT JOIN h ON true LEFT JOIN lgd_writes w "
    "ON w.thread_id = h.thread_id AND w.checkpoint_ns = h.checkpoint_ns AND w.checkpoint_id = h.checkpoint_id"
)
# Every thread with a checkpoint, a blob or a pending write.
SELECT_THREAD_IDS = (
    "SELECT thread_id FROM lgd_checkpoints UNION SELECT thread_id FROM lgd_blobs "
    "UNION SELECT thread_id FROM lgd_writes ORDER BY 1"
)
SELECT_THREAD_CHECKPOINTS = f"SELECT {_CP_COLS} FROM lgd_checkpoints WHERE thread_id = %s"
SELECT_THREAD_BLOBS = "SELECT thread_id, checkpoint_ns, channel, version, record FROM lgd_blobs WHERE thread_id = %s"
SELECT_THREAD_WRITES = f"SELECT {_W_COLS} FROM lgd_writes WHERE thread_id = %s"

# -- deletes ------------------------------------------------------------------

# A thread's rows, table by table (one transaction).
DELETE_THREAD = tuple(
    f"DELETE FROM {table} WHERE thread_id = %s"
    for table in ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_quarantine", "lgd_ledger")
)
# Checkpoint c of one of these runs (an array) and not one of the retained
# (thread, ns, checkpoint id) arrays.
_DOOMED = (
    "c.run_id = ANY(%s) AND (c.thread_id, c.checkpoint_ns, c.checkpoint_id) NOT IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))"
)
# The pending writes of the checkpoints `_DOOMED` picks.
DELETE_RUN_WRITES = (
    f"DELETE FROM lgd_writes w USING lgd_checkpoints c WHERE {_DOOMED} "
    "AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
    "AND w.checkpoint_id = c.checkpoint_id"
)
# The checkpoints `_DOOMED` picks.
DELETE_RUN_CHECKPOINTS = f"DELETE FROM lgd_checkpoints c WHERE {_DOOMED}"
DELETE_CHECKPOINT = "DELETE FROM lgd_checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
# A thread's checkpoints, then its pending writes, except those of the kept (ns, checkpoint id) arrays.
PRUNE_CHECKPOINTS_AND_WRITES = tuple(
    f"DELETE FROM {table} WHERE thread_id = %s AND (checkpoint_ns, checkpoint_id) NOT IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[]))"
    for table in ("lgd_checkpoints", "lgd_writes")
)
# A thread's blobs except those of the kept (ns, channel, version) arrays.
PRUNE_BLOBS = (
    "DELETE FROM lgd_blobs WHERE thread_id = %s AND (checkpoint_ns, channel, version) NOT IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))"
)

# -- the ledger ---------------------------------------------------------------

UPSERT_LEDGER = (
    "INSERT INTO lgd_ledger VALUES (%s, %s, %s) ON CONFLICT (thread_id, key) DO UPDATE SET record = EXCLUDED.record"
)
INSERT_LEDGER_IF_ABSENT = "INSERT INTO lgd_ledger VALUES (%s, %s, %s) ON CONFLICT (thread_id, key) DO NOTHING"
# Replace a ledger entry only if it still holds the old record (params: new, thread, key, old).
SWAP_LEDGER = "UPDATE lgd_ledger SET record = %s WHERE thread_id = %s AND key = %s AND record = %s"
SELECT_LEDGER = "SELECT key, record FROM lgd_ledger WHERE thread_id = %s"

# -- the quarantine -----------------------------------------------------------

INSERT_QUARANTINE = (
    "INSERT INTO lgd_quarantine (thread_id, checkpoint_ns, kind, key, reason, record, fields) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s)"
)
_QUARANTINE = "SELECT id, thread_id, checkpoint_ns, kind, key, reason, record, detected_at, fields FROM lgd_quarantine"
SELECT_QUARANTINE = _QUARANTINE + " ORDER BY id"
SELECT_THREAD_QUARANTINE = _QUARANTINE + " WHERE thread_id = %s ORDER BY id"
# Quarantined copies by id (an array).
DELETE_QUARANTINED = "DELETE FROM lgd_quarantine WHERE id = ANY(%s)"


def delete_copy(table: str, where: str) -> str:
    """One exact copy of a live row: `where` (`base.live_row_where`) finds
    its key, and its record must match too (the last param)."""
    return f"DELETE FROM {table} WHERE {where} AND record = %s"


# -- store-wide settings ------------------------------------------------------

SELECT_META = "SELECT value FROM lgd_meta WHERE key = %s"
DELETE_META = "DELETE FROM lgd_meta WHERE key = %s"
UPSERT_META = "INSERT INTO lgd_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
INSERT_META_IF_ABSENT = "INSERT INTO lgd_meta VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"
# The keys of an array set to '1' (`mark_gone`), each unless set.
# The thread's gone notes: keys in [low, high) byte-wise (`base.gone_range`),
# through the text_pattern_ops index.
DELETE_GONE_NOTES = "DELETE FROM lgd_meta WHERE key ~>=~ %s AND key ~<~ %s"
INSERT_GONE = "INSERT INTO lgd_meta SELECT k, '1' FROM unnest(%s::text[]) AS k ON CONFLICT (key) DO NOTHING"
# Which of these keys (an array) are set.
SELECT_META_KEYS = "SELECT key FROM lgd_meta WHERE key = ANY(%s)"

# -- writer leases: the server's clock ----------------------------------------

SELECT_LEASE = "SELECT holder, token, expires_at FROM lgd_leases WHERE thread_id = %s"
# The lease (all NULL if none) and the server's clock now, in one row.
SELECT_LEASE_AND_NOW = (
    f"SELECT l.holder, l.token, l.expires_at, {_NOW} FROM (SELECT 1) AS one LEFT JOIN lgd_leases l ON l.thread_id = %s"
)
# Take a lease that was never held (params: thread, holder, token, ttl); returns its expiry.
INSERT_LEASE = (
    f"INSERT INTO lgd_leases VALUES (%s, %s, %s, {_NOW} + %s) ON CONFLICT (thread_id) DO NOTHING RETURNING expires_at"
)
# Take a lease that still is as expected (params: holder, token, ttl, then
# the expected thread, holder, token, expiry); returns its expiry.
SWAP_LEASE = (
    f"UPDATE lgd_leases SET holder = %s, token = %s, expires_at = {_NOW} + %s "
    "WHERE thread_id = %s AND holder = %s AND token = %s AND expires_at = %s RETURNING expires_at"
)
# Extend a held, unreleased lease (params: ttl, thread, holder, token); returns its expiry.
KEEP_LEASE = (
    f"UPDATE lgd_leases SET expires_at = {_NOW} + %s "
    "WHERE thread_id = %s AND holder = %s AND token = %s AND expires_at > 0 RETURNING expires_at"
)
# `KEEP_LEASE` for many (params: ttl, threads, tokens, holder); returns the renewed threads.
RENEW_LEASES = (
    f"UPDATE lgd_leases l SET expires_at = {_NOW} + %s FROM unnest(%s::text[], %s::bigint[]) AS k(thread_id, token) "
    "WHERE l.thread_id = k.thread_id AND l.token = k.token AND l.holder = %s AND l.expires_at > 0 "
    "RETURNING l.thread_id"
)
# Release a lease (expiry 0) of this holder, with this token unless NULL (params: thread, holder, token, token).
RELEASE_LEASE = (
    "UPDATE lgd_leases SET expires_at = 0 WHERE thread_id = %s AND holder = %s AND (%s::bigint IS NULL OR token = %s)"
)
# A hand-off request on a holder's channel (`lease.hand_off_channel`).
NOTIFY_HAND_OFF = "SELECT pg_notify(%s, %s)"


# -- a schema of the saver's own (``postgres_schema=``) ------------------------

# The tables' names where a statement names them, never an index's name
# (``lgd_checkpoints_run``) nor a name already qualified.
_TABLE = re.compile(
    r'(?<![\w."\x00])(lgd_(?:checkpoints|blobs|writes|quarantine|ledger|meta|leases|migrations))(?![\w"])'
)
# DROP INDEX finds its index through the search_path unless qualified.
_DROPPED_INDEX = re.compile(r"(DROP INDEX (?:IF EXISTS )?)(lgd_\w+)")
# A row lock's OF names a table of the FROM clause, unqualified.
_LOCKED = re.compile(r"(FOR (?:NO KEY |KEY )?(?:SHARE|UPDATE) OF )lgd_")
# Postgres truncates identifiers to 63 bytes (NAMEDATALEN - 1).
MAX_SCHEMA_BYTES = 63


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualify(statement: str, schema: str | None = None) -> str:
    """`statement` with every table of the saver's in `schema` (None: as
    the connection's search_path finds them). Idempotent."""
    if schema is None:
        return statement
    schema_q = quote_ident(schema)
    statement = _DROPPED_INDEX.sub(lambda m: f"{m[1]}{schema_q}.{m[2]}", statement)
    statement = _LOCKED.sub(lambda m: f"{m[1]}\x00lgd_", statement)  # marked: left unqualified
    return _TABLE.sub(lambda m: f"{schema_q}.{m[1]}", statement).replace("\x00", "")


SCHEMA_EXISTS = "SELECT 1 FROM pg_namespace WHERE nspname = %s"


def create_schema(schema: str) -> str:
    return f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}"


def in_schema(schema: str | None) -> Any:
    """This module's statements and statement builders with the tables in
    `schema`: what a tier reads as ``self.sql``. Qualified names, not a
    ``SET search_path``: behind a transaction pooler each statement may run
    in another server session, and an application's pool keeps its own
    search_path."""
    module = sys.modules[__name__]
    if schema is None:
        return module
    names: dict[str, Any] = {}
    for name, value in vars(module).items():
        if name.startswith("_") or name in _NOT_STATEMENTS:
            continue
        if isinstance(value, str):
            names[name] = qualify(value, schema)
        elif isinstance(value, tuple | list) and all(isinstance(v, str) for v in value):
            names[name] = type(value)(qualify(v, schema) for v in value)
        elif isinstance(value, int):
            names[name] = value
        elif callable(value) and getattr(value, "__module__", None) == __name__:
            names[name] = _qualifying(inspect.unwrap(value), schema)
    names["qualify"] = functools.partial(qualify, schema=schema)
    return types.SimpleNamespace(**names)


def _qualifying(builder: Callable[..., str], schema: str) -> Callable[..., str]:
    @functools.lru_cache(maxsize=256)
    def built(*args: Any, **kwargs: Any) -> str:
        return qualify(builder(*args, **kwargs), schema)

    return built


_NOT_STATEMENTS = frozenset({"in_schema", "qualify", "quote_ident", "create_schema", "SCHEMA_EXISTS"})
