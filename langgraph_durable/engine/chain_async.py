"""The tier chain: every decision about which tier to read, write and repair.

Tiers are ordered nearest first (local SQLite, Redis, Postgres). Records are
immutable, so any tier that has a verified copy may serve it; only "which
checkpoint is latest" and "which writes exist" can go stale, and those are
asked of the most authoritative reachable tier (the farthest one).

This file is the async source: ``chain.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import logging
import os
import time
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
)

from ..errors import ConfigError, DurableError, TierUnavailable, UndecodableRecord
from ..integrity import (
    Incident,
    IntegrityPolicy,
    ScanReport,
)
from ..ledger import LedgerEntry
from ..metrics import MetricsSink
from ..model import delta_history as delta
from ..model.backlog import (
    DEFAULT_CALL_TIMEOUT_S,
    JournalEntry,
    Lag,
    MemoryBacklog,
    Owed,
    WriteMode,
    lag_of,
)
from ..model.breaker import Breakers
from ..model.carried import SeenVersions, never_written
from ..model.codec import (
    DEFAULT_MAX_ID_BYTES,
    RecordCodec,
    check_checkpoint_id,
    check_key_part,
    thread_id_of,
    thread_of,
    version_key,
)
from ..model.decisions import WriteOrder, acknowledged_behind, worth_probing, write_fails, write_order
from ..model.delta_trail import TrailWrite, trail_put
from ..model.deltas import DeltaMemo
from ..model.health import Counters, Health, TierHealth
from ..model.lease import Fence
from ..model.own_heads import OwnHeads
from ..model.pins import RESERVED_PREFIX, Pin, pins_of, without_pins
from ..model.read_cache import ReadCache
from ..model.records import BlobRow, CheckpointRow, WriteRow, key_fingerprint, ledger_context
from ..model.roles import Roles
from ..retention import RetentionPolicy, RetentionReport
from ..tiers.base import EMBEDDED_META, KEYS_META, SHARED_META, STORE_KEY_META, QuarantinedRecord, key_mismatch_message
from ..tiers.protocol_async import AsyncTier
from ..tiers.sqlite.tier import AsyncSqliteTier
from . import heap
from .concurrency import LEAD_WAIT_S, Abandoned, ALock, Lead, amaybe_await, arun_all, refuse_awaitable
from .guard_async import AsyncGuardedTier, overlap
from .journal_async import AsyncJournal
from .maintenance_async import AsyncMaintenance
from .reads_async import AsyncTierReader
from .scan_async import AsyncScanner

logger = logging.getLogger("langgraph_durable")

BlobKey = tuple[str, str]
Found = tuple[CheckpointRow, dict[str, Any], dict[str, Any]]  # row, checkpoint, metadata
RowT = TypeVar("RowT", CheckpointRow, BlobRow, WriteRow)


def _raise_first(results: Sequence[Any]) -> None:
    for r in results:
        if isinstance(r, BaseException):
            raise r


class AsyncTierChain:
    """Reads and writes LangGraph records across an ordered list of tiers."""

    def __init__(
        self,
        local: AsyncSqliteTier | None,
        shared: Sequence[AsyncTier],
        codec: RecordCodec,
        policy: IntegrityPolicy | None = None,
        *,
        write: WriteMode = "shared",
        breakers: Breakers | None = None,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT_S,
        memory: MemoryBacklog | None = None,
        kick: Callable[..., None] | None = None,
        counters: Counters | None = None,
        deltas: DeltaMemo | None = None,
        own: OwnHeads | None = None,
        seen: SeenVersions | None = None,
        metrics: MetricsSink | None = None,
        read_cache: ReadCache | None = None,
        store_key: bool = False,
        read_only: bool = False,
    ) -> None:
        # The options were checked with the saver's others (`options.Options.parse`);
        # `Roles.of` below refuses a chain without a tier.
        self.write = write
        self.breakers = breakers or Breakers()
        self.metrics = metrics  # every tier call is reported to it (guard_async.py)
        # The tiers as the rooms see them: behind their breakers (guard_async.py).
        # Ordered by role (roles.py), not by the order they were passed in.
        raw = Roles.of(([local] if local is not None else []) + list(shared))
        self.raw_local = local
        self.raw_shared = list(raw.shared)
        self.local = cast(AsyncSqliteTier, self._guard(local)) if local is not None else None
        self.roles: Roles[AsyncTier] = Roles(self.local, tuple(self._guard(t, call_timeout) for t in raw.shared))
        self.shared: list[AsyncTier] = list(self.roles.shared)
        self.tiers: list[AsyncTier] = list(self.roles.tiers)
        # Whether the replicator, not the step, ships a run's writes to a
        # shared tier (`Roles.ships_behind`).
        self.ships_behind = self.roles.ships_behind(write)
        self.codec = codec
        # Seal every record with the store's own key, kept in the system of
        # record, when the user gave none (`_adopt_store_key`).
        self.store_key = store_key
        # A chain for looking only (the CLI's read commands): it writes
        # nothing anywhere, not even a repair or a quarantine.
        self.read_only = read_only
        # Set by `promote_local`: a local file holding an embedded store's
        # history is what it copies, not a reason to refuse.
        self.promoting = False
        self._promotable = False  # found by the promoting setup (`_embedded_history`)
        self._embedded = False  # `_mark_embedded` done
        self.policy = policy or IntegrityPolicy()
        # Not `memory or ...`: an empty backlog is falsy, and both faces must share it.
        self.memory = memory if memory is not None else MemoryBacklog()
        self.journal = AsyncJournal(self.local, self.shared, codec, self.memory)
        # kick(): something is owed; kick(now=True): ship it without waiting
        # for the replicator's gap between passes (a run's hand-off waits).
        self.kick = kick or (lambda **_: None)
        self.counters = counters or Counters()
        self.deltas = deltas
        # What this saver wrote last under a thread's lease (lease.py): read
        # back from the local tier alone while it holds the lease.
        self.own = own if local is not None else None
        # The versions of the checkpoints stored or served last (carried.py).
        self.seen = seen or SeenVersions()
        self.reads = AsyncTierReader(self.tiers, codec, self.policy, deltas, self.memory.outbox.holds)
        self.reads.read_only = read_only
        self.maintenance = AsyncMaintenance(self.tiers, codec, self.reads, deltas)
        # Reads kept while the local file is unchanged (read_cache.py): every
        # read with SQLite alone; with a shared tier (which another replica
        # writes without touching the file) only what this saver reads back
        # from the local tier under the thread's lease.
        self.read_cache = read_cache if local is not None else None
        self.cache_all_reads = not shared
        self._views: dict[int, AsyncTierChain] = {}
        # The archive's copy of the store's key, asked when no hot tier holds
        # one: a store rebuilt from the archive keeps its key, if the
        # operator vouched for it (`AsyncArchiver.trusted_key`).
        self.archived_key: Callable[[], Any] | None = None
        # With an archive: check at setup that this store owns its prefix
        # (`AsyncArchiver.claim`), so a second store pointed at it stops here.
        self.claim_archive: Callable[[], Any] | None = None
        self._ready = False
        # First use may come from many tasks (or threads) at once; the pools
        # must be opened and the schema migrated exactly once.
        self._setup_lock = ALock()

    def _guard(self, tier: Any, timeout: float | None = None) -> Any:
        return AsyncGuardedTier(
            tier, self.breakers[tier.name], timeout=timeout, admit=self._admit, metrics=self.metrics
        )

    def with_codec(self, codec: RecordCodec) -> AsyncTierChain:
        """This chain decoding with `codec` (a `with_allowlist` clone's): the
        same tiers and connections, another serializer."""
        if codec is self.codec:
            return self
        view = self._views.get(id(codec))
        if view is None or view.codec is not codec:
            view = copy.copy(self)
            view.codec = codec
            view.journal = AsyncJournal(self.local, self.shared, codec, self.memory)
            view.reads = AsyncTierReader(self.tiers, codec, self.policy, self.deltas, self.memory.outbox.holds)
            view.reads.read_only = self.read_only
            view.maintenance = AsyncMaintenance(self.tiers, codec, view.reads, self.deltas)
            view.read_cache = None  # kept with the other serializer
            view._views = {}
            self._views[id(codec)] = view
        return view

    # -- lifecycle --------------------------------------------------------------

    async def setup(self) -> None:
        """Create or migrate every tier's schema, then push forward any local
        journal entry a crash left unacknowledged. Idempotent."""
        async with self._setup_lock:
            await self._setup()

    async def ensure_setup(self) -> None:
        if self._ready:
            return
        async with self._setup_lock:
            if not self._ready:
                await self._setup()

    async def _setup(self) -> None:
        """Set up every tier that answers. Unless ``write="all"``, a shared
        tier that is down is left behind its breaker and set up by the first
        call that reaches it (`_admit`); the saver starts as long as it can
        write somewhere it must (a shared tier, or the local one for
        write-behind); with none, the shared tiers their breakers skipped
        are tried once first (`probe_skipped`). Then ship what a dead
        process left owed."""
        up: list[AsyncTier] = []
        down: list[TierUnavailable] = []
        skipped = self._skipped(self.shared)
        for tier in self.tiers:
            try:
                await tier.setup()
            except TierUnavailable as exc:
                if self.write == "all" or (tier is self.local and not self.shared):
                    raise
                down.append(exc.detached())  # no frames kept: see `TierUnavailable.detached`
                # The tier's going down was logged once, by its guard.
                logger.debug("%s tier is down at setup (%s); carrying on without it", tier.name, exc)
                continue
            cast(AsyncGuardedTier, tier).admitted = True
            up.append(tier)
        usable = [t for t in up if t is not self.local] or (up if self.write == "local" or not self.shared else [])
        if not usable:
            # Set up (admitted) by the probe, if it answers.
            usable = await self.probe_skipped(skipped)
            up += usable
        if not usable:
            raise TierUnavailable.every(down)
        await self._embedded_history(up)
        await self._adopt_store_key(up)
        await self._check_keys(up)
        if self.claim_archive is not None:
            await self.claim_archive()
        if self.read_only:
            self._ready = True
            return
        await self.journal.catch_up()
        self._ready = True
        if down or not (await self.lag()).caught_up:
            self.kick()

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise ConfigError(f"{what}: this saver was opened with read_only=True (for looking only); open it without.")

    async def _adopt_store_key(self, up: Sequence[AsyncTier]) -> None:
        """Seal with the store's key: with shared tiers and no signing key
        of the user's, every record is sealed with one random key that the
        system of record keeps (the last shared tier: Postgres, else Redis),
        created by the first saver that finds none. A record planted in a
        tier by someone who cannot read that key then fails verification, so
        records that verify are decoded with the application's serde as is
        and its own types come back as themselves. The local tier keeps a
        copy, so a restart works while the system of record is down.

        A store that already holds unsigned records keeps accepting them,
        decoded with the strict allowlist, until `repair` re-seals them (only
        those that decode strictly, unless ``permissive_decoding``). A
        store sealed with a key of the user's gets no store key: the key
        check then says which key it needs.

        A saver given its own key (`signing_key=`) over a store sealed with
        the store's key still verifies those records, as long as the tiers
        record that they hold some: turning a key on needs no old key, and
        `repair` re-seals them with the new one (after which the store key
        is accepted no more).

        The local file alone (a saver or command given only ``sqlite=``)
        uses the copy of the key it holds, if any: it never creates one,
        unless the saver has an archive, whose segments are never unsigned
        (anyone who can write the bucket could seal those): the local file
        is then the system of record and keeps the store's key.

        With no key in any hot tier, the archive's copy is taken only if the
        operator vouched for it (`archive_key_fingerprint=`); an archive
        that keeps a key or belongs to a store refuses a new key
        (`AsyncArchiver.trusted_key`)."""
        authority = self.roles.authority
        if authority is None and self.archived_key is not None:
            authority = self.local
        # The fingerprints first, then the key: a saver records a key's
        # fingerprint only after it created or read that key, so a
        # fingerprint seen here means the key is readable below. Read the
        # other way round, a replica starting together with the one that
        # creates the key could find no key, then its fingerprint, and take
        # the store for one sealed with a key of the user's.
        recorded: set[str] = set()
        for tier in up:
            value = await tier.read_meta(KEYS_META)
            recorded.update(value.split(",") if value else ())
        far = await authority.read_meta(STORE_KEY_META) if authority in up and authority is not None else None
        text = far
        if text is None and self.local is not None and self.local in up:
            text = await self.local.read_meta(STORE_KEY_META)
        if authority is None and text is None:
            return  # SQLite alone, never shared: its own disk, unsigned as ever
        if not self.store_key:
            if text is not None and key_fingerprint(base64.b64decode(text)) in recorded:
                self.codec.ring.accept(base64.b64decode(text))
            return
        if text is None:
            assert authority is not None
            if authority not in up:
                raise TierUnavailable(
                    f"this saver seals records with the store's key, which {authority.name} keeps, and "
                    f"{authority.name} cannot be reached while this replica has no copy of the key yet: "
                    "start it when the tier is back, or pass signing_key= (the same on every replica).",
                    tier=authority.name,
                )
            if recorded - {"unsigned"} or self.read_only:
                return  # sealed with a key of the user's (the key check says so), or only looking
            # Every hot tier lost it (or it never was): the archive's copy, if
            # it keeps one the operator vouched for (a store rebuilt from
            # it), else a new key.
            kept = await self.archived_key() if self.archived_key is not None else None
            text = await authority.create_meta(STORE_KEY_META, kept or base64.b64encode(os.urandom(32)).decode())
        elif far is None and authority in up and authority is not None and not self.read_only:
            # The system of record lost the key this replica keeps a copy of
            # (a Redis that evicted or was flushed): put it back, before a new
            # replica finds none and creates another one.
            text = await authority.create_meta(STORE_KEY_META, text)
        key = base64.b64decode(text)
        self.codec.ring.adopt(key, unsigned_too="unsigned" in recorded)
        if self.local is not None and self.local in up and not self.read_only:
            await self.local.create_meta(STORE_KEY_META, text)

    async def _embedded_history(self, up: Sequence[AsyncTier]) -> None:
        """The local file as a store's system of record. Written with SQLite
        alone, it is one, and says so (`_mark_embedded`). Given shared tiers,
        a file that says so holds a history they lack: serving the thread
        from them would show part of it (another replica, none), so setup
        stops before writing anything, until `promote_local` copied it there.
        (A file only read alone, a replica's cache looked into, stays a cache.)"""
        local = self.local
        if local is None or local not in up or self.read_only or not self.shared:
            return
        embedded = await local.read_meta(EMBEDDED_META) is not None
        if self.promoting:
            # What `promote_local` may copy: a file that holds an embedded
            # store's history, or one an earlier version wrote (no mark at
            # all); never a cache of the shared tiers (promoted already, or
            # a replica's), whose stale copies would undo their deletions.
            self._promotable = embedded or await local.read_meta(SHARED_META) is None
        if self.promoting or not embedded:
            await local.create_meta(SHARED_META, "1")
            return
        raise ConfigError(
            f"the SQLite file {getattr(self.raw_local, 'path', '')!r} holds the history of a store that ran on it alone, which the shared "
            "tiers do not have yet: copy it there first with `langgraph-durable promote` (the same --sqlite, "
            "--redis and --postgres) or saver.promote_local(), then start the replicas; or run without the "
            "shared tiers."
        )

    async def _mark_embedded(self) -> None:
        """A checkpoint written with SQLite alone: the file holds history no
        other tier has (`EMBEDDED_META`), noted once per process."""
        if self._embedded or self.shared or self.local is None:
            return
        file = self.raw_local is not None and self.raw_local.path != ":memory:"
        if file and await self.local.read_meta(SHARED_META) is None:
            await self.local.create_meta(EMBEDDED_META, "1")
        self._embedded = True

    async def promote_local(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Copy every thread of the local file, which was a store's system of
        record (SQLite alone), into the shared tiers, sealed with the store's
        key: checkpoints, channel values, pending writes and ledger entries,
        the authority first, each record as it is (nothing is decoded). Then
        the file is a cache like any replica's. Safe to run again, and to
        resume after an interruption. The threads copied."""
        if self.local is None or not self.shared:
            raise ConfigError(
                "promote_local copies the local SQLite file into the shared tiers: give the saver sqlite= and "
                "redis= and/or postgres=."
            )
        self.promoting, self._ready = True, False
        try:
            await self.ensure_setup()
        finally:
            self.promoting = False
        path = getattr(self.raw_local, "path", "")
        if not self._promotable:
            raise ConfigError(
                f"the SQLite file {path!r} is a cache of the shared tiers (promoted already, or a replica's): it "
                "holds no history of its own to copy, and its copies may be older than theirs. Nothing was copied."
            )
        local = self.local
        ids = sorted(await local.thread_ids())
        targets = [t for t in self.roles.by_authority() if t is not local]
        conflicts: list[str] = []
        for done, thread_id in enumerate(ids, start=1):
            records = await local.thread_records(thread_id)
            ledger = await local.read_ledger(thread_id)
            held = (await targets[0].thread_records(thread_id)).checkpoints
            if _other_history(records.checkpoints, held):
                conflicts.append(thread_id)  # another history on the id: never merged
                continue
            checkpoints = [self._sealed(r) for r in sorted(records.checkpoints, key=lambda r: r.checkpoint_id)]
            blobs = [self._sealed(r) for r in records.blobs]
            writes = [self._sealed(r) for r in records.writes]
            entries = {
                k: self.codec.reseal(ledger_context(thread_id, k), ledger_context(thread_id, k), v)
                for k, v in ledger.items()
            }
            for tier in targets:
                if checkpoints:
                    await tier.write_batch([(c, blobs if i == 0 else []) for i, c in enumerate(checkpoints)], writes)
                elif blobs:
                    await tier.write_blobs(blobs)
                for key, envelope in entries.items():
                    await tier.write_ledger(thread_id, key, envelope)
            if progress is not None:
                progress(done, len(ids))
        if conflicts:
            shown = ", ".join(repr(t) for t in conflicts[:5]) + (" ..." if len(conflicts) > 5 else "")
            raise ConfigError(
                f"{len(conflicts)} thread(s) of {path!r} were not copied: the shared tiers hold another history "
                f"on their ids ({shown}), another app's or another store's, which a copy would merge into one "
                f"thread. The other {len(ids) - len(conflicts)} were copied; the file still refuses the shared "
                "tiers. Give those tiers to this store alone (or delete those threads from them), then run it again."
            )
        await local.write_meta(EMBEDDED_META, None)
        return len(ids)

    def _sealed(self, row: Any) -> Any:
        """`row` sealed with the store's key (an embedded store's records
        are unsigned); its payload as it is."""
        return replace(row, envelope=self.codec.reseal(row.context, row.context, row.envelope))

    async def _admit(self, tier: AsyncTier) -> None:
        """A tier that was down at setup answers: set it up and check its key
        before it takes any record."""
        await tier.setup()
        await self._check_keys([tier])
        logger.warning("%s tier is set up (it was down when the saver started)", tier.name)
        self.kick()

    async def _check_keys(self, tiers: Sequence[AsyncTier]) -> None:
        """Refuse to run with a signing key that does not match the store.

        Each tier records the fingerprints of the keys its records may be
        sealed with. A saver with another key would see every record fail its
        checksum and take it all for corruption; this is a configuration
        error, found before anything is read or quarantined."""
        accepted = self.codec.fingerprints
        stored: list[tuple[AsyncTier, set[str] | None]] = []
        for tier in tiers:
            value = await tier.read_meta(KEYS_META)
            stored.append((tier, set(value.split(",")) if value else None))
        for tier, fingerprints in stored:
            foreign = sorted((fingerprints or set()) - set(accepted))
            if foreign:
                raise ConfigError(key_mismatch_message(tier.name, foreign, accepted))
        # A tier may hold whatever another holds (read-repair copies records
        # as they are), and from now on records sealed with our key.
        union = {accepted[0]}.union(*(f for _, f in stored if f))
        for tier, fingerprints in stored:
            if fingerprints != union and not self.read_only:
                await tier.write_meta(KEYS_META, ",".join(sorted(union)))

    async def close(self) -> None:
        # The local tier is shared by both faces; the saver closes it.
        for tier in self.shared:
            await tier.close()

    # -- writes -------------------------------------------------------------------

    async def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        fence: Fence | None = None,
    ) -> RunnableConfig:
        """Store a checkpoint in the tiers the write mode asks for (`WriteMode`).

        With a `fence` (lease.py) the lease's tier is written first, alone,
        and only if the thread's lease still matches the fence; else it
        raises `LeaseLost` and no tier has the checkpoint. A checkpoint that
        fails (`TierUnavailable`: no shared tier took it, or with
        ``write="all"`` one did not) is withdrawn from every tier that took it."""
        thread_id = thread_of(config, what="put")
        ns = config["configurable"].get("checkpoint_ns", "") or ""
        parent_id = config["configurable"].get("checkpoint_id")
        versions = checkpoint.get("channel_versions", {})
        parent = self.seen.get(thread_id, ns, parent_id) if parent_id else None
        never = never_written(versions, new_versions, parent_id, parent)
        self._writable("put")
        # Set up first: the store's key (`_adopt_store_key`) seals the records.
        # Serialization writes nothing, so a bad value still leaves no record.
        await self.ensure_setup()
        # What the thread's DeltaTrail follows (`OwnHeads`), for a saver that keeps its heads.
        records: dict[str, Any] | None = {} if self.own is not None and fence is not None else None
        # A thread's first checkpoint starts its trail, trusted while no other
        # connection commits to the local file (`DeltaTrail.file_version`).
        file_version = await self._file_version() if records is not None and not parent_id else None
        row, blobs, stored = self.codec.encode_put(
            config, checkpoint, metadata, new_versions, self.deltas, never, records=records
        )
        outbox = self.memory.outbox
        local_took = await self._write_behind(
            fence,
            lambda owed, f: self._local().write_checkpoint(row, blobs, journal=owed, fence=f),
            keep=lambda seq: outbox.keep_checkpoint(seq, row, blobs),
        )
        if not local_took:
            try:
                local_took = await self._write_through(
                    fence,
                    lambda t, f: t.write_checkpoint(row, blobs, fence=f),
                    lambda owed, before: self._local().write_checkpoint(row, blobs, journal=owed, before_commit=before),
                    withdraw=lambda t: t.delete_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id),
                    owe=lambda names: self.memory.owe_checkpoint(row, blobs, names),
                    keep=lambda seq: outbox.keep_checkpoint(seq, row, blobs),
                )
            except BaseException:
                self._unsure(row.thread_id)
                raise
        if self.deltas is not None:
            self.deltas.remember(stored)  # its lists may now be the base of the next pieces
        self.seen.note(row.thread_id, row.checkpoint_ns, row.checkpoint_id, versions)
        await self._bounded(row.thread_id, local_took)
        await self._mark_embedded()
        if self.own is not None:
            if fence is not None and local_took:
                trail = None
                if records is not None:
                    keyed = {ch: version_key(v) for ch, v in versions.items()}
                    trail = trail_put(row.checkpoint_id, row.parent_id, keyed, records, metadata, file_version)
                self.own.put(row.thread_id, row.checkpoint_ns, fence.token, row.checkpoint_id, time.monotonic(), trail)
            else:
                self.own.forget(row.thread_id)
        heap.now_and_then(time.monotonic())  # what the memos and the steps freed, back to the system
        return {
            "configurable": {
                "thread_id": row.thread_id,
                "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.checkpoint_id,
            }
        }

    async def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
        *,
        fence: Fence | None = None,
    ) -> None:
        """`fence`: as for `put` (a refused write reaches no tier). No
        withdrawal on failure, unlike `put`: a task's writes are what it
        really produced, so the copies that did land may be served (reads take
        the union of the tiers) and spare the task a rerun; retrying is
        idempotent."""
        self._writable("put_writes")
        if not writes:
            return
        await self.ensure_setup()  # the store's key seals the rows
        dumped: list[Any] | None = [] if self.own is not None and fence is not None else None
        rows, upsert = self.codec.encode_writes(config, writes, task_id, task_path, dumped)
        outbox = self.memory.outbox
        local_took = await self._write_behind(
            fence,
            lambda owed, f: self._local().write_writes(rows, upsert, journal=owed, fence=f),
            keep=lambda seq: outbox.keep_writes(seq, rows, upsert),
        )
        if not local_took:
            try:
                local_took = await self._write_through(
                    fence,
                    lambda t, f: t.write_writes(rows, upsert, fence=f),
                    lambda owed, before: self._local().write_writes(rows, upsert, journal=owed, before_commit=before),
                    withdraw=None,
                    owe=lambda names: self.memory.owe_writes(rows, upsert, names),
                    keep=lambda seq: outbox.keep_writes(seq, rows, upsert),
                )
            except BaseException:
                self._unsure(rows[0].thread_id)
                raise
        if self.own is not None:
            first = rows[0]
            if fence is not None and local_took:
                keys = {(w.task_id, w.idx) for w in rows}
                now = time.monotonic()
                trail = [TrailWrite(w.task_id, w.idx, w.channel, w.task_path, d) for w, d in zip(rows, dumped or ())]
                self.own.writes(
                    first.thread_id,
                    first.checkpoint_ns,
                    fence.token,
                    first.checkpoint_id,
                    keys,
                    now,
                    trail if dumped is not None else None,
                    upsert=upsert,
                )
            else:
                self.own.forget(first.thread_id)
        await self._bounded(rows[0].thread_id, local_took)

    def _unsure(self, thread_id: str) -> None:
        """A write failed, perhaps after some tiers took it (pending writes
        are not withdrawn): what this saver wrote of the thread under its
        lease (`OwnHeads`, its DeltaTrail) may no longer be what the tiers
        hold, so it is not trusted any more."""
        if self.own is not None:
            self.own.forget(thread_id)

    async def _file_version(self) -> int | None:
        """The local file's ``PRAGMA data_version`` (`DeltaTrail`), or None
        when the file cannot be asked (nothing is then answered from memory;
        the write or read goes on as ever)."""
        try:
            return (await self._local().version())[1]
        except TierUnavailable:
            return None

    def _local(self) -> AsyncSqliteTier:
        assert self.local is not None
        return self.local

    async def _bounded(self, thread_id: str, wrote: bool = False) -> None:
        """A size-bounded local cache (``local_max_bytes``): note the use of
        `thread_id` and, after a local write, evict what is past the bound
        (`SqliteTier.evict`), never a thread this saver is running."""
        if self.raw_local is None or self.raw_local.max_bytes is None:
            return
        self.raw_local.touch(thread_id)
        if not wrote:
            return
        running = (self.own.threads() if self.own is not None else set()) | {thread_id}
        try:
            evicted = await self._local().evict(running)
        except TierUnavailable:
            return  # counted as a local write failure where it matters; the next check tries again
        for gone in evicted:
            if self.own is not None:
                self.own.forget(gone)

    def tier_named(self, name: str) -> AsyncTier:
        return self.roles.named(name)

    def down_errors(self, tried: Sequence[TierUnavailable]) -> list[TierUnavailable]:
        """`tried` (the errors of the tiers a call tried), followed by one
        for each other shared tier its breaker skips now: what to raise
        (`TierUnavailable.every`) when no shared tier could take the call."""
        now = time.monotonic()
        seen = {n for e in tried for n in e.tiers}
        skipped = []
        for tier in self.shared:
            if tier.name in seen or self.breakers[tier.name].available(now):
                continue
            stats = self.breakers[tier.name].stats(now)
            skipped.append(
                TierUnavailable(
                    f"{tier.name} tier skipped: it is down ({stats.last_error})", tier=tier.name, skipped=True
                )
            )
        return [*tried, *skipped]

    def lease_tier(self) -> AsyncTier:
        """Where a new writer lease is taken: the most authoritative tier
        whose breaker lets calls through (Postgres, else Redis, else SQLite).
        With every shared tier down, write-behind keeps its leases locally."""
        now = time.monotonic()
        for tier in self.roles.lease_candidates():
            if self.breakers[tier.name].available(now):
                return tier
        if self.write == "local" and self.local is not None:
            return self.local
        return self.roles.last_resort

    async def _write_behind(
        self, fence: Fence | None, local: Callable[[Owed, Fence | None], Any], *, keep: Callable[[int], None]
    ) -> bool:
        """``write="local"``: commit to the local journal only (fsynced) and
        leave the rest to the replicator (`keep`: the records go into the
        outbox under the entry's seq). False when the write is to go through
        instead (another mode, or the local disk refused it)."""
        if self.write != "local" or self.local is None:
            return False
        on_local = fence is not None and fence.tier == self.local.name
        owed = Owed(tuple(t.name for t in self.shared), fence=None if on_local else fence)
        try:
            seq = await local(owed, fence if on_local else None)
        except TierUnavailable as exc:
            self._local_failed(exc, "writing through to the shared tiers instead")
            return False
        if seq is not None:
            keep(seq)
        self.kick()
        return True

    async def _write_through(
        self,
        fence: Fence | None,
        first: Callable[[AsyncTier, Fence | None], Any],
        local: Callable[[Owed | None, Callable[[], None] | None], Any],
        *,
        withdraw: Callable[[AsyncTier], Any] | None,
        owe: Callable[[Sequence[str]], None],
        keep: Callable[[int], None],
    ) -> bool:
        """Carry out a write in the order `decisions.write_order` gives: the
        lease's tier first (fenced), then the local tier with a journal entry
        naming the shared tiers still to write, then those at once (unless
        `decisions.acknowledged_behind`: the replicator ships them). The
        shared tiers that fail stay owed (journal, or memory without a local
        tier) and are caught up later, unless the write must fail
        (`decisions.write_fails`); a failing `put` is withdrawn from every
        tier that took it. The lambdas are the I/O: `first` writes to a tier,
        `local` to the local tier with its journal entry, `withdraw` takes a
        failed checkpoint back out, `owe` records what the memory backlog
        owes, `keep` keeps the records in the outbox under the entry's seq."""
        order = write_order(self.roles, fence.tier if fence is not None else None)
        fenced: list[AsyncTier] = []
        # Reads take the union of what every tier holds and repair the gaps,
        # so a write the fence refuses (`LeaseLost`) must reach no tier at
        # all: the lease's tier goes first, alone. The sync face overlaps
        # the local write with it (`_lead`), committing it only after.
        lead = self._lead(order, first, fence)
        if order.first is not None and lead is None:
            await first(order.first, fence)
            fenced.append(order.first)
        rest = list(order.rest)
        seq = None
        local_took = False
        if order.journal:
            owed = Owed(order.owed(), acked=order.first is not None) if rest else None
            try:
                seq = await local(owed, lead.before_commit if lead is not None else None)
                local_took = True
            except Abandoned:
                # The lease's tier refused or failed (raised here), or is slow:
                # the local write rolled back; it goes after, as without a lead.
                assert lead is not None and order.first is not None
                lead.result()
                fenced.append(order.first)
                lead = None
                try:
                    seq = await local(owed, None)
                    local_took = True
                except TierUnavailable as exc:
                    await self._local_unavailable(exc, withdraw, fenced)
            except TierUnavailable as exc:
                if lead is not None:
                    assert order.first is not None
                    lead.result()  # the lease's tier's own failure comes first
                    fenced.append(order.first)
                    lead = None
                await self._local_unavailable(exc, withdraw, fenced)
            except BaseException:
                if lead is not None:
                    lead.result()
                raise
            if lead is not None:
                assert order.first is not None
                lead.result()  # answered: the local write committed after it
                fenced.append(order.first)
        if acknowledged_behind(
            fenced=fence is not None,
            behind=fence is not None and fence.behind,
            journaled=seq is not None,
            ships_behind=self.ships_behind,
        ):
            # The lease's tier took it, fenced, and the local journal owes it
            # to the rest: acknowledged ("shared": the journal and one shared
            # tier). A run's end ships what its thread owes before its lease
            # is given back (leases/keeper_async.py), and the replicator what a
            # run still going wrote a while ago (Runtime.replicate), in
            # one transaction per thread and tier, from the outbox (`keep`),
            # not read back from the local file.
            assert seq is not None
            keep(seq)
            self.kick()
            return True
        skipped = self._skipped(rest)
        results = await arun_all([functools.partial(first, t, None) for t in rest], overlap=overlap(rest))
        took = fenced + [t for t, r in zip(rest, results) if not isinstance(r, BaseException)]
        failed = [(t, r) for t, r in zip(rest, results) if isinstance(r, BaseException)]
        if worth_probing(self.write, failed=bool(failed), took_shared=any(t is not self.local for t in took)):
            probed, failed = await self._half_open(failed, skipped, lambda t: first(t, None))
            took += probed
        if write_fails(self.write, took_shared=any(t is not self.local for t in took), errors=[r for _, r in failed]):
            # Take a checkpoint back out of every tier that accepted it, so no
            # tier serves a checkpoint the caller was told failed. Blobs stay:
            # they are immutable and unreachable without the checkpoint.
            await self._withdraw(withdraw, ([self.local] if local_took and self.local is not None else []) + took)
            if seq is not None:
                if withdraw is not None:
                    await self._local().journal_drop(seq)
                else:
                    await self._local().journal_acked(seq, [t.name for t in took], everyone=self.journal.names)
            raise TierUnavailable.every([error for _, error in failed])
        if seq is not None:
            # Written by the next local transaction, not one of its own.
            assert self.raw_local is not None
            self.raw_local.defer_ack(seq, [t.name for t in took if t in rest], everyone=self.journal.names)
        elif failed:
            owe([t.name for t, _ in failed])
        if failed:
            self.kick()  # the replicator catches the tier up when it is back
        return local_took or (self.local is not None and self.local in fenced)

    def _lead(
        self, order: WriteOrder[AsyncTier], first: Callable[[AsyncTier, Fence | None], Any], fence: Fence | None
    ) -> Lead | None:
        """The sync face's overlap: the lease's tier's write started on a
        worker thread (`concurrency.Lead`) while the local write runs, when
        there is a local write to overlap, the lease's tier answers as usual
        (its breaker closed, its last answer within `LEAD_WAIT_S`), and what
        overlapping saves (the shorter of the two writes' last times) is more
        than a lead costs (`breaker.LEAD_HOP_S`): a local write that waits for
        its disk (or a loaded machine) and a lease's tier that is not near
        either, not a local write of a fraction of a millisecond, however far
        the lease's tier. The async face writes one after the other (None)."""
        if True:  # ASYNC
            return None
        else:
            if order.first is None or not order.journal:
                return None
            lead, local = order.first, self.local
            if not isinstance(lead, AsyncGuardedTier) or not isinstance(local, AsyncGuardedTier):
                return None
            if not lead.breaker.answers_within(LEAD_WAIT_S) or not overlap([lead, local], lead=True):
                return None
            return Lead(functools.partial(first, lead, fence))

    async def _local_unavailable(
        self, exc: TierUnavailable, withdraw: Callable[[AsyncTier], Any] | None, fenced: list[AsyncTier]
    ) -> None:
        """The local tier refused a write the lease's tier took (`fenced`):
        it fails (withdrawn) with ``write="all"`` or without shared tiers;
        otherwise the shared tiers carry on."""
        if self.write == "all" or not self.shared:
            await self._withdraw(withdraw, fenced)
            raise exc
        self._local_failed(exc, "the shared tiers carry on")

    def _skipped(self, tiers: Sequence[AsyncTier]) -> set[str]:
        """The names of the shared tiers among `tiers` that their breakers
        will skip now (taken just before a call to them)."""
        now = time.monotonic()
        return {t.name for t in tiers if t is not self.local and not self.breakers[t.name].available(now)}

    async def _half_open(
        self,
        failed: Sequence[tuple[AsyncTier, BaseException]],
        skipped: set[str],
        call: Callable[[AsyncTier], Any],
    ) -> tuple[list[AsyncTier], list[tuple[AsyncTier, BaseException]]]:
        """No shared tier acknowledged a write: before the run fails, try
        `call` once on each shared tier its breaker skipped (`skipped`), as
        an early half-open probe (`Breaker.allow_early`: once per outage). A
        tier that came back while its breaker still waits out its backoff
        (Redis restarted, then Postgres dropped) thus takes the write, and
        its breaker closes. A tier that failed in this very call is not
        tried again. Returns the tiers that took it and what still failed."""
        took: list[AsyncTier] = []
        still: list[tuple[AsyncTier, BaseException]] = []
        for tier, error in failed:
            if tier.name not in skipped or not isinstance(error, TierUnavailable):
                still.append((tier, error))
                continue
            guard = cast(AsyncGuardedTier, tier)
            if not guard.breaker.allow_early(time.monotonic()):
                still.append((tier, error))  # its early probe was spent in this outage
                continue
            try:
                await guard.probe(functools.partial(call, guard.tier))
            except Exception as exc:  # down still, or it answered and refused (then raised as such)
                still.append((tier, exc))
                continue
            logger.warning("%s tier took a write as a probe while no other shared tier answered", tier.name)
            took.append(tier)
        return took, still

    async def probe_skipped(self, names: Collection[str]) -> list[AsyncTier]:
        """Probe each shared tier named in `names` that its breaker skips
        now, with one cheap read, as an early half-open probe
        (`Breaker.allow_early`: once per outage); a tier that answers is set
        up first if it was down at setup. Returns the tiers that answered,
        their breakers closed. For a caller about to fail because no shared
        tier answers (setting up, taking a writer lease in
        leases/keeper_async.py); it leaves out the tiers that just failed it."""
        answered: list[AsyncTier] = []
        skipped = self._skipped(self.shared) & set(names)
        for tier in self.roles.lease_candidates():
            guard = cast(AsyncGuardedTier, tier)
            if tier.name not in skipped or not guard.breaker.allow_early(time.monotonic()):
                continue
            try:
                await guard.probe(functools.partial(guard.tier.read_meta, KEYS_META))
            except TierUnavailable:
                continue
            answered.append(guard)
        return answered

    async def _withdraw(self, withdraw: Callable[[AsyncTier], Any] | None, tiers: Sequence[AsyncTier]) -> None:
        if withdraw is None:
            return
        for tier in tiers:
            try:
                await withdraw(tier)
            except DurableError as exc:
                logger.error("could not withdraw a failed checkpoint from %s: %s", tier.name, exc)

    def _local_failed(self, exc: TierUnavailable, then: str) -> None:
        self.counters.local_write_failed()
        logger.error("local tier write failed (%s): %s", exc, then)

    # -- outages: catch-up and health ----------------------------------------------------

    async def catch_up(
        self,
        thread_id: str | None = None,
        *,
        between: Callable[[], Any] | None = None,
        skip: Callable[[JournalEntry], bool] | None = None,
    ) -> int:
        """Ship what the shared tiers are owed, by one thread or all
        (`journal_async.AsyncJournal`; `between`, `skip`: see there)."""
        await self.ensure_setup()
        return await self.journal.catch_up(thread_id, between=between, skip=skip)

    async def lag(self) -> Lag:
        """What the shared tiers are owed: records, per tier, and the oldest's age."""
        now = time.time()
        lag = lag_of(self.memory.pending(), self.journal.names, now)
        if self.local is None:
            return lag
        try:
            count, oldest, by_tier = await self.local.journal_lag(self.journal.names)
        except TierUnavailable:
            return lag
        return Lag(
            records=lag.records + count,
            seconds=max(lag.seconds, now - oldest if oldest is not None else 0.0),
            by_tier={n: lag.by_tier[n] + by_tier[n] for n in self.journal.names},
        )

    async def health(self) -> Health:
        """Probe every tier now (its breaker learns the outcome)."""
        with contextlib.suppress(TierUnavailable):  # each tier's probe below says which
            await self.ensure_setup()
        lag = await self.lag()
        report = []
        for tier in self.tiers:
            guard = cast(AsyncGuardedTier, tier)
            started = time.monotonic()
            error = None
            try:
                await guard.probe(lambda: guard.tier.read_meta(KEYS_META))
            except TierUnavailable as exc:
                error = str(exc)
            latency = (time.monotonic() - started) * 1000
            report.append(
                TierHealth(
                    name=tier.name,
                    reachable=error is None,
                    latency_ms=None if error else latency,
                    breaker=self.breakers[tier.name].stats(time.monotonic()),
                    owed=lag.by_tier.get(tier.name, 0),
                    error=error,
                    role=tier.role.value,
                )
            )
        return Health(tiers=report, lag=lag, local_write_failures=self.counters.local_write_failures)

    # -- reads ----------------------------------------------------------------------

    async def _authority(self, what: str, call: Callable[[AsyncTier], Any]) -> Any:
        """Ask the authority; nearer tiers answer only when it is down."""
        return (await self._authority_tier(what, call))[1]

    async def _authority_tier(self, what: str, call: Callable[[AsyncTier], Any]) -> tuple[AsyncTier, Any]:
        """`_authority`, also naming the tier that answered."""
        down: list[TierUnavailable] = []
        for i, tier in enumerate(self.roles.by_authority()):
            try:
                result = await call(tier)
            except TierUnavailable as exc:
                down.append(exc.detached())  # no frames kept: see `TierUnavailable.detached`
                continue
            if i:
                logger.debug("degraded read: %s answered by %s (%s)", what, tier.name, down[-1])
            return tier, result
        assert down
        raise TierUnavailable.every(down)

    # The reader (reads_async.py) owns every read; these names stay for the
    # maintenance code below.

    async def _checkpoint(self, thread_id: str, ns: str, cid: str, incidents: list[Incident]) -> Found | None:
        return await self.reads.checkpoint(thread_id, ns, cid, incidents)

    async def _blobs(
        self, thread_id: str, ns: str, keys: Sequence[BlobKey], incidents: list[Incident]
    ) -> dict[BlobKey, tuple[BlobRow, Any]]:
        return await self.reads.blobs(thread_id, ns, keys, incidents)

    async def _writes(
        self, thread_id: str, ns: str, cids: Sequence[str], incidents: list[Incident]
    ) -> tuple[dict[str, list[tuple[WriteRow, PendingWrite]]], dict[str, str]]:
        """Pending writes, and (always empty now: a bad write no longer makes
        its checkpoint unusable) the checkpoints whose writes were lost."""
        return await self.reads.writes(thread_id, ns, cids, incidents), {}

    async def _serve(
        self, thread_id: str, ns: str, cid: str, incidents: list[Incident], *, latest: bool = False
    ) -> CheckpointTuple | None:
        if latest:
            return await self.reads.latest(thread_id, ns, incidents)
        return await self.reads.serve(thread_id, ns, cid, incidents)

    async def _settle(self, incidents: list[Incident], default: str = "nothing") -> None:
        await self.reads.settle(incidents, default)

    async def get_tuple(
        self, config: RunnableConfig, *, lease_token: int | None = None, trusted_until: float | None = None
    ) -> CheckpointTuple | None:
        """`lease_token`: the token of this saver's lease of the thread, if it
        holds one; then what it wrote last is read from the local tier alone
        (`trusted_until`: for a lease kept after its run, until this
        monotonic time)."""
        thread_id = thread_of(config, what="get_tuple")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        cid = configurable.get("checkpoint_id")
        await self.ensure_setup()
        await self._bounded(thread_id)
        if not cid and self.own is not None:
            expected = self.own.current(thread_id, ns, lease_token, time.monotonic(), trusted_until)
            if expected is not None:
                # What this saver wrote last under the thread's lease, from the
                # local tier alone, kept under what the lease says the file
                # holds: the head and its write keys. None: read as usual.
                own = await self._kept(
                    ("own", thread_id, ns, *expected), _one(lambda: self.reads.local_latest(thread_id, ns, *expected))
                )
                if own:
                    return self.served(own[0])
        if self.cache_all_reads:
            found = await self._kept(
                ("get", thread_id, ns, cid), _one(lambda: self.reads.get_tuple(thread_id, ns, cid))
            )
            return self.served(found[0] if found else None)
        return self.served(await self.reads.get_tuple(thread_id, ns, cid))

    async def _kept(self, key: Hashable, read: Callable[[], Any]) -> list[CheckpointTuple]:
        """`read()` (a page), kept while the local file is unchanged
        (`read_cache.py`): under `key` and the file's version, taken before
        the read. A read that met a bad copy (`AsyncTierReader.incident_reads`
        moved) is not kept, nor one that found nothing (`ReadCache.put`)."""
        version = await self._cached_version()
        if version is not None and self.read_cache is not None:
            kept = self.read_cache.get(key, version)
            if kept is not None:
                return kept
        incidents = self.reads.incident_reads
        page = await read()
        if version is not None and self.read_cache is not None and self.reads.incident_reads == incidents:
            self.read_cache.put(key, version, page)
        return page

    async def _cached_version(self) -> Any:
        """The local file's version if reads are cached (`read_cache.py`),
        taken before the read it stands for; None: read as usual."""
        if self.read_cache is None or self.local is None:
            return None
        try:
            return await self.local.version()
        except TierUnavailable:
            return None

    def served(self, tup: CheckpointTuple | None) -> CheckpointTuple | None:
        """`tup`, noted as served: LangGraph may continue from it (carried.py)."""
        if tup is not None:
            c = tup.config["configurable"]
            self.seen.note(
                c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"], tup.checkpoint["channel_versions"]
            )
        return tup

    async def list_tuples(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        channels: Sequence[str] | None = None,
        lease_token: int | None = None,
        trusted_until: float | None = None,
    ) -> list[CheckpointTuple]:
        """`list`; with `channels`, only those channels' values are read.
        Under this saver's lease (`lease_token`, `trusted_until`: see
        `get_tuple`), a page of one namespace that holds only checkpoints
        this saver wrote under that lease comes from the local tier alone
        (`own_page`)."""
        configurable = (config or {}).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        thread_id = thread_id_of(thread_id, what="list") if thread_id is not None else None
        ns = configurable.get("checkpoint_ns")  # absent: every namespace
        if ns:
            check_key_part(ns, what="list: checkpoint_ns", limit=None)
        cid = configurable.get("checkpoint_id")
        # LangGraph's server passes `before` without its "configurable" wrapper.
        plain: dict[str, Any] = dict(before or {})
        before_id = cast(str | None, (plain.get("configurable") or plain).get("checkpoint_id"))
        if cid:
            check_checkpoint_id(cid, what="list: checkpoint_id")
        if before_id:
            check_checkpoint_id(before_id, what="list: before's checkpoint_id")
        await self.ensure_setup()
        if thread_id is not None:
            await self._bounded(thread_id)
            if ns is not None and not cid and not filter and limit:
                page = await self.own_page(thread_id, ns, before_id, limit, channels, lease_token, trusted_until)
                if page is not None:
                    return page
        # One thread's history, as history views and DeltaChannel reads ask
        # for it, is kept like a get (`read_cache.py`).
        if self.cache_all_reads and thread_id is not None and not filter:
            key = ("list", thread_id, ns, cid, before_id, limit, tuple(channels) if channels is not None else None)
            return await self._kept(
                key, lambda: self.reads.list_tuples(thread_id, ns, cid, before_id, filter, limit, channels)
            )
        return await self.reads.list_tuples(thread_id, ns, cid, before_id, filter, limit, channels)

    async def own_page(
        self,
        thread_id: str,
        ns: str,
        before_id: str | None,
        limit: int,
        channels: Sequence[str] | None,
        lease_token: int | None,
        trusted_until: float | None,
    ) -> list[CheckpointTuple] | None:
        """The page of `limit` checkpoints before `before_id` (the newest
        without it) from the local tier alone, if this saver wrote every one
        of them under the lease it holds (`OwnHeads.mine`): nobody else wrote
        the thread since, so no other tier holds a newer one. The local rows
        must be exactly those checkpoints, with exactly the pending writes
        this saver wrote, every record intact (`AsyncTierReader.local_list`);
        None otherwise, and the caller reads across the tiers."""
        if self.own is None:
            return None
        mine = self.own.mine(thread_id, ns, lease_token, time.monotonic(), trusted_until)
        if mine is None:
            return None
        wanted = sorted((c for c in mine if before_id is None or c < before_id), reverse=True)[:limit]
        if len(wanted) < limit:
            return None  # the page reaches past the lease: other writers' checkpoints, maybe
        page = await self.local_page(thread_id, ns, before_id, limit, channels, mine)
        if page is None or [t.config["configurable"]["checkpoint_id"] for t in page] != wanted:
            return None
        return page

    async def local_page(
        self,
        thread_id: str,
        ns: str,
        before_id: str | None,
        limit: int,
        channels: Sequence[str] | None,
        mine: Mapping[str, frozenset[tuple[str, int]]],
    ) -> list[CheckpointTuple] | None:
        """`AsyncTierReader.local_list`, kept while the local file is
        unchanged (`read_cache.py`) under what the lease says the file holds
        (`mine`), as the latest state read under the lease is: a DeltaChannel
        read walks the same ancestors again on every `get_state`."""
        key = (
            "own-list",
            thread_id,
            ns,
            before_id,
            limit,
            tuple(channels) if channels is not None else None,
            frozenset(mine.items()),
        )

        async def read() -> list[CheckpointTuple]:
            return await self.reads.local_list(thread_id, ns, before_id, limit, channels, mine) or []

        return await self._kept(key, read) or None

    async def delta_history(
        self,
        config: RunnableConfig,
        channels: Sequence[str],
        *,
        lease_token: int | None = None,
        trusted_until: float | None = None,
    ) -> Mapping[str, DeltaChannelHistory] | None:
        """A DeltaChannel's history (`delta_history.py`): the parent-chain walk over
        ancestors read a page at a time; None when the chain is not complete
        in what `list` returns (the caller then walks with `get_tuple`).
        Under this saver's lease (`lease_token`, `trusted_until`: see
        `get_tuple`) the ancestors it wrote under that lease come from the
        local tier alone (`AsyncTierReader.local_list`), and the head of a
        thread it wrote all of is answered from memory (`delta_trail.py`)."""
        configurable = config.get("configurable") or {}
        thread_id = thread_of(config, what="get_delta_channel_history")
        ns = configurable.get("checkpoint_ns", "") or ""
        if self.own is not None:
            now, asked = time.monotonic(), configurable.get("checkpoint_id")
            followed = self.own.trail(thread_id, ns, lease_token, now, trusted_until, asked, channels)
            if followed is not None:
                if followed[1] is not None and followed[1] == await self._file_version():
                    with contextlib.suppress(UndecodableRecord):  # raised again, with its record, by the walk
                        return self.codec.decode_trail(followed[0])
                else:
                    self.own.drop_trail(thread_id, ns)
        mine = (
            self.own.mine(thread_id, ns, lease_token, time.monotonic(), trusted_until) if self.own is not None else None
        )
        target = None
        if configurable.get("checkpoint_id"):
            # Only its parent pointer is needed: no values, no writes, no
            # asking every tier (the record is immutable).
            await self.ensure_setup()
            target = await self.reads.stub(thread_id, ns, str(configurable["checkpoint_id"]))
        if target is None:
            target = await self.get_tuple(config, lease_token=lease_token, trusted_until=trusted_until)
        if target is None:
            return delta.empty(channels)
        ancestors: dict[str, CheckpointTuple] = {}
        oldest = delta.checkpoint_id(target)
        size = delta.first_page(target, channels)
        while True:
            found = delta.walk(target, ancestors, channels)
            if not isinstance(found, str):
                return found
            if found >= oldest:  # not where list() looked: gone, or another namespace
                return None
            page = None
            if mine is not None and found in mine:
                page = await self.local_page(thread_id, ns, oldest, size, channels, mine)
            if not page:
                mine = None  # past what this saver wrote under the lease: every tier from here
                page = await self.list_tuples(
                    delta.same_thread(target), before=delta.before(oldest), limit=size, channels=channels
                )
            if not page:
                return None
            delta.add_page(ancestors, page)
            oldest = min(delta.checkpoint_id(t) for t in page)
            size = min(2 * size, delta.MAX_PAGE)

    # -- non-resumable actions and resume validation ----------------------------------

    async def actions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's action ledger, reconciled across the tiers (its pins left out)."""
        return without_pins(await self.ledger_entries(thread_id))

    async def ledger_entries(self, thread_id: str) -> dict[str, LedgerEntry]:
        """Every entry of the thread's ledger: its actions and its pins (`model.pins`)."""
        thread_id = thread_id_of(thread_id, what="actions")
        await self.ensure_setup()
        return await self.reads.ledger(thread_id)

    async def pins(self, thread_id: str) -> list[Pin]:
        thread_id = thread_id_of(thread_id, what="pins")
        return pins_of(thread_id, await self.ledger_entries(thread_id))

    async def record_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write one ledger entry to every tier before returning: an intent
        must be durable before the action runs. Unless ``write="all"``, a
        shared tier that is down is skipped as long as another took it."""
        if entry.key.startswith(RESERVED_PREFIX):
            raise ConfigError(
                f"action key {entry.key!r} starts with {RESERVED_PREFIX!r}, which langgraph-durable keeps for "
                "its own entries (pins); choose another key."
            )
        await self.record_entry(thread_id, entry)

    async def record_entry(self, thread_id: str, entry: LedgerEntry) -> None:
        """`record_action` for any entry, the saver's own (pins) too."""
        check_key_part(entry.key, what="action key", limit=DEFAULT_MAX_ID_BYTES)
        await self.ensure_setup()  # the store's key seals the entry
        envelope = self.codec.encode_ledger(thread_id, entry)
        calls = [functools.partial(t.write_ledger, thread_id, entry.key, envelope) for t in self.tiers]
        skipped = self._skipped(self.tiers)
        results = await arun_all(calls)
        took_shared = [
            t for t, r in zip(self.tiers, results) if t is not self.local and not isinstance(r, BaseException)
        ]
        if self.shared and not took_shared and self.write != "all":
            missed = [
                (t, r) for t, r in zip(self.tiers, results) if isinstance(r, BaseException) and t is not self.local
            ]
            probed, _ = await self._half_open(missed, skipped, lambda t: t.write_ledger(thread_id, entry.key, envelope))
            took_shared += probed
            results = [None if t in probed else r for t, r in zip(self.tiers, results)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed and (
            self.write == "all"
            or (self.shared and not took_shared)
            or any(not isinstance(r, TierUnavailable) for r in failed)
            or (not self.shared)
        ):
            raise failed[0]
        # A tier that missed it gets it from the next ledger read, which
        # reconciles the tiers and repairs the ones behind (reads_async.py).

    # -- verify / repair ------------------------------------------------------------

    async def scan(
        self, thread_id: str | None, *, repair: bool, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        """Verify every copy of every record in every tier (one thread or
        all), and compare the shared tiers; with `repair`, restore bad and
        missing copies from intact ones and re-seal old-key records
        (`scan_async.AsyncScanner`)."""
        await self.ensure_setup()
        return await AsyncScanner(self.tiers, self.codec).scan(thread_id, repair=repair, progress=progress)

    async def restore_quarantined(
        self, records: Sequence[QuarantinedRecord]
    ) -> tuple[list[QuarantinedRecord], list[QuarantinedRecord]]:
        """Put quarantined copies back (`scan_async.AsyncScanner.restore`)."""
        await self.ensure_setup()
        return await AsyncScanner(self.tiers, self.codec).restore(records)

    async def restore_outcomes(self, records: Sequence[QuarantinedRecord]) -> list[tuple[str, str]]:
        """What `restore_quarantined` would do with each of `records`
        (`scan_async.AsyncScanner.outcome`), changing nothing."""
        await self.ensure_setup()
        scanner = AsyncScanner(self.tiers, self.codec)
        return [await scanner.outcome(q) for q in records]

    async def purge_quarantined(
        self, older_than: float, *, thread_id: str | None = None, dry_run: bool = False, now: float | None = None
    ) -> list[QuarantinedRecord]:
        """Delete, from every tier, the quarantined copies detected more than
        `older_than` seconds ago (of `thread_id`, or every thread); with
        `dry_run` only list them. Returns them."""
        await self.ensure_setup()
        cutoff = (time.time() if now is None else now) - older_than
        purged: list[QuarantinedRecord] = []
        for tier in self.tiers:
            old = [q for q in await tier.list_quarantine(thread_id) if q.detected_at < cutoff]
            if old and not dry_run:
                await tier.drop_quarantined([q.id for q in old])
            purged.extend(old)
        return purged

    # -- maintenance -------------------------------------------------------------------

    async def _everywhere(self, call: Callable[[AsyncTier], Any]) -> None:
        _raise_first(await arun_all([functools.partial(call, t) for t in self.tiers]))

    def forget_thread(self, thread_id: str) -> None:
        """Drop what this process remembers of the thread (it left the hot
        tiers, or came back into them from elsewhere): the next read asks the tiers."""
        if self.own is not None:
            self.own.forget(thread_id)
        self.seen.forget(thread_id)
        if self.deltas is not None:
            self.deltas.forget(thread_id)

    async def delete_thread(self, thread_id: str) -> None:
        if self.own is not None:
            self.own.forget(thread_id)
        self.seen.forget(thread_id)
        self.memory.outbox.forget()  # owed records deleted: not shipped from memory either
        await self.ensure_setup()
        await self.maintenance.delete_thread(thread_id)

    async def delete_for_runs(self, run_ids: Sequence[str], ask: Callable[[str], Any] | None = None) -> None:
        """`ask(thread_id)`: see `AsyncMaintenance.delete_for_runs`."""
        if not run_ids:
            return
        if self.own is not None:
            self.own.forget(None)
        self.memory.outbox.forget()  # see delete_thread
        await self.ensure_setup()
        await self.maintenance.delete_for_runs(run_ids, ask)

    async def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        if self.own is not None:
            self.own.forget(str(target_thread_id))
        await self.ensure_setup()
        await self.maintenance.copy_thread(source_thread_id, target_thread_id)

    async def retain(
        self,
        policy: RetentionPolicy,
        thread_ids: Sequence[str] | None,
        *,
        now: float,
        dry_run: bool,
        progress: Callable[[int, int], None] | None = None,
        pace: Callable[[], Any] | None = None,
        ask: Callable[[str], Any] | None = None,
    ) -> RetentionReport:
        """Apply `policy` to these threads (None: every thread any tier
        holds), one at a time; `pace()` runs before each (a rate limit; on
        the sync face an async one is refused before any thread is touched).
        `ask(thread_id)` runs before a thread is changed (`AsyncMaintenance.retain`)."""
        await self.ensure_setup()
        if thread_ids is None:
            listed = await arun_all([functools.partial(t.thread_ids) for t in self.tiers])
            _raise_first(listed)
            thread_ids = sorted({t for ids in cast(list[list[str]], listed) for t in ids})
        report = RetentionReport(dry_run=dry_run)
        for done, thread_id in enumerate(thread_ids, start=1):
            thread_id = thread_id_of(thread_id, what="apply_retention")
            if pace is not None:
                if True:  # ASYNC
                    await amaybe_await(pace())
                else:
                    refuse_awaitable(pace(), "pace")
            unconfirmed = any(e.escalated() for e in (await self.actions(thread_id)).values())
            if not dry_run and self.own is not None:
                self.own.forget(thread_id)
            if not dry_run:
                self.memory.outbox.forget()  # see delete_thread
            retained = await self.maintenance.retain(
                thread_id,
                policy,
                now,
                unconfirmed=unconfirmed,
                dry_run=dry_run,
                ask=ask,
                note_gone=self.claim_archive is not None,  # an archive learns what went (`Maintenance.retain`)
            )
            report.add(retained, unconfirmed=unconfirmed)
            if progress is not None:
                progress(done, len(thread_ids))
        return report

    async def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
        if self.own is not None:
            for thread_id in thread_ids:
                self.own.forget(str(thread_id))
        self.memory.outbox.forget()  # see delete_thread
        await self.ensure_setup()
        await self.maintenance.prune(thread_ids, strategy=strategy, note_gone=self.claim_archive is not None)


def _other_history(mine: Sequence[CheckpointRow], theirs: Sequence[CheckpointRow]) -> bool:
    """Whether `theirs` (a shared tier's checkpoints of a thread) is another
    history than `mine` (the local file's): each has a root checkpoint in
    the root namespace, and not the same one."""
    roots = {r.checkpoint_id for r in mine if r.checkpoint_ns == "" and r.parent_id is None}
    others = {r.checkpoint_id for r in theirs if r.checkpoint_ns == "" and r.parent_id is None}
    return bool(roots and others) and roots.isdisjoint(others)


def _one(read: Callable[[], Any]) -> Callable[[], Any]:
    """`read`, as a page of at most one (what `AsyncTierChain._kept` keeps)."""

    async def page() -> list[CheckpointTuple]:
        tup = await read()
        return [tup] if tup is not None else []

    return page


def _reasons(incidents: Sequence[Incident]) -> list[str]:
    return [f"{i.tier.name if i.tier is not None else 'every tier'}: {i.key}: {i.reason}" for i in incidents]
