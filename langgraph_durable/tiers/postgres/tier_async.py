"""The Postgres tier: the system of record.

Tables are keyed by thread first, so they partition cleanly by thread.
Schema changes go through `MIGRATIONS` (index = version, append only),
applied under an advisory lock so many replicas can call ``setup()`` at once.
The statements live in ``sql.py`` beside it; this module does the I/O.

Every statement works behind a pooler in transaction mode (PgBouncer
``pool_mode = transaction``), which hands each transaction to whichever
server connection is free: nothing here keeps state in a server session
between transactions (no SET, LISTEN, temporary table, WITH HOLD cursor or
session advisory lock; the migration lock is ``pg_advisory_xact_lock``, held
by the transaction that migrates). The one session feature is psycopg's
server-side prepared statements, off with ``prepared_statements=False``.

This file is the async source: ``tier.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import contextlib
import json
import math
import select
import time
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import TupleRow, tuple_row
from psycopg.types.json import Jsonb

from ...errors import ConfigError, DurableError, TierUnavailable
from ...model.backlog import DEFAULT_CALL_TIMEOUT_S
from ...model.lease import (
    HAND_OFF_MAX_MESSAGE,
    Fence,
    Lease,
    hand_off_channel,
    hand_off_message,
    lease_lost,
    renew_every,
)
from ...model.records import BlobRow, CheckpointRow, Row, WriteRow
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
    redact,
    unavailable_on,
)
from ..pools import LONG_CALL_FACTOR, LONG_CALL_TIMEOUT_S, AsyncConnectionPool, long_call_timeout, watched
from . import sql
from .group import GroupCommit, GroupFailed, Member, Rows  # ASYNC ONLY
from .sql import MIGRATIONS  # noqa: F401 - the schema's versions, as tests and tools import them

DEFAULT_POOL_SIZE = 10
RENEWED_MAX = 100_000


DEFAULT_CONNECT_TIMEOUT_S = 5.0
# psycopg's own default: a statement is prepared on its sixth run on a connection.
PREPARE_THRESHOLD = 5

_ERRORS = (psycopg.OperationalError,)
# libpq: notice a peer that vanished without closing (a cut network) within
# seconds instead of the kernel's two hours. `tcp_user_timeout` (added per
# tier: `_tcp_user_timeout_ms`) also drops a connection whose sent data goes
# unacknowledged that long (a partition without resets). Neither sees a
# server that stalls while its host still acks: the call timeout does
# (`ConnectionPool.watch` on the sync face, the tier guard's on the async).
_KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3}
# What the server says when it was reached but will not take this URL's
# user, password or database: a configuration problem, not an outage.
_CONFIG_FAILURES = (
    "does not exist",
    "authentication failed",
    "no password supplied",
    "pg_hba.conf",
    "not permitted to log in",
    "permission denied",
)


def connect_error(exc: psycopg.Error, subject: str, option: str) -> DurableError:
    """Why a connection to `subject` did not open, from its error `exc`: the
    server refused this URL's database, user or password (`ConfigError`,
    final: retrying cannot help, fix `option`), or it could not be reached
    (`TierUnavailable`). Both with the server's own words."""
    reason = " ".join(str(exc).split())
    if isinstance(exc, psycopg.OperationalError) and not any(m in reason for m in _CONFIG_FAILURES):
        return TierUnavailable(
            f"{subject} is unreachable ({reason}). Check that the server is running and the URL is right.",
            tier="postgres",
        )
    return ConfigError(
        f"{subject} refused the connection ({reason}). Check the user, password and database name in "
        f"{option}: the database must exist and the user must be allowed to connect."
    )


# What the server says when psycopg's prepared statements (named _pg3_0,
# _pg3_1, ... by every connection) meet a server session other than the one
# they were prepared in: the mark of a pooler in transaction mode between us
# and the server. Such a session may lack the name, hold another client's
# statement under it, or one with another number of parameters (a protocol
# violation, which would otherwise pass for an outage).
_SESSION_MOVED = (
    psycopg.errors.DuplicatePreparedStatement,
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.ProtocolViolation,
)


def _prepared_elsewhere(exc: psycopg.Error) -> bool:
    return not isinstance(exc, psycopg.errors.ProtocolViolation) or "prepared statement" in str(exc)


# A pooled connection returned this recently is handed out without the test
# query (psycopg_pool's `check_connection`: a round trip of its own, as long
# as most of our calls) unless something says it broke (`_check`). One idle
# longer may have been dropped by a server restart or a failover meanwhile.
CHECK_IDLE_S = 1.0


def _cp(r: TupleRow) -> CheckpointRow:
    return CheckpointRow(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]))


def _w(r: TupleRow) -> WriteRow:
    return WriteRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bytes(r[7]))


class AsyncPostgresTier:
    """Checkpoints in Postgres through a psycopg connection pool.

    ``prepared_statements=False`` keeps psycopg from preparing statements on
    the server (``prepare_threshold=None``): needed behind a pooler in
    transaction mode that does not track them. There a call finds its
    prepared statement missing, or another client's under the same name:
    it fails with `ConfigError` (or, same name and number of parameters,
    runs the other statement). Each call then costs the server a parse and
    a plan.

    `connect_timeout` bounds opening a connection and waiting for a pooled
    one; `call_timeout` each call on a connection, on the sync face too
    (`pools.ConnectionPool.watch`: past it the connection's socket is shut
    down, the call raises `TierUnavailable` and the connection is
    discarded). The calls that walk a whole thread or every thread
    (`thread_ids`, `thread_records`, `list_quarantine`, `prune`,
    `delete_thread`, `delete_for_runs`) and `setup`'s migration, which may
    wait for another replica's migration lock, are not bounded by it, as in
    the tier guard: they get `long_call_timeout` (`pools.long_call_timeout`:
    six call timeouts, at least `pools.LONG_CALL_TIMEOUT_S`, 60 s), on both
    faces, past which the connection's socket is shut down and they raise
    `TierUnavailable` too. None: unbounded (both).

    `pool`: the application's own pool for this face (`url` then says where
    it points, see `tiers.supplied`). The tier borrows its connections with
    the settings it needs (`_borrowed`), never opens or closes it, and a
    closed one is a `ConfigError`.
    """

    name = "postgres"
    # Set by a read-only saver: setup checks the store is there, as this
    # version's tables, and creates or migrates nothing.
    read_only = False
    role = Role.RECORD

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT_S,
        prepared_statements: bool = True,
        pool: AsyncConnectionPool | None = None,
        schema: str | None = None,
    ) -> None:
        self.url = url
        # Every statement names its tables in `schema` when one is given
        # (`sql.in_schema`), on both faces and whatever a pool's search_path.
        self.schema = schema
        self.sql = sql.in_schema(schema)
        self.where = redact(url)
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        # The bound of the calls `call_timeout` does not hold (see the class).
        self.long_call_timeout = long_call_timeout(call_timeout)
        self.pool_size = pool_size
        self.prepared_statements = prepared_statements
        self._failed_at = 0.0  # when a call last met a connection error
        # When (monotonic, before the statement was sent) this saver last took
        # or renewed a lease, by (thread, holder, token): a fenced write
        # renews it only `renew_every` seconds later (`_fenced`).
        self._renewed: dict[tuple[str, str, int], float] = {}
        self.group = GroupCommit(self._run_grouped)  # ASYNC ONLY
        # The application's pool is theirs: used, never opened nor closed here.
        self.owns_pool = pool is None
        self.pool = self._new_pool() if pool is None else pool
        self._opened = False

    @contextlib.contextmanager
    def _unreachable(self) -> Generator[None, None, None]:
        """`unavailable_on` for this tier, remembering when a call failed:
        from then on every pooled connection is tested before use. A
        prepared statement met in the wrong server session is a
        `ConfigError` saying how to run behind a transaction pooler."""
        try:
            with unavailable_on("postgres", self.where, *_ERRORS):
                try:
                    yield
                except _SESSION_MOVED as exc:
                    if self.prepared_statements and _prepared_elsewhere(exc):
                        raise self._pooled_error(exc) from exc
                    raise
        except TierUnavailable:
            self._failed_at = time.monotonic()
            raise

    def _pooled_error(self, exc: psycopg.Error) -> ConfigError:
        return ConfigError(
            f"postgres tier at {self.where}: {' '.join(str(exc).split())}. A connection pooler in transaction "
            "mode (PgBouncer pool_mode = transaction) is between this saver and the server: it runs each "
            "transaction in any server session, where the statements psycopg prepared are missing or are another "
            "client's. Pass postgres_prepared_statements=False to DurableSaver (or set "
            "LANGGRAPH_DURABLE_POSTGRES_PREPARED_STATEMENTS=false), or make the pooler track prepared statements "
            "(PgBouncer 1.21+: max_prepared_statements > 0)."
        )

    @contextlib.asynccontextmanager
    async def _connection(self, timed: bool = True, doing: str = "") -> AsyncIterator[Any]:
        """A pooled connection, stamped with when it went back to the pool
        (`_check`). Not a pool ``reset`` callback: with one, psycopg_pool
        returns connections from a background task, one hop more per call.

        `timed`: the calls made on it are bounded by `call_timeout` (the
        sync face's watchdog, `pools.ConnectionPool.watch`; the async face
        is bounded by its tier guard); a call that outlives it raises
        `TierUnavailable` and its connection is closed, so the pool
        discards it rather than hand it out again. Waiting for a pooled
        connection is bounded by `call_timeout` too (and always by
        `connect_timeout`): a pool whose connections all went to a stalled
        server does not hold the call for the connect timeout. Untimed
        calls are bounded the same way, on both faces, by
        `long_call_timeout`; `doing` says what such a call was doing, for
        its error."""
        wait = self.connect_timeout
        if timed and self.call_timeout is not None:
            wait = min(wait, self.call_timeout)
        async with self.pool.connection(timeout=wait) as conn, self._borrowed(conn):
            watch = None
            try:
                with (
                    AsyncConnectionPool.watch(conn, self.call_timeout)
                    if timed
                    else watched(conn, self.long_call_timeout)
                ) as watch:
                    yield conn
            except psycopg.OperationalError as exc:
                if watch is not None and watch.fired:
                    raise (self._stalled(exc) if timed else self._stalled_long(exc, doing)) from exc
                raise
            finally:
                if watch is not None and watch.fired:
                    await conn.close()
                conn._lgd_returned_at = time.monotonic()  # type: ignore[attr-defined]

    @contextlib.asynccontextmanager
    async def _borrowed(self, conn: Any) -> AsyncIterator[None]:
        """A connection of the application's pool, set up as this tier's own
        are (autocommit, tuple rows, no prepared statements if so
        configured) while the tier uses it, and given back with its own
        settings. Attribute changes, no round trip. A connection of the
        tier's own pool already has them."""
        if self.owns_pool:
            yield
            return
        saved = (conn.autocommit, conn.row_factory, conn.prepare_threshold)
        if not conn.autocommit:
            await conn.set_autocommit(True)
        conn.row_factory = tuple_row
        # As on the tier's own connections: psycopg's default, or never. An
        # app's threshold of 0 (PostgresStore's advice) would prepare the
        # migrations' multi-statement scripts, which the server refuses.
        conn.prepare_threshold = PREPARE_THRESHOLD if self.prepared_statements else None
        try:
            yield
        finally:
            conn.row_factory, conn.prepare_threshold = saved[1], saved[2]
            if not saved[0]:
                # Not inside a transaction, or the connection is broken (the
                # pool discards it): either way nothing to put back.
                with contextlib.suppress(psycopg.Error):
                    await conn.set_autocommit(False)

    def _stalled(self, exc: BaseException) -> TierUnavailable:
        return TierUnavailable(
            f"postgres tier at {self.where} did not answer within call_timeout ({self.call_timeout} s; "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}): the server or the network to it stalls. "
            "Its connection was dropped; check the server's load and the network, or raise call_timeout.",
            tier="postgres",
        )

    def _stalled_long(self, exc: BaseException, doing: str) -> TierUnavailable:
        """A call `call_timeout` does not hold outlived `long_call_timeout`."""
        return TierUnavailable(
            f"postgres tier at {self.where} did not finish {doing or 'a scan'} within {self.long_call_timeout} s "
            f"(the bound of setup and whole-store calls: {LONG_CALL_FACTOR} call timeouts, at least "
            f"{LONG_CALL_TIMEOUT_S:g} s; {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}): the server or the network to it stalls"
            + (
                ", or another replica holds the migration lock (pg_advisory_xact_lock) that long. Check the "
                "server's load and the network, and pg_stat_activity for a session stuck in a migration"
                if doing == "setup"
                else ". Check the server's load and the network"
            )
            + "; its connection was dropped.",
            tier="postgres",
        )

    async def _check(self, conn: Any) -> None:
        """Test a pooled connection before it is handed out, unless it was
        in use a moment ago and nothing says it broke since: no call failed,
        and its socket has nothing to read (a server that closed the
        connection leaves an end-of-file there, seen without a round trip)."""
        returned = getattr(conn, "_lgd_returned_at", 0.0)
        if (
            returned <= self._failed_at
            or time.monotonic() - returned >= CHECK_IDLE_S
            or select.select([conn.fileno()], [], [], 0)[0]
        ):
            # The test query waits on the server too: bounded like a call, on
            # both faces (it also comes before the calls the tier guard does
            # not bound): a stalled one fails the check, and the pool discards
            # the connection.
            with watched(conn, self.call_timeout):
                await AsyncConnectionPool.check_connection(conn)

    def _new_pool(self) -> AsyncConnectionPool:
        return AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            timeout=self.connect_timeout,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, int(self.connect_timeout)),
                **_KEEPALIVES,
                "tcp_user_timeout": self._tcp_user_timeout_ms(),
                # psycopg prepares a statement on the server once a connection
                # has run it a few times; None never does, for a pooler that
                # gives each transaction any server session (see the module).
                **({} if self.prepared_statements else {"prepare_threshold": None}),
            },
            # Hand out no connection the server dropped while it sat in the
            # pool (a restart, a failover): one idle for a while is tested first.
            check=self._check,
        )

    def _tcp_user_timeout_ms(self) -> int:
        """libpq's ``tcp_user_timeout``: a connection whose sent data goes
        unacknowledged for the call timeout is dropped by the kernel (not
        before the connect timeout, which bounds the connect itself)."""
        return int(1000 * max(self.call_timeout or 0.0, self.connect_timeout))

    async def _open(self) -> None:
        """Open the pool, once one direct connection has shown the server
        answers. psycopg_pool retries a refused connect until its timeout,
        so a server known down at once (nothing listening) would cost every
        new process `connect_timeout` here; the direct connection fails at
        once instead, and the tier's breaker then skips it. The
        application's pool is theirs to open."""
        if not self._opened and not self.owns_pool:
            if self.pool.closed:
                raise ConfigError(
                    f"the psycopg pool given as postgres= ({self.where}) is not open: open it "
                    "(`pool.open()`, `await pool.open()`, or `with`/`async with` the pool) before the saver uses "
                    "it; the saver never opens or closes a pool it was given."
                )
            self._opened = True
        if not self._opened:
            error = await self._connect_error()
            if error is not None:
                raise error
            try:
                await self.pool.open(wait=True, timeout=self.connect_timeout)
            except psycopg.OperationalError as exc:
                # A pool that failed to open is closed for good: the next
                # attempt (the server may be back by then) gets a new one.
                await self.pool.close()
                self.pool = self._new_pool()
                raise await self._open_error(exc) from exc
            self._opened = True

    async def _open_error(self, pool_error: psycopg.OperationalError) -> DurableError:
        """Why the pool did not open. The pool only says PoolTimeout ("is the
        server running?") whatever happened, so one direct connection asks
        the server (`_connect_error`)."""
        error = await self._connect_error()
        if error is not None:
            return error
        return TierUnavailable(
            f"postgres tier at {self.where} did not open its connection pool in {self.connect_timeout} s "
            f"({type(pool_error).__name__}: {pool_error}). Check that the server is running and not overloaded.",
            tier="postgres",
        )

    async def _connect_error(self) -> DurableError | None:
        """Try one direct connection (bounded as the pool's are): None if it
        opened, else why not: a wrong database, role or password is a
        `ConfigError`, anything else `TierUnavailable`, both with the
        server's own words."""
        try:
            conn = await self.pool.connection_class.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, int(self.connect_timeout)),
                **_KEEPALIVES,
                tcp_user_timeout=self._tcp_user_timeout_ms(),
            )
        except psycopg.Error as exc:
            return connect_error(exc, f"postgres tier at {self.where}", "postgres=")
        await conn.close()
        return None

    async def setup(self) -> None:
        await self._open()
        with self._unreachable():
            if self.read_only:
                await self._found()
                return
            async with self._connection(timed=False, doing="setup") as conn, conn.transaction():
                await conn.execute(self.sql.LOCK_MIGRATIONS, (self.sql.MIGRATION_LOCK,))
                if self.schema is not None:
                    # Looked up first: a role that may not create schemas can
                    # still use one an administrator made for it.
                    cur = await conn.execute(sql.SCHEMA_EXISTS, (self.schema,))
                    if await cur.fetchone() is None:
                        await conn.execute(sql.create_schema(self.schema))
                await conn.execute(self.sql.CREATE_MIGRATIONS_TABLE)
                cur = await conn.execute(self.sql.SELECT_SCHEMA_VERSION)
                row = await cur.fetchone()
                current = row[0] if row else 0
                for version in range(current + 1, len(self.sql.MIGRATIONS)):
                    await conn.execute(self.sql.MIGRATIONS[version])
                    await conn.execute(self.sql.INSERT_SCHEMA_VERSION, (version,))

    async def _found(self) -> None:
        """A read-only saver's setup: `ConfigError` unless the database holds
        a store with this version's tables; nothing is created."""
        async with self._connection(timed=False, doing="setup") as conn:
            cur = await conn.execute(self.sql.MIGRATIONS_TABLE)
            row = await cur.fetchone()
            if row is None or row[0] is None:
                raise ConfigError(
                    f"no store in the database at {self.where}{self._in_schema()}: a read-only saver (and every "
                    "command that only looks) never creates one. Check the URL (postgres=, --postgres, "
                    "LANGGRAPH_DURABLE_POSTGRES_URL)."
                )
            cur = await conn.execute(self.sql.SELECT_SCHEMA_VERSION)
            current = (await cur.fetchone() or (0,))[0]
        if current < len(self.sql.MIGRATIONS) - 1:
            raise ConfigError(
                f"the store in the database at {self.where}{self._in_schema()} has the tables of an older version, "
                "which a read-only saver does not migrate: start the application (or any command that writes) "
                "once with this version."
            )

    def _in_schema(self) -> str:
        return f" (schema {self.schema})" if self.schema is not None else ""

    async def close(self) -> None:
        await self.group.drain()  # ASYNC ONLY
        if self.owns_pool:
            await self.pool.close()
        self._opened = False

    # -- writes ---------------------------------------------------------------------

    async def write_checkpoint(
        self, row: CheckpointRow, blobs: Sequence[BlobRow], *, fence: Fence | None = None
    ) -> None:
        """One statement, so one round trip and atomic without BEGIN/COMMIT:
        the fence check (`_fenced`), the new blobs and the checkpoint."""
        checkpoint = (
            row.thread_id,
            row.checkpoint_ns,
            row.checkpoint_id,
            row.parent_id,
            row.run_id,
            row.metadata_json,
            row.envelope,
        )

        def rows() -> Rows:  # ASYNC ONLY
            return Rows(
                blobs=[(row.thread_id, row.checkpoint_ns, b.channel, b.version, b.envelope) for b in blobs],
                checkpoints=[checkpoint],
            )

        if len(blobs) <= self.sql.VALUES_MAX_ROWS:
            values: list[Any] = []
            for b in blobs:
                values += (row.thread_id, row.checkpoint_ns, b.channel, b.version, b.envelope)
            inserts = (self.sql.blobs_values(len(blobs)),) if blobs else ()
            if True:  # ASYNC
                await self._fenced(fence, (*inserts, self.sql.UPSERT_CHECKPOINT), (*values, *checkpoint), rows)
            else:
                self._fenced(fence, (*inserts, self.sql.UPSERT_CHECKPOINT), (*values, *checkpoint))
            return
        params = (
            row.thread_id,
            row.checkpoint_ns,
            [b.channel for b in blobs],
            [b.version for b in blobs],
            [b.envelope for b in blobs],
            *checkpoint,
        )
        if True:  # ASYNC
            await self._fenced(fence, [self.sql.INSERT_CHECKPOINT_BLOBS, self.sql.UPSERT_CHECKPOINT], params, rows)
        else:
            self._fenced(fence, [self.sql.INSERT_CHECKPOINT_BLOBS, self.sql.UPSERT_CHECKPOINT], params)

    async def write_batch(
        self,
        checkpoints: Sequence[tuple[CheckpointRow, Sequence[BlobRow]]],
        writes: Sequence[WriteRow],
        *,
        fence: Fence | None = None,
    ) -> None:
        """One statement (see `write_checkpoint`) for all of them."""
        rows = list({(r.checkpoint_ns, r.checkpoint_id): r for r, _ in checkpoints}.values())
        blobs = [b for _, bs in checkpoints for b in bs]
        first = rows[0] if rows else writes[0] if writes else None
        if first is None:
            return
        inserts: list[str] = []
        params: list[Any] = []
        if blobs:
            inserts.append(self.sql.INSERT_BATCH_BLOBS)
            params += [
                first.thread_id,
                [b.checkpoint_ns for b in blobs],
                [b.channel for b in blobs],
                [b.version for b in blobs],
                [b.envelope for b in blobs],
            ]
        if rows:
            inserts.append(self.sql.UPSERT_BATCH_CHECKPOINTS)
            params += [
                first.thread_id,
                [r.checkpoint_ns for r in rows],
                [r.checkpoint_id for r in rows],
                [r.parent_id for r in rows],
                [r.run_id for r in rows],
                [r.metadata_json for r in rows],
                [r.envelope for r in rows],
            ]
        if writes:
            inserts.append(self.sql.INSERT_BATCH_WRITES)
            params += [
                first.thread_id,
                [w.checkpoint_ns for w in writes],
                [w.checkpoint_id for w in writes],
                [w.task_id for w in writes],
                [w.idx for w in writes],
                [w.channel for w in writes],
                [w.task_path for w in writes],
                [w.envelope for w in writes],
            ]
        await self._fenced(fence, inserts, params)

    async def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        if not blobs:
            return
        with self._unreachable():
            async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
                await cur.executemany(
                    self.sql.UPSERT_BLOB,
                    [(b.thread_id, b.checkpoint_ns, b.channel, b.version, b.envelope) for b in blobs],
                )

    async def write_writes(self, rows: Sequence[WriteRow], upsert: bool, *, fence: Fence | None = None) -> None:
        """One statement (see `write_checkpoint`). A call's writes have
        distinct (task, idx), so one INSERT may upsert them all."""
        if not rows:
            return
        first = rows[0]
        if any(
            (w.thread_id, w.checkpoint_ns, w.checkpoint_id)
            != (first.thread_id, first.checkpoint_ns, first.checkpoint_id)
            for w in rows
        ):
            for w in rows:  # rows of several checkpoints (catch-up, repair): one statement each
                await self.write_writes([w], upsert, fence=fence)
            return

        def grouped() -> Rows:  # ASYNC ONLY
            tuples = [
                (w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.channel, w.task_path, w.envelope)
                for w in rows
            ]
            return Rows(upserts=tuples) if upsert else Rows(writes=tuples)

        if len(rows) <= self.sql.VALUES_MAX_ROWS:
            values: list[Any] = []
            for w in rows:
                values += (w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.channel, w.task_path)
                values.append(w.envelope)
            if True:  # ASYNC
                await self._fenced(fence, (self.sql.writes_values(len(rows), upsert),), values, grouped)
            else:
                self._fenced(fence, (self.sql.writes_values(len(rows), upsert),), values)
            return
        params = (
            first.thread_id,
            first.checkpoint_ns,
            first.checkpoint_id,
            [w.task_id for w in rows],
            [w.idx for w in rows],
            [w.channel for w in rows],
            [w.task_path for w in rows],
            [w.envelope for w in rows],
        )
        if True:  # ASYNC
            await self._fenced(fence, [self.sql.UPSERT_WRITES if upsert else self.sql.INSERT_WRITES], params, grouped)
        else:
            self._fenced(fence, [self.sql.UPSERT_WRITES if upsert else self.sql.INSERT_WRITES], params)

    async def _fenced(
        self,
        fence: Fence | None,
        inserts: Sequence[str],
        params: Sequence[Any],
        rows: Callable[[], Any] | None = None,
    ) -> None:
        """Run `inserts` (each with an ``{ok}`` slot in its WHERE) as one
        statement. With a `fence`, the statement first renews the lease if it
        still matches (its row stays locked until the statement commits, so a
        takeover waits for the write and then sees the renewed lease), and
        inserts nothing otherwise: then `LeaseLost`. On the async face a
        fenced write that meets another in flight goes with the others that
        wait, in one statement (`group.py`, the tier's `group`: `rows` makes
        the write's rows for it)."""
        if fence is None:
            with self._unreachable():
                async with self._connection() as conn:
                    await conn.execute(self.sql.chained(tuple(inserts)), params)
            return
        check = (
            fence.token,
            fence.ttl,
            fence.thread_id,
            fence.holder,
            fence.late,
            fence.token,
            fence.late,
            fence.token,
        )
        key = (fence.thread_id, fence.holder, fence.token)
        sent = time.monotonic()
        # Renew the lease (an UPDATE, which two writes of a run at once take
        # in turn) unless this saver renewed it a moment ago; else only lock it.
        renew = fence.late or sent - self._renewed.get(key, -math.inf) >= renew_every(fence.ttl)

        async def alone() -> bool:
            found = await self._fetchall(self.sql.fenced(tuple(inserts), renew=renew), (*check, *params))
            return bool(found[0][0])

        if True:  # ASYNC
            matched = await (self.group.write(Member(fence, renew, rows, alone)) if rows is not None else alone())
        else:
            matched = alone()
        if matched and renew:
            self._renewed_at(key, sent)
        if not matched:
            self._renewed.pop(key, None)
            lease = await self._fetchall(self.sql.SELECT_LEASE, (fence.thread_id,))
            r = lease[0] if lease else None
            raise lease_lost(fence, Lease(fence.thread_id, r[0], r[1], r[2]) if r else None, "postgres")

    async def _run_grouped(self, statement: str, params: list[Any]) -> set[str]:  # ASYNC ONLY
        """(`GroupCommit`.) One grouped statement: the threads whose fence
        matched. Its own failures (not the connection's) are `GroupFailed`."""
        with self._unreachable():
            async with self._connection() as conn:
                try:
                    cur = await conn.execute(self.sql.qualify(statement), params)
                    return {r[0] for r in await cur.fetchall()}
                except psycopg.errors.TransactionRollback as exc:  # an OperationalError, but not an outage
                    raise GroupFailed(str(exc)) from exc
                except psycopg.Error as exc:
                    if isinstance(exc, psycopg.OperationalError):
                        raise
                    raise GroupFailed(str(exc)) from exc

    def _renewed_at(self, key: tuple[str, str, int], sent: float) -> None:
        if len(self._renewed) >= RENEWED_MAX and key not in self._renewed:
            self._renewed.clear()  # forgotten leases are renewed by their next write: only a cost
        self._renewed[key] = sent

    # -- reads ------------------------------------------------------------------------

    async def _fetchall(self, query: str, params: Sequence[Any], *, timed: bool = True) -> list[TupleRow]:
        with self._unreachable():
            async with self._connection(timed) as conn:
                cur = await conn.execute(query, params)
                return await cur.fetchall()

    async def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        rows = await self._fetchall(self.sql.SELECT_CHECKPOINT, (thread_id, ns, checkpoint_id))
        return _cp(rows[0]) if rows else None

    async def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        if not keys:
            return {}
        rows = await self._fetchall(self.sql.SELECT_BLOBS, (thread_id, ns, [c for c, _ in keys], [v for _, v in keys]))
        return {(r[0], r[1]): BlobRow(thread_id, ns, r[0], r[1], bytes(r[2])) for r in rows}

    async def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        if not checkpoint_ids:
            return []
        rows = await self._fetchall(self.sql.SELECT_WRITES, (thread_id, ns, list(checkpoint_ids)))
        return [_w(r) for r in rows]

    async def list_page(
        self, thread_id: str, ns: str, before: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[WriteRow]]:
        """`list_checkpoints` and `read_writes` of one page, in one statement."""
        rows = await self._fetchall(
            self.sql.select_page(before is not None), (thread_id, ns, *([before] if before is not None else []), limit)
        )
        checkpoints: dict[str, CheckpointRow] = {}
        writes = []
        for r in rows:
            if r[2] not in checkpoints:
                checkpoints[r[2]] = _cp(r)
            if r[7] is not None:
                writes.append(WriteRow(thread_id, ns, r[2], r[7], r[8], r[9], r[10], bytes(r[11])))
        return list(checkpoints.values()), writes

    async def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        params: list[Any] = [v for v in (thread_id, ns, checkpoint_id, before) if v is not None]
        if filter:
            # Containment narrows the scan on the server; the chain re-checks
            # exact equality on the verified record.
            params.append(Jsonb(json.loads(json.dumps(filter, default=str))))
        limited = limit is not None and not filter
        if limited:
            params.append(limit)
        query = self.sql.select_checkpoints(
            thread_id=thread_id is not None,
            ns=ns is not None,
            checkpoint_id=checkpoint_id is not None,
            before=before is not None,
            filter=bool(filter),
            limit=limited,
        )
        return [_cp(r) for r in await self._fetchall(query, params)]

    # -- deletes ----------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> None:
        with self._unreachable():
            async with self._connection(timed=False, doing="deleting a thread") as conn, conn.transaction():
                for statement in self.sql.DELETE_THREAD:
                    await conn.execute(statement, (thread_id,))
                await conn.execute(self.sql.DELETE_GONE_NOTES, gone_range(thread_id))

    async def delete_for_runs(self, run_ids: Sequence[str], retain: Sequence[tuple[str, str, str]] = ()) -> None:
        """Delete the checkpoints (and their writes) of these runs, except
        the `retain` ones, (thread, ns, checkpoint id): still needed by a
        surviving checkpoint's delta channels."""
        if not run_ids:
            return
        kept = sorted(set(retain))
        params = ([k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept])
        with self._unreachable():
            async with self._connection(timed=False, doing="deleting runs") as conn, conn.transaction():
                await conn.execute(self.sql.DELETE_RUN_WRITES, (list(run_ids), *params))
                await conn.execute(self.sql.DELETE_RUN_CHECKPOINTS, (list(run_ids), *params))

    async def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.DELETE_CHECKPOINT, (thread_id, ns, checkpoint_id))

    async def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.UPSERT_LEDGER, (thread_id, key, envelope))

    async def swap_ledger(self, thread_id: str, key: str, old: bytes | None, new: bytes) -> None:
        """Replace one ledger entry only if it still holds `old` (None: only
        if there is none); see `SqliteTier.swap_ledger`."""
        with self._unreachable():
            async with self._connection() as conn:
                if old is None:
                    await conn.execute(self.sql.INSERT_LEDGER_IF_ABSENT, (thread_id, key, new))
                else:
                    await conn.execute(self.sql.SWAP_LEDGER, (new, thread_id, key, old))

    async def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        rows = await self._fetchall(self.sql.SELECT_LEDGER, (thread_id,))
        return {r[0]: bytes(r[1]) for r in rows}

    async def thread_ids(self) -> list[str]:
        rows = await self._fetchall(self.sql.SELECT_THREAD_IDS, (), timed=False)
        return [r[0] for r in rows]

    async def thread_records(self, thread_id: str) -> ThreadRecords:
        """Every live record of one thread, for `verify` and `repair`."""
        cps = await self._fetchall(self.sql.SELECT_THREAD_CHECKPOINTS, (thread_id,), timed=False)
        blobs = await self._fetchall(self.sql.SELECT_THREAD_BLOBS, (thread_id,), timed=False)
        writes = await self._fetchall(self.sql.SELECT_THREAD_WRITES, (thread_id,), timed=False)
        return ThreadRecords(
            [_cp(r) for r in cps],
            [BlobRow(r[0], r[1], r[2], r[3], bytes(r[4])) for r in blobs],
            [_w(r) for r in writes],
        )

    async def quarantine(
        self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes, fields: bytes = b""
    ) -> None:
        """Keep a copy for forensics and for `restore`, out of every read path."""
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(
                    self.sql.INSERT_QUARANTINE, (thread_id, ns, kind, key, reason, envelope, fields or None)
                )

    async def remove_copy(self, kind: str, row: Row) -> None:
        """Delete this exact copy from the live table; a different copy under
        the same key (one repaired meanwhile) stays."""
        table, where, params = live_row_where(row, "%s")
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.delete_copy(table, where), (*params, row.envelope))

    async def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        if thread_id is None:
            rows = await self._fetchall(self.sql.SELECT_QUARANTINE, (), timed=False)
        else:
            rows = await self._fetchall(self.sql.SELECT_THREAD_QUARANTINE, (thread_id,), timed=False)
        return [
            QuarantinedRecord("postgres", r[1], r[2], r[3], r[4], r[5], bytes(r[6]), r[7], str(r[0]), _fields(r[8]))
            for r in rows
        ]

    async def drop_quarantined(self, ids: Sequence[str]) -> None:
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.DELETE_QUARANTINED, ([int(i) for i in ids],))

    async def read_meta(self, key: str) -> str | None:
        rows = await self._fetchall(self.sql.SELECT_META, (key,))
        return rows[0][0] if rows else None

    async def write_meta(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one store-wide setting."""
        with self._unreachable():
            async with self._connection() as conn:
                if value is None:
                    await conn.execute(self.sql.DELETE_META, (key,))
                else:
                    await conn.execute(self.sql.UPSERT_META, (key, value))

    async def create_meta(self, key: str, value: str) -> str:
        """Set a store-wide setting unless one is set; the value that holds
        (two replicas creating it at once agree on the first one's)."""
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.INSERT_META_IF_ABSENT, (key, value))
                cur = await conn.execute(self.sql.SELECT_META, (key,))
                row = await cur.fetchone()
        return str(row[0]) if row else value

    async def head(self, thread_id: str, ns: str) -> Head:
        """The newest checkpoint of (thread, ns), the thread's deletion
        marker (`mark_deleted`), and the newest checkpoint's row and pending
        writes, in one statement (one round trip)."""
        rows = await self._fetchall(self.sql.SELECT_HEAD, (thread_id, ns, deleted_key(thread_id)))
        first = rows[0]
        row = _cp(first) if first[2] is not None else None
        writes = tuple(
            WriteRow(thread_id, ns, first[2], r[8], r[9], r[10], r[11], bytes(r[12])) for r in rows if r[8] is not None
        )
        return Head(first[2], first[7], row, writes)

    async def mark_gone(self, thread_id: str, checkpoints: Sequence[tuple[str, str]]) -> None:
        """Record that these (ns, checkpoint id) were deleted (`delete_for_runs`)."""
        if not checkpoints:
            return
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.INSERT_GONE, ([gone_key(thread_id, ns, c) for ns, c in checkpoints],))

    async def gone(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> set[str]:
        """Which of these checkpoint ids `mark_gone` recorded."""
        keys = {gone_key(thread_id, ns, c): c for c in checkpoint_ids}
        if not keys:
            return set()
        rows = await self._fetchall(self.sql.SELECT_META_KEYS, (list(keys),))
        return {keys[r[0]] for r in rows}

    async def mark_deleted(self, thread_id: str, marker: str | None) -> None:
        """Record that every checkpoint of the thread up to `marker` was
        deleted (None clears it); see `SqliteTier.mark_deleted`."""
        await self.write_meta(deleted_key(thread_id), marker)

    async def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        kept_ns = [ns for ns, _ in keep]
        kept_ids = [cid for _, cid in keep]
        with self._unreachable():
            async with self._connection(timed=False, doing="pruning a thread") as conn, conn.transaction():
                for statement in self.sql.PRUNE_CHECKPOINTS_AND_WRITES:
                    await conn.execute(statement, (thread_id, kept_ns, kept_ids))
                await conn.execute(
                    self.sql.PRUNE_BLOBS,
                    (thread_id, [b[0] for b in keep_blobs], [b[1] for b in keep_blobs], [b[2] for b in keep_blobs]),
                )

    # -- writer leases (lease.py): the server's clock, so replicas' skew does not matter --

    async def read_lease(self, thread_id: str) -> tuple[Lease | None, float]:
        rows = await self._fetchall(self.sql.SELECT_LEASE_AND_NOW, (thread_id,))
        r = rows[0]
        return (Lease(thread_id, r[0], r[1], r[2]) if r[0] is not None else None), r[3]

    async def swap_lease(
        self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float
    ) -> Lease | None:
        sent = time.monotonic()
        taken = await self._swap_lease(thread_id, expected, holder, token, ttl)
        if taken is not None:
            self._renewed_at((thread_id, holder, token), sent)
        return taken

    async def _swap_lease(
        self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float
    ) -> Lease | None:
        if expected is None:
            rows = await self._fetchall(self.sql.INSERT_LEASE, (thread_id, holder, token, ttl))
        else:
            rows = await self._fetchall(
                self.sql.SWAP_LEASE,
                (holder, token, ttl, thread_id, expected.holder, expected.token, expected.expires_at),
            )
        return Lease(thread_id, holder, token, rows[0][0]) if rows else None

    async def keep_lease(self, thread_id: str, holder: str, token: int, ttl: float) -> bool:
        rows = await self._fetchall(self.sql.KEEP_LEASE, (ttl, thread_id, holder, token))
        return bool(rows)

    async def renew_leases(self, holder: str, leases: Sequence[tuple[str, int]], ttl: float) -> set[str]:
        if not leases:
            return set()
        threads, tokens = [t for t, _ in leases], [token for _, token in leases]
        rows = await self._fetchall(self.sql.RENEW_LEASES, (ttl, threads, tokens, holder))
        return {row[0] for row in rows}

    async def release_lease(self, thread_id: str, holder: str, token: int | None) -> None:
        if token is not None:
            self._renewed.pop((thread_id, holder, token), None)
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.RELEASE_LEASE, (thread_id, holder, token, token))

    async def ask_hand_off(self, thread_id: str, holder: str) -> None:
        message = hand_off_message(holder, thread_id)
        if len(message.encode()) > HAND_OFF_MAX_MESSAGE:
            return
        with self._unreachable():
            async with self._connection() as conn:
                await conn.execute(self.sql.NOTIFY_HAND_OFF, (hand_off_channel(holder), message))


if TYPE_CHECKING:
    from ..protocol_async import AsyncTier

    def _conforms(tier: AsyncPostgresTier) -> AsyncTier:
        """mypy checks here that the class implements the Protocol the rooms use."""
        return tier
