"""`DurableSaver`: one checkpointer object, sync and async, over 1-3 tiers.

The public class and its options. Its operations are written once, async,
in ``faces/ops_async.py`` (the sync face, ``faces/ops.py``, is generated from
it); what both faces share is ``faces/base.py``.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

from .archive.replica import DEFAULT_ARCHIVE_LAG_S

# The variables, named with the options, are also importable from here.
from .environment import (
    ENV_LEASE_LINGER as ENV_LEASE_LINGER,
)
from .environment import (
    ENV_OLD_SIGNING_KEYS as ENV_OLD_SIGNING_KEYS,
)
from .environment import (
    ENV_POSTGRES_PREPARED_STATEMENTS as ENV_POSTGRES_PREPARED_STATEMENTS,
)
from .environment import (
    ENV_POSTGRES_URL as ENV_POSTGRES_URL,
)
from .environment import (
    ENV_REDIS_KEY_PREFIX as ENV_REDIS_KEY_PREFIX,
)
from .environment import (
    ENV_REDIS_TTL as ENV_REDIS_TTL,
)
from .environment import (
    ENV_REDIS_URL as ENV_REDIS_URL,
)
from .environment import (
    ENV_SERDE as ENV_SERDE,
)
from .environment import (
    ENV_SIGNING_KEY as ENV_SIGNING_KEY,
)
from .environment import (
    ENV_SQLITE as ENV_SQLITE,
)
from .environment import (
    ENV_WRITE as ENV_WRITE,
)
from .errors import ConfigError
from .integrity import OnCorruption
from .metrics import MetricsHook
from .model.backlog import DEFAULT_CALL_TIMEOUT_S, WriteMode
from .model.codec import DEFAULT_MAX_RECORD_BYTES
from .model.deltas import DEFAULT_SNAPSHOT_EVERY
from .model.lease import (
    DEFAULT_LEASE_LINGER_S,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEASE_WAIT_S,
    DEFAULT_ON_BUSY,
    OnBusy,
)
from .model.memory_budget import DEFAULT_MEMORY_BUDGET
from .options import (
    Options,
    env_options,
    naming_the_variable,
)
from .retention import RetentionPolicy
from .tiers.postgres.tier_async import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_POOL_SIZE
from .tiers.redis.tier_async import DEFAULT_KEY_PREFIX
from .tiers.registry import DEFAULT_SQLITE_PATH, KINDS, POSTGRES, REDIS, SQLITE
from .tiers.sqlite.tier import DEFAULT_BUSY_TIMEOUT_S

if TYPE_CHECKING:
    from .tiers.supplied import PostgresPool, RedisClient
from .engine.sweeper import RetentionSweeper
from .faces.base import DEFAULT_DRAIN_TIMEOUT_S, DEFAULT_RETENTION_RATE, checked_validator
from .faces.ops import SaverOps
from .faces.ops_async import AsyncSaverOps
from .validation import ValidationHook, Validator


class DurableSaver(SaverOps, AsyncSaverOps):
    """A LangGraph checkpointer that writes through SQLite -> Redis -> Postgres.

    Pass any non-empty subset of tiers. The same object serves ``graph.invoke``
    and ``graph.ainvoke``: sync methods use sync drivers, async methods use
    async drivers, and both share the local SQLite file.

    ``put`` returns when the tiers `write` names hold the checkpoint. A shared
    tier that is down is skipped behind a circuit breaker and caught up when
    it is back; if the write cannot be acknowledged, the checkpoint is
    withdrawn from the tiers that took it and `TierUnavailable` is raised. A
    value that cannot be serialized raises `SerializationError` before
    anything is written.

    Args:
        sqlite: path of the local SQLite file, ``":memory:"``, or None for no
            local tier.
        redis: a ``redis://`` URL, or None. A URL of any node of a Redis
            Cluster works as is (see ``redis_cluster``); for Redis Sentinel,
            ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``
            names the sentinels and the monitored primary's service name
            (the credentials are the primary's; sentinel port 26379 if
            omitted), and the primary is found again after a failover.
            Or a redis-py client of your own (``redis.Redis``,
            ``redis.asyncio.Redis`` or either ``RedisCluster``, made with
            ``decode_responses=False``, the default): the saver uses it on
            its face (sync or async methods) and opens a client of its own,
            to the same server, for the other. Yours is left open on close;
            its timeouts and retries are yours, so give it a
            ``socket_timeout`` if a stalled server must not hold a sync call.
        postgres: a ``postgresql://`` URL, or None. Or a psycopg pool of
            your own (``psycopg_pool.ConnectionPool`` or
            ``AsyncConnectionPool``), opened before the saver first uses it,
            for instance shared with a ``PostgresStore``::

                pool = AsyncConnectionPool(url, kwargs={"autocommit": True, "row_factory": dict_row})
                await pool.open()
                store = AsyncPostgresStore(pool)
                saver = DurableSaver(postgres=pool)
                graph = builder.compile(checkpointer=saver, store=store)

            The saver sets what it needs on each connection it borrows
            (autocommit, tuple rows, and no prepared statements if
            ``postgres_prepared_statements=False``) and puts the
            connection's own settings back when it returns it. The other
            face (the sync methods, for an async pool) gets a pool of its
            own to the same server. Yours is left open on close. A pool
            with a ``configure=`` or ``reset=`` callback needs
            ``postgres_schema=``: the other face's pool cannot run it, so
            a ``search_path`` it sets would hold on one face only
            (`ConfigError` otherwise).
        serde: the serializer (default: LangGraph's JsonPlusSerializer).
        signing_key: bytes or str (16 bytes or more). Makes each record's
            checksum an HMAC, so records planted without the key are rejected.
            Each tier records the key's fingerprint (never the key); a saver
            whose key does not match raises `ConfigError` at setup, before it
            reads anything.
        signing_keys: for key rotation, instead of ``signing_key``: the new
            key first, then older keys still accepted when verifying (None
            accepts unsigned records, to start signing an existing store).
            `repair` re-seals old records under the new key.
            Without either, and with a shared tier, every record is sealed
            with the store's own key: the first saver's ``setup()`` creates a
            random one in the system of record (Postgres, else Redis), every
            replica reads it from there, and the local tier keeps a copy.
            A record planted by someone who cannot read that key fails
            verification; records that verify are decoded with ``serde`` as
            is, so the application's own types come back as themselves.
        permissive_decoding: decode records that verify WITHOUT a key (those
            of a store written before it had one) with ``serde`` as given. By
            default such records, when read through a shared tier, are
            decoded with LangGraph's strict msgpack allowlist, so one planted
            in a shared tier cannot construct arbitrary objects; a type the
            allowlist blocks raises `UndecodableRecord` (never a plain dict).
            `repair` re-seals with the key only the unsigned records that
            decode strictly; to re-seal the others, once, when you know the
            store's unsigned records were written by your application alone,
            run ``repair()`` on a saver with ``permissive_decoding=True``.
        redis_key_prefix: prefix of every Redis key this saver writes.
        redis_cluster: None (default) asks the server at setup whether it is
            a Redis Cluster node (``INFO cluster``) and, if so, uses redis-py's
            cluster client; True or False says so without asking. Each
            thread's keys share one hash slot, so every per-thread step is
            one transaction or script on one primary; ``list(None)``,
            ``delete_for_runs``, ``verify`` and ``repair`` scan every primary.
            A primary that is down (or a cluster answering CLUSTERDOWN)
            counts as the Redis tier being down. True with a
            ``redis+sentinel://`` URL raises `ConfigError`.
        postgres_pool_size: maximum connections in each psycopg pool.
        redis_ttl: seconds after which a thread nobody used leaves Redis
            (every key a write touches expires that long after, and a thread
            in use has its keys' expiry pushed back, at most every tenth of
            it). Its next read is served from Postgres and copies it back.
            Needs postgres=. None (default): keys never expire. Also
            ``LANGGRAPH_DURABLE_REDIS_TTL``.
        postgres_prepared_statements: let psycopg prepare statements on the
            server (its ``prepare_threshold``), saving a parse and a plan per
            call. Pass False when a pooler in transaction mode sits in front
            of Postgres (PgBouncer ``pool_mode = transaction``) and does not
            track prepared statements (below 1.21, or ``max_prepared_statements
            = 0``): it runs each transaction in any server session, where a
            prepared statement is missing or another replica's, so calls fail
            with `ConfigError` saying so (or, worse, run the other statement).
            The tier keeps no other session state, so nothing else needs
            changing. Also
            ``LANGGRAPH_DURABLE_POSTGRES_PREPARED_STATEMENTS=false``.
        postgres_schema: the Postgres schema of the saver's tables, created
            by ``setup()`` if missing (looked up first, so a role that may
            not create schemas can use one made for it). Every statement
            names its tables in it, so two applications can share one
            database in two schemas, behind PgBouncer too, whatever their
            connections' ``search_path``. None (default): the tables are
            wherever the connections' ``search_path`` finds them (``public``
            unless you set it). Also ``LANGGRAPH_DURABLE_POSTGRES_SCHEMA``.
        sqlite_busy_timeout: seconds to wait for another process's SQLite lock.
        connect_timeout: seconds before Redis or Postgres counts as unreachable
            when connecting (and waiting for a pooled Postgres connection);
            a refused connection fails at once. Each call after that is
            bounded by ``call_timeout``.
        on_corruption: what to do when a record is bad in every tier:
            ``"fallback"`` (default) serves the newest intact ancestor
            checkpoint, ``"raise"`` raises `CorruptCheckpoint`, a callable
            does the fallback and receives each `CorruptionEvent` (an async
            one is awaited in the async face). Every bad copy is
            quarantined, logged and counted in any case.
        max_record_bytes: largest serialized channel value, pending write or
            checkpoint accepted by ``put`` / ``put_writes``; a larger one raises
            `RecordTooLarge` naming the channel, and nothing is written.
            None for no limit.
        validators: resume validators (see `langgraph_durable.validation`),
            run in order before a graph resumes a thread; `add_validator`
            adds more. Unconfirmed non-resumable actions are always checked.
        on_validation: called with a `ValidationOutcome` after each validation;
            an async function is awaited in the async face (the sync face
            cannot wait for one: it logs that it did not run).
        app_version: stamped into every checkpoint's metadata (``app_version``)
            so `validation.pin_version` can tell which version wrote it.
        lease_ttl: seconds a graph run keeps its thread's writer lease after
            its last write (one writer per thread, see `langgraph_durable.model.lease`).
            A run takes the lease in the most authoritative tier before it
            reads the thread; each write checks and renews it in the same
            transaction; the run gives it back when it ends (the sync face
            before ``invoke`` returns, the async face just after), so another
            replica may run the thread right away. The TTL only matters for a
            holder that crashed or hangs: another writer may take the lease
            over once it expired; the first run then gets `LeaseLost` at its
            next write, which is not stored. Direct ``put`` / ``put_writes``
            calls (and ``update_state``) use this saver's lease if it holds
            one, else take one for the single write.
        on_busy: when another writer is running the thread: ``"raise"``
            (default) raises `ThreadBusy` naming the holder (after looking
            again for up to a second, in case its run has just ended),
            ``"wait"`` waits for it to be released or to expire.
        lease_wait: longest wait with ``on_busy="wait"``, then `ThreadBusy`.
        lease_linger: seconds a run's lease is kept after the run ends
            (default 30; 0: given back at once). Meanwhile nobody else can
            write the thread, so this saver reads its latest state from the
            local cache alone, with no round trip to Redis or Postgres (with
            a local tier in front of a shared one; otherwise it does
            nothing). Another replica that wants to run the thread asks for
            the lease on the lease's tier (Postgres NOTIFY, else Redis
            PUBLISH) and this saver, listening on a connection of its own,
            gives it back at once (`langgraph_durable.engine.leases.handoff`); while
            it cannot hear that channel it keeps no lease. A request not
            heard costs the other replica a wait (``on_busy="wait"``) or
            `ThreadBusy`, never a fork. A kept lease expires in its tier
            1.5 s after the listener last renewed it (every 0.5 s), so a
            replica that dies keeping leases holds them 1.5 s at most;
            another replica, even with ``on_busy="raise"``, waits that out
            and takes the thread over. ``delete_thread``, ``copy_thread``
            (into the thread), ``delete_for_runs``, ``prune`` and
            ``apply_retention`` ask for a
            kept lease the same way first. A run of another replica that took
            its lease in a lower tier during an outage reaches this saver's
            reads when the linger ends. A lease taken in a lower tier during
            an outage is not kept. ``release_thread`` and ``close`` give kept
            leases back.
        write: which tiers must hold a record before ``put`` / ``put_writes``
            return. ``"shared"`` (default): the local journal (if there is a
            local tier) and at least one shared tier; a shared tier that is
            down or slow is skipped and caught up later, so no run fails
            while one shared tier answers. With all three tiers a run's
            write waits for Postgres (fenced) and the journal; Redis gets it
            shipped behind: a run's end ships what its thread owes before
            the lease is given back, and the replicator what a run still
            going wrote more than a second ago. ``"all"``: every tier, else
            `TierUnavailable` and nothing half-written. ``"local"``
            (write-behind): the local journal only, fsynced; a background
            replicator ships to Redis and Postgres in order (`lag` tells how
            far behind they are). Also ``LANGGRAPH_DURABLE_WRITE``.
        local_fsync: whether each commit of the local SQLite file is
            fsynced. None (default): with ``write="local"`` only, where the
            local journal is the only copy of an acknowledged checkpoint
            until it ships, so that it survives a power loss too. False with
            ``write="local"``: a step costs less (no fsync per commit), and an
            acknowledged checkpoint still survives the process being killed
            (an OOM kill, a deploy, a crash: SQLite's WAL is in the OS's
            page cache), but not the machine losing power or its kernel
            crashing before it ships (within ``lag()``). True: fsync in
            every write mode.
        call_timeout: seconds a call to Redis or Postgres may take before
            the tier counts as down, on both faces: the async face cancels
            the call; on the sync face it is Redis's socket timeout, and a
            Postgres call still waiting has its connection's socket shut down
            (a stalled server keeps the connection open and never answers),
            so the call raises and the connection is dropped. The tier is
            then skipped by its breaker; the run goes on with another shared
            tier, or fails with `TierUnavailable` if none answers. Calls that
            may take long on a healthy server (setup's migration, and those
            that walk a whole thread or every thread: verify, repair, prune,
            delete) get six times as long, and at least 60 s. None: no limit.
        drain_timeout: seconds ``close()`` / ``aclose()`` keep shipping what
            the shared tiers are owed before they give up (it stays in the
            local journal and is shipped at the next start). 0: close at once.
        list_snapshot_every: a list channel whose new value extends the
            previous one (a message list under ``add_messages`` or
            ``operator.add``) is stored as what it appended, with a whole copy
            at least every this many versions, so a read of it touches at most
            this many records (`langgraph_durable.model.deltas`). 1 (or 0) stores
            every value whole, as the stock savers do.
        local_max_bytes: bound the local SQLite file to about this many
            bytes in use: past it, the least recently used threads' local
            copies are evicted (never one the journal still owes a shared
            tier, nor one this saver is running); a read copies an evicted
            thread back from the shared tiers. Needs a shared tier. None
            (default): unbounded.
        read_cache_bytes: reads from the local SQLite file are kept,
            serialized, up to about this many bytes, and served again while
            nothing has been committed to the file, by this process or
            another (`langgraph_durable.model.read_cache`). With SQLite alone,
            every ``get_tuple`` and page of ``list``; with shared tiers, only
            a thread's latest state read back under this saver's lease of
            it (see ``lease_linger``). What is served is what was verified
            when it was read; damage to the file without a commit is found
            by the next real read or by `verify`. 0: read the file every
            time. None (default): its share of ``memory_budget`` (a quarter).
        memory_budget: about how many bytes of memory this saver's memos of
            the threads it served may hold together (64 MiB by default): the
            lists it stored last, channel versions, its own latest writes
            under each lease, the read cache, records still to ship, kept
            leases, each with its share (`langgraph_durable.model.memory_budget`),
            least recently used out first. Forgetting only costs speed (a
            miss reads the tiers, a list is stored whole once), so a process
            serving any number of threads stays within it. Records owed to a
            tier that is down with no local journal, and the leases of runs
            going on, are not counted: forgetting them would lose writes.
            At least 1 MiB, else `ConfigError`.
        retention: a `RetentionPolicy` (keep the newest N checkpoints per
            thread and namespace, those younger than T, delete threads idle
            longer than T) that `apply_retention` applies by default.
        retention_every: seconds between background retention sweeps (a
            daemon thread; None: none, call `apply_retention` yourself).
        retention_rate: threads a background sweep visits per second, at
            most (default 20; None: no limit).
        metrics: a `langgraph_durable.metrics.MetricsHook` (or a list of
            them) called with a `TierCall` for every call to a tier (tier,
            operation, seconds, ok / miss / error / unavailable) and a
            `CorruptCopy` for every bad copy a read met (what was served
            instead, whether it was repaired). Ready-made: `TierStats` (counts
            and latency percentiles to read) and `OpenTelemetryMetrics` (the
            ``otel`` extra); both also report the journal backlog (`lag`). A
            hook that raises is logged once and never breaks a call.
        archive: ``s3://BUCKET/PREFIX`` of an S3-compatible object store
            (AWS S3, MinIO, Cloudflare R2, GCS's S3 interface; the ``s3``
            extra), or None. Credentials, region and endpoint come from the
            standard ``AWS_*`` variables (an ``http://`` ``AWS_ENDPOINT_URL``
            is allowed). Every thread this saver writes is shipped there
            behind the steps, within ``archive_lag`` seconds; `archive_idle`
            moves idle threads out of the hot tiers into it (their next read
            brings them back), and `restore` rebuilds the hot tiers from it.
            Never asked on a step's path, but for a thread that lives only
            there. Also ``LANGGRAPH_DURABLE_ARCHIVE_URL``.
        archive_lag: seconds within which a record written reaches the
            archive while the object store answers (default 60): the replica
            ships every thread written since its last pass every half of it.
        archive_key_fingerprint: the full fingerprint of the store's key
            (``hmac-sha256:`` and 64 hex digits), as `health` and
            ``langgraph-durable doctor`` print it: needed only to rebuild a
            store from its archive after losing every hot tier (the copy of
            the key the archive keeps is taken on that word alone, never on
            the bucket's). Also ``LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT``.
        read_only: only look (what the command line's read commands use):
            a bad copy a read meets is reported, logged and counted, but
            nothing is repaired, withdrawn or quarantined, setup records
            nothing, nothing owed is shipped, and no store key is created;
            ``put`` / ``put_writes`` raise `ConfigError`. No SQLite file is
            created: a missing one is a `ConfigError` ("no store at PATH")
            without a shared tier, and left out with one.
    """

    def __init__(
        self,
        *,
        sqlite: str | None = DEFAULT_SQLITE_PATH,
        redis: str | RedisClient | None = None,
        postgres: str | PostgresPool | None = None,
        serde: SerializerProtocol | None = None,
        signing_key: bytes | str | None = None,
        signing_keys: Sequence[bytes | str | None] | None = None,
        permissive_decoding: bool = False,
        redis_key_prefix: str = DEFAULT_KEY_PREFIX,
        redis_cluster: bool | None = None,
        redis_ttl: float | None = None,
        postgres_pool_size: int = DEFAULT_POOL_SIZE,
        postgres_prepared_statements: bool = True,
        postgres_schema: str | None = None,
        sqlite_busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        on_corruption: OnCorruption = "fallback",
        max_record_bytes: int | None = DEFAULT_MAX_RECORD_BYTES,
        validators: Sequence[Validator] = (),
        on_validation: ValidationHook | None = None,
        app_version: str | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL_S,
        on_busy: OnBusy = DEFAULT_ON_BUSY,
        lease_wait: float = DEFAULT_LEASE_WAIT_S,
        lease_linger: float = DEFAULT_LEASE_LINGER_S,
        write: WriteMode = "shared",
        local_fsync: bool | None = None,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT_S,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT_S,
        list_snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        metrics: MetricsHook | Sequence[MetricsHook] | None = None,
        local_max_bytes: int | None = None,
        read_cache_bytes: int | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        retention: RetentionPolicy | None = None,
        retention_every: float | None = None,
        retention_rate: float | None = DEFAULT_RETENTION_RATE,
        archive: str | None = None,
        archive_lag: float = DEFAULT_ARCHIVE_LAG_S,
        archive_key_fingerprint: str | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        # Every option checked in one place (options.py), kept by concern,
        # before anything is made.
        options = Options.parse(
            sqlite=sqlite,
            redis=redis,
            postgres=postgres,
            signing_key=signing_key,
            signing_keys=signing_keys,
            permissive_decoding=permissive_decoding,
            redis_key_prefix=redis_key_prefix,
            redis_cluster=redis_cluster,
            redis_ttl=redis_ttl,
            postgres_pool_size=postgres_pool_size,
            postgres_prepared_statements=postgres_prepared_statements,
            postgres_schema=postgres_schema,
            sqlite_busy_timeout=sqlite_busy_timeout,
            connect_timeout=connect_timeout,
            on_corruption=on_corruption,
            max_record_bytes=max_record_bytes,
            write=write,
            local_fsync=local_fsync,
            call_timeout=call_timeout,
            drain_timeout=drain_timeout,
            list_snapshot_every=list_snapshot_every,
            local_max_bytes=local_max_bytes,
            read_cache_bytes=read_cache_bytes,
            memory_budget=memory_budget,
            retention=retention,
            retention_every=retention_every,
            retention_rate=retention_rate,
            lease_ttl=lease_ttl,
            on_busy=on_busy,
            lease_wait=lease_wait,
            lease_linger=lease_linger,
            archive=archive,
            archive_lag=archive_lag,
            archive_key_fingerprint=archive_key_fingerprint,
            read_only=read_only,
        )
        self._build(
            options, validators=validators, on_validation=on_validation, app_version=app_version, metrics=metrics
        )
        # Last: nothing starts before every option has been checked, so a
        # constructor that raises leaves no thread behind.
        sweeps = options.retention
        if sweeps.every is not None:
            self._sweeper = RetentionSweeper(
                lambda pace: self.apply_retention(pace=pace), every=sweeps.every, rate=sweeps.rate
            )
            self._sweeper.start()

    # -- construction -----------------------------------------------------------

    @classmethod
    def from_urls(
        cls,
        *,
        sqlite: str | None = DEFAULT_SQLITE_PATH,
        redis: str | RedisClient | None = None,
        postgres: str | PostgresPool | None = None,
        **options: Any,
    ) -> DurableSaver:
        """Same as the constructor; reads well as ``with DurableSaver.from_urls(...) as saver``."""
        return cls(sqlite=sqlite, redis=redis, postgres=postgres, **options)

    @classmethod
    def from_env(cls, **options: Any) -> DurableSaver:
        """A saver from the ``LANGGRAPH_DURABLE_*`` environment variables:
        the tiers (``LANGGRAPH_DURABLE_SQLITE``, a path, ``:memory:`` or empty
        for none, default ``.langgraph_durable/checkpoints.sqlite``;
        ``LANGGRAPH_DURABLE_REDIS_URL``; ``LANGGRAPH_DURABLE_POSTGRES_URL``),
        the signing keys, the serializer (``module:attr``), the write mode,
        the archive and the rest of the option table's variables (the
        configuration page lists each with its keyword). Keyword options
        override them; an error about a value that came from a variable
        names the variable."""
        from_env = env_options(os.environ, DEFAULT_SQLITE_PATH)
        kwargs = {**from_env, **options}
        try:
            return cls(**kwargs)
        except ConfigError as exc:
            # Name the variable a value came from, where the message names its keyword.
            raise naming_the_variable(exc, from_env, options) from exc

    @property
    def tier_names(self) -> list[str]:
        """The configured tiers, nearest first."""
        on = {SQLITE: self.sqlite_path, REDIS: self.redis_url, POSTGRES: self.postgres_url}
        return [kind.keyword for kind in KINDS if on[kind]]

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> DurableSaver:
        """A view of this saver that also rebuilds `extra_allowlist` types.

        LangGraph's ``compile()`` calls this with the types of the graph's
        state (under ``LANGGRAPH_STRICT_MSGPACK=true``). The clone shares this
        saver's connections, leases and counters; only its decoding differs,
        including the strict decoding of unsigned shared-tier records."""
        clone = cast(DurableSaver, super().with_allowlist(extra_allowlist))
        if clone is self:
            if not self._codec.strict:
                return self
            clone = copy.copy(self)
        clone._origin = self._origin or self
        clone._codec = self._codec.with_allowlist(clone.serde, extra_allowlist)
        clone._lease_keeper = None
        clone._alease_keeper = None
        return clone

    def add_validator(self, validator: Validator) -> None:
        """Run `validator` (after those already registered) before every resume."""
        self._validators.append(checked_validator(validator))

    @property
    def unbuildable_as_data(self) -> bool:
        """Whether a value whose class this process cannot import is handed
        back as its stored data (as LangGraph hands back a class that was
        never importable) instead of refusing the read: for tools that read
        or move a store without the application's classes, such as the
        command line. Off by default: an application's reads rebuild its
        objects or say which class is missing."""
        return self._codec.plain_when_unbuildable

    @unbuildable_as_data.setter
    def unbuildable_as_data(self, value: bool) -> None:
        self._codec.plain_when_unbuildable = bool(value)

    @property
    def corruptions_detected(self) -> int:
        """Bad copies met by reads of this saver since it was created."""
        return self._policy.count

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Same format as the stock savers: zero-padded counter + random
        suffix, so versions compare correctly as strings."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"
