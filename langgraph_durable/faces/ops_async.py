"""The saver's operations, written once: every public operation of
`DurableSaver`, on both faces, and the private steps they share.

This file is the async source: `AsyncSaverOps` is the async face, and
``ops.py`` (the sync face) is generated from it by ``tools/async_to_sync.py``.
Edit this file, then run the tool; CI checks that the twin is current.
`DurableSaver` (``saver.py``) is both faces over one `SaverBase`
(``base.py``): a view of the runtime (``runtime.py``) that holds what the
faces and every view share (the tiers, the leases, the archive's
coordination, the background workers), and the codec the view decodes
with.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Self, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ..archive.reports import ArchiveReport, RestoreReport
from ..engine.chain_async import AsyncTierChain
from ..engine.concurrency import amaybe_await, asleep, refuse_awaitable
from ..engine.imports import sources
from ..engine.imports.importer_async import AsyncImporter
from ..engine.imports.sources import ImportReport
from ..engine.resume_async import AsyncResumeGate
from ..errors import ConfigError, DurableError, MigrationFailed, NewerStateVersion, ThreadBusy, TierUnavailable
from ..integrity import ScanReport
from ..ledger import LedgerEntry, damaged_entry, operator_answer
from ..migrations import MigrationReport, ThreadMigration, describe
from ..model.backlog import ArchiveLag, Lag
from ..model.codec import thread_id_of, thread_of
from ..model.health import Health
from ..model.lease import Lease
from ..model.pins import Pin, pin_entry, pin_key, unpin_entry
from ..retention import RetentionPolicy, RetentionReport
from ..tiers.base import ARCHIVE_META, EMBEDDED_META, QuarantinedRecord, archived_key
from ..validation import RUNTIME_KEY
from .base import (
    BRING_BACK_POLL_S,
    NEWER_POLL_S,
    SaverBase,
    archived_runs_unsearched,
    idle_for,
    left_alone,
    rearchived,
    resolve_quarantined,
    seconds_above_zero,
    settles,
    thread_archived,
    undo_count,
)
from .runtime import HAND_OFF_START_WAIT_S


class AsyncSaverOps(SaverBase):
    """The operations of `DurableSaver` on one face (see the module's docstring)."""

    async def asetup(self) -> None:
        """Create or migrate the schema of every tier. Idempotent; safe from
        many replicas at once. Raises `TierUnavailable` naming the tier that
        cannot be reached. Called on first use if you do not call it. With
        ``lease_linger``, also starts listening for hand-off requests."""
        await self._async_chain().setup()
        if True:  # ASYNC
            await asyncio.to_thread(self._runtime.listen_for_hand_offs, HAND_OFF_START_WAIT_S)
        else:
            self._runtime.listen_for_hand_offs(HAND_OFF_START_WAIT_S)

    async def aclose(self) -> None:
        """Ship what the shared tiers are still owed (for up to
        ``drain_timeout`` seconds, see `drain`), then close the connections
        and the local file. The saver may not be used afterwards. Closing on
        the sync face leaves the async face's connections and the local file
        open (and says so in a warning): after async use, close the saver on
        the async face (or with ``async with``), which closes both faces'.
        Every view of the saver (`with_allowlist`) shares what this closes:
        closing one closes them all."""
        await self._runtime.aclose()

    async def adrain(self, timeout: float | None = None) -> Lag:
        """Ship what the shared tiers are owed, until nothing is or `timeout`
        seconds passed (None: one pass). Returns what is still owed. At
        SIGTERM, `langgraph_durable.shutdown` drains on a thread of its own;
        never drain from a signal handler, which may have interrupted one of
        this saver's calls."""
        if True:  # ASYNC
            return await asyncio.to_thread(self._runtime.drain, timeout)
        else:
            return self._runtime.drain(timeout)

    async def alag(self) -> Lag:
        """How far behind the shared tiers are: records owed (in all and per
        tier) and the age of the oldest in seconds. With ``write="local"``
        this is the write-behind lag; otherwise it is what tiers that were
        down have still to be sent, and (all three tiers) what Redis is
        still to get from the replicator."""
        return self._runtime.with_archive(await self._async_chain().lag())

    async def ahealth(self) -> Health:
        """Probe every tier now: reachable, latency, breaker state, records
        owed. ``langgraph-durable doctor`` prints it."""
        chain = self._async_chain()
        health = await chain.health()
        if all(t.reachable for t in health.tiers):  # a tier down: no second wait for it
            with contextlib.suppress(DurableError):
                await chain.ensure_setup()  # the store's key, for its fingerprint
        health = self._with_fingerprint(health)
        if self.archive_url is None:
            return health
        if True:  # ASYNC
            return await asyncio.to_thread(self._runtime.archive_health, health)
        else:
            return self._runtime.archive_health(health)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names, else the thread's latest (LangGraph's
        contract). A run's first call takes the thread's writer lease and runs
        the gates: the version guard, migrations, the resume validators."""
        chain = self._async_chain()
        first = self._first_call_of_run(config)
        refused: NewerStateVersion | None = None
        deadline = 0.0
        while True:
            # A run takes the thread's writer lease before it reads "latest"
            # (also for a new thread), and gives it back if it fails to start.
            lease = await self._async_leases().begin_run(config) if first else None
            try:
                if not first:  # ASYNC ONLY
                    await self._runtime.settle_run_end(config)
                token, until = (None, None) if first else self._runtime.lease_token(config)
                tup = await chain.get_tuple(config, lease_token=token, trusted_until=until)
                if tup is None and await self._abrought_back(config, held=first):
                    tup = await chain.get_tuple(config)
                if tup is not None and lease is not None:
                    gate = self._aresume_gate(chain, lease)
                    tup = await gate.validate(tup, self._validators, self._on_validation)
                return tup
            except NewerStateVersion as exc:
                if lease is not None:
                    await self._async_leases().abandon_run(lease)
                if refused is None:
                    refused = exc
                    deadline = time.monotonic() + (self.migrations.newer_wait if self.migrations is not None else 0.0)
                await self._await_newer(chain, config, refused, deadline)  # raises unless the thread came back
            except BaseException:
                if lease is not None:
                    await self._async_leases().abandon_run(lease)
                raise

    def _aresume_gate(self, chain: AsyncTierChain, lease: Lease | None) -> AsyncResumeGate:
        """The gates a run's first read passes (or `migrate`'s, for one
        thread), every write fenced by `lease`: a lease lost meanwhile (a
        slow step, another replica taking the thread over) refuses them
        (`LeaseLost`) before anything reaches a tier. Without one (a dry
        run) the gate only plans."""
        fence = self._async_leases().book.fence(lease, behind=True) if lease is not None else None

        async def put(
            config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, versions: Any
        ) -> Any:
            assert fence is not None, "a dry run writes nothing"
            return await chain.put(config, checkpoint, self._stamped(metadata), versions, fence=fence)

        async def put_writes(config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str) -> None:
            assert fence is not None, "a dry run writes nothing"
            await chain.put_writes(config, writes, task_id, fence=fence)

        return AsyncResumeGate(
            chain.ledger_entries,
            chain.get_tuple,
            put,
            put_writes=put_writes,
            record=chain.record_entry,
            migrations=self.migrations,
            next_version=self._next_version,
            listing=chain.list_tuples,
        )

    async def _await_newer(
        self, chain: AsyncTierChain, config: RunnableConfig, refused: NewerStateVersion, deadline: float
    ) -> None:
        """A run met a thread a newer state version wrote. Raise, unless
        ``Migrations(on_newer="wait")`` and the run asked for the thread's
        latest: then, holding no lease, wait until `deadline` for a replica
        of that version to take the thread (raise, ``taken``), or for the
        thread to come back to a version this one runs (a rollback: return,
        and the run starts again). Closing the saver ends the wait."""
        migrations = self.migrations
        configurable = config.get("configurable") or {}
        if migrations is None or migrations.on_newer != "wait" or configurable.get("checkpoint_id"):
            raise refused
        thread_id = refused.thread_id
        ns = configurable.get("checkpoint_ns", "") or ""
        latest = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._runtime.closing:
                raise refused
            await asleep(min(NEWER_POLL_S, remaining))
            now = await chain.get_tuple(cast(RunnableConfig, latest))
            if now is None or migrations.version_of(now.metadata) <= migrations.version:
                return
            if now.checkpoint["id"] != refused.checkpoint_id:
                raise NewerStateVersion(
                    f"thread {thread_id!r} was taken by a replica of state version "
                    f"{migrations.version_of(now.metadata)} while this one (version {migrations.version}) waited: "
                    "that replica ran it; nothing was run or written here.",
                    thread_id=thread_id,
                    version=migrations.version_of(now.metadata),
                    running=migrations.version,
                    checkpoint_id=str(now.checkpoint["id"]),
                    checkpoint=now,
                    taken=True,
                )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The checkpoints matching the arguments, newest first (LangGraph's contract)."""
        chain = self._async_chain()
        token, until = None, None
        if config:
            await self._runtime.settle_run_end(config)  # ASYNC ONLY
            token, until = self._runtime.lease_token(config)
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
        """Store a checkpoint, under the thread's writer lease (LangGraph's contract)."""
        if self.migrations is not None and RUNTIME_KEY not in (config.get("configurable") or {}):
            await self._aguard_plain_write(config)
        stored = await self._async_leases().put(config, checkpoint, self._stamped(metadata), new_versions)
        self._runtime.note_archive(config)
        return stored

    async def _aguard_plain_write(self, config: RunnableConfig) -> None:
        """A write outside a run (``update_state``, a ``put`` by hand) to a
        thread a newer state version wrote: refused, as a run would be.
        A run's writes were guarded when it began, under its lease."""
        assert self.migrations is not None
        configurable = config.get("configurable") or {}
        thread_id = thread_of(config, what="put")
        ns = configurable.get("checkpoint_ns", "") or ""
        latest = await self._async_chain().get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
        if latest is None:
            return
        written = self.migrations.version_of(latest.metadata)
        if written > self.migrations.version:
            raise NewerStateVersion(
                f"thread {thread_id!r} was written by state version {written} and this replica runs version "
                f"{self.migrations.version}: it does not write it (update_state, put). Write it from a replica of "
                f"version {written} or newer.",
                thread_id=thread_id,
                version=written,
                running=self.migrations.version,
                checkpoint_id=str(latest.checkpoint["id"]),
                checkpoint=latest,
            )

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's pending writes, under the thread's writer lease (LangGraph's contract)."""
        await self._async_leases().put_writes(config, writes, task_id, task_path)
        self._runtime.note_archive(config)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, pending write and ledger entry of the
        thread, in every tier (and its archive copy)."""
        chain = self._async_chain()
        if self.archive_url is None:  # its archive copy would stay, and serve it again
            await self._arefuse_archived(chain, {"configurable": {"thread_id": str(thread_id)}})
        leases = self._async_leases()
        await leases.ask_kept_back(thread_id, "delete_thread")  # another saver's kept lease (lease_linger)
        held = await self._ahold_archived(thread_id)
        try:
            await self._adelete_now(thread_id, chain)
        finally:
            if held is not None:
                await leases.unhold(held)

    async def _adelete_now(self, thread_id: str, chain: AsyncTierChain | None = None) -> None:
        """`delete_thread`'s deletion, under a lease the caller holds if any."""
        chain = chain or self._async_chain()
        async with self._runtime.replicator.aexclusive():
            await chain.catch_up()  # what is owed first: nothing deleted is shipped later
            await chain.delete_thread(thread_id)
        await self._aarchive_forget(thread_id)

    async def _ahold_archived(self, thread_id: str) -> Any:
        """With an archive: the thread's lease for a delete, so that no
        bring-back of it (which holds it) is half done meanwhile. While the
        thread is flagged archived, whoever holds its lease is bringing it
        back (a run brings it back before it runs), however long that takes:
        the delete waits for it, or the bring-back would write the deleted
        thread back. Once it is hot, a run holding it does not hold the
        delete up, as it never did."""
        if self.archive_url is None or self.read_only:
            return None
        archiver = self._aarchiver()
        while True:
            try:
                return await self._async_leases().hold(str(thread_id))
            except TierUnavailable:
                return None
            except ThreadBusy:
                if await archiver.flag(str(thread_id)) is None:
                    return None
            await asleep(BRING_BACK_POLL_S)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and pending writes of these runs, from every
        thread (archived ones are brought back first), in every tier."""
        chain = self._async_chain()
        leases = self._async_leases()
        unsearched: TierUnavailable | None = None
        if self.archive_url is not None and not self.read_only and run_ids:
            # An archived thread holding one of the runs comes back first: the runs go from it too.
            try:
                for thread_id in await self._aarchiver().holding_runs([str(r) for r in run_ids]):
                    await self._abring_back_thread(thread_id)
            except TierUnavailable as exc:
                unsearched = exc  # the hot threads lose the runs all the same; then it is said
        async with self._runtime.replicator.aexclusive():
            await chain.catch_up()  # what is owed first: nothing deleted is shipped later
            # Another saver's kept lease of a thread that loses a checkpoint (lease_linger).
            await chain.delete_for_runs(run_ids, self._aasking(leases.ask_kept_back, "delete_for_runs"))
        if unsearched is not None:
            raise archived_runs_unsearched(unsearched)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of one thread to another, in every tier."""
        chain = self._async_chain()
        # An archived source would copy as nothing, an archived target be overwritten by its bring-back.
        await self._abring_back_thread(source_thread_id)
        await self._abring_back_thread(target_thread_id)
        await self._async_leases().ask_kept_back(target_thread_id, "copy_thread: target")  # see delete_thread
        async with self._runtime.replicator.aexclusive():
            await chain.catch_up()  # what is owed first: nothing deleted is shipped later
            await chain.copy_thread(source_thread_id, target_thread_id)
        self._runtime.note_archive(target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the threads' checkpoints by `strategy` (LangGraph's
        ``"keep_latest"`` or ``"delete"``), in every tier; pinned
        checkpoints stay."""
        chain = self._async_chain()
        leases = self._async_leases()
        for thread_id in thread_ids:
            await self._abring_back_thread(thread_id)  # an archived thread is pruned as a hot one is
            await leases.ask_kept_back(thread_id, "prune")  # see delete_thread
            await self._aarchive_owe(thread_id)
        async with self._runtime.replicator.aexclusive():
            await chain.catch_up()  # see delete_thread
            await chain.prune(thread_ids, strategy=strategy)
        for thread_id in thread_ids:
            self._runtime.note_archive(thread_id)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's walk up the parent chain, over ancestors read a page at
        a time with `list` instead of one `get_tuple` each (`delta_history.py`), from
        the local cache alone for what this saver wrote under the thread's
        lease it still holds; LangGraph's own walk whenever the chain is not
        complete in those pages."""
        if not channels:
            return {}
        chain = self._async_chain()
        await self._runtime.settle_run_end(config)  # ASYNC ONLY
        token, until = self._runtime.lease_token(config)
        found = await chain.delta_history(config, channels, lease_token=token, trusted_until=until)
        if found is not None:
            return found
        return await super().aget_delta_channel_history(config=config, channels=channels)

    async def aactions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's ledger of non-resumable actions, by key."""
        return await self._async_chain().actions(thread_id)

    async def arecord_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write a ledger entry through every tier (used by `ledger.action`)."""
        await self._async_chain().record_action(thread_id_of(thread_id, what="record_action"), entry)
        self._runtime.note_archive(str(thread_id))

    async def aresolve_action(
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
            entries: Mapping[str, LedgerEntry] | None = await self.aactions(thread_id)
        except Exception as exc:
            if not damaged_entry(exc, str(thread_id), key):
                raise
            entries = None  # unreadable everywhere: the answer replaces it
        entry = operator_answer(str(thread_id), key, entries, done=done, result=result, force=force)
        await self.arecord_action(thread_id, entry)
        return entry

    async def arestore_quarantined(
        self, records: Sequence[QuarantinedRecord | str]
    ) -> tuple[builtins.list[QuarantinedRecord], builtins.list[QuarantinedRecord]]:
        """Put quarantined copies back where they were (`quarantined` lists
        them; a string names one as ``"tier:id"``, as the CLI prints it).

        Nothing is trusted because it was restored: the next read verifies
        the copy again (and quarantines it again if it is still bad). A copy
        whose place holds an intact record now stays in the quarantine.
        Returns ``(restored, kept)``. Raises `ConfigError` for an unknown id
        or a copy kept without its row's fields."""
        chain = self._async_chain()
        await chain.ensure_setup()
        known = await self.aquarantined() if any(isinstance(r, str) for r in records) else []
        return await chain.restore_quarantined(resolve_quarantined(records, known))

    async def aquarantined(self, thread_id: str | None = None) -> builtins.list[QuarantinedRecord]:
        """Quarantined copies, from every tier (one thread or all): bad copies
        met by reads, `repair` or the journal, and withdrawn checkpoints.
        Each carries its tier, id, reason and bytes; `restore_quarantined`
        puts them back."""
        chain = self._async_chain()
        await chain.ensure_setup()
        return [q for tier in chain.tiers for q in await tier.list_quarantine(thread_id)]

    async def arestore_outcomes(self, records: Sequence[QuarantinedRecord]) -> builtins.list[tuple[str, str]]:
        """What `restore_quarantined` would do with each of `records` now,
        changing nothing: ``(verdict, why)`` with verdict ``"restore"`` (put
        back: its place holds no intact copy), ``"keep"`` (an intact copy is
        in its place, after `repair` say: it stays quarantined) or
        ``"refuse"`` (it cannot be put back)."""
        return await self._async_chain().restore_outcomes(records)

    async def apurge_quarantined(
        self, older_than: float | timedelta, *, thread_id: str | None = None, dry_run: bool = False
    ) -> builtins.list[QuarantinedRecord]:
        """Delete for good, from every tier, the quarantined copies detected
        more than `older_than` (seconds, or a timedelta) ago: of `thread_id`,
        or of every thread. With `dry_run` nothing is deleted. Returns the
        copies purged (or that would be). A read-only saver refuses
        (`ConfigError`)."""
        self._may_purge()
        return await self._async_chain().purge_quarantined(
            seconds_above_zero(older_than), thread_id=thread_id, dry_run=dry_run
        )

    async def athread_ids(self) -> builtins.list[str]:
        """Every thread with a checkpoint or pending write in some tier,
        sorted: the union over the tiers, as `verify` walks them (so a tier
        that cannot be reached raises `TierUnavailable` rather than leaving
        its threads out). ``langgraph-durable threads`` lists them."""
        chain = self._async_chain()
        await chain.ensure_setup()
        return sorted({t for tier in chain.tiers for t in await tier.thread_ids()})

    async def amigrate(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        pace: float = 0.0,
        progress: Callable[[int, int], None] | None = None,
    ) -> MigrationReport:
        """Bring idle threads (all, or `thread_ids`) up to this saver's
        state version now, as a run would before resuming each: under its
        writer lease, written as a new checkpoint with the old one pinned.
        With `dry_run`, say what would change and write nothing. `pace`
        seconds between threads spare the tiers. A thread a run holds is
        left (``busy``), as is one archived (migrated when it is brought
        back); one a step fails on keeps its state (``failed``, the error in
        ``detail``). Running it again after a kill carries on: migrated
        threads are ``current``."""
        migrations = self.migrations
        if migrations is None:
            raise ConfigError(
                "migrate needs the app's migrations: DurableSaver(..., migrations=Migrations(version=N, ...)), "
                "or on the command line --migrations module:attribute."
            )
        if not dry_run and self.read_only:
            raise ConfigError("this saver is read-only (read_only=True): migrate with dry_run=True, or a writable one.")
        archived = set(await self.aarchived_threads()) if self.archive_url is not None else set()
        every = thread_ids is None
        ids = sorted(set(await self.athread_ids()) | archived) if every else builtins.list(thread_ids or ())
        report = MigrationReport(migrations.version, dry_run=dry_run)
        chain = self._async_chain()
        leases = self._async_leases()
        for done, thread_id in enumerate(ids):
            if done and pace > 0:
                await asleep(pace)
            if progress is not None:
                progress(done, len(ids))
            if thread_id in archived:
                report.threads.append(ThreadMigration(thread_id, "archived", detail="migrated when brought back"))
                continue
            held = None
            if not dry_run:
                try:
                    held = await leases.hold(thread_id)
                except ThreadBusy as exc:
                    report.threads.append(ThreadMigration(thread_id, "busy", detail=str(exc)))
                    continue
            try:
                report.threads.append(await self._amigrate_one(chain, thread_id, held))
            finally:
                if held is not None:
                    await leases.unhold(held)
        if progress is not None:
            progress(len(ids), len(ids))
        return report

    async def _amigrate_one(self, chain: AsyncTierChain, thread_id: str, held: Lease | None) -> ThreadMigration:
        """`migrate` of one thread: under `held`, its lease, or (None) a dry run."""
        migrations = self.migrations
        dry_run = held is None
        assert migrations is not None
        tup = await chain.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        if tup is None:
            return ThreadMigration(thread_id, "empty", detail="no checkpoint in the root namespace")
        version = migrations.version_of(tup.metadata)
        latest = str(tup.checkpoint["id"])
        if version > migrations.version:
            return ThreadMigration(thread_id, "newer", version, checkpoint_id=latest)
        if version == migrations.version:
            return ThreadMigration(thread_id, "current", version, checkpoint_id=latest)
        if missing := migrations.missing(version):
            detail = f"no step from version {missing[0]}"
            return ThreadMigration(thread_id, "unreachable", version, detail=detail, checkpoint_id=latest)
        # A dry run holds no lease and writes nothing: its gate only plans.
        gate = self._aresume_gate(chain, held)
        try:
            migrated = await gate.upgrade(tup)
        except MigrationFailed as exc:
            return ThreadMigration(thread_id, "failed", version, detail=str(exc), checkpoint_id=latest)
        assert migrated is not None
        if dry_run:
            return ThreadMigration(
                thread_id, "would migrate", version, migrations.version, describe(migrated), checkpoint_id=latest
            )
        written = await gate._migrate(migrated)
        self._runtime.note_archive(thread_id)  # the archive's copy follows, as after a run's writes
        return ThreadMigration(
            thread_id, "migrated", version, migrations.version, describe(migrated), str(written.checkpoint["id"])
        )

    async def averify(
        self, thread_id: str | None = None, *, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        """Check every copy of every record in every tier (one thread or all).
        Changes nothing; `ScanReport.bad` lists each bad copy with its tier and key.
        With an archive, `ScanReport.archive` says which of its segments do
        not verify and which threads the hot tiers hold older than it does
        (rolled back, or lost everywhere), an `archive.reports.ArchiveCheck`.
        `progress(done, total)` is called after each thread."""
        report = await self._async_chain().scan(thread_id, repair=False, progress=progress)
        if self.archive_url is not None:
            report.archive = await self._aarchiver().check(None if thread_id is None else [thread_id])
        return report

    async def arepair(
        self, thread_id: str | None = None, *, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        """`verify`, then replace each bad copy with an intact copy from another
        tier (the bad bytes are quarantined first). Copies with no intact twin
        are listed in `ScanReport.unrestorable`."""
        return await self._async_chain().scan(thread_id, repair=True, progress=progress)

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
        """Apply `policy` (default: the saver's `retention=`) to these threads
        (default: every thread any tier holds), in every tier; with `dry_run`
        only count what would go. What a sweep never removes is listed in
        `RetentionPolicy`. Records still owed to the shared tiers are shipped
        first. A tier that cannot be reached raises `TierUnavailable` and
        leaves the threads not reached yet as they were; run it again.
        `progress(done, total)` runs after each thread, `pace()` before each
        (a rate limit: the background sweep's `retention_rate`); on the async
        face `pace()` may return an awaitable, which is awaited."""
        chosen = self._retention_policy(policy)
        chain = self._async_chain()
        leases = self._async_leases()
        when = time.time() if now is None else now
        hot_ids, archived_ids = await self._aretention_split(thread_ids)
        async with self._runtime.replicator.aexclusive():
            await chain.catch_up()  # what is owed first: nothing deleted is shipped later
            report = await chain.retain(
                chosen,
                hot_ids,
                now=when,
                dry_run=dry_run,
                progress=progress,
                pace=pace,
                # Another saver's kept lease of a thread it deletes or prunes (lease_linger).
                ask=self._aasking(leases.ask_kept_back, "apply_retention"),
            )
        if self.archive_url is not None:
            await self._aretain_archived(chosen, archived_ids, report, now=when, dry_run=dry_run, pace=pace)
        if chosen.archive_idle_after is not None:
            archived = await self.aarchive_idle(
                chosen.archive_idle_after, thread_ids=thread_ids, dry_run=dry_run, now=when, pace=pace
            )
            report.threads_archived = len(archived.archived)
        return report

    async def _aretention_split(
        self, thread_ids: Sequence[str] | None
    ) -> tuple[Sequence[str] | None, builtins.list[str]]:
        """A sweep's hot threads (None: every thread the hot tiers hold) and
        its archived ones: flagged in the hot tiers, listed in the archive."""
        if self.archive_url is None:
            return thread_ids, []
        archiver = self._aarchiver()
        if thread_ids is None:
            return None, await archiver.archived_threads()
        archived = [str(t) for t in thread_ids if await archiver.flag(str(t)) is not None]
        return [t for t in thread_ids if str(t) not in archived], archived

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
        """A sweep's archived threads, each judged on its archive copy
        (`Archiver.judge`) and passed over unread where the archived flag
        shows that no rule can touch it. One a rule changes is deleted
        (idle), or brought back, swept as a hot one and archived again; each
        under the thread's writer lease and only while its flag is the one
        judged, so a run or a pin that brought it back since wins. A thread
        whose copy was read and loses nothing has that noted in its flag
        (`Archiver.settle`)."""
        archiver = self._aarchiver()
        leases = self._async_leases()
        for thread_id in thread_ids:
            if pace is not None:
                if True:  # ASYNC
                    await amaybe_await(pace())
                else:
                    refuse_awaitable(pace(), "pace")
            judged = await archiver.judge(thread_id, policy, now)
            if judged is None:
                continue  # brought back since it was listed: the next sweep finds it hot
            report.add(judged.retained, unconfirmed=judged.unconfirmed)
            if dry_run or not (judged.acts or settles(judged)):
                continue
            await leases.ask_kept_back(thread_id, "apply_retention")  # see delete_thread
            try:
                lease = await leases.hold(thread_id)
            except ThreadBusy:
                left_alone(report, judged)  # a run has it: not idle, and swept hot by the next sweep
                continue
            try:
                if not judged.acts:
                    await archiver.settle(thread_id, judged, policy, now)
                    continue
                if await archiver.flag(thread_id) != judged.flag:
                    left_alone(report, judged)  # brought back meanwhile: the next sweep finds it hot
                    continue
                if judged.retained.thread_deleted:
                    await self._adelete_now(thread_id)
                    continue
                with self._runtime.archive_call("bring_back"):
                    await archiver.bring_back(thread_id)  # under the lease held here
                await self._aarchive_owe(thread_id)  # see prune
            finally:
                await leases.unhold(lease)
            undo_count(report, judged)  # counted again as the hot sweep finds it
            async with self._runtime.replicator.aexclusive():
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
                idle_after=idle_for(judged, now),
                now=now,
                **self._runtime.archiving_with(leases),
            )
            rearchived(thread_id, again)

    def _aasking(self, ask: Callable[[str, str], Any], what: str) -> Callable[[str], Any]:
        """`ask(thread_id, what)` before a thread is changed outside a run,
        the thread noted for the archive replica too."""

        async def asked(thread_id: str) -> Any:
            self._runtime.note_archive(thread_id)
            await self._aarchive_owe(thread_id)
            return await ask(thread_id, what)

        return asked

    async def _aarchive_owe(self, thread_id: str) -> None:
        """Before a deletion in the thread: noted in the hot tiers for the
        archive, so that it reaches the archive even when the object store
        is down now and this process exits before it answers again."""
        if self.archive_url is not None and not self.read_only:
            await self._aarchiver().owe(str(thread_id))

    async def _aarchive_forget(self, thread_id: str) -> None:
        """After `delete_thread`: the thread is no longer archived (the hot
        tiers' flag goes, so no read brings it back, whatever the object
        store says), and its archive copy goes with the replica's next pass."""
        if self.archive_url is None or self.read_only:
            return
        self._runtime.note_archive(thread_id)
        await self._aarchiver().forget(str(thread_id))

    async def _arefuse_archived(self, chain: AsyncTierChain, config: RunnableConfig) -> None:
        """A saver without an archive found nothing of the thread: if the
        system of record flags it archived (another saver of the store moved
        it there), `ThreadArchived`, before anything is written. One read of
        the system of record on such a miss, as a saver with an archive pays."""
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None or configurable.get("checkpoint_ns"):
            return  # a subgraph's first step: its thread's root namespace answered already
        await chain.ensure_setup()  # the store's key first, as any read
        for tier in chain.roles.by_authority():
            try:
                flagged = await tier.read_meta(archived_key(str(thread_id)))
                where = await tier.read_meta(ARCHIVE_META) if flagged is not None else None
            except TierUnavailable:
                continue
            if flagged is not None:
                raise thread_archived(str(thread_id), where, looking=self.archive_url is not None)
            return

    async def _abring_back_thread(self, thread_id: str) -> None:
        """If the thread is archived, bring it back (under its lease), for an
        operation on it that works on the hot tiers."""
        await self._abrought_back({"configurable": {"thread_id": str(thread_id)}})

    async def _abrought_back(self, config: RunnableConfig, *, held: bool = False) -> bool:
        """A read found nothing of the thread: if the hot tiers flag it
        archived, copy it back into them (one read of the system of record
        on such a miss; the object store only for an archived thread).
        Whether it did. Under the thread's writer lease: the caller's run's
        (`held`), this saver's kept one, or taken for it."""
        if self.archive_url is None or self.read_only:
            await self._arefuse_archived(self._async_chain(), config)
        thread_id = self._archived_thread_of(config)
        if thread_id is None:
            return False
        leases = self._async_leases()
        mine = held or self._runtime.lease_token(config)[0] is not None
        hold, release = (None, None) if mine else (leases.hold, leases.unhold)
        archiver = self._aarchiver()
        if await archiver.flag(thread_id) is None:
            return False
        with self._runtime.archive_call("bring_back"):
            if not await archiver.bring_back(thread_id, hold=hold, release=release):
                return False
        self._runtime.archive_restores += 1
        self._runtime.note_archive(thread_id)
        return True

    async def aarchive_idle(
        self,
        older_than: float,
        *,
        thread_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        now: float | None = None,
        pace: Callable[[], Any] | None = None,
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
        archiver = self._aarchiver()
        leases = self._async_leases()
        chain = archiver.chain
        await chain.ensure_setup()
        report = ArchiveReport(dry_run=dry_run)
        when = time.time() if now is None else now
        ids = sorted({t for tier in chain.tiers for t in await tier.thread_ids()}) if thread_ids is None else thread_ids
        async with self._runtime.replicator.aexclusive():
            await chain.catch_up()  # what is owed first: the hot tiers hold everything
        return await archiver.archive_threads(
            ids, report, idle_after=older_than, now=when, pace=pace, **self._runtime.archiving_with(leases)
        )

    async def apromote_local(self, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Give a store that ran on SQLite alone its shared tiers: copy every
        thread the local file holds (checkpoints, channel values, pending
        writes, ledger entries) into Redis and Postgres, sealed with the
        store's key, each record as it is. Until it has, a saver given both
        the file and shared tiers refuses to start (`ConfigError`), so no
        replica serves part of a thread's history. Safe to run again, and
        to resume after an interruption. The threads copied
        (``langgraph-durable promote``)."""
        return await self._async_chain().promote_local(progress)

    async def aneeds_promote(self) -> bool:
        """Whether this saver has shared tiers and its SQLite file holds the
        history of a store that ran on it alone, not copied there yet: what
        `promote_local` (``langgraph-durable promote``) does. Until it has,
        a saver given both refuses to start."""
        chain = self._async_chain()
        if chain.local is None or not chain.shared:
            return False
        return await chain.local.read_meta(EMBEDDED_META) is not None

    async def aarchived_threads(self) -> builtins.list[str]:
        """Threads that live only in the archive (``threads --archived``)."""
        return await self._aarchiver().archived_threads()

    async def arestore(self, thread_ids: Sequence[str] | None = None, *, until: float | None = None) -> RestoreReport:
        """Rebuild the hot tiers from the archive, after they were lost: every
        thread it holds (or `thread_ids`), as of the newest segment (or the
        newest written by `until`, seconds since the epoch: a point in time,
        to the replica's pass). With every thread, archived threads stay
        archived (the hot tiers get their marker back); a thread named is
        brought back, under its writer lease (`ThreadBusy` while a run holds
        it). Safe to run again; ``langgraph-durable restore`` runs it."""
        leases = self._async_leases()
        return await self._aarchiver().restore(thread_ids, until=until, hold=leases.hold, release=leases.unhold)

    async def adrain_archive(self, timeout: float | None = None) -> ArchiveLag | None:
        """Ship every thread written since the archive replica's last pass
        now, for up to `timeout` seconds. What is still behind (None without
        an archive)."""
        if True:  # ASYNC
            return await asyncio.to_thread(self._runtime.drain_archive, timeout)
        else:
            return self._runtime.drain_archive(timeout)

    async def apin(self, config: RunnableConfig, *, label: str = "", check: bool = True) -> Pin:
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
            tup = await self.aget_tuple(cast(RunnableConfig, target))
            if tup is None:
                raise ConfigError(f"pin: thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'} to pin.")
            checkpoint_id = tup.config["configurable"]["checkpoint_id"]
        assert checkpoint_id is not None
        await self._async_chain().record_entry(thread_id, pin_entry(ns, checkpoint_id, label))
        self._runtime.note_archive(thread_id)
        return Pin(thread_id, ns, checkpoint_id, label, time.time())

    async def aunpin(self, config: RunnableConfig) -> bool:
        """Remove the pin of the checkpoint `config` names. Whether there was one."""
        thread_id, ns, checkpoint_id = self._pin_target(config)
        if not checkpoint_id:
            raise ConfigError("unpin: name the checkpoint (configurable checkpoint_id), as pin() returned it.")
        chain = self._async_chain()
        entry = (await chain.ledger_entries(thread_id)).get(pin_key(ns, checkpoint_id))
        if entry is None or entry.state != "intent":
            return False
        await chain.record_entry(thread_id, unpin_entry(entry))
        self._runtime.note_archive(thread_id)
        return True

    async def apins(self, thread_id: str) -> builtins.list[Pin]:
        """The thread's pinned checkpoints, oldest pin first."""
        return await self._async_chain().pins(thread_id)

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
        what was written stays and is skipped next time.

        On the async face an AsyncSqliteSaver or AsyncPostgresSaver is read
        from its tables, and any other async-capable saver (InMemorySaver,
        ...) through its own async listing."""
        leases = self._async_leases()
        return await AsyncImporter(
            source,
            list_target=self.alist,
            get_target=self.aget_tuple,
            put=leases.put,
            put_writes=leases.put_writes,
            tables=sources.async_tables(source),
            allow=allow,
            merge=merge,
            thread_prefix=thread_prefix,
            verify=verify,
            progress=progress,
        ).run()

    async def arelease_thread(self, thread_id: str) -> None:
        """Give back this saver's writer lease of `thread_id` now. Not needed
        after a run: a run gives its lease back when it ends, or keeps it
        (``lease_linger``) until another replica asks for it. A run of this
        saver still going on the thread gets `LeaseLost` at its next write.
        Raises `TierUnavailable` if the lease tier cannot be reached (the
        lease then expires by itself after ``lease_ttl``)."""
        await self._async_leases().release(str(thread_id))
