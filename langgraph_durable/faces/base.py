"""What both faces of `DurableSaver` share: its tiers and their chains, the
writer leases and their hand-offs, the archive's coordination, the
background workers and the lifecycle.

`SaverBase` holds the state and the steps that are the same on both faces or
belong to one face alone (a chain per face, the async chain bound to its
event loop). The operations themselves are written once, in
``ops_async.py``; ``saver.py`` is the public class and its options.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointMetadata,
)

from ..archive.archiver import Archiver
from ..archive.archiver_async import AsyncArchiver
from ..archive.replica import FAILING_META, ArchiveReplica
from ..archive.reports import ArchiveRefused, ArchiveReport
from ..archive.segments import OWNER as ARCHIVE_OWNER
from ..archive.store import ArchiveStore
from ..archive.store_async import AsyncArchiveStore
from ..engine.chain import TierChain
from ..engine.chain_async import AsyncTierChain
from ..engine.concurrency import wait_deferred
from ..engine.leases.book import LeaseBook
from ..engine.leases.handoff import Ears, HandOffListener, PostgresEars, RedisEars
from ..engine.leases.keeper import LeaseKeeper
from ..engine.leases.keeper_async import AsyncLeaseKeeper
from ..engine.replicator import WRITE_BEHIND_GAP_S, Replicator
from ..engine.sweeper import RetentionSweeper
from ..errors import ConfigError, DurableError, ThreadArchived, TierUnavailable, no_archive, no_store_at
from ..integrity import IntegrityPolicy
from ..metrics import MetricsHook, MetricsSink, Outcome, PlainData, TierCall
from ..model.backlog import ArchiveLag, JournalEntry, Lag, MemoryBacklog, WriteMode
from ..model.breaker import Breakers
from ..model.carried import SeenVersions
from ..model.codec import RecordCodec, thread_id_of
from ..model.deltas import DeltaMemo
from ..model.health import Counters, Health
from ..model.lease import (
    Lease,
    OnBusy,
    hand_off_channel,
)
from ..model.own_heads import OwnHeads
from ..model.read_cache import ReadCache
from ..model.records import key_fingerprint
from ..model.roles import Role, Roles, ships_behind
from ..options import Options
from ..retention import Retained, RetentionPolicy, RetentionReport, age_seconds
from ..tiers.base import QuarantinedRecord, redact
from ..tiers.postgres.tier import PostgresTier
from ..tiers.postgres.tier_async import AsyncPostgresTier
from ..tiers.redis.tier import RedisTier
from ..tiers.registry import kinds
from ..tiers.sqlite.tier import AsyncSqliteTier, SqliteTier

if TYPE_CHECKING:
    pass
from ..validation import RUNTIME_KEY, VERSION_KEY, ValidationHook, Validator, is_resume_of_a_run

logger = logging.getLogger("langgraph_durable")

# The runtime of a run whose explicit-checkpoint get_tuple was just validated.
_PROBE_EXPECTED: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "langgraph_durable_probe_expected", default=None
)

# How long `setup` waits for the hand-off listener to hear its channel
# (handoff.py): until then, runs give their leases back as without linger.
HAND_OFF_START_WAIT_S = 3.0
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


def seconds_above_zero(duration: float | timedelta) -> float:
    """`duration` in seconds; it must be above 0."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if not seconds > 0:
        raise ConfigError(f"older_than must be a duration above 0, got {duration!r}")
    return seconds


def resolve_quarantined(
    records: Sequence[QuarantinedRecord | str], listed: Sequence[QuarantinedRecord]
) -> list[QuarantinedRecord]:
    """Quarantined records, given as records or as ``"tier:id"`` strings
    (`listed`: the quarantine, listed by the caller when a string is given)."""
    if not any(isinstance(r, str) for r in records):
        return [r for r in records if isinstance(r, QuarantinedRecord)]
    known = {f"{q.tier}:{q.id}": q for q in listed}
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


async def close_at_loop_shutdown(chain: AsyncTierChain) -> None:
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


def report_plain_data(metrics: MetricsSink | None, type_name: str, record: str) -> None:
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


def thread_archived(thread_id: str, where: str | None, *, looking: bool = False) -> ThreadArchived:
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


def undo_count(report: RetentionReport, judged: Any) -> None:
    """Take back what `report.add(judged.retained)` counted: the thread was
    not changed as judged (a run has it), or is counted again as swept hot."""
    retained = judged.retained
    report.threads -= 1
    report.threads_deleted -= retained.thread_deleted
    report.checkpoints_deleted -= retained.deleted
    report.checkpoints_kept -= retained.kept
    if judged.unconfirmed:
        report.left_alone.remove(retained.thread_id)


def left_alone(report: RetentionReport, judged: Any) -> None:
    """The thread was not changed as judged (a run or a pin has it): counted
    as looked at, everything kept."""
    if judged.acts:
        undo_count(report, judged)
        report.add(Retained(judged.retained.thread_id, kept=judged.retained.kept + judged.retained.deleted))


def settles(judged: Any) -> bool:
    """Whether a verdict of "nothing goes" is noted in the thread's flag: its
    copy was read, and could be judged whole."""
    return judged.summary is not None and not (judged.acts or judged.unconfirmed or judged.unreadable)


def idle_for(judged: Any, now: float) -> float:
    """How idle the thread was when judged: archived again after its sweep
    only if no run wrote to it since (its newest checkpoint that old)."""
    found = (judged.flag or {}).get("summary") if judged.summary is None else judged.summary
    idle = age_seconds(found.get("newest_ts"), now) if isinstance(found, dict) else None
    return max(0.0, (idle or 0.0) - 1.0)


def rearchived(thread_id: str, report: ArchiveReport) -> None:
    """A thread a sweep brought back to prune it is archived again at once;
    one that could not be (a run took it meanwhile) stays hot, and the next
    `archive_idle` moves it once it is idle."""
    for outcome in report.threads:
        if not outcome.archived:
            logger.info("thread %r stays hot after retention pruned it: %s", thread_id, outcome.skipped)


def archived_runs_unsearched(exc: TierUnavailable) -> TierUnavailable:
    """`delete_for_runs` could not look through the archived threads."""
    return TierUnavailable(
        f"delete_for_runs deleted the runs from every thread in the hot tiers, but could not look through the "
        f"archived threads ({exc}). Call delete_for_runs again with the same run ids once the archive answers: "
        "an archived thread holding one of them is brought back and loses them too.",
        tier="archive",
    )


def checked_validator(validator: Validator) -> Validator:
    """`validator`, if it can be one (callable), else `ConfigError`."""
    if not callable(validator):
        raise ConfigError(f"a validator must be callable taking a ResumeContext, not {validator!r}.")
    return validator


class SaverBase(BaseCheckpointSaver[str]):
    """The state and shared steps of `DurableSaver` (see the module's docstring)."""

    def _build(
        self,
        options: Options,
        *,
        validators: Sequence[Validator],
        on_validation: ValidationHook | None,
        app_version: str | None,
        metrics: MetricsHook | Sequence[MetricsHook] | None,
    ) -> None:
        """Everything the saver holds, from its checked options. Starts
        nothing that outlives a failure: the retention sweeper starts last."""
        self.options = options
        tiers, integrity = options.tiers, options.integrity
        self.sqlite_path = tiers.sqlite
        write = options.write.mode
        if (
            options.read_only
            and self.sqlite_path
            and self.sqlite_path != ":memory:"
            and not os.path.exists(self.sqlite_path)
        ):
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
        self._metrics = MetricsSink.of(metrics, lag=lambda: self._with_archive(self._sync_chain().lag()))
        self._policy = IntegrityPolicy(integrity.on_corruption, metrics=self._metrics)
        self._codec.on_plain_data = functools.partial(report_plain_data, self._metrics)
        self._validators: list[Validator] = [checked_validator(v) for v in validators]
        self._on_validation = on_validation
        self.app_version = app_version
        self.write: WriteMode = write
        self.call_timeout = tiers.call_timeout
        self.drain_timeout = tiers.drain_timeout
        self._local = (
            SqliteTier(
                self.sqlite_path,
                busy_timeout=tiers.sqlite_busy_timeout,
                fsync=options.write.fsync,
                max_bytes=options.limits.local_max_bytes,
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
            DeltaMemo(max_bytes=budget.deltas, every=snapshot_every)
            if (snapshot_every := options.write.list_snapshot_every) > 1
            else None
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
        behind = ships_behind(write, bool(self.sqlite_path), (tiers.redis is not None) + (tiers.postgres is not None))
        self._replicator = Replicator(
            self._replicate, lambda: self._sync_chain().lag(), gap=WRITE_BEHIND_GAP_S if behind else 0.0
        )
        sweeps = options.retention
        self.retention = sweeps.policy
        # The background retention sweep: made and started by the saver's
        # constructor, last (it runs the sync face's `apply_retention`).
        self._sweeper: RetentionSweeper | None = None
        self._lock = threading.Lock()
        self._drains: list[threading.Event] = []  # drains under way (_drain_pending): close waits
        self._sync: TierChain | None = None
        self._async: AsyncTierChain | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._async_closer: AsyncGenerator[None, None] | None = None
        # A `with_allowlist` clone works through the saver it was made from.
        self._origin: Self | None = None
        # The archive (archive/): a replica shipping behind the steps.
        self.archive_url = options.archive.url
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
            if self.archive_url is not None and not self.read_only
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
        if self._leases.linger > 0 and self._local is not None and tiers.shared:
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

    def _shared_tiers(self, *, asynchronous: bool) -> list[Any]:
        """This saver's shared tiers, on one face, as the registry makes them."""
        tiers = self.options.tiers
        made = [
            kind.tier_class(asynchronous=asynchronous)(url, **tiers.arguments(kind, asynchronous=asynchronous))
            for kind in kinds()
            if kind.role is not Role.LOCAL and (url := tiers.url(kind))
        ]
        for tier in made:
            tier.read_only = self.read_only  # setup then creates and migrates nothing
        return made

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
                    await close_at_loop_shutdown(chain)

        gen = closer()
        # Run it to its yield now, without awaiting: the first step registers
        # it with the running loop, which then finalizes it at shutdown.
        with contextlib.suppress(StopIteration):
            gen.__anext__().send(None)
        return gen

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
        # (leases/keeper.py) with the sync face: let it finish with the pools open.
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
            lag = self._replicator.drain(self.drain_timeout)
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

    def _with_archive(self, lag: Lag) -> Lag:
        replica = (self._origin or self)._archive_replica
        return dataclasses.replace(lag, archive=replica.lag()) if replica is not None else lag

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

    def _may_purge(self) -> None:
        if self.read_only:
            raise ConfigError("this saver is read-only (read_only=True): it never purges the quarantine.")

    def _retention_policy(self, policy: RetentionPolicy | None) -> RetentionPolicy:
        chosen = policy if policy is not None else self.retention
        if not isinstance(chosen, RetentionPolicy):
            raise ConfigError("no retention policy: pass one, or give the saver retention=RetentionPolicy(...).")
        return chosen

    def _archiver(self) -> Archiver:
        """The sync face's archiver (its chain's tiers and the object store)."""
        if self._origin is not None:
            return self._origin._archiver()
        if self.archive_url is None:
            raise no_archive()
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

    def _archived_thread_of(self, config: RunnableConfig) -> str | None:
        """The thread a read found nothing of, if it may live in the archive."""
        if self.archive_url is None or self.read_only:
            return None
        thread_id = (config.get("configurable") or {}).get("thread_id")
        return None if thread_id is None else str(thread_id)

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

    def _pin_target(self, config: RunnableConfig) -> tuple[str, str, str | None]:
        configurable = config.get("configurable") or {}
        thread_id = thread_id_of(configurable.get("thread_id"), what="pin")
        ns = str(configurable.get("checkpoint_ns") or "")
        checkpoint_id = configurable.get("checkpoint_id")
        return thread_id, ns, checkpoint_id

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

    async def _close_async_face(self) -> None:
        """`aclose`'s part for the async face: its writer leases given back
        and its chain closed, on the event loop it belongs to."""
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
