"""`DurableSaver`: one checkpointer object, sync and async, over 1-3 tiers."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import copy
import dataclasses
import functools
import json
import logging
import os
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .archive.archiver import Archiver
from .archive.archiver_async import AsyncArchiver
from .archive.replica import DEFAULT_ARCHIVE_LAG_S, FAILING_META, ArchiveReplica
from .archive.reports import ArchiveRefused, ArchiveReport, RestoreReport
from .archive.segments import OWNER as ARCHIVE_OWNER
from .archive.store import ArchiveStore
from .archive.store_async import AsyncArchiveStore
from .engine import importing
from .engine.chain import TierChain
from .engine.chain_async import AsyncTierChain
from .engine.concurrency import amaybe_await, refuse_awaitable, wait_deferred
from .engine.handoff import Ears, HandOffListener, PostgresEars, RedisEars
from .engine.importer import Importer
from .engine.importer_async import AsyncImporter
from .engine.importing import ImportReport
from .engine.lease_book import LeaseBook
from .engine.lease_keeper import LeaseKeeper
from .engine.lease_keeper_async import AsyncLeaseKeeper
from .engine.replicator import WRITE_BEHIND_GAP_S, Replicator
from .engine.sweeper import RetentionSweeper
from .errors import ConfigError, DurableError, ThreadArchived, ThreadBusy, TierUnavailable, no_store_at
from .integrity import IntegrityPolicy, OnCorruption, ScanReport
from .ledger import LedgerEntry, damaged_entry, operator_answer
from .metrics import MetricsHook, MetricsSink, Outcome, PlainData, TierCall
from .model.backlog import DEFAULT_CALL_TIMEOUT_S, ArchiveLag, JournalEntry, Lag, MemoryBacklog, WriteMode
from .model.breaker import Breakers
from .model.carried import SeenVersions
from .model.codec import DEFAULT_MAX_RECORD_BYTES, RecordCodec, thread_id_of
from .model.deltas import DEFAULT_SNAPSHOT_EVERY, DeltaMemo
from .model.health import Counters, Health
from .model.lease import (
    DEFAULT_LEASE_LINGER_S,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEASE_WAIT_S,
    DEFAULT_ON_BUSY,
    Lease,
    OnBusy,
    hand_off_channel,
)
from .model.memory_budget import DEFAULT_MEMORY_BUDGET
from .model.own_heads import OwnHeads
from .model.pins import Pin, pin_entry, pin_key, unpin_entry
from .model.read_cache import ReadCache
from .model.records import key_fingerprint
from .model.roles import Role, Roles, ships_behind

# The variables, defined with the options, are also importable from here.
from .options import (
    ENV_LEASE_LINGER as ENV_LEASE_LINGER,
)
from .options import (
    ENV_OLD_SIGNING_KEYS as ENV_OLD_SIGNING_KEYS,
)
from .options import (
    ENV_POSTGRES_PREPARED_STATEMENTS as ENV_POSTGRES_PREPARED_STATEMENTS,
)
from .options import (
    ENV_POSTGRES_URL as ENV_POSTGRES_URL,
)
from .options import (
    ENV_REDIS_KEY_PREFIX as ENV_REDIS_KEY_PREFIX,
)
from .options import (
    ENV_REDIS_TTL as ENV_REDIS_TTL,
)
from .options import (
    ENV_REDIS_URL as ENV_REDIS_URL,
)
from .options import (
    ENV_SERDE as ENV_SERDE,
)
from .options import (
    ENV_SIGNING_KEY as ENV_SIGNING_KEY,
)
from .options import (
    ENV_SQLITE as ENV_SQLITE,
)
from .options import (
    ENV_WRITE as ENV_WRITE,
)
from .options import (
    Options,
    env_options,
    naming_the_variable,
)
from .retention import Retained, RetentionPolicy, RetentionReport, age_seconds
from .tiers.base import ARCHIVE_META, EMBEDDED_META, QuarantinedRecord, archived_key, redact
from .tiers.postgres.tier import PostgresTier
from .tiers.postgres.tier_async import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_POOL_SIZE, AsyncPostgresTier
from .tiers.redis.tier import RedisTier
from .tiers.redis.tier_async import DEFAULT_KEY_PREFIX
from .tiers.registry import DEFAULT_SQLITE_PATH, KINDS, POSTGRES, REDIS, SQLITE
from .tiers.sqlite.tier import DEFAULT_BUSY_TIMEOUT_S, AsyncSqliteTier, SqliteTier

if TYPE_CHECKING:
    from .tiers.supplied import PostgresPool, RedisClient
from .validation import RUNTIME_KEY, VERSION_KEY, ValidationHook, Validator, is_resume_of_a_run

logger = logging.getLogger("langgraph_durable")


# The runtime of a run whose explicit-checkpoint get_tuple was just validated.
_PROBE_EXPECTED: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "langgraph_durable_probe_expected", default=None
)

# How long `setup` waits for the hand-off listener to hear its channel
# (handoff.py): until then, runs give their leases back as without linger.
HAND_OFF_START_WAIT_S = 3.0
_UNSET: Any = object()
# How long close() keeps shipping what the shared tiers are owed.
DEFAULT_DRAIN_TIMEOUT_S = 10.0
# How long close() waits for a run's release that the garbage collector
# handed to the deferred worker (it ships the run's thread first).
DEFERRED_WAIT_S = 5.0
# With all three tiers, a record of a run still going is left to the run's
# end for this long before a background pass ships it (`_left_to_its_run`).
RUN_SHIPS_ITS_OWN_S = 1.0
# How often a delete of an archived thread looks again for the lease a
# bring-back of it holds (`_hold_archived`).
BRING_BACK_POLL_S = 0.2
# Threads a background retention sweep visits per second, at most.
DEFAULT_RETENTION_RATE = 20.0


def _seconds(duration: float | timedelta) -> float:
    """`duration` in seconds; it must be above 0."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if not seconds > 0:
        raise ConfigError(f"older_than must be a duration above 0, got {duration!r}")
    return seconds


def _resolve(
    records: Sequence[QuarantinedRecord | str], listing: Callable[[], list[QuarantinedRecord]]
) -> list[QuarantinedRecord]:
    """Quarantined records, given as records or as ``"tier:id"`` strings."""
    if not any(isinstance(r, str) for r in records):
        return [r for r in records if isinstance(r, QuarantinedRecord)]
    known = {f"{q.tier}:{q.id}": q for q in listing()}
    out = []
    for r in records:
        if isinstance(r, QuarantinedRecord):
            out.append(r)
        elif r in known:
            out.append(known[r])
        else:
            raise ConfigError(
                f"no quarantined record {r!r}: ids look like 'sqlite:12' or 'redis:<thread>/<hex>'; "
                "list them with `langgraph-durable quarantine list` or saver.quarantined()."
            )
    return out


async def _close_at_loop_shutdown(chain: AsyncTierChain) -> None:
    """Close `chain` from ``loop.shutdown_asyncgens()``. asyncio.run has
    cancelled every task by then, psycopg_pool's workers included, and the
    pool's close() re-raises their cancellation before it closes its idle
    connections: drain() (psycopg_pool 3.3+) closes those first."""
    for tier in chain.raw_shared:
        if isinstance(tier, AsyncPostgresTier) and tier._opened and tier.owns_pool and hasattr(tier.pool, "drain"):
            await tier.pool.drain()
    with contextlib.suppress(asyncio.CancelledError):
        await chain.close()
    if chain.local is not None:
        await chain.local.close()


class DurableSaver(BaseCheckpointSaver[str]):
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
            gives it back at once (`langgraph_durable.engine.handoff`); while
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
        # Every option checked in one place (options.py), kept by concern.
        self.options = options = Options.parse(
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
        tiers, integrity = options.tiers, options.integrity
        self.sqlite_path = tiers.sqlite
        if read_only and self.sqlite_path and self.sqlite_path != ":memory:" and not os.path.exists(self.sqlite_path):
            if not tiers.shared:
                raise no_store_at(self.sqlite_path)
            # No local copy yet on this machine: the shared tiers answer, and no
            # file is made. (Write-behind needs a local file: a reader writes nothing.)
            self.sqlite_path = None
            write = "shared" if write == "local" else write
        self.redis_url = tiers.redis
        self.postgres_url = tiers.postgres
        self.redis_key_prefix = tiers.redis_key_prefix
        self.redis_cluster = tiers.redis_cluster
        self.redis_ttl = tiers.redis_ttl
        self.postgres_pool_size = tiers.postgres_pool_size
        self.postgres_prepared_statements = tiers.postgres_prepared_statements
        self.postgres_schema = tiers.postgres_schema
        self.connect_timeout = tiers.connect_timeout
        # Without a signing key anyone who can write to Redis or Postgres can
        # plant a record that verifies; decoding it with LangGraph's default
        # msgpack would import and call whatever it names. A local-only store
        # is as trusted as the process's own disk, so it keeps the default.
        keys = integrity.signing_keys
        strict = not keys[0] and tiers.shared and not integrity.permissive_decoding
        self._codec = RecordCodec(
            self.serde, signing_keys=keys, max_record_bytes=integrity.max_record_bytes, strict=strict
        )
        # No key of the user's: seal with the store's own, which setup finds
        # or creates in the system of record, or finds in a local file that
        # was shared before (`AsyncTierChain._adopt_store_key`).
        self._store_key = integrity.store_key
        self.read_only = options.read_only
        # Per-tier metrics (metrics.py): None without hooks, so a tier call costs one `if`.
        self._metrics = MetricsSink.of(metrics, lag=self.lag)
        self._policy = IntegrityPolicy(on_corruption, metrics=self._metrics)
        self._codec.on_plain_data = functools.partial(_report_plain_data, self._metrics)
        self._validators: list[Validator] = []
        for v in validators:
            self.add_validator(v)
        self._on_validation = on_validation
        self.app_version = app_version
        self.write: WriteMode = write
        self.call_timeout = call_timeout
        self.drain_timeout = drain_timeout
        self._local = (
            SqliteTier(
                self.sqlite_path,
                busy_timeout=sqlite_busy_timeout,
                fsync=options.write.fsync,
                max_bytes=local_max_bytes,
            )
            if self.sqlite_path
            else None
        )
        # Outages (breaker.py, backlog.py, replicator.py): shared by both faces.
        self._breakers = Breakers()
        # What the memos below may hold, each its share (memory_budget.py).
        budget = options.limits.budget
        self._memory = MemoryBacklog(outbox_bytes=budget.outbox)
        self._counters = Counters()
        # Growing lists stored as what they appended (deltas.py): both faces.
        self._deltas = (
            DeltaMemo(max_bytes=budget.deltas, every=list_snapshot_every) if list_snapshot_every > 1 else None
        )
        # Versions of the checkpoints stored or served last, both faces (carried.py).
        self._seen = SeenVersions(max_bytes=budget.seen)
        # Reads served again while the local file is unchanged, both faces:
        # every read with SQLite alone, else the reads under a lease.
        local = self._local is not None
        self._read_cache = ReadCache(self.serde, budget.read_cache) if local and budget.read_cache else None
        # A pass at most every WRITE_BEHIND_GAP_S when the replicator ships
        # every write of a run (`roles.ships_behind`): batches, not one
        # record per kick.
        behind = ships_behind(write, bool(self.sqlite_path), (redis is not None) + (postgres is not None))
        self._replicator = Replicator(
            self._replicate, lambda: self._sync_chain().lag(), gap=WRITE_BEHIND_GAP_S if behind else 0.0
        )
        sweeps = options.retention
        self.retention = sweeps.policy
        self._sweeper: RetentionSweeper | None = None
        if sweeps.every is not None:
            self._sweeper = RetentionSweeper(
                lambda pace: self.apply_retention(pace=pace), every=sweeps.every, rate=sweeps.rate
            )
        self._lock = threading.Lock()
        self._drains: list[threading.Event] = []  # drains under way (_drain_pending): close waits
        self._sync: TierChain | None = None
        self._async: AsyncTierChain | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._async_closer: AsyncGenerator[None, None] | None = None
        # A `with_allowlist` clone works through the saver it was made from.
        self._origin: DurableSaver | None = None
        # The archive (archive/): a replica shipping behind the steps.
        self.archive_url = archive
        self.archive_key_fingerprint = options.archive.key_fingerprint
        self._sync_archiver: Archiver | None = None
        self._async_archiver: AsyncArchiver | None = None
        self._archive_replica = (
            ArchiveReplica(
                self._archive_ship,
                lag=options.archive.lag,
                rescan=self._archive_rescan,
                on_failing=self._archive_failing,
            )
            if archive is not None and not read_only
            else None
        )
        self.archive_restores = 0  # threads brought back from the archive by a read
        # One writer per thread (lease.py): the leases this saver holds.
        lease = options.leases
        self._leases = LeaseBook(
            ttl=lease.ttl,
            on_busy=cast(OnBusy, lease.on_busy),
            wait=lease.wait,
            linger=lease.linger,
            max_kept_bytes=budget.kept_leases,
        )
        # What this saver wrote last under a thread's lease, read back from
        # the local tier alone while it holds the lease: both faces.
        self._own = OwnHeads(max_age=self._leases.ttl / 2, max_bytes=budget.own_heads)
        self._lease_keeper: LeaseKeeper | None = None
        self._closed = False  # set once close() has let the deferred releases finish
        self._alease_keeper: AsyncLeaseKeeper | None = None
        # ``lease_linger``: a kept lease is given back when another replica
        # asks for it, heard on the tier where leases are kept (handoff.py).
        self._hand_offs: HandOffListener | None = None
        if self._leases.linger > 0 and self._local is not None and (redis is not None or postgres is not None):
            self._leases.needs_ears = True
            self._hand_offs = HandOffListener(
                self._leases,
                self._hand_off_ears,
                self._ask_hand_off,
                self._hand_off_give_back,
                self._renew_kept,
                where=redact(tiers.postgres or tiers.redis or ""),
                claim_ending=write != "local",
            )
        # Last: nothing starts before every option has been checked, so a
        # constructor that raises leaves no thread behind.
        if self._sweeper is not None:
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
        """Tiers from ``LANGGRAPH_DURABLE_SQLITE`` (a path, ``:memory:``, or
        empty for no local tier; default ``.langgraph_durable/checkpoints.sqlite``),
        ``LANGGRAPH_DURABLE_REDIS_URL`` (and ``LANGGRAPH_DURABLE_REDIS_KEY_PREFIX``,
        ``LANGGRAPH_DURABLE_REDIS_TTL``),
        ``LANGGRAPH_DURABLE_POSTGRES_URL`` (and
        ``LANGGRAPH_DURABLE_POSTGRES_PREPARED_STATEMENTS``, true or false),
        ``LANGGRAPH_DURABLE_SERDE`` (``module:attr`` of the serializer, or of a
        function returning it), ``LANGGRAPH_DURABLE_WRITE``, ``LANGGRAPH_DURABLE_LEASE_LINGER``,
        ``LANGGRAPH_DURABLE_ARCHIVE_URL`` (``s3://BUCKET/PREFIX``) and
        ``LANGGRAPH_DURABLE_SIGNING_KEY`` (plus ``LANGGRAPH_DURABLE_OLD_SIGNING_KEYS``,
        comma-separated, during a key rotation). Keyword options override them."""
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

    def _shared_tiers(self, *, asynchronous: bool) -> list[Any]:
        """This saver's shared tiers, on one face, as the registry makes them."""
        tiers = self.options.tiers
        made = [
            kind.tier_class(asynchronous=asynchronous)(url, **tiers.arguments(kind, asynchronous=asynchronous))
            for kind in KINDS
            if kind.role is not Role.LOCAL and (url := tiers.url(kind))
        ]
        for tier in made:
            tier.read_only = self.read_only  # setup then creates and migrates nothing
        return made

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

    def _chain_options(self) -> dict[str, Any]:
        return {
            "write": self.write,
            "breakers": self._breakers,
            "call_timeout": self.call_timeout,
            "memory": self._memory,
            "kick": self._replicator.kick,
            "counters": self._counters,
            "deltas": self._deltas,
            "own": self._own,
            "metrics": self._metrics,
            "seen": self._seen,
            "read_cache": self._read_cache,
            "store_key": self._store_key,
            "read_only": self.read_only,
        }

    def _sync_chain(self) -> TierChain:
        if self._origin is not None:
            return self._origin._sync_chain().with_codec(self._codec)
        with self._lock:
            if self._sync is None:
                self._sync = TierChain(
                    self._local,
                    self._shared_tiers(asynchronous=False),
                    self._codec,
                    self._policy,
                    **self._chain_options(),
                )
                if self.archive_url is not None:
                    archiver = Archiver(
                        ArchiveStore(self.archive_url), self._sync, key_fingerprint=self.archive_key_fingerprint
                    )
                    self._sync.archived_key = archiver.trusted_key
                    self._sync.claim_archive = functools.partial(archiver.claim, at_setup=True)
                    self._sync_archiver = archiver
                if self._archive_replica is not None:
                    self._archive_replica.start()  # its first rescan ships what a dead process left
            return self._sync

    def _async_chain(self) -> AsyncTierChain:
        if self._origin is not None:
            return self._origin._async_chain().with_codec(self._codec)
        # Async drivers bind to the event loop that first uses them.
        loop = asyncio.get_running_loop()
        if self._async is not None and self._async_loop is not loop:
            if self._async_loop is not None and not self._async_loop.is_closed():
                raise ConfigError(
                    "this DurableSaver's async connections belong to another running event loop; "
                    "use one saver per event loop (or `await saver.aclose()` before switching loops)."
                )
            # Its loop was closed without finalizing async generators (not by
            # asyncio.run), so its sockets can no longer be closed properly.
            logger.warning(
                "the event loop this DurableSaver's async connections belonged to was closed without "
                "`await saver.aclose()`; they are left to the garbage collector."
            )
            self._async = None
            self._async_loop = None
            closer, self._async_closer = self._async_closer, None
            if closer is not None:
                with contextlib.suppress(StopIteration):
                    closer.aclose().send(None)  # finishes it (no I/O: the chain is detached)
        if self._async is None:
            local = AsyncSqliteTier(self._local) if self._local is not None else None
            self._async = AsyncTierChain(
                local,
                self._shared_tiers(asynchronous=True),
                self._codec,
                self._policy,
                **self._chain_options(),
            )
            if self.archive_url is not None:
                aarchiver = AsyncArchiver(
                    AsyncArchiveStore(self.archive_url), self._async, key_fingerprint=self.archive_key_fingerprint
                )
                self._async.archived_key = aarchiver.trusted_key
                self._async.claim_archive = functools.partial(aarchiver.claim, at_setup=True)
                self._async_archiver = aarchiver
            if self._archive_replica is not None:
                self._archive_replica.start()  # see _sync_chain
            self._async_loop = loop
            self._async_closer = self._close_at_loop_end(self._async, loop)
        return self._async

    def _close_at_loop_end(self, chain: AsyncTierChain, loop: asyncio.AbstractEventLoop) -> AsyncGenerator[None, None]:
        """Arrange for `chain` to be closed when `loop` shuts down.

        redis.asyncio connections and psycopg's async pool belong to the loop
        that opened them and can only be closed while it runs. A saver used
        from successive ``asyncio.run()`` calls would otherwise leave each
        loop's connections open. asyncio has no public "on shutdown" hook, but
        ``asyncio.run`` (like pytest-asyncio and uvloop) finalizes the loop's
        async generators with ``loop.shutdown_asyncgens()`` just before closing
        it, while I/O still works: a generator paused at its ``yield`` is that
        hook. `aclose` finalizes it earlier. Returns the generator, which must
        be kept referenced (the loop only holds it weakly).
        """

        async def closer() -> AsyncGenerator[None, None]:
            try:
                yield
            finally:
                # The lease releases of runs that end from now on cannot use
                # this chain: they go through the sync face.
                if self._alease_keeper is not None and self._alease_keeper.chain is chain:
                    self._alease_keeper.wind_down()
                # Still in use while its loop shuts down: the last moment its
                # I/O works. (`aclose` and a dead loop detach it first.)
                if self._async is chain:
                    self._async = None
                    self._async_loop = None
                    await _close_at_loop_shutdown(chain)

        gen = closer()
        # Run it to its yield now, without awaiting: the first step registers
        # it with the running loop, which then finalizes it at shutdown.
        with contextlib.suppress(StopIteration):
            gen.__anext__().send(None)
        return gen

    # -- lifecycle --------------------------------------------------------------

    def setup(self) -> None:
        """Create or migrate the schema of every tier. Idempotent; safe from
        many replicas at once. Raises `TierUnavailable` naming the tier that
        cannot be reached. Called on first use if you do not call it. With
        ``lease_linger``, also starts listening for hand-off requests."""
        self._sync_chain().setup()
        self._listen_for_hand_offs(HAND_OFF_START_WAIT_S)

    async def asetup(self) -> None:
        """Async `setup`."""
        await self._async_chain().setup()
        await asyncio.to_thread(self._listen_for_hand_offs, HAND_OFF_START_WAIT_S)

    def close(self) -> None:
        """Ship what the shared tiers are still owed (for up to
        ``drain_timeout`` seconds, see `drain`), then close the sync
        connections and the local file. The saver may not be used
        afterwards. Call `aclose` instead if you used the async face."""
        if self._origin is not None:  # a with_allowlist clone: its origin owns the connections
            self._origin.close()
            return
        self._wait_for_drains()
        self._drain_at_close()
        self._stop_hand_offs()
        self._close_sync()

    def _stop_hand_offs(self) -> None:
        """Stop the hand-off listener (its connection closes; kept leases are
        given back with the rest) before the tiers close."""
        if self._hand_offs is not None:
            self._hand_offs.stop()

    def _close_sync(self) -> None:
        if self._metrics is not None:
            self._metrics.close()  # the backlog gauges stop asking: they would reopen the local file
        # A run's end seen inside the garbage collector, or an async run's end
        # seen as its event loop shut down, is released by the deferred worker
        # (lease_keeper.py) with the sync face: let it finish with the pools open.
        wait_deferred(DEFERRED_WAIT_S)
        self._closed = True
        if self._sync is not None:
            self._sync_lease_keeper().release_all()  # writer leases (lease.py)
            self._sync.close()
            self._sync = None
        if self._async is not None:
            logger.warning(
                "DurableSaver.close() leaves the async connections open: this saver was used from async "
                "code, so close it with `await saver.aclose()` or `async with`."
            )
        elif self._local is not None:
            self._local.close()

    async def aclose(self) -> None:
        """`close` for both faces: ship what is owed (as `close` does), then
        close every connection, sync and async, and the local file."""
        if self._origin is not None:
            await self._origin.aclose()
            return
        await asyncio.to_thread(self._wait_for_drains)
        await asyncio.to_thread(self._drain_at_close)
        await asyncio.to_thread(self._stop_hand_offs)
        await asyncio.to_thread(wait_deferred, DEFERRED_WAIT_S)  # see `_close_sync`
        if self._async is not None and self._async_loop is asyncio.get_running_loop():
            await self._async_leases().release_all()  # writer leases (lease.py)
        chain, loop, closer = self._async, self._async_loop, self._async_closer
        self._async = None
        self._async_loop = None
        self._async_closer = None
        if closer is not None:
            await closer.aclose()  # the chain is detached: it only finishes
        if chain is not None:
            if loop is asyncio.get_running_loop():
                await chain.close()
                if chain.local is not None:
                    await chain.local.close()
            else:
                logger.warning(
                    "DurableSaver.aclose() ran on another event loop than the one its async connections "
                    "belong to; they are left to the garbage collector."
                )
        self._close_sync()

    # -- outages: what the shared tiers are owed, and each tier's health ------------

    def _owes(self) -> bool:
        if len(self._memory):
            return True
        if self._local is None or (self._sync is None and self._async is None):
            return False
        try:
            return self._local.journal_size() > 0
        except Exception:  # unreadable local file: drain() would not help either
            return False

    def _drain_at_close(self) -> None:
        if self.drain_timeout and self._owes():
            lag = self.drain(self.drain_timeout)
            if not lag.caught_up:
                kept = (
                    "they stay in the local journal and are shipped at the next start"
                    if self._local is not None
                    else "they were kept in memory only: run `langgraph-durable repair` once the tiers are back"
                )
                logger.warning(
                    "closing with %s record(s) still owed to the shared tiers (%s); %s",
                    lag.records,
                    ", ".join(f"{name}: {n}" for name, n in lag.by_tier.items() if n),
                    kept,
                )
        self._replicator.stop()
        if self._sweeper is not None:
            self._sweeper.stop()
        if self._archive_replica is not None:
            # What was written since the last pass, within the drain's time.
            # (Also with nothing noted: the first rescan may still be noting
            # what a killed process left.)
            if self.drain_timeout and (self._sync or self._async):
                left = self._archive_replica.flush(self.drain_timeout)
                if not left.caught_up:
                    logger.warning(
                        "closing with %d thread(s) not shipped to the archive yet; the next start's rescan ships them",
                        left.threads,
                    )
            self._archive_replica.stop()

    def _replicate(self, background: bool = False) -> int:
        """One replicator pass: first the threads of ended write-behind runs
        (their leases are given back once they have shipped:
        `LeaseKeeper.hand_off_shipped`), then everything else owed, then the
        leases of runs that ended meanwhile, between its rounds and at its
        end (a pass lasts while runs keep writing). A `background` pass
        leaves the newest records of runs still going to their runs' ends
        (`_left_to_its_run`)."""
        skip = self._left_to_its_run if background and self.write == "shared" else None
        settled = self._hand_off_shipped()
        settled += self._sync_chain().catch_up(between=self._hand_off_shipped, skip=skip)
        return settled + self._hand_off_shipped()

    def _left_to_its_run(self, entry: JournalEntry) -> bool:
        """A record a run still going on this saver wrote less than
        `RUN_SHIPS_ITS_OWN_S` ago (``write="shared"``): the run's end ships
        it with the rest of the run (`LeaseKeeper._ship_behind`), so a short
        run's records are shipped once, in one transaction per tier, not also
        by a pass in its middle competing with the runs for the interpreter.
        A longer run's records still reach every shared tier within that
        time and a pass."""
        return (
            not entry.in_memory
            and time.time() - entry.created_at < RUN_SHIPS_ITS_OWN_S
            and self._leases.held(entry.thread_id) is not None
        )

    def _hand_off_shipped(self) -> int:
        return self._sync_leases().hand_off_shipped() if self._leases.handoffs(time.monotonic()) else 0

    def drain(self, timeout: float | None = None) -> Lag:
        """Ship what the shared tiers are owed, until nothing is or `timeout`
        seconds passed (None: one pass). Returns what is still owed. The
        drain on SIGTERM calls this on a thread of its own
        (`langgraph_durable.shutdown`); call it from a thread, never from a
        signal handler, which may have interrupted one of this saver's calls."""
        return self._replicator.drain(timeout)

    def _drain_pending(self) -> threading.Event:
        """A drain is about to start elsewhere (a signal's, `shutdown.py`):
        `close` / `aclose` wait until the returned event is set before they
        close the tiers. Takes no lock: a signal handler calls it, and it
        may have interrupted a holder of one (list.append is atomic)."""
        done = threading.Event()
        (self._origin or self)._drains.append(done)
        return done

    def _wait_for_drains(self) -> None:
        """Let a drain announced by `_drain_pending` end (it bounds itself)."""
        while True:
            try:
                done = self._drains.pop()
            except IndexError:
                return
            done.wait()

    async def adrain(self, timeout: float | None = None) -> Lag:
        """Async `drain` (it runs in a worker thread)."""
        return await asyncio.to_thread(self._replicator.drain, timeout)

    def lag(self) -> Lag:
        """How far behind the shared tiers are: records owed (in all and per
        tier) and the age of the oldest in seconds. With ``write="local"``
        this is the write-behind lag; otherwise it is what tiers that were
        down have still to be sent, and (all three tiers) what Redis is
        still to get from the replicator."""
        return self._with_archive(self._sync_chain().lag())

    def _with_archive(self, lag: Lag) -> Lag:
        replica = (self._origin or self)._archive_replica
        return dataclasses.replace(lag, archive=replica.lag()) if replica is not None else lag

    async def alag(self) -> Lag:
        """Async `lag`."""
        return self._with_archive(await self._async_chain().lag())

    def health(self) -> Health:
        """Probe every tier now: reachable, latency, breaker state, records
        owed. ``langgraph-durable doctor`` prints it."""
        chain = self._sync_chain()
        health = chain.health()
        if all(t.reachable for t in health.tiers):  # a tier down: no second wait for it
            with contextlib.suppress(DurableError):
                chain.ensure_setup()  # the store's key, for its fingerprint
        health = self._with_fingerprint(health)
        if self.archive_url is None:
            return health
        return self._archive_health(health, self._archive_probe)

    def _with_fingerprint(self, health: Health) -> Health:
        """`Health.store_key_fingerprint`: what an operator keeps to rebuild
        the store from its archive (`archive_key_fingerprint`)."""
        key = self._codec.key
        if not self._store_key or not key:
            return health
        return dataclasses.replace(health, store_key_fingerprint=key_fingerprint(key, full=True))

    def _archive_probe(self) -> None:
        self._archiver().archived_threads()

    def _archive_health(self, health: Health, probe: Callable[[], Any]) -> Health:
        error = None
        try:
            probe()
        except TierUnavailable as exc:
            error = str(exc)
        replica = (self._origin or self)._archive_replica
        lag = replica.lag() if replica is not None else ArchiveLag(0, 0.0)
        lag = dataclasses.replace(lag, reachable=error is None)
        if not lag.failing:
            # Another process's replica (the `doctor`'s saver ships nothing).
            recorded = self._archive_failing_recorded()
            if recorded:
                shown = sorted(recorded)
                lag = dataclasses.replace(lag, failing=tuple(shown[:10]), failing_error=recorded[shown[-1]])
        return dataclasses.replace(health, archive=lag, archive_error=error, lag=self._with_archive(health.lag))

    async def ahealth(self) -> Health:
        """Async `health`."""
        chain = self._async_chain()
        health = await chain.health()
        if all(t.reachable for t in health.tiers):
            with contextlib.suppress(DurableError):
                await chain.ensure_setup()
        health = self._with_fingerprint(health)
        if self.archive_url is None:
            return health
        return await asyncio.to_thread(self._archive_health, health, self._archive_probe)

    def __enter__(self) -> DurableSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> DurableSaver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- BaseCheckpointSaver: sync face -------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        chain = self._sync_chain()
        first = self._first_call_of_run(config)
        # A run takes the thread's writer lease before it reads "latest" (also
        # for a new thread), and gives it back if it fails to start.
        lease = self._sync_leases().begin_run(config) if first else None
        try:
            token, until = (None, None) if first else self._lease_token(config)
            tup = chain.get_tuple(config, lease_token=token, trusted_until=until)
            if tup is None and self._brought_back(config, held=first):
                tup = chain.get_tuple(config)
            if tup is not None and first:
                tup = chain.validate(tup, self._validators, self._on_validation)
        except BaseException:
            if lease is not None:
                self._sync_leases().abandon_run(lease)
            raise
        return tup

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        token, until = self._lease_token(config) if config else (None, None)
        chain = self._sync_chain()
        items = chain.list_tuples(
            config, filter=filter, before=before, limit=limit, lease_token=token, trusted_until=until
        )
        if not items and config and self._brought_back(config):
            items = chain.list_tuples(config, filter=filter, before=before, limit=limit)
        yield from items

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = self._sync_leases().put(config, checkpoint, self._stamped(metadata), new_versions)
        self._note_archive(config)
        return stored

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._sync_leases().put_writes(config, writes, task_id, task_path)
        self._note_archive(config)

    def delete_thread(self, thread_id: str) -> None:
        chain = self._sync_chain()
        if self.archive_url is None:  # its archive copy would stay, and serve it again
            self._refuse_archived(chain, {"configurable": {"thread_id": str(thread_id)}})
        leases = self._sync_leases()
        leases.ask_kept_back(thread_id, "delete_thread")  # another saver's kept lease (lease_linger)
        held = self._hold_archived(thread_id)
        try:
            self._delete_now(thread_id, chain)
        finally:
            if held is not None:
                leases.unhold(held)

    def _delete_now(self, thread_id: str, chain: TierChain | None = None) -> None:
        """`delete_thread`'s deletion, under a lease the caller holds if any."""
        chain = chain or self._sync_chain()
        with self._replicator.exclusive():
            chain.catch_up()  # what is owed first: nothing deleted is shipped later
            chain.delete_thread(thread_id)
        self._archive_forget(thread_id)

    def _hold_archived(self, thread_id: str) -> Any:
        """With an archive: the thread's lease for a delete, so that no
        bring-back of it (which holds it) is half done meanwhile. While the
        thread is flagged archived, whoever holds its lease is bringing it
        back (a run brings it back before it runs), however long that takes:
        the delete waits for it, or the bring-back would write the deleted
        thread back. Once it is hot, a run holding it does not hold the
        delete up, as it never did."""
        if self.archive_url is None or self.read_only:
            return None
        archiver = self._archiver()
        while True:
            try:
                return self._sync_leases().hold(str(thread_id))
            except TierUnavailable:
                return None
            except ThreadBusy:
                if archiver.flag(str(thread_id)) is None:
                    return None
            time.sleep(BRING_BACK_POLL_S)

    async def _ahold_archived(self, thread_id: str) -> Any:
        if self.archive_url is None or self.read_only:
            return None
        archiver = self._aarchiver()
        while True:  # see _hold_archived
            try:
                return await self._async_leases().hold(str(thread_id))
            except TierUnavailable:
                return None
            except ThreadBusy:
                if await archiver.flag(str(thread_id)) is None:
                    return None
            await asyncio.sleep(BRING_BACK_POLL_S)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        chain = self._sync_chain()
        leases = self._sync_leases()
        unsearched: TierUnavailable | None = None
        if self.archive_url is not None and not self.read_only and run_ids:
            # An archived thread holding one of the runs comes back first: the runs go from it too.
            try:
                for thread_id in self._archiver().holding_runs([str(r) for r in run_ids]):
                    self._bring_back_thread(thread_id)
            except TierUnavailable as exc:
                unsearched = exc  # the hot threads lose the runs all the same; then it is said
        with self._replicator.exclusive():
            chain.catch_up()  # what is owed first: nothing deleted is shipped later
            # Another saver's kept lease of a thread that loses a checkpoint (lease_linger).
            chain.delete_for_runs(run_ids, self._asking(leases.ask_kept_back, "delete_for_runs"))
        if unsearched is not None:
            raise _archived_runs_unsearched(unsearched)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        chain = self._sync_chain()
        # An archived source would copy as nothing, an archived target be overwritten by its bring-back.
        self._bring_back_thread(source_thread_id)
        self._bring_back_thread(target_thread_id)
        self._sync_leases().ask_kept_back(target_thread_id, "copy_thread: target")  # see delete_thread
        with self._replicator.exclusive():
            chain.catch_up()  # what is owed first: nothing deleted is shipped later
            chain.copy_thread(source_thread_id, target_thread_id)
        self._note_archive(target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        chain = self._sync_chain()
        leases = self._sync_leases()
        for thread_id in thread_ids:
            self._bring_back_thread(thread_id)  # an archived thread is pruned as a hot one is
            leases.ask_kept_back(thread_id, "prune")  # see delete_thread
            self._archive_owe(thread_id)
        with self._replicator.exclusive():
            chain.catch_up()  # see delete_thread
            chain.prune(thread_ids, strategy=strategy)
        for thread_id in thread_ids:
            self._note_archive(thread_id)

    # -- BaseCheckpointSaver: async face ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async `get_tuple`."""
        chain = self._async_chain()
        first = self._first_call_of_run(config)
        lease = await self._async_leases().begin_run(config) if first else None  # see get_tuple
        try:
            if not first:
                await self._run_end_settled(chain, config)
            token, until = (None, None) if first else self._lease_token(config)
            tup = await chain.get_tuple(config, lease_token=token, trusted_until=until)
            if tup is None and await self._abrought_back(config, held=first):
                tup = await chain.get_tuple(config)
            if tup is not None and first:
                tup = await chain.validate(tup, self._validators, self._on_validation)
        except BaseException:
            if lease is not None:
                await self._async_leases().abandon_run(lease)
            raise
        return tup

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async `list`."""
        chain = self._async_chain()
        token, until = None, None
        if config:
            await self._run_end_settled(chain, config)  # see aget_tuple
            token, until = self._lease_token(config)
        items = await chain.list_tuples(
            config, filter=filter, before=before, limit=limit, lease_token=token, trusted_until=until
        )
        if not items and config and await self._abrought_back(config):
            items = await chain.list_tuples(config, filter=filter, before=before, limit=limit)
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async `put`."""
        stored = await self._async_leases().put(config, checkpoint, self._stamped(metadata), new_versions)
        self._note_archive(config)
        return stored

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Async `put_writes`."""
        await self._async_leases().put_writes(config, writes, task_id, task_path)
        self._note_archive(config)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async `delete_thread`."""
        chain = self._async_chain()
        if self.archive_url is None:  # see delete_thread
            await self._arefuse_archived(chain, {"configurable": {"thread_id": str(thread_id)}})
        leases = self._async_leases()
        await leases.ask_kept_back(thread_id, "delete_thread")  # see delete_thread
        held = await self._ahold_archived(thread_id)
        try:
            await self._adelete_now(thread_id, chain)
        finally:
            if held is not None:
                await leases.unhold(held)

    async def _adelete_now(self, thread_id: str, chain: AsyncTierChain | None = None) -> None:
        chain = chain or self._async_chain()
        async with self._replicator.aexclusive():
            await chain.catch_up()  # see delete_thread
            await chain.delete_thread(thread_id)
        await self._aarchive_forget(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async `delete_for_runs`."""
        chain = self._async_chain()
        leases = self._async_leases()
        unsearched: TierUnavailable | None = None
        if self.archive_url is not None and not self.read_only and run_ids:
            try:  # see delete_for_runs
                for thread_id in await self._aarchiver().holding_runs([str(r) for r in run_ids]):
                    await self._abring_back_thread(thread_id)
            except TierUnavailable as exc:
                unsearched = exc
        async with self._replicator.aexclusive():
            await chain.catch_up()  # see delete_thread
            await chain.delete_for_runs(run_ids, self._aasking(leases.ask_kept_back, "delete_for_runs"))
        if unsearched is not None:
            raise _archived_runs_unsearched(unsearched)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async `copy_thread`."""
        chain = self._async_chain()
        await self._abring_back_thread(source_thread_id)  # see copy_thread
        await self._abring_back_thread(target_thread_id)
        await self._async_leases().ask_kept_back(target_thread_id, "copy_thread: target")  # see delete_thread
        async with self._replicator.aexclusive():
            await chain.catch_up()  # see delete_thread
            await chain.copy_thread(source_thread_id, target_thread_id)
        self._note_archive(target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async `prune`."""
        chain = self._async_chain()
        leases = self._async_leases()
        for thread_id in thread_ids:
            await self._abring_back_thread(thread_id)  # see prune
            await leases.ask_kept_back(thread_id, "prune")  # see delete_thread
            await self._aarchive_owe(thread_id)
        async with self._replicator.aexclusive():
            await chain.catch_up()  # see delete_thread
            await chain.prune(thread_ids, strategy=strategy)
        for thread_id in thread_ids:
            self._note_archive(thread_id)

    # -- DeltaChannel history (delta_history.py) ------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's walk up the parent chain, over ancestors read a page at
        a time with `list` instead of one `get_tuple` each (`delta_history.py`), from
        the local cache alone for what this saver wrote under the thread's
        lease it still holds; LangGraph's own walk whenever the chain is not
        complete in those pages."""
        if not channels:
            return {}
        token, until = self._lease_token(config)
        found = self._sync_chain().delta_history(config, channels, lease_token=token, trusted_until=until)
        return found if found is not None else super().get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async `get_delta_channel_history`."""
        if not channels:
            return {}
        chain = self._async_chain()
        await self._run_end_settled(chain, config)
        token, until = self._lease_token(config)
        found = await chain.delta_history(config, channels, lease_token=token, trusted_until=until)
        if found is not None:
            return found
        return await super().aget_delta_channel_history(config=config, channels=channels)

    # -- resume validation and non-resumable actions ---------------------------------

    def add_validator(self, validator: Validator) -> None:
        """Run `validator` (after those already registered) before every resume."""
        if not callable(validator):
            raise ConfigError(f"a validator must be callable taking a ResumeContext, not {validator!r}.")
        self._validators.append(validator)

    def _first_call_of_run(self, config: RunnableConfig) -> bool:
        """Validate once per run: the loop's first get_tuple, root graph only.

        With an explicit checkpoint_id (time travel) the loop asks a second
        time, right away and with the same runtime object, for the latest
        checkpoint ("has the thread moved on?"); that probe is not a resume.
        LangGraph's Runtime has __slots__ and no weakref, so the explicit call
        leaves a marker in the current context that the very next call reads.
        """
        if not is_resume_of_a_run(config):
            return False
        configurable = config["configurable"]
        runtime = configurable[RUNTIME_KEY]
        probe_of = _PROBE_EXPECTED.get()
        _PROBE_EXPECTED.set(None)
        if probe_of is runtime and not configurable.get("checkpoint_id"):
            return False
        if configurable.get("checkpoint_id"):
            _PROBE_EXPECTED.set(runtime)
        return True

    def _stamped(self, metadata: CheckpointMetadata) -> CheckpointMetadata:
        if self.app_version is None:
            return metadata
        return cast(CheckpointMetadata, {**metadata, VERSION_KEY: self.app_version})

    def actions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's ledger of non-resumable actions, by key."""
        return self._sync_chain().actions(thread_id)

    async def aactions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """Async `actions`."""
        return await self._async_chain().actions(thread_id)

    def record_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write a ledger entry through every tier (used by `ledger.action`)."""
        self._sync_chain().record_action(thread_id_of(thread_id, what="record_action"), entry)
        self._note_archive(str(thread_id))

    async def arecord_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Async `record_action`."""
        await self._async_chain().record_action(thread_id_of(thread_id, what="record_action"), entry)
        self._note_archive(str(thread_id))

    def resolve_action(
        self, thread_id: str, key: str, *, done: bool, result: Any = None, force: bool = False
    ) -> LedgerEntry:
        """An operator's answer for an escalated action: ``done=True`` (it
        happened; `result` is what later runs get) or ``done=False`` (it did
        not; the next run may do it). The thread can then run again.

        Raises `ConfigError`, writing nothing, if the thread has no action
        `key`, or if the action is already answered (confirmed done, or
        answered by an operator) and `force` is not set: changing a confirmed
        action could make the thread repeat or skip its side effect. An entry
        damaged in every tier can always be answered."""
        try:
            entries: Mapping[str, LedgerEntry] | None = self.actions(thread_id)
        except Exception as exc:
            if not damaged_entry(exc, str(thread_id), key):
                raise
            entries = None  # unreadable everywhere: the answer replaces it
        entry = operator_answer(str(thread_id), key, entries, done=done, result=result, force=force)
        self.record_action(thread_id, entry)
        return entry

    async def aresolve_action(
        self, thread_id: str, key: str, *, done: bool, result: Any = None, force: bool = False
    ) -> LedgerEntry:
        """Async `resolve_action`."""
        try:
            entries: Mapping[str, LedgerEntry] | None = await self.aactions(thread_id)
        except Exception as exc:
            if not damaged_entry(exc, str(thread_id), key):
                raise
            entries = None  # see resolve_action
        entry = operator_answer(str(thread_id), key, entries, done=done, result=result, force=force)
        await self.arecord_action(thread_id, entry)
        return entry

    # -- integrity ------------------------------------------------------------------

    @property
    def corruptions_detected(self) -> int:
        """Bad copies met by reads of this saver since it was created."""
        return self._policy.count

    def restore_quarantined(
        self, records: Sequence[QuarantinedRecord | str]
    ) -> tuple[builtins.list[QuarantinedRecord], builtins.list[QuarantinedRecord]]:
        """Put quarantined copies back where they were (`quarantined` lists
        them; a string names one as ``"tier:id"``, as the CLI prints it).

        Nothing is trusted because it was restored: the next read verifies
        the copy again (and quarantines it again if it is still bad). A copy
        whose place holds an intact record now stays in the quarantine.
        Returns ``(restored, kept)``. Raises `ConfigError` for an unknown id
        or a copy kept without its row's fields."""
        chain = self._sync_chain()
        chain.ensure_setup()
        return chain.restore_quarantined(_resolve(records, lambda: self.quarantined()))

    async def arestore_quarantined(
        self, records: Sequence[QuarantinedRecord | str]
    ) -> tuple[builtins.list[QuarantinedRecord], builtins.list[QuarantinedRecord]]:
        """Async `restore_quarantined`."""
        known = await self.aquarantined() if any(isinstance(r, str) for r in records) else []
        return await self._async_chain().restore_quarantined(_resolve(records, lambda: known))

    def quarantined(self, thread_id: str | None = None) -> builtins.list[QuarantinedRecord]:
        """Quarantined copies, from every tier (one thread or all): bad copies
        met by reads, `repair` or the journal, and withdrawn checkpoints.
        Each carries its tier, id, reason and bytes; `restore_quarantined`
        puts them back."""
        chain = self._sync_chain()
        chain.ensure_setup()
        return [q for tier in chain.tiers for q in tier.list_quarantine(thread_id)]

    async def aquarantined(self, thread_id: str | None = None) -> builtins.list[QuarantinedRecord]:
        """Async `quarantined`."""
        chain = self._async_chain()
        await chain.ensure_setup()
        return [q for tier in chain.tiers for q in await tier.list_quarantine(thread_id)]

    def restore_outcomes(self, records: Sequence[QuarantinedRecord]) -> builtins.list[tuple[str, str]]:
        """What `restore_quarantined` would do with each of `records` now,
        changing nothing: ``(verdict, why)`` with verdict ``"restore"`` (put
        back: its place holds no intact copy), ``"keep"`` (an intact copy is
        in its place, after `repair` say: it stays quarantined) or
        ``"refuse"`` (it cannot be put back)."""
        return self._sync_chain().restore_outcomes(records)

    async def arestore_outcomes(self, records: Sequence[QuarantinedRecord]) -> builtins.list[tuple[str, str]]:
        """Async `restore_outcomes`."""
        return await self._async_chain().restore_outcomes(records)

    def purge_quarantined(
        self, older_than: float | timedelta, *, thread_id: str | None = None, dry_run: bool = False
    ) -> builtins.list[QuarantinedRecord]:
        """Delete for good, from every tier, the quarantined copies detected
        more than `older_than` (seconds, or a timedelta) ago: of `thread_id`,
        or of every thread. With `dry_run` nothing is deleted. Returns the
        copies purged (or that would be). A read-only saver refuses
        (`ConfigError`)."""
        self._may_purge()
        return self._sync_chain().purge_quarantined(_seconds(older_than), thread_id=thread_id, dry_run=dry_run)

    async def apurge_quarantined(
        self, older_than: float | timedelta, *, thread_id: str | None = None, dry_run: bool = False
    ) -> builtins.list[QuarantinedRecord]:
        """Async `purge_quarantined`."""
        self._may_purge()
        return await self._async_chain().purge_quarantined(_seconds(older_than), thread_id=thread_id, dry_run=dry_run)

    def _may_purge(self) -> None:
        if self.read_only:
            raise ConfigError("this saver is read-only (read_only=True): it never purges the quarantine.")

    def thread_ids(self) -> builtins.list[str]:
        """Every thread with a checkpoint or pending write in some tier,
        sorted: the union over the tiers, as `verify` walks them (so a tier
        that cannot be reached raises `TierUnavailable` rather than leaving
        its threads out). ``langgraph-durable threads`` lists them."""
        chain = self._sync_chain()
        chain.ensure_setup()
        return sorted({t for tier in chain.tiers for t in tier.thread_ids()})

    async def athread_ids(self) -> builtins.list[str]:
        """Async `thread_ids`."""
        chain = self._async_chain()
        await chain.ensure_setup()
        return sorted({t for tier in chain.tiers for t in await tier.thread_ids()})

    def verify(self, thread_id: str | None = None, *, progress: Callable[[int, int], None] | None = None) -> ScanReport:
        """Check every copy of every record in every tier (one thread or all).
        Changes nothing; `ScanReport.bad` lists each bad copy with its tier and key.
        With an archive, `ScanReport.archive` says which of its segments do
        not verify and which threads the hot tiers hold older than it does
        (rolled back, or lost everywhere), an `archive.reports.ArchiveCheck`.
        `progress(done, total)` is called after each thread."""
        report = self._sync_chain().scan(thread_id, repair=False, progress=progress)
        if self.archive_url is not None:
            report.archive = self._archiver().check(None if thread_id is None else [thread_id])
        return report

    def repair(self, thread_id: str | None = None, *, progress: Callable[[int, int], None] | None = None) -> ScanReport:
        """`verify`, then replace each bad copy with an intact copy from another
        tier (the bad bytes are quarantined first). Copies with no intact twin
        are listed in `ScanReport.unrestorable`."""
        return self._sync_chain().scan(thread_id, repair=True, progress=progress)

    async def averify(
        self, thread_id: str | None = None, *, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        """Async `verify`."""
        report = await self._async_chain().scan(thread_id, repair=False, progress=progress)
        if self.archive_url is not None:
            report.archive = await self._aarchiver().check(None if thread_id is None else [thread_id])
        return report

    async def arepair(
        self, thread_id: str | None = None, *, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        """Async `repair`."""
        return await self._async_chain().scan(thread_id, repair=True, progress=progress)

    # -- retention (retention.py) ---------------------------------------------------

    def apply_retention(
        self,
        policy: RetentionPolicy | None = None,
        *,
        thread_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        now: float | None = None,
        progress: Callable[[int, int], None] | None = None,
        pace: Callable[[], None] | None = None,
    ) -> RetentionReport:
        """Apply `policy` (default: the saver's `retention=`) to these threads
        (default: every thread any tier holds), in every tier; with `dry_run`
        only count what would go. What a sweep never removes is listed in
        `RetentionPolicy`. Records still owed to the shared tiers are shipped
        first. A tier that cannot be reached raises `TierUnavailable` and
        leaves the threads not reached yet as they were; run it again.
        `progress(done, total)` runs after each thread, `pace()` before or
        after each (a rate limit: the background sweep's `retention_rate`)."""
        chosen = self._retention_policy(policy)
        chain = self._sync_chain()
        leases = self._sync_leases()
        when = time.time() if now is None else now
        hot_ids, archived_ids = self._retention_split(thread_ids)
        with self._replicator.exclusive():
            chain.catch_up()  # see delete_thread
            report = chain.retain(
                chosen,
                hot_ids,
                now=when,
                dry_run=dry_run,
                progress=progress,
                pace=pace,
                # Another saver's kept lease of a thread it deletes or prunes (lease_linger).
                ask=self._asking(leases.ask_kept_back, "apply_retention"),
            )
        if self.archive_url is not None:
            self._retain_archived(chosen, archived_ids, report, now=when, dry_run=dry_run, pace=pace)
        if chosen.archive_idle_after is not None:
            archived = self.archive_idle(
                chosen.archive_idle_after, thread_ids=thread_ids, dry_run=dry_run, now=when, pace=pace
            )
            report.threads_archived = len(archived.archived)
        return report

    async def aapply_retention(
        self,
        policy: RetentionPolicy | None = None,
        *,
        thread_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        now: float | None = None,
        progress: Callable[[int, int], None] | None = None,
        pace: Callable[[], Any] | None = None,
    ) -> RetentionReport:
        """`apply_retention` on the async face; `pace()` may return an awaitable, which is awaited."""
        chosen = self._retention_policy(policy)
        chain = self._async_chain()
        leases = self._async_leases()
        when = time.time() if now is None else now
        hot_ids, archived_ids = await self._aretention_split(thread_ids)
        async with self._replicator.aexclusive():
            await chain.catch_up()
            report = await chain.retain(
                chosen,
                hot_ids,
                now=when,
                dry_run=dry_run,
                progress=progress,
                pace=pace,
                ask=self._aasking(leases.ask_kept_back, "apply_retention"),  # see apply_retention
            )
        if self.archive_url is not None:
            await self._aretain_archived(chosen, archived_ids, report, now=when, dry_run=dry_run, pace=pace)
        if chosen.archive_idle_after is not None:
            archived = await self.aarchive_idle(
                chosen.archive_idle_after, thread_ids=thread_ids, dry_run=dry_run, now=when, pace=pace
            )
            report.threads_archived = len(archived.archived)
        return report

    def _retention_split(self, thread_ids: Sequence[str] | None) -> tuple[Sequence[str] | None, builtins.list[str]]:
        """A sweep's hot threads (None: every thread the hot tiers hold) and
        its archived ones: flagged in the hot tiers, listed in the archive."""
        if self.archive_url is None:
            return thread_ids, []
        archiver = self._archiver()
        if thread_ids is None:
            return None, archiver.archived_threads()
        archived = [str(t) for t in thread_ids if archiver.flag(str(t)) is not None]
        return [t for t in thread_ids if str(t) not in archived], archived

    async def _aretention_split(
        self, thread_ids: Sequence[str] | None
    ) -> tuple[Sequence[str] | None, builtins.list[str]]:
        if self.archive_url is None:
            return thread_ids, []
        archiver = self._aarchiver()
        if thread_ids is None:
            return None, await archiver.archived_threads()
        archived = [str(t) for t in thread_ids if await archiver.flag(str(t)) is not None]
        return [t for t in thread_ids if str(t) not in archived], archived

    def _retain_archived(
        self,
        policy: RetentionPolicy,
        thread_ids: Sequence[str],
        report: RetentionReport,
        *,
        now: float,
        dry_run: bool,
        pace: Callable[[], None] | None = None,
    ) -> None:
        """A sweep's archived threads, each judged on its archive copy
        (`Archiver.judge`) and passed over unread where the archived flag
        shows that no rule can touch it. One a rule changes is deleted
        (idle), or brought back, swept as a hot one and archived again; each
        under the thread's writer lease and only while its flag is the one
        judged, so a run or a pin that brought it back since wins. A thread
        whose copy was read and loses nothing has that noted in its flag
        (`Archiver.settle`)."""
        archiver = self._archiver()
        leases = self._sync_leases()
        for thread_id in thread_ids:
            if pace is not None:
                refuse_awaitable(pace(), "pace")
            judged = archiver.judge(thread_id, policy, now)
            if judged is None:
                continue  # brought back since it was listed: the next sweep finds it hot
            report.add(judged.retained, unconfirmed=judged.unconfirmed)
            if dry_run or not (judged.acts or _settles(judged)):
                continue
            leases.ask_kept_back(thread_id, "apply_retention")  # see delete_thread
            try:
                lease = leases.hold(thread_id)
            except ThreadBusy:
                _left(report, judged)  # a run has it: not idle, and swept hot by the next sweep
                continue
            try:
                if not judged.acts:
                    archiver.settle(thread_id, judged, policy, now)
                    continue
                if archiver.flag(thread_id) != judged.flag:
                    _left(report, judged)  # brought back meanwhile: the next sweep finds it hot
                    continue
                if judged.retained.thread_deleted:
                    self._delete_now(thread_id)
                    continue
                with self._archive_call("bring_back"):
                    archiver.bring_back(thread_id)  # under the lease held here
                self._archive_owe(thread_id)  # see prune
            finally:
                leases.unhold(lease)
            _undo_count(report, judged)  # counted again as the hot sweep finds it
            with self._replicator.exclusive():
                swept = self._sync_chain().retain(
                    policy,
                    [thread_id],
                    now=now,
                    dry_run=False,
                    ask=self._asking(leases.ask_kept_back, "apply_retention"),
                )
            report.merge(swept)
            again = archiver.archive_threads(
                [thread_id],
                ArchiveReport(dry_run=False),
                idle_after=_idle_for(judged, now),
                now=now,
                **self._archiving_with(leases),
            )
            _rearchived(thread_id, again)

    async def _aretain_archived(
        self,
        policy: RetentionPolicy,
        thread_ids: Sequence[str],
        report: RetentionReport,
        *,
        now: float,
        dry_run: bool,
        pace: Callable[[], Any] | None = None,
    ) -> None:
        archiver = self._aarchiver()
        leases = self._async_leases()
        for thread_id in thread_ids:  # see _retain_archived
            if pace is not None:
                await amaybe_await(pace())
            judged = await archiver.judge(thread_id, policy, now)
            if judged is None:
                continue
            report.add(judged.retained, unconfirmed=judged.unconfirmed)
            if dry_run or not (judged.acts or _settles(judged)):
                continue
            await leases.ask_kept_back(thread_id, "apply_retention")
            try:
                lease = await leases.hold(thread_id)
            except ThreadBusy:
                _left(report, judged)
                continue
            try:
                if not judged.acts:
                    await archiver.settle(thread_id, judged, policy, now)
                    continue
                if await archiver.flag(thread_id) != judged.flag:
                    _left(report, judged)
                    continue
                if judged.retained.thread_deleted:
                    await self._adelete_now(thread_id)
                    continue
                with self._archive_call("bring_back"):
                    await archiver.bring_back(thread_id)
                await self._aarchive_owe(thread_id)
            finally:
                await leases.unhold(lease)
            _undo_count(report, judged)
            async with self._replicator.aexclusive():
                swept = await self._async_chain().retain(
                    policy,
                    [thread_id],
                    now=now,
                    dry_run=False,
                    ask=self._aasking(leases.ask_kept_back, "apply_retention"),
                )
            report.merge(swept)
            again = await archiver.archive_threads(
                [thread_id],
                ArchiveReport(dry_run=False),
                idle_after=_idle_for(judged, now),
                now=now,
                **self._archiving_with(leases),
            )
            _rearchived(thread_id, again)

    def _retention_policy(self, policy: RetentionPolicy | None) -> RetentionPolicy:
        chosen = policy if policy is not None else self.retention
        if not isinstance(chosen, RetentionPolicy):
            raise ConfigError("no retention policy: pass one, or give the saver retention=RetentionPolicy(...).")
        return chosen

    # -- the archive (archive/) ---------------------------------------------------------

    def _archiver(self) -> Archiver:
        """The sync face's archiver (its chain's tiers and the object store)."""
        if self._origin is not None:
            return self._origin._archiver()
        if self.archive_url is None:
            raise ConfigError(
                "this saver has no archive: pass archive='s3://BUCKET/PREFIX' (or set "
                "LANGGRAPH_DURABLE_ARCHIVE_URL, or --archive on the command line)."
            )
        chain = self._sync_chain()
        with self._lock:
            if self._sync_archiver is None or self._sync_archiver.chain is not chain:
                self._sync_archiver = Archiver(
                    ArchiveStore(self.archive_url), chain, key_fingerprint=self.archive_key_fingerprint
                )
            return self._sync_archiver

    def _aarchiver(self) -> AsyncArchiver:
        if self._origin is not None:
            return self._origin._aarchiver()
        if self.archive_url is None:
            self._archiver()  # raises the ConfigError
        assert self.archive_url is not None
        chain = self._async_chain()
        if self._async_archiver is None or self._async_archiver.chain is not chain:
            self._async_archiver = AsyncArchiver(
                AsyncArchiveStore(self.archive_url), chain, key_fingerprint=self.archive_key_fingerprint
            )
        return self._async_archiver

    def _note_archive(self, config: RunnableConfig | str) -> None:
        """The thread changed: the replica ships it with its next pass."""
        replica = (self._origin or self)._archive_replica
        if replica is None:
            return
        thread_id = config if isinstance(config, str) else (config.get("configurable") or {}).get("thread_id")
        if thread_id is not None:
            replica.note(str(thread_id))

    def _asking(self, ask: Callable[[str, str], Any], what: str) -> Callable[[str], Any]:
        """`ask(thread_id, what)` before a thread is changed outside a run,
        the thread noted for the archive replica too."""

        def asked(thread_id: str) -> Any:
            self._note_archive(thread_id)
            self._archive_owe(thread_id)
            return ask(thread_id, what)

        return asked

    def _aasking(self, ask: Callable[[str, str], Any], what: str) -> Callable[[str], Any]:
        """`_asking` on the async face."""

        async def asked(thread_id: str) -> Any:
            self._note_archive(thread_id)
            await self._aarchive_owe(thread_id)
            return await ask(thread_id, what)

        return asked

    def _archive_owe(self, thread_id: str) -> None:
        """Before a deletion in the thread: noted in the hot tiers for the
        archive, so that it reaches the archive even when the object store
        is down now and this process exits before it answers again."""
        if self.archive_url is not None and not self.read_only:
            self._archiver().owe(str(thread_id))

    async def _aarchive_owe(self, thread_id: str) -> None:
        if self.archive_url is not None and not self.read_only:
            await self._aarchiver().owe(str(thread_id))

    def _archive_answers(self) -> bool:
        """Whether the object store answers a call that names no thread: a
        ship that failed while it does failed for that thread alone."""
        try:
            self._archiver().store.keys(ARCHIVE_OWNER)
        except TierUnavailable:
            return False
        return True

    def _archive_failing(self, failing: dict[str, str]) -> None:
        """Where `doctor` (another process) finds the threads this replica
        cannot ship while the object store answers."""
        self._archive_failing_holder().write_meta(
            FAILING_META, json.dumps(failing, sort_keys=True) if failing else None
        )

    def _archive_failing_holder(self) -> Any:
        chain = self._sync_chain()
        return chain.roles.authority or chain.local

    def _archive_failing_recorded(self) -> dict[str, str]:
        try:
            text = self._archive_failing_holder().read_meta(FAILING_META)
            found = json.loads(text) if text else {}
        except (DurableError, ValueError):
            return {}
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def _archive_ship(self, thread_id: str) -> int:
        with self._archive_call("ship"):
            try:
                return self._archiver().ship(thread_id)
            except TierUnavailable as exc:
                if exc.tier == "archive" and self._archive_answers():
                    raise ArchiveRefused(thread_id, exc) from exc  # an "error", not the store down
                raise

    @contextlib.contextmanager
    def _archive_call(self, op: str) -> Iterator[None]:
        """Report one archive operation to the metrics hooks as a `TierCall`
        of tier ``"archive"`` (``ship``, ``bring_back``, ``archive_thread``)."""
        sink = (self._origin or self)._metrics
        if sink is None:
            yield
            return
        started = time.perf_counter()
        outcome: Outcome = "error"
        try:
            yield
            outcome = "ok"
        except TierUnavailable:
            outcome = "unavailable"
            raise
        finally:
            sink(TierCall("archive", op, time.perf_counter() - started, outcome))

    def _archive_rescan(self, note: Callable[[str], None], paced: Callable[[], bool]) -> int:
        """Note every thread the archive is behind on: those whose head differs
        from their newest segment's, and those it holds that the hot tiers
        no longer do (deleted: the replica records it, unless archived)."""
        archiver = self._archiver()
        chain = archiver.chain
        chain.ensure_setup()
        hot = set(chain.roles.last_resort.thread_ids())
        noted = 0
        for thread_id in sorted(hot):
            if not paced():
                return noted
            if archiver.changed(thread_id):
                note(thread_id)
                noted += 1
        archived = set(archiver.archived_threads())
        for thread_id in sorted(set(archiver.archived_thread_ids()) - hot - archived):
            note(thread_id)
            noted += 1
        return noted

    def _archive_forget(self, thread_id: str) -> None:
        """After `delete_thread`: the thread is no longer archived (the hot
        tiers' flag goes, so no read brings it back, whatever the object
        store says), and its archive copy goes with the replica's next pass."""
        if self.archive_url is None or self.read_only:
            return
        self._note_archive(thread_id)
        self._archiver().forget(str(thread_id))

    async def _aarchive_forget(self, thread_id: str) -> None:
        if self.archive_url is None or self.read_only:
            return
        self._note_archive(thread_id)
        await self._aarchiver().forget(str(thread_id))

    def _archived_thread_of(self, config: RunnableConfig) -> str | None:
        """The thread a read found nothing of, if it may live in the archive."""
        if self.archive_url is None or self.read_only:
            return None
        thread_id = (config.get("configurable") or {}).get("thread_id")
        return None if thread_id is None else str(thread_id)

    def _refuse_archived(self, chain: TierChain, config: RunnableConfig) -> None:
        """A saver without an archive found nothing of the thread: if the
        system of record flags it archived (another saver of the store moved
        it there), `ThreadArchived`, before anything is written. One read of
        the system of record on such a miss, as a saver with an archive pays."""
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None or configurable.get("checkpoint_ns"):
            return  # a subgraph's first step: its thread's root namespace answered already
        chain.ensure_setup()  # the store's key first, as any read
        for tier in chain.roles.by_authority():
            try:
                flagged = tier.read_meta(archived_key(str(thread_id)))
                where = tier.read_meta(ARCHIVE_META) if flagged is not None else None
            except TierUnavailable:
                continue
            if flagged is not None:
                raise _thread_archived(str(thread_id), where, looking=self.archive_url is not None)
            return

    async def _arefuse_archived(self, chain: AsyncTierChain, config: RunnableConfig) -> None:
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None or configurable.get("checkpoint_ns"):
            return
        await chain.ensure_setup()
        for tier in chain.roles.by_authority():  # see _refuse_archived
            try:
                flagged = await tier.read_meta(archived_key(str(thread_id)))
                where = await tier.read_meta(ARCHIVE_META) if flagged is not None else None
            except TierUnavailable:
                continue
            if flagged is not None:
                raise _thread_archived(str(thread_id), where, looking=self.archive_url is not None)
            return

    def _bring_back_thread(self, thread_id: str) -> None:
        """If the thread is archived, bring it back (under its lease), for an
        operation on it that works on the hot tiers."""
        self._brought_back({"configurable": {"thread_id": str(thread_id)}})

    async def _abring_back_thread(self, thread_id: str) -> None:
        await self._abrought_back({"configurable": {"thread_id": str(thread_id)}})

    def _brought_back(self, config: RunnableConfig, *, held: bool = False) -> bool:
        """A read found nothing of the thread: if the hot tiers flag it
        archived, copy it back into them (one read of the system of record
        on such a miss; the object store only for an archived thread).
        Whether it did. Under the thread's writer lease: the caller's run's
        (`held`), this saver's kept one, or taken for it."""
        if self.archive_url is None or self.read_only:
            self._refuse_archived(self._sync_chain(), config)
        thread_id = self._archived_thread_of(config)
        if thread_id is None:
            return False
        leases = self._sync_leases()
        mine = held or self._lease_token(config)[0] is not None
        hold, release = (None, None) if mine else (leases.hold, leases.unhold)
        archiver = self._archiver()
        if archiver.flag(thread_id) is None:
            return False
        with self._archive_call("bring_back"):
            if not archiver.bring_back(thread_id, hold=hold, release=release):
                return False
        self.archive_restores += 1
        self._note_archive(thread_id)
        return True

    async def _abrought_back(self, config: RunnableConfig, *, held: bool = False) -> bool:
        if self.archive_url is None or self.read_only:
            await self._arefuse_archived(self._async_chain(), config)
        thread_id = self._archived_thread_of(config)
        if thread_id is None:
            return False
        leases = self._async_leases()
        mine = held or self._lease_token(config)[0] is not None
        hold, release = (None, None) if mine else (leases.hold, leases.unhold)
        archiver = self._aarchiver()
        if await archiver.flag(thread_id) is None:
            return False
        with self._archive_call("bring_back"):
            if not await archiver.bring_back(thread_id, hold=hold, release=release):
                return False
        self.archive_restores += 1
        self._note_archive(thread_id)
        return True

    def archive_idle(
        self,
        older_than: float,
        *,
        thread_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        now: float | None = None,
        pace: Callable[[], None] | None = None,
    ) -> ArchiveReport:
        """Move every thread whose newest checkpoint is older than
        `older_than` seconds out of the hot tiers into the archive.

        Each thread is shipped, its archive copy read back and checked to
        hold every record any hot tier holds (every namespace, checkpoint,
        channel value and list piece, pending write, ledger entry and pin
        entry), byte for byte, and only then deleted from the local, Redis
        and Postgres tiers, under the thread's writer lease. A thread with a
        pin, one being run, or one whose copy does not check out stays (the
        report says why). Any later read or run of an archived thread
        (``get_tuple``, ``list``, ``invoke``, ``get_state_history``) brings
        it back first. With `dry_run`, only say which threads would go.
        `pace()` runs before each thread (a rate limit)."""
        archiver = self._archiver()
        leases = self._sync_leases()
        chain = archiver.chain
        chain.ensure_setup()
        report = ArchiveReport(dry_run=dry_run)
        when = time.time() if now is None else now
        ids = thread_ids if thread_ids is not None else sorted({t for tier in chain.tiers for t in tier.thread_ids()})
        with self._replicator.exclusive():
            chain.catch_up()  # what is owed first: the hot tiers hold everything
        return archiver.archive_threads(
            ids, report, idle_after=older_than, now=when, pace=pace, **self._archiving_with(leases)
        )

    async def aarchive_idle(
        self,
        older_than: float,
        *,
        thread_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        now: float | None = None,
        pace: Callable[[], Any] | None = None,
    ) -> ArchiveReport:
        """`archive_idle` on the async face; `pace()` may return an awaitable, which is awaited."""
        archiver = self._aarchiver()
        leases = self._async_leases()
        chain = archiver.chain
        await chain.ensure_setup()
        report = ArchiveReport(dry_run=dry_run)
        when = time.time() if now is None else now
        if thread_ids is None:
            ids = sorted({t for tier in chain.tiers for t in await tier.thread_ids()})
        else:
            ids = list(thread_ids)
        async with self._replicator.aexclusive():
            await chain.catch_up()
        return await archiver.archive_threads(
            ids, report, idle_after=older_than, now=when, pace=pace, **self._archiving_with(leases)
        )

    def _archiving_with(self, leases: Any) -> dict[str, Any]:
        """What archiving a thread needs of one face's lease keeper (its
        writer lease held, then given back; a kept lease asked for) and the
        metrics around each archive call."""
        return {
            "hold": leases.hold,
            "release": leases.unhold,
            "ask": leases.ask_kept_back,
            "timed": self._archive_call,
        }

    def promote_local(self, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Give a store that ran on SQLite alone its shared tiers: copy every
        thread the local file holds (checkpoints, channel values, pending
        writes, ledger entries) into Redis and Postgres, sealed with the
        store's key, each record as it is. Until it has, a saver given both
        the file and shared tiers refuses to start (`ConfigError`), so no
        replica serves part of a thread's history. Safe to run again, and
        to resume after an interruption. The threads copied
        (``langgraph-durable promote``)."""
        return self._sync_chain().promote_local(progress)

    async def apromote_local(self, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Async `promote_local`."""
        return await self._async_chain().promote_local(progress)

    def _holds_embedded_history(self) -> bool:
        """Whether this saver has shared tiers and its SQLite file holds the
        history of a store that ran on it alone (`promote_local` not run)."""
        chain = self._sync_chain()
        if chain.local is None or not chain.shared:
            return False
        return chain.local.read_meta(EMBEDDED_META) is not None

    def archived_threads(self) -> builtins.list[str]:
        """Threads that live only in the archive (``threads --archived``)."""
        return self._archiver().archived_threads()

    async def aarchived_threads(self) -> builtins.list[str]:
        """Async `archived_threads`."""
        return await self._aarchiver().archived_threads()

    def restore(self, thread_ids: Sequence[str] | None = None, *, until: float | None = None) -> RestoreReport:
        """Rebuild the hot tiers from the archive, after they were lost: every
        thread it holds (or `thread_ids`), as of the newest segment (or the
        newest written by `until`, seconds since the epoch: a point in time,
        to the replica's pass). With every thread, archived threads stay
        archived (the hot tiers get their marker back); a thread named is
        brought back, under its writer lease (`ThreadBusy` while a run holds
        it). Safe to run again; ``langgraph-durable restore`` runs it."""
        leases = self._sync_leases()
        return self._archiver().restore(thread_ids, until=until, hold=leases.hold, release=leases.unhold)

    async def arestore(self, thread_ids: Sequence[str] | None = None, *, until: float | None = None) -> RestoreReport:
        """Async `restore`."""
        leases = self._async_leases()
        return await self._aarchiver().restore(thread_ids, until=until, hold=leases.hold, release=leases.unhold)

    def drain_archive(self, timeout: float | None = None) -> ArchiveLag | None:
        """Ship every thread written since the archive replica's last pass
        now, for up to `timeout` seconds. What is still behind (None without
        an archive)."""
        replica = (self._origin or self)._archive_replica
        return replica.flush(timeout) if replica is not None else None

    async def adrain_archive(self, timeout: float | None = None) -> ArchiveLag | None:
        """Async `drain_archive`."""
        return await asyncio.to_thread(self.drain_archive, timeout)

    # -- pinned recovery points (model/pins.py) ------------------------------------------

    def _pin_target(self, config: RunnableConfig) -> tuple[str, str, str | None]:
        configurable = config.get("configurable") or {}
        thread_id = thread_id_of(configurable.get("thread_id"), what="pin")
        ns = str(configurable.get("checkpoint_ns") or "")
        checkpoint_id = configurable.get("checkpoint_id")
        return thread_id, ns, checkpoint_id

    def pin(self, config: RunnableConfig, *, label: str = "", check: bool = True) -> Pin:
        """Pin a checkpoint (the one `config` names, else the thread's
        latest): retention, ``prune``, ``delete_for_runs`` and `archive_idle`
        never remove it or anything it is rebuilt from, until `unpin`.
        Resume from it with ``graph.invoke(None, pin.config)``. With
        `check` (default) the checkpoint must exist, else `ConfigError`;
        `pin_here` pins the checkpoint its step started from without
        looking, as it may still be on its way to the tiers."""
        thread_id, ns, checkpoint_id = self._pin_target(config)
        if check or not checkpoint_id:
            target = config if checkpoint_id else {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            tup = self.get_tuple(cast(RunnableConfig, target))
            if tup is None:
                raise ConfigError(f"pin: thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'} to pin.")
            checkpoint_id = tup.config["configurable"]["checkpoint_id"]
        assert checkpoint_id is not None
        self._sync_chain().record_entry(thread_id, pin_entry(ns, checkpoint_id, label))
        self._note_archive(thread_id)
        return Pin(thread_id, ns, checkpoint_id, label, time.time())

    async def apin(self, config: RunnableConfig, *, label: str = "", check: bool = True) -> Pin:
        """Async `pin`."""
        thread_id, ns, checkpoint_id = self._pin_target(config)
        if check or not checkpoint_id:
            target = config if checkpoint_id else {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            tup = await self.aget_tuple(cast(RunnableConfig, target))
            if tup is None:
                raise ConfigError(f"pin: thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'} to pin.")
            checkpoint_id = tup.config["configurable"]["checkpoint_id"]
        assert checkpoint_id is not None
        await self._async_chain().record_entry(thread_id, pin_entry(ns, checkpoint_id, label))
        self._note_archive(thread_id)
        return Pin(thread_id, ns, checkpoint_id, label, time.time())

    def unpin(self, config: RunnableConfig) -> bool:
        """Remove the pin of the checkpoint `config` names. Whether there was one."""
        thread_id, ns, checkpoint_id = self._pin_target(config)
        if not checkpoint_id:
            raise ConfigError("unpin: name the checkpoint (configurable checkpoint_id), as pin() returned it.")
        chain = self._sync_chain()
        entry = chain.ledger_entries(thread_id).get(pin_key(ns, checkpoint_id))
        if entry is None or entry.state != "intent":
            return False
        chain.record_entry(thread_id, unpin_entry(entry))
        self._note_archive(thread_id)
        return True

    async def aunpin(self, config: RunnableConfig) -> bool:
        """Async `unpin`."""
        thread_id, ns, checkpoint_id = self._pin_target(config)
        if not checkpoint_id:
            raise ConfigError("unpin: name the checkpoint (configurable checkpoint_id), as pin() returned it.")
        chain = self._async_chain()
        entry = (await chain.ledger_entries(thread_id)).get(pin_key(ns, checkpoint_id))
        if entry is None or entry.state != "intent":
            return False
        await chain.record_entry(thread_id, unpin_entry(entry))
        self._note_archive(thread_id)
        return True

    def pins(self, thread_id: str) -> builtins.list[Pin]:
        """The thread's pinned checkpoints, oldest pin first."""
        return self._sync_chain().pins(thread_id)

    async def apins(self, thread_id: str) -> builtins.list[Pin]:
        """Async `pins`."""
        return await self._async_chain().pins(thread_id)

    # -- importing another saver's threads (importer_async.py) ----------------------

    def import_from(
        self,
        source: BaseCheckpointSaver,
        *,
        verify: bool = True,
        progress: Callable[[int, int], None] | None = None,
        allow: Iterable[tuple[str, str] | str | type] = (),
        merge: bool = False,
        thread_prefix: str = "",
    ) -> ImportReport:
        """Copy every thread, namespace, checkpoint (parent chain and metadata
        included) and pending write of `source` into this saver's tiers; see
        the README's "Switching from SqliteSaver or PostgresSaver".

        A SqliteSaver or PostgresSaver (LangGraph's serializer, optionally
        encrypted) is read from its tables, through its own connection, and
        nothing its records name is run: a value that would rebuild a type
        outside LangGraph's allowlist plus `allow` (``("module", "Class")``
        pairs, ``"module:Class"`` strings or classes), or that is pickled, is
        not decoded; its row is skipped and listed in
        `ImportReport.rejected`. Any other saver is read through its public
        `list`, which decodes with that saver's own serializer.

        A thread already in the tiers with checkpoints the source does not
        have raises `ImportConflict` (a `ConfigError`) before anything is
        written, unless `merge` (add the source's checkpoints to it) or
        `thread_prefix` (import thread ``t`` as ``thread_prefix + t``).
        Run it again to resume an interrupted import: checkpoints already
        here are skipped and missing pending writes added. With `verify`,
        every copy is read back through `list` and `get_tuple` and compared
        with its source; `ImportReport.differences` lists what differs.
        `progress(done, total)` is called per thread. Checkpoints keep their
        metadata as the source stored it. A source or tier failure raises;
        what was written stays and is skipped next time."""
        leases = self._sync_leases()
        return Importer(
            source,
            list_target=self.list,
            get_target=self.get_tuple,
            put=leases.put,
            put_writes=leases.put_writes,
            tables=importing.sync_tables(source),
            allow=allow,
            merge=merge,
            thread_prefix=thread_prefix,
            verify=verify,
            progress=progress,
        ).run()

    async def aimport_from(
        self,
        source: BaseCheckpointSaver,
        *,
        verify: bool = True,
        progress: Callable[[int, int], None] | None = None,
        allow: Iterable[tuple[str, str] | str | type] = (),
        merge: bool = False,
        thread_prefix: str = "",
    ) -> ImportReport:
        """`import_from` on the async face: an AsyncSqliteSaver or
        AsyncPostgresSaver is read from its tables, any other async-capable
        saver (InMemorySaver, ...) through its `alist`."""
        leases = self._async_leases()
        return await AsyncImporter(
            source,
            list_target=self.alist,
            get_target=self.aget_tuple,
            put=leases.put,
            put_writes=leases.put_writes,
            tables=importing.async_tables(source),
            allow=allow,
            merge=merge,
            thread_prefix=thread_prefix,
            verify=verify,
            progress=progress,
        ).run()

    # -- versions -------------------------------------------------------------------

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

    # -- one writer per thread (lease.py) -------------------------------------------------

    async def _run_end_settled(self, chain: AsyncTierChain, config: RunnableConfig) -> None:
        """A read of a thread whose async run just ended here waits for that
        end to be handled (`AsyncLeaseKeeper.settle`): the lease then kept,
        the read is served from the local cache."""
        keeper = self._alease_keeper
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if keeper is not None and keeper.chain is chain and thread_id is not None:
            await keeper.settle(str(thread_id))

    def _lease_token(self, config: RunnableConfig) -> tuple[int | None, float | None]:
        """The token of this saver's lease of the config's thread, if it holds
        one; for a lease kept after its run (``lease_linger``), also until
        when (monotonic) its local cache is trusted."""
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if thread_id is None:
            return None, None
        held = self._leases.held(str(thread_id))
        if held is not None:
            return held.token, None
        kept = self._leases.kept(str(thread_id), time.monotonic())
        return (kept[0].token, kept[1]) if kept is not None else (None, None)

    def _hand_off_tier(self) -> Any:
        """The sync tier where leases are kept after runs: Postgres if
        configured, else Redis (the authority, `AsyncLeaseKeeper._give_back`)."""
        chain = self._sync_chain()
        chain.ensure_setup()
        return Roles.of(chain.raw_shared).authority

    def _hand_off_ears(self) -> Ears:
        """(The hand-off listener's thread.) A connection of its own on the
        hand-off channel of the tier where leases are kept."""
        tier = self._hand_off_tier()
        if isinstance(tier, PostgresTier):
            return PostgresEars(
                tier.url, tier.connect_timeout, hand_off_channel(self._leases.holder), call_timeout=self.call_timeout
            )
        redis = cast(RedisTier, tier)
        redis.setup()  # connects; finds out whether it is a cluster
        return RedisEars(redis.client, redis.prefix + hand_off_channel(self._leases.holder))

    def _ask_hand_off(self, thread_id: str, holder: str) -> None:
        """(The hand-off listener's thread.) A request on the tier's channel,
        sent as another replica sends it."""
        self._hand_off_tier().ask_hand_off(thread_id, holder)

    def _hand_off_give_back(self, lease: Lease) -> None:
        """(The hand-off listener's thread.) Give back a lease asked for: one
        kept after its run, or one of a run whose end is not handled yet."""
        self._sync_leases().give_back_asked(lease)

    def _renew_kept(self, leases: Sequence[Lease]) -> set[str]:
        """(The hand-off listener's thread.) Renew kept leases in their tier."""
        return self._sync_lease_keeper().renew_kept(leases)

    def _listen_for_hand_offs(self, wait: float = 0.0) -> None:
        """Start the hand-off listener if it is not running (in this
        process); wait up to `wait` seconds for it to hear its channel."""
        origin = self._origin or self
        if origin._hand_offs is not None:
            origin._hand_offs.start(wait)

    def _sync_leases(self) -> LeaseKeeper:
        keeper = self._sync_lease_keeper()
        self._listen_for_hand_offs()
        return keeper

    def _sync_lease_keeper(self) -> LeaseKeeper:
        chain = self._sync_chain()
        with self._lock:
            if self._lease_keeper is None or self._lease_keeper.chain is not chain:
                self._lease_keeper = LeaseKeeper(chain, self._leases)
            return self._lease_keeper

    def _async_leases(self) -> AsyncLeaseKeeper:
        self._listen_for_hand_offs()
        chain = self._async_chain()
        if self._alease_keeper is None or self._alease_keeper.chain is not chain:
            self._alease_keeper = AsyncLeaseKeeper(chain, self._leases)
            self._alease_keeper.elsewhere = self._release_run_elsewhere
        return self._alease_keeper

    def _release_run_elsewhere(self, lease: Lease) -> None:
        """(The deferred worker.) Give back the lease of an async run that
        ended as its event loop shut down, or after (`AsyncLeaseKeeper.elsewhere`),
        with the sync face, unless the saver closed meanwhile."""
        if (self._origin or self)._closed:
            logger.warning(
                "could not release the writer lease of thread %r at the end of its run (the saver is closed); "
                "it expires in at most %s s",
                lease.thread_id,
                self._leases.ttl,
            )
            return
        self._sync_lease_keeper().release_at_run_end(lease)

    def release_thread(self, thread_id: str) -> None:
        """Give back this saver's writer lease of `thread_id` now. Not needed
        after a run: a run gives its lease back when it ends, or keeps it
        (``lease_linger``) until another replica asks for it. A run of this
        saver still going on the thread gets `LeaseLost` at its next write.
        Raises `TierUnavailable` if the lease tier cannot be reached (the
        lease then expires by itself after ``lease_ttl``)."""
        self._sync_leases().release(str(thread_id))

    async def arelease_thread(self, thread_id: str) -> None:
        """Async `release_thread`."""
        await self._async_leases().release(str(thread_id))


def _report_plain_data(metrics: MetricsSink | None, type_name: str, record: str) -> None:
    """A type whose values a read hands back as stored data (once per saver)."""
    logger.warning(
        "%s holds %s, whose class could not be imported under that name where it was written either (a class "
        "defined inside a function, a nested class, a model made with create_model): its values are handed back "
        "as their stored data, as LangGraph does, and a state schema that names the class rebuilds them. Define "
        "it at a module's top level to get the objects back.",
        record,
        type_name,
    )
    if metrics is not None:
        metrics(PlainData(type_name, record))


def _thread_archived(thread_id: str, where: str | None, *, looking: bool = False) -> ThreadArchived:
    if looking:  # a read-only saver with the archive: it never brings a thread back
        return ThreadArchived(
            f"thread {thread_id!r} is archived: this saver only looks, and looking never brings a thread back. "
            "Any run or read of an application's saver does, and so does `langgraph-durable restore THREAD`.",
            thread_id=thread_id,
            archive=where,
        )
    archive = f"'s3://{where}'" if where else "the archive's URL"
    return ThreadArchived(
        f"thread {thread_id!r} is archived (another saver of this store moved it to its archive) and this saver "
        f"has no archive to bring it back from: pass archive={archive} (or LANGGRAPH_DURABLE_ARCHIVE_URL). "
        "Nothing was written.",
        thread_id=thread_id,
        archive=where,
    )


def _undo_count(report: RetentionReport, judged: Any) -> None:
    """Take back what `report.add(judged.retained)` counted: the thread was
    not changed as judged (a run has it), or is counted again as swept hot."""
    retained = judged.retained
    report.threads -= 1
    report.threads_deleted -= retained.thread_deleted
    report.checkpoints_deleted -= retained.deleted
    report.checkpoints_kept -= retained.kept
    if judged.unconfirmed:
        report.left_alone.remove(retained.thread_id)


def _left(report: RetentionReport, judged: Any) -> None:
    """The thread was not changed as judged (a run or a pin has it): counted
    as looked at, everything kept."""
    if judged.acts:
        _undo_count(report, judged)
        report.add(Retained(judged.retained.thread_id, kept=judged.retained.kept + judged.retained.deleted))


def _settles(judged: Any) -> bool:
    """Whether a verdict of "nothing goes" is noted in the thread's flag: its
    copy was read, and could be judged whole."""
    return judged.summary is not None and not (judged.acts or judged.unconfirmed or judged.unreadable)


def _idle_for(judged: Any, now: float) -> float:
    """How idle the thread was when judged: archived again after its sweep
    only if no run wrote to it since (its newest checkpoint that old)."""
    found = (judged.flag or {}).get("summary") if judged.summary is None else judged.summary
    idle = age_seconds(found.get("newest_ts"), now) if isinstance(found, dict) else None
    return max(0.0, (idle or 0.0) - 1.0)


def _rearchived(thread_id: str, report: ArchiveReport) -> None:
    """A thread a sweep brought back to prune it is archived again at once;
    one that could not be (a run took it meanwhile) stays hot, and the next
    `archive_idle` moves it once it is idle."""
    for outcome in report.threads:
        if not outcome.archived:
            logger.info("thread %r stays hot after retention pruned it: %s", thread_id, outcome.skipped)


def _archived_runs_unsearched(exc: TierUnavailable) -> TierUnavailable:
    """`delete_for_runs` could not look through the archived threads."""
    return TierUnavailable(
        f"delete_for_runs deleted the runs from every thread in the hot tiers, but could not look through the "
        f"archived threads ({exc}). Call delete_for_runs again with the same run ids once the archive answers: "
        "an archived thread holding one of them is brought back and loses them too.",
        tier="archive",
    )
