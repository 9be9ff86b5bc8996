"""What every view of one `DurableSaver` shares: its runtime.

`Runtime` owns the saver's machinery: the tiers and a chain per face (the
async one bound to the event loop that first used it, and closed as that
loop ends), the lease book and a lease keeper per face, the background
tasks (replicator, retention sweeper, archive replica, hand-off listener),
the archivers, the metrics sink, the breakers, the memory backlog and the
counters, the drains a signal announced, and closing all of it.

A saver is a view: a runtime and a codec (``base.py``). `with_allowlist`
makes another view of the same runtime, decoding with a wider allowlist;
every view reaches the tiers, the leases and the workers through the one
runtime, so a clone shares its origin's connections, leases and counters,
and closing either closes both.

The codec. A chain needs one, so the runtime's chains are built with the
codec of the view that made the runtime: every record is sealed with it
(the key ring is shared by every view's codec) and the workers verify what
they ship with it. A view reads through ``chain.with_codec(its codec)``,
which for the view that made the runtime is the chain itself. A view's
codec differs only in what its strict loader lets decode, never in how a
record is written.

The lease keepers. One per face (the async one per event loop, on that
loop's chain), whichever view asks: a writer lease belongs to the process
and the store (the book's holder), not to a view, and a keeper only writes,
ships and gives back, through the runtime's chain, never decoding a record
for a caller. So a run that took its lease through any view has its end
handled, its lease kept or given back, wound down at its loop's end and
released at close by that one keeper.

The background tasks are `BackgroundTask` objects (``engine/tasks.py``)
that receive what they work for, typed by a small protocol in their module:
the runtime itself for the replicator (`CatchesUp`), the archive replica
(`Ships`) and the hand-off listener (`HandsOff`); the view that made the
runtime for the retention sweep (`Retains`), which runs that view's
`apply_retention`. The runtime starts them (the sweep last, once everything
else is made) and stops them, in order, at close.

Why in ``faces/``: the runtime is the saver's own (only `SaverBase` makes or
uses it) and composes the layers below (``engine/``, ``archive/``,
``tiers/``); the package's top level holds the modules users import.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig

from ..archive.archiver import Archiver
from ..archive.archiver_async import AsyncArchiver
from ..archive.replica import FAILING_META, ArchiveReplica
from ..archive.reports import ArchiveRefused
from ..archive.segments import OWNER as ARCHIVE_OWNER
from ..archive.store import ArchiveStore
from ..archive.store_async import AsyncArchiveStore
from ..engine.chain import TierChain
from ..engine.chain_async import AsyncTierChain
from ..engine.concurrency import wait_deferred
from ..engine.leases.book import LeaseBook
from ..engine.leases.handoff import Ears, HandOffListener
from ..engine.leases.keeper import LeaseKeeper
from ..engine.leases.keeper_async import AsyncLeaseKeeper
from ..engine.replicator import WRITE_BEHIND_GAP_S, Replicator
from ..engine.sweeper import Retains, RetentionSweeper
from ..engine.tasks import BackgroundTask
from ..errors import ConfigError, DurableError, TierUnavailable, no_archive, no_store_at
from ..integrity import IntegrityPolicy
from ..metrics import MetricsHook, MetricsSink, Outcome, TierCall
from ..model.backlog import ArchiveLag, JournalEntry, Lag, MemoryBacklog, WriteMode
from ..model.breaker import Breakers
from ..model.carried import SeenVersions
from ..model.codec import RecordCodec
from ..model.deltas import DeltaMemo
from ..model.health import Counters, Health
from ..model.lease import Lease, OnBusy, hand_off_channel
from ..model.own_heads import OwnHeads
from ..model.read_cache import ReadCache
from ..model.roles import Role, Roles, ships_behind
from ..options import Options
from ..tiers.base import redact
from ..tiers.postgres.tier_async import AsyncPostgresTier
from ..tiers.sqlite.tier import AsyncSqliteTier, SqliteTier

logger = logging.getLogger("langgraph_durable")

_A = TypeVar("_A", Archiver, AsyncArchiver)

# How long `setup` waits for the hand-off listener to hear its channel
# (handoff.py): until then, runs give their leases back as without linger.
HAND_OFF_START_WAIT_S = 3.0
# How long close() waits for a run's release that the garbage collector
# handed to the deferred worker (it ships the run's thread first).
DEFERRED_WAIT_S = 5.0
# With all three tiers, a record of a run still going is left to the run's
# end for this long before a background pass ships it (`left_to_its_run`).
RUN_SHIPS_ITS_OWN_S = 1.0


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


class Runtime:
    """The tiers, chains, leases, workers and lifecycle every view of one
    saver shares (see the module's docstring)."""

    def __init__(
        self,
        options: Options,
        *,
        codec: RecordCodec,
        metrics: MetricsHook | Sequence[MetricsHook] | None,
    ) -> None:
        """Everything but the retention sweep (`start_sweeps`), from the
        saver's checked options; `codec` is the one its chains are built
        with. Starts no thread: the workers start on first use. Raises
        `ConfigError` for a read-only saver with no store to read, or a
        ``metrics=`` that is not a hook."""
        self.options = options
        tiers = options.tiers
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
        self.write: WriteMode = write
        self.read_only = options.read_only
        self.call_timeout = tiers.call_timeout
        self.drain_timeout = tiers.drain_timeout
        self._codec = codec
        # No key of the user's: seal with the store's own, which setup finds
        # or creates in the system of record, or finds in a local file that
        # was shared before (`AsyncTierChain._adopt_store_key`).
        self.store_key = options.integrity.store_key
        # Per-tier metrics (metrics.py): None without hooks, so a tier call costs one `if`.
        self.metrics = MetricsSink.of(metrics, lag=self.lag)
        self.policy = IntegrityPolicy(options.integrity.on_corruption, metrics=self.metrics)
        self.local = (
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
        self.breakers = Breakers()
        # What the memos below may hold, each its share (memory_budget.py).
        budget = options.limits.budget
        self.memory = MemoryBacklog(outbox_bytes=budget.outbox)
        self.counters = Counters()
        # Growing lists stored as what they appended (deltas.py): both faces.
        self.deltas = (
            DeltaMemo(max_bytes=budget.deltas, every=snapshot_every)
            if (snapshot_every := options.write.list_snapshot_every) > 1
            else None
        )
        # Versions of the checkpoints stored or served last, both faces (carried.py).
        self.seen = SeenVersions(max_bytes=budget.seen)
        # Reads served again while the local file is unchanged, both faces:
        # every read with SQLite alone, else the reads under a lease.
        local = self.local is not None
        self.read_cache = ReadCache(codec.serde, budget.read_cache) if local and budget.read_cache else None
        # A pass at most every WRITE_BEHIND_GAP_S when the replicator ships
        # every write of a run (`roles.ships_behind`): batches, not one
        # record per kick.
        shared = [kind for kind in tiers.configured() if kind.role is not Role.LOCAL]  # nearest first
        behind = ships_behind(write, bool(self.sqlite_path), len(shared))
        self.replicator = Replicator(self, gap=WRITE_BEHIND_GAP_S if behind else 0.0)
        # The background retention sweep: started last (`start_sweeps`).
        self.sweeper: RetentionSweeper | None = None
        self._lock = threading.Lock()
        self._drains: list[threading.Event] = []  # drains under way (`drain_pending`): close waits
        self._sync: TierChain | None = None
        self._async: AsyncTierChain | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._async_closer: AsyncGenerator[None, None] | None = None
        # The archive (archive/): a replica shipping behind the steps.
        self.archive_url = options.archive.url
        self.archive_key_fingerprint = options.archive.key_fingerprint
        self._sync_archiver: Archiver | None = None
        self._async_archiver: AsyncArchiver | None = None
        self.archive_replica = (
            ArchiveReplica(self, lag=options.archive.lag)
            if self.archive_url is not None and not self.read_only
            else None
        )
        self.archive_restores = 0  # threads brought back from the archive by a read
        # One writer per thread (lease.py): the leases this saver holds.
        lease = options.leases
        self.leases = LeaseBook(
            ttl=lease.ttl,
            on_busy=cast(OnBusy, lease.on_busy),
            wait=lease.wait,
            linger=lease.linger,
            max_kept_bytes=budget.kept_leases,
        )
        # What this saver wrote last under a thread's lease, read back from
        # the local tier alone while it holds the lease: both faces.
        self.own = OwnHeads(max_age=self.leases.ttl / 2, max_bytes=budget.own_heads)
        self._lease_keeper: LeaseKeeper | None = None
        self._alease_keeper: AsyncLeaseKeeper | None = None
        self.closed = False  # set once close() has let the deferred releases finish
        self.closing = False  # set as close() begins: a run waiting for another replica stops waiting
        # ``lease_linger``: a kept lease is given back when another replica
        # asks for it, heard on the tier where leases are kept (handoff.py).
        self.hand_offs: HandOffListener | None = None
        if self.leases.linger > 0 and self.local is not None and tiers.shared:
            self.leases.needs_ears = True
            self.hand_offs = HandOffListener(
                self.leases,
                self,
                where=redact(tiers.url(shared[-1]) or ""),  # the authority: where leases are kept
                claim_ending=write != "local",
            )

    @property
    def tasks(self) -> list[BackgroundTask]:
        """The background tasks this runtime made (started or not)."""
        made = (self.replicator, self.sweeper, self.archive_replica, self.hand_offs)
        return [task for task in made if task is not None]

    def start_sweeps(self, saver: Retains) -> None:
        """Start the background retention sweep (``retention_every``), which
        applies `saver`'s policy on its sync face. Called last, once
        everything else is made, so that a constructor that raises leaves
        no thread behind."""
        sweeps = self.options.retention
        if sweeps.every is not None and self.sweeper is None:
            self.sweeper = RetentionSweeper(saver, every=sweeps.every, rate=sweeps.rate)
            self.sweeper.start()

    # -- chains --------------------------------------------------------------------

    def _shared_tiers(self, *, asynchronous: bool) -> list[Any]:
        """The shared tiers, on one face, as their kinds make them (the kinds
        registered when the options were checked)."""
        tiers = self.options.tiers
        made = [
            kind.tier_class(asynchronous=asynchronous)(url, **tiers.arguments(kind, asynchronous=asynchronous))
            for kind in tiers.configured()
            if kind.role is not Role.LOCAL and (url := tiers.url(kind))
        ]
        for tier in made:
            tier.read_only = self.read_only  # setup then creates and migrates nothing
        return made

    def _chain_parts(self, *, asynchronous: bool) -> tuple[list[Any], RecordCodec, IntegrityPolicy]:
        """A new chain's shared tiers (on its face), codec and policy."""
        return self._shared_tiers(asynchronous=asynchronous), self._codec, self.policy

    def _chain_options(self) -> dict[str, Any]:
        return {
            "write": self.write,
            "breakers": self.breakers,
            "call_timeout": self.call_timeout,
            "memory": self.memory,
            "kick": self.replicator.kick,
            "counters": self.counters,
            "deltas": self.deltas,
            "own": self.own,
            "metrics": self.metrics,
            "seen": self.seen,
            "read_cache": self.read_cache,
            "store_key": self.store_key,
            "read_only": self.read_only,
        }

    def sync_chain(self) -> TierChain:
        """The sync face's chain (made on first use, which also starts the
        archive replica). A view reads through ``with_codec`` of it."""
        with self._lock:
            if self._sync is None:
                self._sync = TierChain(self.local, *self._chain_parts(asynchronous=False), **self._chain_options())
                if self.archive_url is not None:
                    self._sync_archiver = self._archived_on(self._sync, self._archiver_on(self._sync))
                if self.archive_replica is not None:
                    self.archive_replica.start()  # its first rescan ships what a dead process left
            return self._sync

    def async_chain(self) -> AsyncTierChain:
        """The async face's chain on the running event loop (made on first
        use there, and closed as that loop shuts down: `_close_at_loop_end`).
        Raises `ConfigError` while another running loop has it."""
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
            local = AsyncSqliteTier(self.local) if self.local is not None else None
            self._async = AsyncTierChain(local, *self._chain_parts(asynchronous=True), **self._chain_options())
            if self.archive_url is not None:
                self._async_archiver = self._archived_on(self._async, self._aarchiver_on(self._async))
            if self.archive_replica is not None:
                self.archive_replica.start()  # see sync_chain
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

    def lag(self) -> Lag:
        """What the shared tiers and the archive are owed (the metrics
        hooks' backlog, `DurableSaver.lag`)."""
        return self.with_archive(self.sync_chain().lag())

    # -- leases --------------------------------------------------------------------

    def sync_leases(self) -> LeaseKeeper:
        """The sync face's lease keeper, the hand-off listener started."""
        keeper = self.sync_lease_keeper()
        self.listen_for_hand_offs()
        return keeper

    def sync_lease_keeper(self) -> LeaseKeeper:
        """The sync face's lease keeper (the listener's thread uses it: it
        does not start the listener)."""
        chain = self.sync_chain()
        with self._lock:
            if self._lease_keeper is None or self._lease_keeper.chain is not chain:
                self._lease_keeper = LeaseKeeper(chain, self.leases)
            return self._lease_keeper

    def async_leases(self) -> AsyncLeaseKeeper:
        """The lease keeper of the running event loop's chain, the hand-off
        listener started."""
        self.listen_for_hand_offs()
        return self._async_lease_keeper()

    def _async_lease_keeper(self) -> AsyncLeaseKeeper:
        chain = self.async_chain()
        if self._alease_keeper is None or self._alease_keeper.chain is not chain:
            self._alease_keeper = AsyncLeaseKeeper(chain, self.leases)
            self._alease_keeper.elsewhere = self._release_run_elsewhere
        return self._alease_keeper

    async def settle_run_end(self, config: RunnableConfig) -> None:
        """A read of a thread whose async run just ended here waits for that
        end to be handled (`AsyncLeaseKeeper.settle`): the lease then kept,
        the read is served from the local cache. Call it after
        `async_chain`, on the loop it answered for."""
        keeper = self._alease_keeper
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if keeper is not None and keeper.chain is self._async and thread_id is not None:
            await keeper.settle(str(thread_id))

    def lease_token(self, config: RunnableConfig) -> tuple[int | None, float | None]:
        """The token of this saver's lease of the config's thread, if it holds
        one; for a lease kept after its run (``lease_linger``), also until
        when (monotonic) its local cache is trusted."""
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if thread_id is None:
            return None, None
        held = self.leases.held(str(thread_id))
        if held is not None:
            return held.token, None
        kept = self.leases.kept(str(thread_id), time.monotonic())
        return (kept[0].token, kept[1]) if kept is not None else (None, None)

    def listen_for_hand_offs(self, wait: float = 0.0) -> None:
        """Start the hand-off listener if it is not running (in this
        process); wait up to `wait` seconds for it to hear its channel."""
        if self.hand_offs is not None:
            self.hand_offs.start(wait)

    def _release_run_elsewhere(self, lease: Lease) -> None:
        """(The deferred worker.) Give back the lease of an async run that
        ended as its event loop shut down, or after (`AsyncLeaseKeeper.elsewhere`),
        with the sync face, unless the saver closed meanwhile."""
        if self.closed:
            logger.warning(
                "could not release the writer lease of thread %r at the end of its run (the saver is closed); "
                "it expires in at most %s s",
                lease.thread_id,
                self.leases.ttl,
            )
            return
        self.sync_lease_keeper().release_at_run_end(lease)

    # -- the hand-off listener's side (`HandsOff`, on its thread) -------------------

    def _hand_off_tier(self) -> Any:
        """The sync tier where leases are kept after runs: Postgres if
        configured, else Redis (the authority, `AsyncLeaseKeeper._give_back`)."""
        chain = self.sync_chain()
        chain.ensure_setup()
        return Roles.of(chain.raw_shared).authority

    def hand_off_ears(self) -> Ears:
        """A connection of its own on the hand-off channel of the tier where
        leases are kept, as its kind listens (`TierKind.ears`)."""
        tier = self._hand_off_tier()
        kind = next((k for k in self.options.tiers.configured() if k.role is tier.role), None)
        listen = kind.hook("ears") if kind is not None else None
        if listen is None:
            raise ConfigError(f"the {tier.name} tier's kind does not say how to listen for hand-offs (TierKind.ears).")
        ears: Ears = listen(tier, hand_off_channel(self.leases.holder), self.call_timeout)
        return ears

    def ask_hand_off(self, thread_id: str, holder: str) -> None:
        """A request on the tier's channel, sent as another replica sends it."""
        self._hand_off_tier().ask_hand_off(thread_id, holder)

    def give_back_asked(self, lease: Lease) -> None:
        """Give back a lease asked for: one kept after its run, or one of a
        run whose end is not handled yet."""
        self.sync_leases().give_back_asked(lease)

    def renew_kept(self, leases: Sequence[Lease]) -> set[str]:
        """Renew kept leases in their tier."""
        return self.sync_lease_keeper().renew_kept(leases)

    # -- the replicator's side (`CatchesUp`) ----------------------------------------

    def replicate(self, background: bool = False) -> int:
        """One replicator pass: first the threads of ended write-behind runs
        (their leases are given back once they have shipped:
        `LeaseKeeper.hand_off_shipped`), then everything else owed, then the
        leases of runs that ended meanwhile, between its rounds and at its
        end (a pass lasts while runs keep writing). A `background` pass
        leaves the newest records of runs still going to their runs' ends
        (`left_to_its_run`)."""
        skip = self.left_to_its_run if background and self.write == "shared" else None
        settled = self._hand_off_shipped()
        settled += self.sync_chain().catch_up(between=self._hand_off_shipped, skip=skip)
        return settled + self._hand_off_shipped()

    def shared_lag(self) -> Lag:
        """What the shared tiers are owed (the archive aside)."""
        return self.sync_chain().lag()

    def left_to_its_run(self, entry: JournalEntry) -> bool:
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
            and self.leases.held(entry.thread_id) is not None
        )

    def _hand_off_shipped(self) -> int:
        return self.sync_leases().hand_off_shipped() if self.leases.handoffs(time.monotonic()) else 0

    def drain(self, timeout: float | None) -> Lag:
        """Ship what the shared tiers are owed, until nothing is or `timeout`
        seconds passed (None: one pass), in the caller's thread."""
        return self.replicator.drain(timeout)

    def drain_pending(self) -> threading.Event:
        """A drain is about to start elsewhere (a signal's, `shutdown.py`):
        `close` / `aclose` wait until the returned event is set before they
        close the tiers. Takes no lock: a signal handler calls it, and it
        may have interrupted a holder of one (list.append is atomic)."""
        done = threading.Event()
        self._drains.append(done)
        return done

    def _wait_for_drains(self) -> None:
        """Let a drain announced by `drain_pending` end (it bounds itself)."""
        while True:
            try:
                done = self._drains.pop()
            except IndexError:
                return
            done.wait()

    # -- the archive -------------------------------------------------------------

    def archiver(self) -> Archiver:
        """The sync face's archiver (its chain's tiers and the object
        store). Raises `ConfigError` without an archive."""
        if self.archive_url is None:
            raise no_archive()
        chain = self.sync_chain()
        with self._lock:
            if self._sync_archiver is None or self._sync_archiver.chain is not chain:
                self._sync_archiver = self._archiver_on(chain)
            return self._sync_archiver

    def aarchiver(self) -> AsyncArchiver:
        """The async face's archiver, on the running event loop's chain."""
        if self.archive_url is None:
            raise no_archive()
        chain = self.async_chain()
        if self._async_archiver is None or self._async_archiver.chain is not chain:
            self._async_archiver = self._aarchiver_on(chain)
        return self._async_archiver

    def _archiver_on(self, chain: TierChain) -> Archiver:
        assert self.archive_url is not None
        return Archiver(ArchiveStore(self.archive_url), chain, key_fingerprint=self.archive_key_fingerprint)

    def _aarchiver_on(self, chain: AsyncTierChain) -> AsyncArchiver:
        assert self.archive_url is not None
        return AsyncArchiver(AsyncArchiveStore(self.archive_url), chain, key_fingerprint=self.archive_key_fingerprint)

    @staticmethod
    def _archived_on(chain: Any, archiver: _A) -> _A:
        """`archiver`, a new chain's: the chain learns the key the archive
        vouches for and claims the archive at setup."""
        chain.archived_key = archiver.trusted_key
        chain.claim_archive = functools.partial(archiver.claim, at_setup=True)
        return archiver

    def with_archive(self, lag: Lag) -> Lag:
        """`lag` with what the archive replica is behind on."""
        replica = self.archive_replica
        return dataclasses.replace(lag, archive=replica.lag()) if replica is not None else lag

    def note_archive(self, config: RunnableConfig | str) -> None:
        """The thread changed: the replica ships it with its next pass."""
        replica = self.archive_replica
        if replica is None:
            return
        thread_id = config if isinstance(config, str) else (config.get("configurable") or {}).get("thread_id")
        if thread_id is not None:
            replica.note(str(thread_id))

    def drain_archive(self, timeout: float | None) -> ArchiveLag | None:
        """Ship every noted thread now, for up to `timeout` seconds; what
        is still behind (None without an archive)."""
        return self.archive_replica.flush(timeout) if self.archive_replica is not None else None

    @contextlib.contextmanager
    def archive_call(self, op: str) -> Iterator[None]:
        """Report one archive operation to the metrics hooks as a `TierCall`
        of tier ``"archive"`` (``ship``, ``bring_back``, ``archive_thread``)."""
        sink = self.metrics
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

    def archiving_with(self, leases: Any) -> dict[str, Any]:
        """What archiving a thread needs of one face's lease keeper (its
        writer lease held, then given back; a kept lease asked for) and the
        metrics around each archive call."""
        return {
            "hold": leases.hold,
            "release": leases.unhold,
            "ask": leases.ask_kept_back,
            "timed": self.archive_call,
        }

    def archive_health(self, health: Health) -> Health:
        """`health` with the archive's: reachable (one listing), what the
        replica is behind on, the threads it cannot ship (this process's
        replica, else what another process's recorded)."""
        error = None
        try:
            self.archiver().archived_threads()
        except TierUnavailable as exc:
            error = str(exc)
        replica = self.archive_replica
        lag = replica.lag() if replica is not None else ArchiveLag(0, 0.0)
        lag = dataclasses.replace(lag, reachable=error is None)
        if not lag.failing:
            # Another process's replica (the `doctor`'s saver ships nothing).
            recorded = self._archive_failing_recorded()
            if recorded:
                shown = sorted(recorded)
                lag = dataclasses.replace(lag, failing=tuple(shown[:10]), failing_error=recorded[shown[-1]])
        return dataclasses.replace(health, archive=lag, archive_error=error, lag=self.with_archive(health.lag))

    def _archive_answers(self) -> bool:
        """Whether the object store answers a call that names no thread: a
        ship that failed while it does failed for that thread alone."""
        try:
            self.archiver().store.keys(ARCHIVE_OWNER)
        except TierUnavailable:
            return False
        return True

    def _archive_failing_holder(self) -> Any:
        chain = self.sync_chain()
        return chain.roles.authority or chain.local

    def _archive_failing_recorded(self) -> dict[str, str]:
        try:
            text = self._archive_failing_holder().read_meta(FAILING_META)
            found = json.loads(text) if text else {}
        except (DurableError, ValueError):
            return {}
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    # -- the archive replica's side (`Ships`, on its thread) ------------------------

    def ship_to_archive(self, thread_id: str) -> int:
        """Ship one thread to the archive (one segment); the records shipped.
        `ArchiveRefused` when the object store answers but refuses this
        thread, `TierUnavailable` when it is down."""
        with self.archive_call("ship"):
            try:
                return self.archiver().ship(thread_id)
            except TierUnavailable as exc:
                if exc.tier == "archive" and self._archive_answers():
                    raise ArchiveRefused(thread_id, exc) from exc  # an "error", not the store down
                raise

    def rescan_archive(self, note: Callable[[str], None], paced: Callable[[], bool]) -> int:
        """Note every thread the archive is behind on: those whose head differs
        from their newest segment's, and those it holds that the hot tiers
        no longer do (deleted: the replica records it, unless archived)."""
        archiver = self.archiver()
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

    def archive_failing(self, failing: dict[str, str]) -> None:
        """Where `doctor` (another process) finds the threads this replica
        cannot ship while the object store answers."""
        self._archive_failing_holder().write_meta(
            FAILING_META, json.dumps(failing, sort_keys=True) if failing else None
        )

    # -- closing -------------------------------------------------------------------

    def close(self) -> None:
        """Close on the sync face (`DurableSaver.close`): let announced
        drains end, ship what is owed (``drain_timeout``), stop the
        background tasks, give the writer leases back and close the sync
        chain and the local file (left open, with a warning, while the
        async face still has its chain)."""
        self.closing = True
        self._wait_for_drains()
        self._stop_tasks()
        self._close_sync_face()

    async def aclose(self) -> None:
        """Close on the async face (`DurableSaver.aclose`): as `close`, the
        blocking steps on worker threads, and the async face's leases and
        chain first, on the event loop they belong to."""
        self.closing = True
        await asyncio.to_thread(self._wait_for_drains)
        await asyncio.to_thread(self._stop_tasks)
        await asyncio.to_thread(wait_deferred, DEFERRED_WAIT_S)  # see `_close_sync_face`
        await self._close_async_face()
        self._close_sync_face()

    def _owes(self) -> bool:
        if len(self.memory):
            return True
        if self.local is None or (self._sync is None and self._async is None):
            return False
        try:
            return self.local.journal_size() > 0
        except Exception:  # unreadable local file: drain() would not help either
            return False

    def _stop_tasks(self) -> None:
        """Drain, then stop every background task: the replicator, the
        sweep, the archive replica (after shipping what was noted, within
        the drain's time), and last the hand-off listener (its connection
        closes; kept leases are given back with the rest), all before the
        tiers close."""
        if self.drain_timeout and self._owes():
            lag = self.replicator.drain(self.drain_timeout)
            if not lag.caught_up:
                kept = (
                    "they stay in the local journal and are shipped at the next start"
                    if self.local is not None
                    else "they were kept in memory only: run `langgraph-durable repair` once the tiers are back"
                )
                logger.warning(
                    "closing with %s record(s) still owed to the shared tiers (%s); %s",
                    lag.records,
                    ", ".join(f"{name}: {n}" for name, n in lag.by_tier.items() if n),
                    kept,
                )
        self.replicator.stop()
        if self.sweeper is not None:
            self.sweeper.stop()
        if self.archive_replica is not None:
            # What was written since the last pass, within the drain's time.
            # (Also with nothing noted: the first rescan may still be noting
            # what a killed process left.)
            if self.drain_timeout and (self._sync or self._async):
                left = self.archive_replica.flush(self.drain_timeout)
                if not left.caught_up:
                    logger.warning(
                        "closing with %d thread(s) not shipped to the archive yet; the next start's rescan ships them",
                        left.threads,
                    )
            self.archive_replica.stop()
        if self.hand_offs is not None:
            self.hand_offs.stop()

    def _close_sync_face(self) -> None:
        if self.metrics is not None:
            self.metrics.close()  # the backlog gauges stop asking: they would reopen the local file
        # A run's end seen inside the garbage collector, or an async run's end
        # seen as its event loop shut down, is released by the deferred worker
        # (leases/keeper.py) with the sync face: let it finish with the pools open.
        wait_deferred(DEFERRED_WAIT_S)
        self.closed = True
        if self._sync is not None:
            self.sync_lease_keeper().release_all()  # writer leases (lease.py)
            self._sync.close()
            self._sync = None
        if self._async is not None:
            logger.warning(
                "DurableSaver.close() leaves the async connections open: this saver was used from async "
                "code, so close it with `await saver.aclose()` or `async with`."
            )
        elif self.local is not None:
            self.local.close()

    async def _close_async_face(self) -> None:
        """`aclose`'s part for the async face: its writer leases given back
        and its chain closed, on the event loop it belongs to."""
        if self._async is not None and self._async_loop is asyncio.get_running_loop():
            await self._async_lease_keeper().release_all()  # writer leases (lease.py)
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
