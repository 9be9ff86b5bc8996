"""The tier chain: every decision about which tier to read, write and repair.

Tiers are ordered nearest first (local SQLite, Redis, Postgres). Records are
immutable, so any tier that has a verified copy may serve it; only "which
checkpoint is latest" and "which writes exist" can go stale, and those are
asked of the most authoritative reachable tier (the farthest one).

This file is the async source. ``chain.py`` is generated from it by
``tools/generate_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    copy_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6

from .codec import DEFAULT_MAX_ID_BYTES, RecordCodec, check_key_part, thread_id_of, thread_of, version_key
from .concurrency import ALock, amaybe_await, arun_all
from .errors import ConfigError, DurableError, ResumeRejected, TierUnavailable
from .integrity import (
    Incident,
    IntegrityPolicy,
    ScanReport,
    record_label,
)
from .lease import Fence
from .ledger import LedgerEntry, unconfirmed_message
from .maintenance_async import AsyncMaintenance
from .reads_async import AsyncTierReader
from .records import BadRecord, BlobRow, CheckpointRow, WriteRow, row_fields
from .scan_async import AsyncScanner
from .tiers.base import KEYS_META, QuarantinedRecord, key_mismatch_message, pack_fields
from .tiers.sqlite import AsyncSqliteTier
from .validation import Reject, Rewind, ValidationHook, ValidationOutcome, make_context, validator_name

logger = logging.getLogger("langgraph_durable")

Tier = Any  # AsyncSqliteTier | AsyncRedisTier | AsyncPostgresTier: same method names
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
        shared: Sequence[Tier],
        codec: RecordCodec,
        policy: IntegrityPolicy | None = None,
    ) -> None:
        if local is None and not shared:
            raise ConfigError("at least one tier is needed: pass sqlite=, redis= or postgres=.")
        self.local = local
        self.shared = list(shared)
        self.tiers: list[Tier] = ([local] if local is not None else []) + self.shared
        self.codec = codec
        self.policy = policy or IntegrityPolicy()
        self.reads = AsyncTierReader(self.tiers, codec, self.policy)
        self.maintenance = AsyncMaintenance(self.tiers, codec, self.reads)
        self._views: dict[int, AsyncTierChain] = {}
        self._ready = False
        # First use may come from many tasks (or threads) at once; the pools
        # must be opened and the schema migrated exactly once.
        self._setup_lock = ALock()

    def with_codec(self, codec: RecordCodec) -> AsyncTierChain:
        """This chain decoding with `codec` (a `with_allowlist` clone's): the
        same tiers and connections, another serializer."""
        if codec is self.codec:
            return self
        view = self._views.get(id(codec))
        if view is None or view.codec is not codec:
            view = copy.copy(self)
            view.codec = codec
            view.reads = AsyncTierReader(self.tiers, codec, self.policy)
            view.maintenance = AsyncMaintenance(self.tiers, codec, view.reads)
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
        for tier in self.tiers:
            await tier.setup()
        await self._check_keys()
        await self._replay_journal()
        self._ready = True

    async def _check_keys(self) -> None:
        """Refuse to run with a signing key that does not match the store.

        Each tier records the fingerprints of the keys its records may be
        sealed with. A saver with another key would see every record fail its
        checksum and take it all for corruption; this is a configuration
        error, found before anything is read or quarantined."""
        accepted = self.codec.fingerprints
        stored: list[tuple[Tier, set[str] | None]] = []
        for tier in self.tiers:
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
            if fingerprints != union:
                await tier.write_meta(KEYS_META, ",".join(sorted(union)))

    async def close(self) -> None:
        # The local tier is shared by both faces; the saver closes it.
        for tier in self.shared:
            await tier.close()

    async def _replay_journal(self) -> None:
        """Push to the shared tiers what a crash left unacknowledged, in
        order. Every record is verified first: a damaged or planted local row
        is quarantined (locally) and never shipped, and never blocks startup."""
        if self.local is None or not self.shared:
            return
        local = self.local
        for seq, kind, thread_id, ns, cid, task_id in await local.pending_journal():
            try:
                if kind == "checkpoint":
                    row = await local.read_checkpoint(thread_id, ns, cid)
                    if row is not None:
                        blobs = await self._verified_local_blobs(row)
                        _raise_first(
                            await arun_all([functools.partial(t.write_checkpoint, row, blobs) for t in self.shared])
                        )
                else:
                    rows = [w for w in await local.read_writes(thread_id, ns, [cid]) if w.task_id == task_id]
                    good = []
                    for w in rows:
                        try:
                            self.codec.decode_write(w)
                        except BadRecord as exc:
                            await self._quarantine_local("write", w, exc.reason)
                            continue
                        good.append(w)
                    _raise_first(await arun_all([functools.partial(t.write_writes, good, False) for t in self.shared]))
            except BadRecord as exc:
                logger.error(
                    "journal entry %s (%s %s/%s/%s) was not shipped: %s", seq, kind, thread_id, ns, cid, exc.reason
                )
            await local.journal_done(seq)
            logger.info("replayed journal entry %s (%s %s/%s/%s) to the shared tiers", seq, kind, thread_id, ns, cid)

    async def _verified_local_blobs(self, row: CheckpointRow) -> list[BlobRow]:
        """A journaled checkpoint's local row and channel values, verified.
        Raises `BadRecord` (after quarantining the bad copy) when any fails."""
        assert self.local is not None
        try:
            checkpoint, _ = self.codec.decode_checkpoint(row)
        except BadRecord as exc:
            await self._quarantine_local("checkpoint", row, exc.reason)
            raise
        keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
        blobs = list((await self.local.read_blobs(row.thread_id, row.checkpoint_ns, keys)).values())
        for blob in blobs:
            try:
                self.codec.decode_blob(blob)
            except BadRecord as exc:
                await self._quarantine_local("blob", blob, exc.reason)
                raise BadRecord(f"its channel value {blob.channel} @ {blob.version} is damaged ({exc.reason})") from exc
        return blobs

    async def _quarantine_local(self, kind: str, row: Any, reason: str) -> None:
        assert self.local is not None
        await self.local.quarantine(
            row.thread_id, row.checkpoint_ns, kind, record_label(kind, row), reason, row.envelope,
            pack_fields(row_fields(row)),
        )  # fmt: skip
        await self.local.remove_copy(kind, row)
        logger.error("local %s %s is damaged (%s): quarantined, not shipped", kind, record_label(kind, row), reason)

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
        """With a `fence` (lease.py) the most authoritative tier is written
        first, alone, and only if the thread's lease still matches the fence;
        else it raises `LeaseLost` and no tier has the checkpoint."""
        # Serialize before touching any tier: a bad value writes nothing.
        row, blobs = self.codec.encode_checkpoint(config, checkpoint, metadata, new_versions)
        await self.ensure_setup()
        fenced = await self._fenced_first(fence, lambda t: t.write_checkpoint(row, blobs, fence=fence))
        shared = [t for t in self.shared if t not in fenced]
        seq = None
        if self.local is not None and self.local not in fenced:
            seq = await self.local.write_checkpoint(row, blobs, journal=bool(shared))
        results = await arun_all([functools.partial(t.write_checkpoint, row, blobs) for t in shared])
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            # Write-through means all or nothing: take the checkpoint back out
            # of every tier that accepted it, so no tier serves a checkpoint
            # the caller was told failed. Blobs stay: they are immutable and
            # unreachable without the checkpoint.
            took = fenced + [t for t, r in zip(shared, results) if not isinstance(r, BaseException)]
            if self.local is not None and self.local not in fenced:
                took.insert(0, self.local)
            for tier in took:
                try:
                    await tier.delete_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
                except DurableError as exc:
                    logger.error("could not withdraw checkpoint %s from %s: %s", row.checkpoint_id, tier.name, exc)
            if self.local is not None:
                await self.local.journal_done(seq)
            raise failed[0]
        if self.local is not None:
            await self.local.journal_done(seq)
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
        """`fence`: as for `put` (a refused write reaches no tier)."""
        rows, upsert = self.codec.encode_writes(config, writes, task_id, task_path)
        if not rows:
            return
        await self.ensure_setup()
        fenced = await self._fenced_first(fence, lambda t: t.write_writes(rows, upsert, fence=fence))
        shared = [t for t in self.shared if t not in fenced]
        seq = None
        if self.local is not None and self.local not in fenced:
            seq = await self.local.write_writes(rows, upsert, journal=bool(shared))
        # No withdrawal on failure, unlike put(): writes are only ever read
        # from the authoritative tier, so a copy that reached only a nearer
        # tier is invisible, and retrying is idempotent.
        results = await arun_all([functools.partial(t.write_writes, rows, upsert) for t in shared])
        if self.local is not None:
            await self.local.journal_done(seq)
        _raise_first(results)

    async def _fenced_first(self, fence: Fence | None, write: Callable[[Tier], Any]) -> list[Tier]:
        """A fenced write (lease.py) goes to the lease tier first, alone: reads
        take the union of what every tier holds and repair the gaps, so a
        write the fence refuses (`LeaseLost`) must reach no tier at all. The
        tiers written, for the caller to skip."""
        if fence is None:
            return []
        await write(self.tiers[-1])
        return [self.tiers[-1]]

    # -- reads ----------------------------------------------------------------------

    async def _authority(self, what: str, call: Callable[[Tier], Any]) -> Any:
        """Ask the farthest reachable tier; nearer ones answer only when it is down."""
        return (await self._authority_tier(what, call))[1]

    async def _authority_tier(self, what: str, call: Callable[[Tier], Any]) -> tuple[Tier, Any]:
        """`_authority`, also naming the tier that answered."""
        last: TierUnavailable | None = None
        for i, tier in enumerate(reversed(self.tiers)):
            try:
                result = await call(tier)
            except TierUnavailable as exc:
                last = exc
                continue
            if i:
                logger.warning("degraded read: %s answered by %s (%s)", what, tier.name, last)
            return tier, result
        assert last is not None
        raise last

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

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = thread_of(config, what="get_tuple")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        await self.ensure_setup()
        return await self.reads.get_tuple(thread_id, ns, configurable.get("checkpoint_id"))

    async def list_tuples(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]:
        configurable = (config or {}).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        thread_id = thread_id_of(thread_id, what="list") if thread_id is not None else None
        ns = configurable.get("checkpoint_ns")  # absent: every namespace
        if ns:
            check_key_part(ns, what="list: checkpoint_ns", limit=None)
        cid = configurable.get("checkpoint_id")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        await self.ensure_setup()
        return await self.reads.list_tuples(thread_id, ns, cid, before_id, filter, limit)

    # -- non-resumable actions and resume validation ----------------------------------

    async def actions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's action ledger, reconciled across the tiers."""
        thread_id = thread_id_of(thread_id, what="actions")
        await self.ensure_setup()
        return await self.reads.ledger(thread_id)

    async def record_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write one ledger entry through every tier before returning: an
        intent must be durable before the action runs."""
        check_key_part(entry.key, what="action key", limit=DEFAULT_MAX_ID_BYTES)
        envelope = self.codec.encode_ledger(thread_id, entry)
        await self.ensure_setup()
        await self._everywhere(lambda t: t.write_ledger(thread_id, entry.key, envelope))

    async def validate(
        self, tup: CheckpointTuple, validators: Sequence[Any], hook: ValidationHook | None
    ) -> CheckpointTuple:
        """The checkpoint a run may resume from, given `tup`, the one it asked
        for: `tup` itself, an earlier one (rewind), or `ResumeRejected`."""
        configurable = tup.config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "") or ""
        requested = tup.checkpoint["id"]
        decisions: list[tuple[str, Any]] = []

        def outcome(resumed_from: str | None) -> None:
            if hook is None:
                return
            try:
                hook(ValidationOutcome(thread_id, requested, resumed_from, tuple(decisions)))
            except Exception:  # a hook never breaks a run
                logger.exception("on_validation hook failed")

        unconfirmed = sorted(k for k, e in (await self.actions(thread_id)).items() if e.escalated())
        if unconfirmed:
            decisions.append(("unconfirmed_actions", Reject(unconfirmed_message(thread_id, unconfirmed))))
            outcome(None)
            raise ResumeRejected(
                unconfirmed_message(thread_id, unconfirmed),
                reason="unconfirmed non-resumable action",
                checkpoint_id=requested,
                checkpoint=tup,
                validator="unconfirmed_actions",
                actions=unconfirmed,
            )
        candidate = tup
        while True:
            context = make_context(candidate)
            decision: Any = None
            name = ""
            for v in validators:
                name = validator_name(v)
                decision = await amaybe_await(v(context))
                decisions.append((name, decision))
                if decision is not None:
                    break
            if decision is None:
                if candidate is not tup:
                    candidate = await self._fork(candidate, requested)
                outcome(candidate.checkpoint["id"])
                return candidate
            if isinstance(decision, Rewind):
                target = decision.checkpoint_id
                if target is None and candidate.parent_config is not None:
                    target = candidate.parent_config["configurable"]["checkpoint_id"]
                previous = None
                if target is not None and target < candidate.checkpoint["id"]:
                    previous = await self.get_tuple(
                        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": target}}
                    )
                if previous is not None:
                    logger.info("validator %s rewinds thread %r: %s", name, thread_id, decision.reason)
                    candidate = previous
                    continue
                decision = Reject(f"{decision.reason}; and no earlier checkpoint to rewind to")
            if not isinstance(decision, Reject):
                raise ConfigError(f"validator {name} returned {decision!r}: return None, rewind(...) or reject(...).")
            outcome(None)
            raise ResumeRejected(
                f"resuming thread {thread_id!r} from checkpoint {candidate.checkpoint['id']} was rejected by "
                f"{name}: {decision.reason}",
                reason=decision.reason,
                checkpoint_id=candidate.checkpoint["id"],
                checkpoint=candidate,
                validator=name,
            )

    async def _fork(self, target: CheckpointTuple, rewound_from: str) -> CheckpointTuple:
        """A rewind resumes from a fresh fork of `target`: the same state, no
        pending writes, so the tasks that ran on it run again in the world as
        it is now. The abandoned branch stays in the history."""
        configurable = target.config["configurable"]
        checkpoint = copy_checkpoint(target.checkpoint)
        checkpoint["id"] = str(uuid6())
        checkpoint["ts"] = datetime.now(UTC).isoformat()
        metadata = cast(CheckpointMetadata, {**target.metadata, "source": "fork", "rewound_from": rewound_from})
        stored = await self.put(dict(target.config), checkpoint, metadata, {})  # type: ignore[arg-type]
        logger.warning(
            "thread %r rewound from %s to %s (resuming from fork %s)",
            configurable["thread_id"],
            rewound_from,
            target.checkpoint["id"],
            checkpoint["id"],
        )
        return CheckpointTuple(stored, checkpoint, metadata, target.config, [])

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
        """Put quarantined copies back into their tiers' live tables; the next
        read verifies them again. A copy whose slot holds an intact record
        now is not put back over it (it stays quarantined). Returns
        (restored, kept)."""
        await self.ensure_setup()
        by_name = {t.name: t for t in self.tiers}
        restored: list[QuarantinedRecord] = []
        kept: list[QuarantinedRecord] = []
        for q in records:
            tier = by_name.get(q.tier)
            if tier is None:
                raise ConfigError(
                    f"quarantined record {q.tier}:{q.id} is in the {q.tier} tier, which this saver has not configured."
                )
            row = q.row()
            if row is None:
                raise ConfigError(
                    f"quarantined record {q.tier}:{q.id} ({q.kind} {q.key}) was kept without the fields of its row, "
                    "so it cannot be put back; it stays in the quarantine for inspection."
                )
            if await self._intact_in(tier, row):
                kept.append(q)
                continue
            if isinstance(row, CheckpointRow):
                await tier.write_checkpoint(row, [])
            elif isinstance(row, BlobRow):
                await tier.write_blobs([row])
            else:
                await tier.write_writes([row], True)
            await tier.drop_quarantined([q.id])
            restored.append(q)
        return restored, kept

    async def _intact_in(self, tier: Tier, row: Any) -> bool:
        """Whether `tier` holds an intact copy of `row`'s record right now."""
        try:
            if isinstance(row, CheckpointRow):
                live = await tier.read_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
                if live is not None:
                    self.codec.decode_checkpoint(live)
            elif isinstance(row, BlobRow):
                live = (await tier.read_blobs(row.thread_id, row.checkpoint_ns, [(row.channel, row.version)])).get(
                    (row.channel, row.version)
                )
                if live is not None:
                    self.codec.decode_blob(live)
            else:
                rows = await tier.read_writes(row.thread_id, row.checkpoint_ns, [row.checkpoint_id])
                live = next((w for w in rows if (w.task_id, w.idx) == (row.task_id, row.idx)), None)
                if live is not None:
                    self.codec.decode_write(live)
        except BadRecord:
            return False
        return live is not None

    # -- maintenance -------------------------------------------------------------------

    async def _everywhere(self, call: Callable[[Tier], Any]) -> None:
        _raise_first(await arun_all([functools.partial(call, t) for t in self.tiers]))

    async def delete_thread(self, thread_id: str) -> None:
        await self.ensure_setup()
        await self.maintenance.delete_thread(thread_id)

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        await self.ensure_setup()
        await self.maintenance.delete_for_runs(run_ids)

    async def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.ensure_setup()
        await self.maintenance.copy_thread(source_thread_id, target_thread_id)

    async def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
        await self.ensure_setup()
        await self.maintenance.prune(thread_ids, strategy=strategy)


def _reasons(incidents: Sequence[Incident]) -> list[str]:
    return [f"{i.tier.name if i.tier is not None else 'every tier'}: {i.key}: {i.reason}" for i in incidents]
