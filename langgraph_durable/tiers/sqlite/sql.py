"""The SQL of the SQLite tier (`tier.py`), apart from its I/O.

One constant per statement, the schema as `MIGRATIONS`; statements that
depend on their arguments (how many placeholders, which parts a query has,
a setting's value) are small pure functions returning the text.
"""

from __future__ import annotations

# -- schema -------------------------------------------------------------------

# Index = schema version. Append only; never edit a shipped entry.
MIGRATIONS: list[str] = [
    "",  # version 0: empty database
    """
    CREATE TABLE IF NOT EXISTS lgd_checkpoints (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        parent_id TEXT,
        run_id TEXT,
        metadata TEXT NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS lgd_checkpoints_run ON lgd_checkpoints(run_id)
        WHERE run_id IS NOT NULL;
    CREATE TABLE IF NOT EXISTS lgd_blobs (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        channel TEXT NOT NULL,
        version TEXT NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS lgd_writes (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        channel TEXT NOT NULL,
        task_path TEXT NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS lgd_journal (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        task_id TEXT,
        created_at REAL NOT NULL
    );
    """,
    """
    CREATE TABLE IF NOT EXISTS lgd_quarantine (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        reason TEXT NOT NULL,
        record BLOB NOT NULL,
        detected_at REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS lgd_quarantine_thread ON lgd_quarantine(thread_id);
    """,
    """
    CREATE TABLE IF NOT EXISTS lgd_ledger (
        thread_id TEXT NOT NULL,
        key TEXT NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (thread_id, key)
    ) WITHOUT ROWID;
    """,
    # A quarantined copy keeps the fields of its row (msgpack), so it can be
    # put back; the store's key fingerprint; per-thread writer leases.
    """
    ALTER TABLE lgd_quarantine ADD COLUMN fields BLOB;
    CREATE TABLE IF NOT EXISTS lgd_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS lgd_leases (
        thread_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token INTEGER NOT NULL,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID;
    """,
    # A journal entry names the shared tiers that still owe it (NULL: all),
    # whether one acknowledged it, and a write-behind write's fence.
    """
    ALTER TABLE lgd_journal ADD COLUMN owed TEXT;
    ALTER TABLE lgd_journal ADD COLUMN acked INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE lgd_journal ADD COLUMN fence TEXT;
    """,
    # When each thread was last used, for a size-bounded cache (`evict`).
    """
    CREATE TABLE IF NOT EXISTS lgd_thread_use (
        thread_id TEXT PRIMARY KEY,
        used_at REAL NOT NULL
    ) WITHOUT ROWID;
    """,
    # A thread's newest checkpoints across its namespaces (`list` without
    # checkpoint_ns): read from this index, not sorted from all of them.
    """
    CREATE INDEX IF NOT EXISTS lgd_checkpoints_thread_recent ON lgd_checkpoints(thread_id, checkpoint_id);
    """,
]


def migration(version: int) -> list[str]:
    """The statements of one migration, one by one (sqlite3 runs one per call)."""
    return [statement for statement in MIGRATIONS[version].split(";") if statement.strip()]


# The schema version applied (0: none), and setting it.
GET_USER_VERSION = "PRAGMA user_version"


def set_user_version(version: int) -> str:
    return f"PRAGMA user_version={version}"


# -- the connection -----------------------------------------------------------

GET_JOURNAL_MODE = "PRAGMA journal_mode"
ENABLE_WAL = "PRAGMA journal_mode=WAL"
# Moves whenever another connection commits to the file.
GET_DATA_VERSION = "PRAGMA data_version"
GET_PAGE_COUNT = "PRAGMA page_count"
GET_FREELIST_COUNT = "PRAGMA freelist_count"
GET_PAGE_SIZE = "PRAGMA page_size"
# Fail at once with SQLITE_BUSY instead of waiting for another connection's lock.
NO_BUSY_WAIT = "PRAGMA busy_timeout=0"


def set_busy_timeout(seconds: float) -> str:
    """Wait this long for another connection's lock (whole milliseconds)."""
    return f"PRAGMA busy_timeout={int(seconds * 1000)}"


WAL_CHECKPOINT_PASSIVE = "PRAGMA wal_checkpoint(PASSIVE)"


def set_wal_autocheckpoint(pages: int) -> str:
    return f"PRAGMA wal_autocheckpoint={int(pages)}"


def set_synchronous(fsync: bool) -> str:
    """FULL (every commit on disk when it returns) with `fsync`, else NORMAL."""
    return f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}"


# A write transaction holding the write lock from its first statement.
BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
# One write inside a group commit (`SqliteTier.grouped`).
SAVEPOINT = "SAVEPOINT lgd_write"
ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO lgd_write"
RELEASE_SAVEPOINT = "RELEASE lgd_write"

# -- fragments ----------------------------------------------------------------

_CP_COLS = "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, metadata, record"
_W_COLS = "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, record"
# Records are read as bytes whatever type a row holds: a record column that
# holds text (planted, or damaged by another program) then reads as a bad
# copy of that one record, instead of making sqlite3 raise for the whole read.
_RECORD = "CAST(record AS BLOB)"
_READ_CP_COLS = _CP_COLS.replace("record", _RECORD)
_READ_W_COLS = _W_COLS.replace("record", _RECORD)


def _marks(n: int) -> str:
    return ",".join("?" * n)


# -- writes -------------------------------------------------------------------

UPSERT_CHECKPOINT = f"INSERT OR REPLACE INTO lgd_checkpoints ({_CP_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
INSERT_BLOB = "INSERT OR IGNORE INTO lgd_blobs VALUES (?, ?, ?, ?, ?)"
# Replacing any copy under its key (read-repair).
UPSERT_BLOB = "INSERT OR REPLACE INTO lgd_blobs VALUES (?, ?, ?, ?, ?)"
INSERT_WRITE = "INSERT OR IGNORE INTO lgd_writes VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
UPSERT_WRITE = "INSERT OR REPLACE INTO lgd_writes VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

# -- the journal --------------------------------------------------------------

INSERT_JOURNAL = (
    "INSERT INTO lgd_journal (kind, thread_id, checkpoint_ns, checkpoint_id, task_id, created_at, owed, acked, fence) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE_JOURNAL_ENTRY = "DELETE FROM lgd_journal WHERE seq = ?"
# What is still owed of one entry, and whether some tier acknowledged it (params: owed, acked, seq).
UPDATE_JOURNAL_OWED = "UPDATE lgd_journal SET owed = ?, acked = acked OR ? WHERE seq = ?"
# Entries after a seq, of one thread (or all, if NULL), oldest first, up to a limit (-1: none).
SELECT_PENDING_JOURNAL = (
    "SELECT seq, kind, thread_id, checkpoint_ns, checkpoint_id, task_id, owed, acked, fence, created_at "
    "FROM lgd_journal WHERE seq > ? AND (? IS NULL OR thread_id = ?) ORDER BY seq LIMIT ?"
)
COUNT_JOURNAL = "SELECT count(*) FROM lgd_journal"


def select_journal_owed(n: int) -> str:
    """What `n` journal entries (by seq) still owe."""
    return f"SELECT seq, owed FROM lgd_journal WHERE seq IN ({_marks(n)})"


def select_journal_lag(tiers: int) -> str:
    """Entries owed, the oldest's creation time, then the entries owed to
    each of `tiers` shared tiers (one param each: its name)."""
    owes = "(owed IS NULL OR ',' || owed || ',' LIKE '%,' || ? || ',%')"
    columns = "".join(f", coalesce(sum({owes}), 0)" for _ in range(tiers))
    return f"SELECT count(*), min(created_at){columns} FROM lgd_journal"


# -- reads --------------------------------------------------------------------

SELECT_CHECKPOINT = (
    f"SELECT {_READ_CP_COLS} FROM lgd_checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
SELECT_CHECKPOINT_WRITES = (
    f"SELECT {_READ_W_COLS} FROM lgd_writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
# The newest checkpoint of (thread, ns) and, riding along, the value of one
# meta key (the thread's deletion marker; params: that key, thread, ns).
SELECT_HEAD = (
    f"SELECT {_READ_CP_COLS}, (SELECT value FROM lgd_meta WHERE key = ?) FROM lgd_checkpoints "
    "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1"
)


def select_blobs(n: int) -> str:
    """`n` blobs of (thread, ns) by (channel, version): params the `n` pairs,
    then thread and ns. CROSS JOIN keeps the keys the outer loop: a
    primary-key lookup each (a row-value IN would scan the thread's values)."""
    pairs = ",".join(["(?, ?)"] * n)
    return (
        f"WITH k(c, v) AS (VALUES {pairs}) SELECT b.channel, b.version, CAST(b.record AS BLOB) "
        "FROM k CROSS JOIN lgd_blobs b ON b.thread_id = ? AND b.checkpoint_ns = ? "
        "AND b.channel = k.c AND b.version = k.v"
    )


def select_writes(n: int) -> str:
    """The pending writes of (thread, ns) of `n` checkpoint ids."""
    return (
        f"SELECT {_READ_W_COLS} FROM lgd_writes WHERE thread_id = ? AND checkpoint_ns = ? "
        f"AND checkpoint_id IN ({_marks(n)})"
    )


def select_checkpoints(*, thread_id: bool, ns: bool, checkpoint_id: bool, before: bool, limit: int | None) -> str:
    """Checkpoints newest first, narrowed by the parts given, whose params
    come in this order: thread, ns, checkpoint id, before. The `limit` is
    written into the text."""
    wheres: list[str] = []
    for column, given in (("thread_id", thread_id), ("checkpoint_ns", ns), ("checkpoint_id", checkpoint_id)):
        if given:
            wheres.append(f"{column} = ?")
    if before:
        wheres.append("checkpoint_id < ?")
    sql = f"SELECT {_READ_CP_COLS} FROM lgd_checkpoints"
    if wheres:
        sql += " WHERE " + " AND ".join(wheres)
    sql += " ORDER BY checkpoint_id DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


# Every thread with a checkpoint, a blob or a pending write.
SELECT_THREAD_IDS = (
    "SELECT thread_id FROM lgd_checkpoints UNION SELECT thread_id FROM lgd_blobs "
    "UNION SELECT thread_id FROM lgd_writes ORDER BY 1"
)
SELECT_THREAD_CHECKPOINTS = f"SELECT {_READ_CP_COLS} FROM lgd_checkpoints WHERE thread_id = ?"
SELECT_THREAD_BLOBS = f"SELECT thread_id, checkpoint_ns, channel, version, {_RECORD} FROM lgd_blobs WHERE thread_id = ?"
SELECT_THREAD_WRITES = f"SELECT {_READ_W_COLS} FROM lgd_writes WHERE thread_id = ?"

# -- deletes ------------------------------------------------------------------

# A thread's rows, table by table (one transaction).
DELETE_THREAD = tuple(
    f"DELETE FROM {table} WHERE thread_id = ?"
    for table in ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_journal", "lgd_quarantine", "lgd_ledger")
)
# The thread's gone notes: keys in [low, high) (`base.gone_range`; BINARY
# collation compares UTF-8 bytes).
DELETE_GONE_NOTES = "DELETE FROM lgd_meta WHERE key >= ? AND key < ?"
DELETE_CHECKPOINT = "DELETE FROM lgd_checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
# The pending writes of one checkpoint.
DELETE_CHECKPOINT_WRITES = "DELETE FROM lgd_writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
DELETE_BLOB = "DELETE FROM lgd_blobs WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
# The (ns, checkpoint id) of a thread's checkpoints, of its pending writes; the keys of its blobs.
SELECT_THREAD_CHECKPOINT_KEYS = "SELECT DISTINCT checkpoint_ns, checkpoint_id FROM lgd_checkpoints WHERE thread_id = ?"
SELECT_THREAD_WRITE_KEYS = "SELECT DISTINCT checkpoint_ns, checkpoint_id FROM lgd_writes WHERE thread_id = ?"
SELECT_THREAD_BLOB_KEYS = "SELECT checkpoint_ns, channel, version FROM lgd_blobs WHERE thread_id = ?"


def select_run_checkpoints(n: int) -> str:
    """The keys of the checkpoints of `n` runs."""
    return f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM lgd_checkpoints WHERE run_id IN ({_marks(n)})"


# -- the ledger ---------------------------------------------------------------

UPSERT_LEDGER = "INSERT OR REPLACE INTO lgd_ledger VALUES (?, ?, ?)"
INSERT_LEDGER_IF_ABSENT = "INSERT OR IGNORE INTO lgd_ledger VALUES (?, ?, ?)"
# Replace a ledger entry only if it still holds the old record (params: new, thread, key, old).
SWAP_LEDGER = "UPDATE lgd_ledger SET record = ? WHERE thread_id = ? AND key = ? AND record = ?"
SELECT_LEDGER = f"SELECT key, {_RECORD} FROM lgd_ledger WHERE thread_id = ?"

# -- the quarantine -----------------------------------------------------------

INSERT_QUARANTINE = (
    "INSERT INTO lgd_quarantine (thread_id, checkpoint_ns, kind, key, reason, record, detected_at, fields) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_QUARANTINE = (
    f"SELECT id, thread_id, checkpoint_ns, kind, key, reason, {_RECORD}, detected_at, fields FROM lgd_quarantine"
)
SELECT_QUARANTINE = _QUARANTINE + " ORDER BY id"
SELECT_THREAD_QUARANTINE = _QUARANTINE + " WHERE thread_id = ? ORDER BY id"
DELETE_QUARANTINED = "DELETE FROM lgd_quarantine WHERE id = ?"


def delete_copy(table: str, where: str) -> str:
    """One exact copy of a live row: `where` (`base.live_row_where`) finds
    its key, and its record must match too (the last param)."""
    return f"DELETE FROM {table} WHERE {where} AND {_RECORD} = ?"


# -- store-wide settings ------------------------------------------------------

SELECT_META = "SELECT value FROM lgd_meta WHERE key = ?"
DELETE_META = "DELETE FROM lgd_meta WHERE key = ?"
UPSERT_META = "INSERT OR REPLACE INTO lgd_meta VALUES (?, ?)"
INSERT_META_IF_ABSENT = "INSERT OR IGNORE INTO lgd_meta VALUES (?, ?)"
# One key set to '1' (`mark_gone`).
UPSERT_GONE = "INSERT OR REPLACE INTO lgd_meta VALUES (?, '1')"


def select_meta_keys(n: int) -> str:
    """Which of `n` meta keys are set."""
    return f"SELECT key FROM lgd_meta WHERE key IN ({_marks(n)})"


# -- a size-bounded cache -----------------------------------------------------

# When a thread was last used (params: thread, time); a later use stays.
UPSERT_THREAD_USE = (
    "INSERT INTO lgd_thread_use VALUES (?, ?) "
    "ON CONFLICT(thread_id) DO UPDATE SET used_at = MAX(used_at, excluded.used_at)"
)
SELECT_CHECKPOINT_THREADS = "SELECT DISTINCT thread_id FROM lgd_checkpoints"
SELECT_WRITE_THREADS = "SELECT DISTINCT thread_id FROM lgd_writes"
# The threads the journal still owes a shared tier.
SELECT_JOURNAL_THREADS = "SELECT DISTINCT thread_id FROM lgd_journal"
SELECT_THREAD_USE = "SELECT thread_id, used_at FROM lgd_thread_use"
# A thread's local copy, table by table (the journal and quarantine stay).
EVICT_THREAD = tuple(
    f"DELETE FROM {table} WHERE thread_id = ?"
    for table in ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_thread_use")
)

# -- writer leases: the local clock -------------------------------------------

# A fenced write holds if the lease is the fence's holder's: with the fence's
# token and not released (expires_at 0), or for a write shipped late (write-
# behind) with that token or a newer one of the same holder: a newer token of
# another holder (a takeover) refuses it. Params: late, token, late, token.
# Only the fence's own live lease is renewed (params: token, new expiry).
_FENCE_HOLDS = "((NOT ? AND token = ? AND expires_at > 0) OR (? AND token >= ?))"
_RENEWED = "CASE WHEN token = ? AND expires_at > 0 THEN ? ELSE expires_at END"
# Renew the lease if the fence holds (params: token, new expiry, thread,
# holder, late, token, late, token); no row changed: the lease was lost.
RENEW_FENCE = f"UPDATE lgd_leases SET expires_at = {_RENEWED} WHERE thread_id = ? AND holder = ? AND {_FENCE_HOLDS}"
SELECT_LEASE = "SELECT holder, token, expires_at FROM lgd_leases WHERE thread_id = ?"
UPSERT_LEASE = "INSERT OR REPLACE INTO lgd_leases VALUES (?, ?, ?, ?)"
# Extend a held, unreleased lease (params: new expiry, thread, holder, token).
KEEP_LEASE = "UPDATE lgd_leases SET expires_at = ? WHERE thread_id = ? AND holder = ? AND token = ? AND expires_at > 0"
# Release a lease (expiry 0) of this holder, with this token unless NULL (params: thread, holder, token, token).
RELEASE_LEASE = "UPDATE lgd_leases SET expires_at = 0 WHERE thread_id = ? AND holder = ? AND (? IS NULL OR token = ?)"
