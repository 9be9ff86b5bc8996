"""The local SQLite tier: the embedded default, and the cache + journal in
front of the shared tiers.

One connection per saver, guarded by a lock. SQLite serializes writers
anyway, so a pool buys nothing inside one process; across processes WAL
mode plus a busy timeout and ``BEGIN IMMEDIATE`` (take the write lock up
front, so two writers never deadlock upgrading a read lock) keep
``database is locked`` away. The async face runs these same methods on one
worker thread, as aiosqlite does, so the SQL is written once (in
``sql.py`` beside it; this module does the I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import threading
import time
import types
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from ...errors import ConfigError, TierUnavailable
from ...model.backlog import JournalEntry, Owed, decode_fence, encode_fence
from ...model.lease import Fence, Lease, lease_lost, renew_every
from ...model.records import BlobRow, CheckpointRow, Row, WriteRow, metadata_matches
from ...model.roles import Role
from ..base import (
    BlobKey,
    Head,
    QuarantinedRecord,
    ThreadRecords,
    _fields,
    deleted_key,
    gone_key,
    gone_range,
    live_row_where,
    unavailable_on,
)
from . import sql

DEFAULT_BUSY_TIMEOUT_S = 30.0

P = ParamSpec("P")
R = TypeVar("R")

# A size-bounded cache evicts down to this share of its bound, so that it
# does not evict again at the very next write.
EVICT_TO = 0.8
# How often a bounded cache checks its size: every this many reads and
# writes, or this many seconds.
EVICT_CHECK_USES = 32
EVICT_CHECK_S = 2.0

# Channel values read by one statement (two parameters each).
BLOBS_PER_QUERY = 500
# WAL checkpoints (copying the WAL into the database file, with its fsyncs)
# are run off the write path, by `WalCheckpointer`, every this many write
# transactions (SQLite's own autocheckpoint runs one inside the commit that
# takes the WAL past 1000 pages: on average more than the commit itself).
# The writer's autocheckpoint stays, at `WAL_BACKSTOP_PAGES`, in case the
# background one falls behind (or cannot run).
WAL_CHECKPOINT_EVERY = 64
WAL_BACKSTOP_PAGES = 10_000


def _in_use(conn: sqlite3.Connection) -> int:
    """Bytes of the database in use: its pages less the free ones."""
    pages = conn.execute(sql.GET_PAGE_COUNT).fetchone()[0] - conn.execute(sql.GET_FREELIST_COUNT).fetchone()[0]
    return int(pages) * int(conn.execute(sql.GET_PAGE_SIZE).fetchone()[0])


def _text(value: bytes) -> str:
    """Text columns as str even when a row holds bytes that are not UTF-8
    (see `sql._RECORD`): such a key no longer matches what it was written as."""
    return value.decode("utf-8", "replace")


def _cp(row: tuple[Any, ...]) -> CheckpointRow:
    return CheckpointRow(row[0], row[1], row[2], row[3], row[4], row[5], bytes(row[6]))


def _w(r: tuple[Any, ...]) -> WriteRow:
    return WriteRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bytes(r[7]))


class WalCheckpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection, in a
    daemon thread, when kicked. PASSIVE never waits for the writer or for
    readers; durability is unchanged (a commit is durable in the WAL, with
    ``synchronous=NORMAL`` against a process crash, as before)."""

    def __init__(self, path: str, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0

    def kick(self) -> None:
        if self._thread is None or self._pid != os.getpid():
            self._pid = os.getpid()  # a forked child inherits no thread: start one anew
            self._thread = threading.Thread(target=self._run, name="langgraph-durable-wal-checkpoint", daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread is not threading.current_thread():
            thread.join(5.0)
        self._thread = None
        self._stopping = False

    def _run(self) -> None:
        conn = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(
                            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
                        )
                    conn.execute(sql.WAL_CHECKPOINT_PASSIVE).fetchall()
                except sqlite3.Error:
                    pass  # the writer's autocheckpoint (`WAL_BACKSTOP_PAGES`) is the backstop
        finally:
            if conn is not None:
                conn.close()


class SqliteTier:
    """Local SQLite storage. Thread-safe; every method is atomic."""

    name = "sqlite"
    role = Role.LOCAL

    def __init__(
        self,
        path: str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        fsync: bool = False,
        max_bytes: int | None = None,
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.fsync = fsync
        # A cache of the shared tiers bounded in size (`evict`): threads used
        # last, by this process, and what was written since the last check.
        self.max_bytes = max_bytes
        self._used: dict[str, float] = {}
        self._used_lock = threading.Lock()
        self._uses_since_check = 0
        self._checked_at = 0.0
        self._lock = threading.RLock()
        # Inside `grouped` (on the thread holding `_lock`): `_tx` is a savepoint.
        self._grouped = False
        self._conn: sqlite3.Connection | None = None
        self._ready = False
        # Acknowledgements not written yet (`defer_ack`), and their own lock:
        # adding one never waits for a transaction.
        self._acks: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []
        self._acks_lock = threading.Lock()
        # Write transactions over, and connections closed (`version`).
        self._writes = 0
        self._checkpointer = WalCheckpointer(path, busy_timeout) if path != ":memory:" else None

    # -- connection ---------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        created = False
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            try:
                created = _create_private(parent, self.path)
            except OSError as exc:
                raise ConfigError(
                    f"cannot create the folder {parent!r} for the SQLite tier ({exc}); "
                    "pass sqlite= a writable path, ':memory:', or None for no local tier."
                ) from exc
        try:
            conn = self._open(created)
        except sqlite3.DatabaseError as exc:  # not the OperationalError of a file in use: made TierUnavailable
            raise ConfigError(
                f"sqlite= names {self.path!r}, which is not a SQLite database ({exc}): pass the store's file, "
                "or a path where none is yet."
            ) from exc
        self._conn = conn
        return conn

    def _open(self, created: bool) -> sqlite3.Connection:
        with unavailable_on("sqlite", self.path, sqlite3.OperationalError):
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
            conn.text_factory = _text
            self._enable_wal(conn)
            if created:
                # SQLite gives -wal and -shm the database file's mode; say so
                # explicitly in case they were left behind by an older file.
                for suffix in ("-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(self.path + suffix, 0o600)
            # NORMAL in WAL mode: a commit survives a process crash (the
            # case we guard against); only an OS crash may lose the last ones.
            # FULL (`fsync`, for write-behind, where the local file is the
            # only copy for a while): every commit is on disk when it returns.
            conn.execute(sql.set_synchronous(self.fsync))
            if self._checkpointer is not None:
                conn.execute(sql.set_wal_autocheckpoint(WAL_BACKSTOP_PAGES))
            conn.execute(sql.set_busy_timeout(self.busy_timeout))
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new file to WAL. The switch needs the file to itself and
        SQLite answers "database is locked" at once, without its busy handler,
        when another connection is using the file (several savers or
        processes opening a new file together), so retry until the busy timeout."""
        if self.path == ":memory:" or conn.execute(sql.GET_JOURNAL_MODE).fetchone()[0].lower() == "wal":
            return
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute(sql.ENABLE_WAL)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the write lock from its first
        statement. It also writes the acknowledgements `defer_ack` kept.
        Inside `grouped`, a savepoint of the group's transaction instead.
        Counted in `version` once it is over, committed or not."""
        with self._lock, unavailable_on("sqlite", self.path, sqlite3.OperationalError):
            try:
                conn = self._connect()
                if self._grouped:
                    conn.execute(sql.SAVEPOINT)
                    try:
                        yield conn
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute(sql.ROLLBACK_TO_SAVEPOINT)
                            conn.execute(sql.RELEASE_SAVEPOINT)
                        raise
                    conn.execute(sql.RELEASE_SAVEPOINT)
                    return
                conn.execute(sql.BEGIN_IMMEDIATE)
                with self._acks_lock:
                    acks = list(self._acks)
                try:
                    if acks:
                        _ack_many(conn, acks)
                    yield conn
                except BaseException:
                    # SQLite rolls back by itself on some errors (SQLITE_FULL).
                    if conn.in_transaction:
                        conn.execute(sql.ROLLBACK)
                    raise
                conn.execute(sql.COMMIT)
                if acks:
                    with self._acks_lock:
                        del self._acks[: len(acks)]
            finally:
                self._writes += 1
                if self._checkpointer is not None and self._writes % WAL_CHECKPOINT_EVERY == 0:
                    self._checkpointer.kick()

    def grouped(self, calls: Sequence[Callable[[], Any]]) -> list[tuple[bool, Any]]:
        """Group commit: run `calls` (writes of this tier) in one
        transaction, each in a savepoint of its own, so that one commit
        stands for all of them. Returns ``(True, result)`` or ``(False,
        exception)`` per call: one that raised left nothing behind and the
        others are committed. Raises if the transaction itself failed (its
        commit, or an error after which SQLite rolled it all back): then none
        of them was stored."""
        outcomes: list[tuple[bool, Any]] = []
        with self._lock, self._tx() as conn:
            self._grouped = True
            try:
                for call in calls:
                    try:
                        outcomes.append((True, call()))
                    except Exception as exc:
                        if not conn.in_transaction:
                            raise
                        outcomes.append((False, exc))
            finally:
                self._grouped = False
        return outcomes

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, unavailable_on("sqlite", self.path, sqlite3.OperationalError):
            yield self._connect()

    def version(self) -> tuple[int, int]:
        """What changes whenever the file's contents may have: the write
        transactions this tier ended (and connections it closed), and
        SQLite's ``PRAGMA data_version``, which moves when any other
        connection, of this process or another, commits to the file. The
        same twice: nothing was written in between (`read_cache.py`). On
        every cached read: the lock and the statement, without `_read`'s
        two context managers."""
        with self._lock:
            try:
                conn = self._conn if self._conn is not None else self._connect()
                return (self._writes, conn.execute(sql.GET_DATA_VERSION).fetchone()[0])
            except sqlite3.OperationalError as exc:
                with unavailable_on("sqlite", self.path, sqlite3.OperationalError):
                    raise exc

    def run_now(self, call: Callable[[], Any], *, writes: bool) -> tuple[bool, Any]:
        """Run `call` (one of this tier's methods) on this thread if it can
        start at once: ``(True, its result)``. Else ``(False, None)``, not
        run: another thread holds this tier (a write under way), no
        connection is open yet, or, for a call that `writes`, SQLite's write
        lock is another connection's (``SQLITE_BUSY``: the busy timeout is 0
        meanwhile, so nothing waits here). A read needs no lock in WAL mode.
        The async face asks this on the event loop before it hands a short
        call to its worker (`AsyncSqliteTier`). Other errors are the call's
        own and propagate."""
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            conn = self._conn
            if conn is None:
                return False, None
            if not writes:
                return True, call()
            conn.execute(sql.NO_BUSY_WAIT)
            try:
                return True, call()
            except TierUnavailable as exc:
                if _busy(exc.__cause__):
                    return False, None
                raise
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute(sql.set_busy_timeout(self.busy_timeout))
        finally:
            self._lock.release()

    def setup(self) -> None:
        with self._lock:
            if self._ready:
                return
            with self._tx() as conn:
                current = conn.execute(sql.GET_USER_VERSION).fetchone()[0]
                for version in range(current + 1, len(sql.MIGRATIONS)):
                    for statement in sql.migration(version):
                        conn.execute(statement)
                    conn.execute(sql.set_user_version(version))
            self._ready = True

    def close(self) -> None:
        with contextlib.suppress(TierUnavailable):  # left owed: shipped again at the next start
            self.flush_acks()
        if self._checkpointer is not None:
            self._checkpointer.stop()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._writes += 1  # the next connection's data_version starts afresh
            self._ready = False

    # -- writes -------------------------------------------------------------

    @staticmethod
    def _insert_checkpoint(conn: sqlite3.Connection, row: CheckpointRow, blobs: Sequence[BlobRow]) -> None:
        conn.execute(
            sql.UPSERT_CHECKPOINT,
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
            conn.executemany(
                sql.INSERT_BLOB,
                [(b.thread_id, b.checkpoint_ns, b.channel, b.version, b.envelope) for b in blobs],
            )

    def write_checkpoint(
        self,
        row: CheckpointRow,
        blobs: Sequence[BlobRow],
        *,
        journal: Owed | bool | None = None,
        fence: Fence | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> int | None:
        """Store the checkpoint; with `journal`, also record it as owed to the
        shared tiers it names (True: all), in the same transaction. Returns the
        journal entry's id. With a `fence`, only if the lease matches it.
        `before_commit` runs last inside the transaction; if it raises, nothing
        is stored (`concurrency.Lead`)."""
        with self._tx() as conn:
            self._check_fence(conn, fence)
            self._insert_checkpoint(conn, row, blobs)
            seq = None
            if journal:
                seq = _journal(conn, "checkpoint", row.thread_id, row.checkpoint_ns, row.checkpoint_id, None, journal)
            if before_commit is not None:
                before_commit()
        return seq

    def write_batch(
        self,
        checkpoints: Sequence[tuple[CheckpointRow, Sequence[BlobRow]]],
        writes: Sequence[WriteRow],
        *,
        fence: Fence | None = None,
    ) -> None:
        """Several checkpoints and pending writes (insert-or-ignore) in one transaction."""
        with self._tx() as conn:
            self._check_fence(conn, fence)
            for row, blobs in checkpoints:
                self._insert_checkpoint(conn, row, blobs)
            conn.executemany(
                sql.INSERT_WRITE,
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
                    for w in writes
                ],
            )

    def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        with self._tx() as conn:
            conn.executemany(
                sql.UPSERT_BLOB,
                [(b.thread_id, b.checkpoint_ns, b.channel, b.version, b.envelope) for b in blobs],
            )

    def write_writes(
        self,
        rows: Sequence[WriteRow],
        upsert: bool,
        *,
        journal: Owed | bool | None = None,
        fence: Fence | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> int | None:
        """Store pending writes (replacing, with `upsert`); `journal`,
        `fence` and `before_commit` as for `write_checkpoint`."""
        with self._tx() as conn:
            self._check_fence(conn, fence)
            conn.executemany(
                sql.UPSERT_WRITE if upsert else sql.INSERT_WRITE,
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
            seq = None
            if journal and rows:
                first = rows[0]
                seq = _journal(
                    conn, "writes", first.thread_id, first.checkpoint_ns, first.checkpoint_id, first.task_id, journal
                )
            if before_commit is not None:
                before_commit()
        return seq

    def journal_acked(self, seq: int | None, tiers: Sequence[str], *, everyone: Sequence[str] = ()) -> None:
        """`tiers` now hold journal entry `seq`: it is no longer owed to them,
        and it is done once no tier owes it (`everyone`: the shared tiers, for
        an entry that owes all of them)."""
        if seq is None:
            return
        with self._tx() as conn:
            _ack(conn, seq, tuple(tiers), tuple(everyone))

    def journal_acked_many(self, acks: Sequence[tuple[int, Sequence[str]]], *, everyone: Sequence[str] = ()) -> None:
        """`journal_acked` for several entries, in one transaction."""
        if not acks:
            return
        with self._tx() as conn:
            _ack_many(conn, [(seq, tuple(tiers), tuple(everyone)) for seq, tiers in acks])

    def defer_ack(self, seq: int | None, tiers: Sequence[str], *, everyone: Sequence[str] = ()) -> None:
        """`journal_acked`, written by the next transaction instead of one
        of its own (a write's acknowledgement rides on the next write). Never
        waits, never fails. Should the process die first, the entry is shipped
        again at the next start, which changes nothing: records are immutable
        and catch-up writes are idempotent."""
        if seq is not None:
            with self._acks_lock:
                self._acks.append((seq, tuple(tiers), tuple(everyone)))

    def flush_acks(self) -> None:
        """Write the acknowledgements `defer_ack` kept (readers of the journal
        call it first, so that they see what was acknowledged)."""
        if self._acks:
            with self._tx():
                pass

    def journal_drop(self, seq: int) -> None:
        """Forget journal entry `seq` (shipped everywhere it can be, or not to be shipped)."""
        with self._tx() as conn:
            conn.execute(sql.DELETE_JOURNAL_ENTRY, (seq,))

    def pending_journal(
        self, limit: int | None = None, after: int = 0, *, thread_id: str | None = None
    ) -> list[JournalEntry]:
        """Entries some shared tier has not acknowledged, oldest first (of
        one thread, or all): a tier was down, a write is behind
        (``write="local"``), or a crash came between the local commit and the
        acknowledgement."""
        self.flush_acks()
        with self._read() as conn:
            rows = conn.execute(
                sql.SELECT_PENDING_JOURNAL,
                (after, thread_id, thread_id, -1 if limit is None else limit),
            ).fetchall()
        return [_entry(r) for r in rows]

    def journal_lag(self, shared: Sequence[str]) -> tuple[int, float | None, dict[str, int]]:
        """Entries owed, the oldest's creation time, and entries owed per shared tier."""
        self.flush_acks()
        with self._read() as conn:
            row = conn.execute(sql.select_journal_lag(len(shared)), list(shared)).fetchone()
        return int(row[0]), row[1], {name: int(n) for name, n in zip(shared, row[2:])}

    def journal_size(self) -> int:
        self.flush_acks()
        with self._read() as conn:
            return int(conn.execute(sql.COUNT_JOURNAL).fetchone()[0])

    # -- reads --------------------------------------------------------------

    def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        with self._read() as conn:
            row = conn.execute(sql.SELECT_CHECKPOINT, (thread_id, ns, checkpoint_id)).fetchone()
        return _cp(row) if row else None

    def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        if not keys:
            return {}
        found: dict[BlobKey, BlobRow] = {}
        with self._read() as conn:
            # One statement per at most BLOBS_PER_QUERY keys (SQLite's limit on
            # parameters is 32766): the primary key's index serves each pair.
            for i in range(0, len(keys), BLOBS_PER_QUERY):
                part = keys[i : i + BLOBS_PER_QUERY]
                rows = conn.execute(
                    sql.select_blobs(len(part)),
                    (*(v for key in part for v in key), thread_id, ns),
                ).fetchall()
                for channel, version, record in rows:
                    found[(channel, version)] = BlobRow(thread_id, ns, channel, version, bytes(record))
        return found

    def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        if not checkpoint_ids:
            return []
        with self._read() as conn:
            rows = conn.execute(sql.select_writes(len(checkpoint_ids)), (thread_id, ns, *checkpoint_ids)).fetchall()
        return [_w(r) for r in rows]

    def list_page(
        self, thread_id: str, ns: str, before: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[WriteRow]]:
        """`list_checkpoints` and `read_writes` of one page, under one lock."""
        with self._lock:
            rows = self.list_checkpoints(thread_id, ns, None, before, None, limit)
            return rows, self.read_writes(thread_id, ns, [r.checkpoint_id for r in rows])

    def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        params = [v for v in (thread_id, ns, checkpoint_id, before) if v is not None]
        query = sql.select_checkpoints(
            thread_id=thread_id is not None,
            ns=ns is not None,
            checkpoint_id=checkpoint_id is not None,
            before=before is not None,
            limit=limit if not filter else None,
        )
        out: list[CheckpointRow] = []
        with self._read() as conn:
            for r in conn.execute(query, params):
                if filter and not metadata_matches(json.loads(r[5]), filter):
                    continue
                out.append(_cp(r))
                if limit is not None and len(out) >= limit:
                    break
        return out

    # -- deletes --------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        with self._tx() as conn:
            for statement in sql.DELETE_THREAD:
                conn.execute(statement, (thread_id,))
            conn.execute(sql.DELETE_GONE_NOTES, gone_range(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str], retain: Sequence[tuple[str, str, str]] = ()) -> None:
        """Delete the checkpoints (and their writes) of these runs, except
        the `retain` ones, (thread, ns, checkpoint id): still needed by a
        surviving checkpoint's delta channels."""
        if not run_ids:
            return
        kept = set(retain)
        with self._tx() as conn:
            doomed = [
                key
                for key in conn.execute(sql.select_run_checkpoints(len(run_ids)), list(run_ids)).fetchall()
                if tuple(key) not in kept
            ]
            for statement in (sql.DELETE_CHECKPOINT_WRITES, sql.DELETE_CHECKPOINT):
                conn.executemany(statement, doomed)

    def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with self._tx() as conn:
            conn.execute(sql.DELETE_CHECKPOINT, (thread_id, ns, checkpoint_id))

    def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        with self._tx() as conn:
            conn.execute(sql.UPSERT_LEDGER, (thread_id, key, envelope))

    def swap_ledger(self, thread_id: str, key: str, old: bytes | None, new: bytes) -> None:
        """Replace one ledger entry only if it still holds `old` (None: only
        if there is none): read-repair never overwrites a state written
        meanwhile."""
        with self._tx() as conn:
            if old is None:
                conn.execute(sql.INSERT_LEDGER_IF_ABSENT, (thread_id, key, new))
            else:
                conn.execute(sql.SWAP_LEDGER, (new, thread_id, key, old))

    def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        with self._read() as conn:
            rows = conn.execute(sql.SELECT_LEDGER, (thread_id,)).fetchall()
        return {r[0]: bytes(r[1]) for r in rows}

    def thread_ids(self) -> list[str]:
        with self._read() as conn:
            rows = conn.execute(sql.SELECT_THREAD_IDS).fetchall()
        return [r[0] for r in rows]

    def thread_records(self, thread_id: str) -> ThreadRecords:
        """Every live record of one thread, for `verify` and `repair`."""
        with self._read() as conn:
            cps = conn.execute(sql.SELECT_THREAD_CHECKPOINTS, (thread_id,)).fetchall()
            blobs = conn.execute(sql.SELECT_THREAD_BLOBS, (thread_id,)).fetchall()
            writes = conn.execute(sql.SELECT_THREAD_WRITES, (thread_id,)).fetchall()
        return ThreadRecords(
            [_cp(r) for r in cps],
            [BlobRow(r[0], r[1], r[2], r[3], bytes(r[4])) for r in blobs],
            [WriteRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bytes(r[7])) for r in writes],
        )

    def quarantine(
        self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes, fields: bytes = b""
    ) -> None:
        """Keep a copy for forensics and for `restore`, out of every read path."""
        with self._tx() as conn:
            conn.execute(
                sql.INSERT_QUARANTINE,
                (thread_id, ns, kind, key, reason, envelope, time.time(), fields or None),
            )

    def remove_copy(self, kind: str, row: Row) -> None:
        """Delete this exact copy from the live table; a different copy under
        the same key (one repaired meanwhile) stays."""
        table, where, params = live_row_where(row, "?")
        with self._tx() as conn:
            conn.execute(sql.delete_copy(table, where), (*params, row.envelope))

    def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        with self._read() as conn:
            if thread_id is None:
                rows = conn.execute(sql.SELECT_QUARANTINE).fetchall()
            else:
                rows = conn.execute(sql.SELECT_THREAD_QUARANTINE, (thread_id,)).fetchall()
        return [
            QuarantinedRecord("sqlite", r[1], r[2], r[3], r[4], r[5], bytes(r[6]), r[7], str(r[0]), _fields(r[8]))
            for r in rows
        ]

    def drop_quarantined(self, ids: Sequence[str]) -> None:
        with self._tx() as conn:
            conn.executemany(sql.DELETE_QUARANTINED, [(int(i),) for i in ids])

    def read_meta(self, key: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(sql.SELECT_META, (key,)).fetchone()
        return row[0] if row else None

    def write_meta(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one store-wide setting."""
        with self._tx() as conn:
            if value is None:
                conn.execute(sql.DELETE_META, (key,))
            else:
                conn.execute(sql.UPSERT_META, (key, value))

    def create_meta(self, key: str, value: str) -> str:
        """Set a store-wide setting unless one is set; the value that holds."""
        with self._tx() as conn:
            conn.execute(sql.INSERT_META_IF_ABSENT, (key, value))
            row = conn.execute(sql.SELECT_META, (key,)).fetchone()
        return str(row[0])

    def head(self, thread_id: str, ns: str) -> Head:
        """The newest checkpoint of (thread, ns), the thread's deletion
        marker (`mark_deleted`), and the newest checkpoint's row and pending
        writes, in one read."""
        with self._read() as conn:
            # The deletion marker rides along (a thread with no checkpoint asks for it alone).
            row = conn.execute(sql.SELECT_HEAD, (deleted_key(thread_id), thread_id, ns)).fetchone()
            if row is None:
                marker = conn.execute(sql.SELECT_META, (deleted_key(thread_id),)).fetchone()
                return Head(None, marker[0] if marker else None, None, ())
            writes = conn.execute(sql.SELECT_CHECKPOINT_WRITES, (thread_id, ns, row[2])).fetchall()
        return Head(row[2], row[-1], _cp(row), tuple(_w(w) for w in writes))

    def mark_gone(self, thread_id: str, checkpoints: Sequence[tuple[str, str]]) -> None:
        """Record that these (ns, checkpoint id) were deleted (`delete_for_runs`)."""
        with self._tx() as conn:
            conn.executemany(
                sql.UPSERT_GONE,
                [(gone_key(thread_id, ns, c),) for ns, c in checkpoints],
            )

    def gone(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> set[str]:
        """Which of these checkpoint ids `mark_gone` recorded."""
        keys = {gone_key(thread_id, ns, c): c for c in checkpoint_ids}
        if not keys:
            return set()
        with self._read() as conn:
            rows = conn.execute(sql.select_meta_keys(len(keys)), list(keys)).fetchall()
        return {keys[r[0]] for r in rows}

    def mark_deleted(self, thread_id: str, marker: str | None) -> None:
        """Record that every checkpoint of the thread up to `marker` (a
        checkpoint id) was deleted, so a copy another replica still caches is
        not taken for a lost one; None clears it."""
        self.write_meta(deleted_key(thread_id), marker)

    def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        with self._tx() as conn:
            for select, delete in (
                (sql.SELECT_THREAD_CHECKPOINT_KEYS, sql.DELETE_CHECKPOINT),
                (sql.SELECT_THREAD_WRITE_KEYS, sql.DELETE_CHECKPOINT_WRITES),
            ):
                rows = conn.execute(select, (thread_id,)).fetchall()
                conn.executemany(delete, [(thread_id, ns, cid) for ns, cid in rows if (ns, cid) not in keep])
            blobs = conn.execute(sql.SELECT_THREAD_BLOB_KEYS, (thread_id,)).fetchall()
            conn.executemany(
                sql.DELETE_BLOB,
                [(thread_id, *b) for b in blobs if tuple(b) not in keep_blobs],
            )

    # -- a size-bounded cache: least recently used threads out -------------------

    def touch(self, thread_id: str) -> None:
        """`thread_id` was just read or written (in memory: a read writes nothing)."""
        if self.max_bytes is not None:
            with self._used_lock:
                self._used[thread_id] = time.time()
                self._uses_since_check += 1

    def used_bytes(self) -> int:
        """Bytes of the file in use (free pages left by deletes not counted)."""
        with self._read() as conn:
            return _in_use(conn)

    def evict(self, protect: Collection[str] = (), *, force: bool = False) -> list[str]:
        """Past `max_bytes`, delete the local copies of the least recently
        used threads until the file uses `EVICT_TO` of it. Never a thread the
        journal still owes a shared tier, nor one in `protect` (threads this
        saver is running). Checks at most every `EVICT_CHECK_USES` uses or
        `EVICT_CHECK_S` seconds unless `force`. The shared tiers still hold
        what is evicted; a read copies it back. Returns the evicted threads."""
        if self.max_bytes is None:
            return []
        now = time.time()
        with self._used_lock:
            due = self._uses_since_check >= EVICT_CHECK_USES or now - self._checked_at >= EVICT_CHECK_S
            if not (due or force):
                return []
            self._uses_since_check = 0
            self._checked_at = now
            used = dict(self._used)
        if self.used_bytes() <= self.max_bytes:
            return []
        target = int(self.max_bytes * EVICT_TO)
        evicted: list[str] = []
        with self._tx() as conn:
            conn.executemany(sql.UPSERT_THREAD_USE, list(used.items()))
            held = {r[0] for r in conn.execute(sql.SELECT_CHECKPOINT_THREADS)}
            held |= {r[0] for r in conn.execute(sql.SELECT_WRITE_THREADS)}
            owed = {r[0] for r in conn.execute(sql.SELECT_JOURNAL_THREADS)}
            last_use = dict(conn.execute(sql.SELECT_THREAD_USE).fetchall())
            candidates = sorted(held - owed - set(protect), key=lambda t: (last_use.get(t, 0.0), t))
            for thread_id in candidates:
                # The pages a delete empties join the free list at once, inside
                # the transaction: the size is measured, not estimated.
                if _in_use(conn) <= target:
                    break
                for statement in sql.EVICT_THREAD:
                    conn.execute(statement, (thread_id,))
                evicted.append(thread_id)
        with self._used_lock:
            for thread_id in evicted:
                self._used.pop(thread_id, None)
        return evicted

    # -- writer leases (lease.py): the local clock; every step is one transaction --

    @staticmethod
    def _check_fence(conn: sqlite3.Connection, fence: Fence | None) -> None:
        """Inside a write transaction: the lease still matches `fence`, or
        `LeaseLost` and the transaction rolls back. The lease is renewed when
        it was last renewed `renew_every` ago or more (read from its expiry,
        so whichever process renewed it); a write that finds it renewed
        since only reads it, and leaves the lease's page out of its commit."""
        if fence is None:
            return
        if not fence.late:
            lease = _lease(conn, fence.thread_id)
            if (
                lease is not None
                and lease.holder == fence.holder
                and lease.token == fence.token
                and lease.expires_at > 0
                and lease.expires_at - time.time() > fence.ttl - renew_every(fence.ttl)
            ):
                return
        renewed = conn.execute(
            sql.RENEW_FENCE,
            (fence.token, time.time() + fence.ttl, fence.thread_id, fence.holder, fence.late, fence.token,
             fence.late, fence.token),
        ).rowcount  # fmt: skip
        if not renewed:
            raise lease_lost(fence, _lease(conn, fence.thread_id), "sqlite")

    def read_lease(self, thread_id: str) -> tuple[Lease | None, float]:
        with self._read() as conn:
            return _lease(conn, thread_id), time.time()

    def swap_lease(self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float) -> Lease | None:
        with self._tx() as conn:
            if _lease(conn, thread_id) != expected:
                return None
            taken = Lease(thread_id, holder, token, time.time() + ttl)
            conn.execute(sql.UPSERT_LEASE, (thread_id, holder, token, taken.expires_at))
            return taken

    def keep_lease(self, thread_id: str, holder: str, token: int, ttl: float) -> bool:
        with self._tx() as conn:
            kept = conn.execute(sql.KEEP_LEASE, (time.time() + ttl, thread_id, holder, token)).rowcount
        return bool(kept)

    def renew_leases(self, holder: str, leases: Sequence[tuple[str, int]], ttl: float) -> set[str]:
        expires = time.time() + ttl
        with self._tx() as conn:
            return {
                thread_id
                for thread_id, token in leases
                if conn.execute(sql.KEEP_LEASE, (expires, thread_id, holder, token)).rowcount
            }

    def release_lease(self, thread_id: str, holder: str, token: int | None) -> None:
        with self._tx() as conn:
            conn.execute(sql.RELEASE_LEASE, (thread_id, holder, token, token))

    def ask_hand_off(self, thread_id: str, holder: str) -> None:
        """Nothing: a lease is kept after its run (``lease_linger``) only in
        a shared tier, which carries the hand-off requests."""


def _entry(r: tuple[Any, ...]) -> JournalEntry:
    owed = tuple(r[6].split(",")) if r[6] is not None else None
    return JournalEntry(r[0], r[1], r[2], r[3], r[4], r[5], owed, bool(r[7]), decode_fence(r[8]), r[9])


def _ack(conn: sqlite3.Connection, seq: int, tiers: Sequence[str], everyone: Sequence[str]) -> None:
    _ack_many(conn, [(seq, tiers, everyone)])


# Journal seqs looked up per statement (SQLite's parameter limit is 32766).
ACKS_PER_QUERY = 500


def _ack_many(conn: sqlite3.Connection, acks: Sequence[tuple[int, Sequence[str], Sequence[str]]]) -> None:
    """(seq, tiers that now hold it, the tiers an entry owing everyone owes)
    for each acknowledged entry, in order: an entry no tier owes any more is
    deleted, the others keep what is still owed (and are marked acked when
    some tier took them). A few statements for any number of entries, not
    two each: a run's end acknowledges every record it shipped at once."""
    seqs = list(dict.fromkeys(seq for seq, _, _ in acks))
    owed: dict[int, str | None] = {}
    for i in range(0, len(seqs), ACKS_PER_QUERY):
        part = seqs[i : i + ACKS_PER_QUERY]
        owed.update(conn.execute(sql.select_journal_owed(len(part)), part).fetchall())
    acked: set[int] = set()
    gone: set[int] = set()
    for seq, tiers, everyone in acks:
        if seq not in owed or seq in gone:
            continue
        current = owed[seq]
        left = [t for t in (current.split(",") if current is not None else everyone) if t and t not in tiers]
        if left:
            owed[seq] = ",".join(left)
            if tiers:
                acked.add(seq)
        else:
            gone.add(seq)
    conn.executemany(
        sql.UPDATE_JOURNAL_OWED,
        [(owed[seq], 1 if seq in acked else 0, seq) for seq in seqs if seq in owed and seq not in gone],
    )
    conn.executemany(sql.DELETE_JOURNAL_ENTRY, [(seq,) for seq in seqs if seq in gone])


def _journal(
    conn: sqlite3.Connection, kind: str, thread_id: str, ns: str, cid: str, task_id: str | None, owed: Owed | bool
) -> int | None:
    spec = owed if isinstance(owed, Owed) else None
    tiers = ",".join(spec.tiers) if spec is not None else None
    acked = 1 if spec is not None and spec.acked else 0
    fence = encode_fence(spec.fence) if spec is not None else None
    cur = conn.execute(
        sql.INSERT_JOURNAL,
        (kind, thread_id, ns, cid, task_id, time.time(), tiers, acked, fence),
    )
    return cur.lastrowid


def _busy(exc: BaseException | None) -> bool:
    """Whether SQLite refused for a lock another connection holds."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _lease(conn: sqlite3.Connection, thread_id: str) -> Lease | None:
    row = conn.execute(sql.SELECT_LEASE, (thread_id,)).fetchone()
    return Lease(thread_id, row[0], int(row[1]), float(row[2])) if row else None


def _create_private(folder: str, path: str) -> bool:
    """Create `folder` (mode 0700) and the database file `path` (mode 0600)
    when they do not exist yet, whatever the umask: checkpoints hold the
    agent's state, which is nobody else's to read. An existing folder or
    file keeps its mode (it may be shared on purpose). True if the file was
    created here. Every folder created above it is 0700 too (`os.makedirs`
    would leave them to the umask: 0777 under umask 000)."""
    missing = []
    at = os.path.abspath(folder)
    while not os.path.isdir(at):
        missing.append(at)
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    for new in reversed(missing):
        try:
            os.mkdir(new, 0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: its mode is its own
        os.chmod(new, 0o700)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return True


# The async face (`AsyncSqliteTier`) runs the short calls of a run's hot path,
# which take tens of microseconds, on the event loop's thread when they can
# start at once (`SqliteTier.run_now`), since handing one to the worker
# thread and waking the loop again costs several times that (0.2 ms a write
# on a busy 2-core machine): the reads of a step's latest state (`_read`) and
# its writes (`_write`; `_group`: the writes of a run, `put` and
# `put_writes`, which it otherwise commits in groups). Writes only without
# ``fsync``: with it (write-behind) a commit waits for the disk, so those
# stay on the worker, which commits the writes waiting in one group.


def _loop_watched() -> bool:
    """Whether the host watches its event loop for blocking calls by
    replacing sqlite3's methods: ``langgraph dev`` does (blockbuster) and
    fails a run that calls SQLite on the loop. Then every call goes to the
    worker, as the host asks."""
    return type(sqlite3.Connection.__dict__.get("execute")) is not types.MethodDescriptorType


class AsyncSqliteTier:
    """The async face of a `SqliteTier`: its methods, run on one worker thread
    or, when short and free to start, on the caller's.

    Nothing is re-implemented: ``await tier.read_checkpoint(...)`` calls
    `SqliteTier.read_checkpoint`. The short calls of a run's hot path (a
    step's writes, the reads of its latest state: `_read`, `_write`,
    `_group`) run on the event loop's thread when nothing waits for them
    (`SqliteTier.run_now`: the tier free, SQLite's lock to be had at once),
    which costs less than the hop; any other call (`_work`), and one that
    would wait, goes to the worker, so a busy database never blocks other
    tasks. So does every call under a host that forbids SQLite on its loop
    (`_loop_watched`).
    The writes of runs (`_group`) that arrive while the worker is busy wait
    for it together and are then committed together
    (`SqliteTier.grouped`): many concurrent runs cost one commit and one
    hand-off to the worker per group, not per write, and each write still
    succeeds or fails on its own.
    """

    name = "sqlite"
    role = Role.LOCAL

    def __init__(self, tier: SqliteTier) -> None:
        self.tier = tier
        self.path = tier.path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="langgraph-durable-sqlite")
        self._waiting: list[tuple[Callable[[], Any], asyncio.AbstractEventLoop, asyncio.Future[Any]]] = []
        self._waiting_lock = threading.Lock()

    # -- how a call runs ------------------------------------------------------

    def _on_caller(self, writes: bool) -> bool:
        """Whether a short call may try the caller's thread (see the module)."""
        return (not writes or not self.tier.fsync) and not _loop_watched()

    async def _work(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """On the worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def _short(self, writes: bool, call: Callable[[], R]) -> R:
        if self._on_caller(writes):
            ran, result = self.tier.run_now(call, writes=writes)
            if ran:
                return cast(R, result)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def _read(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """A short read: on the caller's thread if it can start at once, else on the worker."""
        return await self._short(False, functools.partial(fn, *args, **kwargs))

    async def _write(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """A short write: as `_read`, without ``fsync``; else on the worker."""
        return await self._short(True, functools.partial(fn, *args, **kwargs))

    async def _group(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """A run's write: as `_write` when no write waits for the worker, else
        committed with those waiting (`_grouped`)."""
        call = functools.partial(fn, *args, **kwargs)
        if self._on_caller(True) and not self._waiting:
            ran, result = self.tier.run_now(call, writes=True)
            if ran:
                return cast(R, result)
        return cast(R, await self._grouped(call))

    # -- the tier's methods (`SqliteTier`'s), each as it runs ---------------------

    async def setup(self) -> None:
        return await self._work(self.tier.setup)

    async def version(self) -> tuple[int, int]:
        return await self._read(self.tier.version)

    async def write_checkpoint(
        self,
        row: CheckpointRow,
        blobs: Sequence[BlobRow],
        *,
        journal: Owed | bool | None = None,
        fence: Fence | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> int | None:
        return await self._group(
            self.tier.write_checkpoint, row, blobs, journal=journal, fence=fence, before_commit=before_commit
        )

    async def write_writes(
        self,
        rows: Sequence[WriteRow],
        upsert: bool,
        *,
        journal: Owed | bool | None = None,
        fence: Fence | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> int | None:
        return await self._group(
            self.tier.write_writes, rows, upsert, journal=journal, fence=fence, before_commit=before_commit
        )

    async def write_batch(
        self,
        checkpoints: Sequence[tuple[CheckpointRow, Sequence[BlobRow]]],
        writes: Sequence[WriteRow],
        *,
        fence: Fence | None = None,
    ) -> None:
        return await self._work(self.tier.write_batch, checkpoints, writes, fence=fence)

    async def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        return await self._work(self.tier.write_blobs, blobs)

    async def journal_acked(self, seq: int | None, tiers: Sequence[str], *, everyone: Sequence[str] = ()) -> None:
        return await self._work(self.tier.journal_acked, seq, tiers, everyone=everyone)

    async def journal_acked_many(
        self, acks: Sequence[tuple[int, Sequence[str]]], *, everyone: Sequence[str] = ()
    ) -> None:
        return await self._work(self.tier.journal_acked_many, acks, everyone=everyone)

    async def journal_drop(self, seq: int) -> None:
        return await self._work(self.tier.journal_drop, seq)

    async def pending_journal(
        self, limit: int | None = None, after: int = 0, *, thread_id: str | None = None
    ) -> list[JournalEntry]:
        return await self._work(self.tier.pending_journal, limit, after, thread_id=thread_id)

    async def journal_lag(self, shared: Sequence[str]) -> tuple[int, float | None, dict[str, int]]:
        return await self._work(self.tier.journal_lag, shared)

    async def journal_size(self) -> int:
        return await self._work(self.tier.journal_size)

    async def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        return await self._read(self.tier.read_checkpoint, thread_id, ns, checkpoint_id)

    async def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        return await self._read(self.tier.read_blobs, thread_id, ns, keys)

    async def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        return await self._read(self.tier.read_writes, thread_id, ns, checkpoint_ids)

    async def head(self, thread_id: str, ns: str) -> Head:
        return await self._read(self.tier.head, thread_id, ns)

    async def list_page(
        self, thread_id: str, ns: str, before: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[WriteRow]]:
        return await self._work(self.tier.list_page, thread_id, ns, before, limit)

    async def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        return await self._work(self.tier.list_checkpoints, thread_id, ns, checkpoint_id, before, filter, limit)

    async def thread_ids(self) -> list[str]:
        return await self._work(self.tier.thread_ids)

    async def thread_records(self, thread_id: str) -> ThreadRecords:
        return await self._work(self.tier.thread_records, thread_id)

    async def delete_thread(self, thread_id: str) -> None:
        return await self._work(self.tier.delete_thread, thread_id)

    async def delete_for_runs(self, run_ids: Sequence[str], retain: Sequence[tuple[str, str, str]] = ()) -> None:
        return await self._work(self.tier.delete_for_runs, run_ids, retain)

    async def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        return await self._work(self.tier.delete_checkpoint, thread_id, ns, checkpoint_id)

    async def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        return await self._work(self.tier.prune, thread_id, keep, keep_blobs)

    async def read_meta(self, key: str) -> str | None:
        return await self._work(self.tier.read_meta, key)

    async def write_meta(self, key: str, value: str | None) -> None:
        return await self._work(self.tier.write_meta, key, value)

    async def create_meta(self, key: str, value: str) -> str:
        return await self._work(self.tier.create_meta, key, value)

    async def mark_gone(self, thread_id: str, checkpoints: Sequence[tuple[str, str]]) -> None:
        return await self._work(self.tier.mark_gone, thread_id, checkpoints)

    async def gone(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> set[str]:
        return await self._read(self.tier.gone, thread_id, ns, checkpoint_ids)

    async def mark_deleted(self, thread_id: str, marker: str | None) -> None:
        return await self._work(self.tier.mark_deleted, thread_id, marker)

    async def quarantine(
        self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes, fields: bytes = b""
    ) -> None:
        return await self._work(self.tier.quarantine, thread_id, ns, kind, key, reason, envelope, fields)

    async def remove_copy(self, kind: str, row: Row) -> None:
        return await self._work(self.tier.remove_copy, kind, row)

    async def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        return await self._work(self.tier.list_quarantine, thread_id)

    async def drop_quarantined(self, ids: Sequence[str]) -> None:
        return await self._work(self.tier.drop_quarantined, ids)

    async def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        return await self._work(self.tier.write_ledger, thread_id, key, envelope)

    async def swap_ledger(self, thread_id: str, key: str, old: bytes | None, new: bytes) -> None:
        return await self._work(self.tier.swap_ledger, thread_id, key, old, new)

    async def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        return await self._read(self.tier.read_ledger, thread_id)

    async def read_lease(self, thread_id: str) -> tuple[Lease | None, float]:
        return await self._read(self.tier.read_lease, thread_id)

    async def swap_lease(
        self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float
    ) -> Lease | None:
        return await self._write(self.tier.swap_lease, thread_id, expected, holder, token, ttl)

    async def keep_lease(self, thread_id: str, holder: str, token: int, ttl: float) -> bool:
        return await self._write(self.tier.keep_lease, thread_id, holder, token, ttl)

    async def renew_leases(self, holder: str, leases: Sequence[tuple[str, int]], ttl: float) -> set[str]:
        return await self._write(self.tier.renew_leases, holder, leases, ttl)

    async def release_lease(self, thread_id: str, holder: str, token: int | None) -> None:
        return await self._write(self.tier.release_lease, thread_id, holder, token)

    async def ask_hand_off(self, thread_id: str, holder: str) -> None:
        return await self._work(self.tier.ask_hand_off, thread_id, holder)

    async def used_bytes(self) -> int:
        return await self._work(self.tier.used_bytes)

    async def evict(self, protect: Collection[str] = (), *, force: bool = False) -> list[str]:
        return await self._work(self.tier.evict, protect, force=force)

    async def flush_acks(self) -> None:
        return await self._work(self.tier.flush_acks)

    async def _grouped(self, call: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        item = (call, loop, future)
        with self._waiting_lock:
            self._waiting.append(item)
            first = len(self._waiting) == 1
        if first:
            # The worker takes whatever waits when it gets to it, this one
            # and those that come meanwhile.
            try:
                self._pool.submit(self._commit_waiting)
            except RuntimeError:  # the worker was shut down (closed)
                with self._waiting_lock:
                    self._waiting.remove(item)
                raise
        return await future

    def _commit_waiting(self) -> None:
        """(The worker.) Commit every write waiting, as one group."""
        with self._waiting_lock:
            group, self._waiting = self._waiting, []
        if not group:
            return
        try:
            outcomes = self.tier.grouped([call for call, _, _ in group])
        except BaseException as exc:
            outcomes = [(False, exc)] * len(group)
        for (_, loop, future), outcome in zip(group, outcomes):
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, *outcome)

    def defer_ack(self, seq: int | None, tiers: Sequence[str], *, everyone: Sequence[str] = ()) -> None:
        """`SqliteTier.defer_ack`, on the caller's thread: it never waits."""
        self.tier.defer_ack(seq, tiers, everyone=everyone)

    def touch(self, thread_id: str) -> None:
        """`SqliteTier.touch`, on the caller's thread: in memory only."""
        self.tier.touch(thread_id)

    @property
    def max_bytes(self) -> int | None:
        return self.tier.max_bytes

    async def close(self) -> None:
        # The shared SqliteTier is closed by its owner; only the worker goes.
        self._pool.shutdown(wait=False)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


if TYPE_CHECKING:
    from ..protocol import Tier
    from ..protocol_async import AsyncTier

    def _conforms(tier: SqliteTier) -> Tier:
        """mypy checks here that the class implements the Protocol the rooms use."""
        return tier

    def _conforms_async(tier: AsyncSqliteTier) -> AsyncTier:
        """And that its async face implements the async one."""
        return tier
