"""The tier chain: every decision about which tier to read, write and repair.

Tiers are ordered nearest first (local SQLite, Redis, Postgres). Records are
immutable, so any tier that has a verified copy may serve it; only "which
checkpoint is latest" and "which writes exist" can go stale, and those are
asked of the most authoritative reachable tier (the farthest one).

This file is the async source. ``chain.py`` is generated from it by
``tools/generate_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar, cast

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

from .codec import RecordCodec, assemble_tuple, thread_of, version_key
from .concurrency import ALock, amaybe_await, arun_all
from .errors import ConfigError, CorruptCheckpoint, DurableError, ResumeRejected, TierUnavailable
from .integrity import (
    BadCopy,
    CorruptionEvent,
    Incident,
    IntegrityPolicy,
    ScanReport,
    Unusable,
    record_identity,
    record_label,
)
from .ledger import LedgerEntry, unconfirmed_message
from .records import BadRecord, BlobRow, CheckpointRow, WriteRow, metadata_matches
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
        self._ready = False
        # First use may come from many tasks (or threads) at once; the pools
        # must be opened and the schema migrated exactly once.
        self._setup_lock = ALock()

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
        await self._replay_journal()
        self._ready = True

    async def close(self) -> None:
        # The local tier is shared by both faces; the saver closes it.
        for tier in self.shared:
            await tier.close()

    async def _replay_journal(self) -> None:
        if self.local is None or not self.shared:
            return
        for seq, kind, thread_id, ns, cid, task_id in await self.local.pending_journal():
            if kind == "checkpoint":
                row = await self.local.read_checkpoint(thread_id, ns, cid)
                if row is not None:
                    checkpoint, _ = self.codec.decode_checkpoint(row)
                    keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
                    blobs = list((await self.local.read_blobs(thread_id, ns, keys)).values())
                    _raise_first(
                        await arun_all([functools.partial(t.write_checkpoint, row, blobs) for t in self.shared])
                    )
            else:
                rows = [w for w in await self.local.read_writes(thread_id, ns, [cid]) if w.task_id == task_id]
                _raise_first(await arun_all([functools.partial(t.write_writes, rows, False) for t in self.shared]))
            await self.local.journal_done(seq)
            logger.info("replayed journal entry %s (%s %s/%s/%s) to the shared tiers", seq, kind, thread_id, ns, cid)

    # -- writes -------------------------------------------------------------------

    async def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        # Serialize before touching any tier: a bad value writes nothing.
        row, blobs = self.codec.encode_checkpoint(config, checkpoint, metadata, new_versions)
        await self.ensure_setup()
        seq = None
        if self.local is not None:
            seq = await self.local.write_checkpoint(row, blobs, journal=bool(self.shared))
        results = await arun_all([functools.partial(t.write_checkpoint, row, blobs) for t in self.shared])
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            # Write-through means all or nothing: take the checkpoint back out
            # of every tier that accepted it, so no tier serves a checkpoint
            # the caller was told failed. Blobs stay: they are immutable and
            # unreachable without the checkpoint.
            took = [t for t, r in zip(self.shared, results) if not isinstance(r, BaseException)]
            if self.local is not None:
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
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        rows, upsert = self.codec.encode_writes(config, writes, task_id, task_path)
        if not rows:
            return
        await self.ensure_setup()
        seq = None
        if self.local is not None:
            seq = await self.local.write_writes(rows, upsert, journal=bool(self.shared))
        # No withdrawal on failure, unlike put(): writes are only ever read
        # from the authoritative tier, so a copy that reached only a nearer
        # tier is invisible, and retrying is idempotent.
        results = await arun_all([functools.partial(t.write_writes, rows, upsert) for t in self.shared])
        if self.local is not None:
            await self.local.journal_done(seq)
        _raise_first(results)

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

    async def _repair(self, tiers: Sequence[Tier], write: Callable[[Tier], Any]) -> None:
        """Copy a good record into tiers that lacked it or held a bad copy;
        a failure here never fails the read."""
        for tier in tiers:
            try:
                await write(tier)
            except DurableError as exc:
                logger.warning("read-repair into %s failed: %s", tier.name, exc)

    async def _checkpoint(self, thread_id: str, ns: str, cid: str, incidents: list[Incident]) -> Found | None:
        """A verified checkpoint row, nearest tier first, repairing the tiers
        before it. None if no tier has it; `Unusable` if every copy is bad."""
        lacking: list[Tier] = []
        bad: list[Incident] = []
        unreachable: TierUnavailable | None = None
        for tier in self.tiers:
            try:
                row = await tier.read_checkpoint(thread_id, ns, cid)
            except TierUnavailable as exc:
                unreachable = exc
                continue
            if row is None:
                lacking.append(tier)
                continue
            try:
                checkpoint, metadata = self.codec.decode_checkpoint(row)
            except BadRecord as exc:
                bad.append(Incident(tier, "checkpoint", thread_id, ns, f"checkpoint {cid}", exc.reason, row.envelope))
                lacking.append(tier)
                continue
            for incident in bad:
                incident.served = f"intact copy from {tier.name}"
            incidents.extend(bad)
            await self._repair(lacking, lambda t: t.write_checkpoint(row, []))
            return row, checkpoint, metadata
        incidents.extend(bad)
        if bad:
            # No parent pointer: the bad copies' own is not to be trusted.
            raise Unusable(thread_id, ns, cid, None, "the checkpoint record is damaged in every tier")
        if unreachable is not None and not lacking:
            raise unreachable
        return None

    async def _blobs(
        self, thread_id: str, ns: str, keys: Sequence[BlobKey], incidents: list[Incident]
    ) -> dict[BlobKey, tuple[BlobRow, Any]]:
        """Verified blobs (row and decoded value), nearest tier first. Keys
        no tier holds intact are absent from the result."""
        found: dict[BlobKey, tuple[BlobRow, Any]] = {}
        found_in: dict[BlobKey, str] = {}
        missing = list(dict.fromkeys(keys))
        lacking: list[Tier] = []
        bad: dict[BlobKey, list[Incident]] = defaultdict(list)
        for tier in self.tiers:
            if not missing:
                break
            try:
                rows = await tier.read_blobs(thread_id, ns, missing)
            except TierUnavailable:
                continue
            good: list[BlobRow] = []
            for key, brow in rows.items():
                try:
                    found[key] = (brow, self.codec.decode_blob(brow))
                    found_in[key] = tier.name
                    good.append(brow)
                except BadRecord as exc:
                    bad[key].append(
                        Incident(tier, "blob", thread_id, ns, f"channel {key[0]} @ {key[1]}", exc.reason, brow.envelope)
                    )
            # Repair the tiers before this one: they lacked these blobs or
            # held bad copies (a bad copy is overwritten).
            fix = lacking + [i.tier for key in rows if key in found for i in bad.get(key, []) if i.tier is not tier]
            if good:
                await self._repair(list(dict.fromkeys(fix)), lambda t: t.write_blobs(good))
            missing = [k for k in missing if k not in found]
            lacking.append(tier)
        for key, key_incidents in bad.items():
            if key in found:
                for incident in key_incidents:
                    incident.served = f"intact copy from {found_in[key]}"
            incidents.extend(key_incidents)
        return found

    async def _writes(
        self, thread_id: str, ns: str, cids: Sequence[str], incidents: list[Incident]
    ) -> tuple[dict[str, list[tuple[WriteRow, PendingWrite]]], dict[str, str]]:
        """Pending writes of these checkpoints, from the authoritative tier,
        and the checkpoints whose writes could not all be read intact."""
        source, rows = await self._authority_tier("pending writes", lambda t: t.read_writes(thread_id, ns, cids))
        out: dict[str, list[tuple[WriteRow, PendingWrite]]] = defaultdict(list)
        lost: dict[str, str] = {}
        for w in rows:
            try:
                out[w.checkpoint_id].append((w, self.codec.decode_write(w)))
            except BadRecord as exc:
                key = f"write {w.task_id}/{w.idx} of checkpoint {w.checkpoint_id}"
                incident = Incident(source, "write", thread_id, ns, key, exc.reason, w.envelope)
                good = await self._write_from_elsewhere(w, incident)
                incidents.append(incident)
                if good is None:
                    lost[w.checkpoint_id] = f"pending write {w.task_id}/{w.idx} is damaged in every tier"
                else:
                    out[w.checkpoint_id].append(good)
        return out, lost

    async def _write_from_elsewhere(self, bad: WriteRow, incident: Incident) -> tuple[WriteRow, PendingWrite] | None:
        """An intact copy of one pending write from any tier; repairs the tier
        that served the bad one."""
        for tier in reversed(self.tiers):
            try:
                rows = await tier.read_writes(bad.thread_id, bad.checkpoint_ns, [bad.checkpoint_id])
            except TierUnavailable:
                continue
            for w in rows:
                if (w.task_id, w.idx) != (bad.task_id, bad.idx):
                    continue
                if w == bad:  # the same damaged copy (damage may be in its key fields)
                    continue
                try:
                    decoded = self.codec.decode_write(w)
                except BadRecord:
                    continue
                incident.served = f"intact copy from {tier.name}"
                await self._repair([incident.tier], lambda t: t.write_writes([w], True))
                return w, decoded
        return None

    async def _assemble(self, found: Sequence[Found], incidents: list[Incident]) -> list[CheckpointTuple | Unusable]:
        """Attach channel values and pending writes, batched per (thread, ns).
        A checkpoint missing an intact value or write comes back `Unusable`."""
        groups: dict[tuple[str, str], list[Found]] = defaultdict(list)
        for item in found:
            groups[(item[0].thread_id, item[0].checkpoint_ns)].append(item)
        done: dict[tuple[str, str, str], CheckpointTuple | Unusable] = {}
        for (thread_id, ns), items in groups.items():
            keys = [(ch, version_key(v)) for _, cp, _ in items for ch, v in cp["channel_versions"].items()]
            blobs = await self._blobs(thread_id, ns, keys, incidents)
            writes, lost = await self._writes(thread_id, ns, [row.checkpoint_id for row, _, _ in items], incidents)
            for row, cp, md in items:
                cid = row.checkpoint_id
                absent = [
                    (ch, version_key(v))
                    for ch, v in cp["channel_versions"].items()
                    if (ch, version_key(v)) not in blobs
                ]
                for ch, v in absent:
                    key = f"channel {ch} @ {v}"
                    if not any(i.kind == "blob" and i.key == key for i in incidents):
                        incidents.append(Incident(None, "blob", thread_id, ns, key, "missing in every tier", b""))
                if absent or cid in lost:
                    names = ", ".join(f"{ch} @ {v}" for ch, v in absent)
                    what = lost.get(cid) or f"channel value(s) {names} missing or damaged in every tier"
                    done[(thread_id, ns, cid)] = Unusable(thread_id, ns, cid, row.parent_id, what)
                    continue
                values = {ch: blobs[(ch, version_key(v))][1] for ch, v in cp["channel_versions"].items()}
                done[(thread_id, ns, cid)] = assemble_tuple(row, cp, md, values, writes.get(cid, []))
        return [done[(r.thread_id, r.checkpoint_ns, r.checkpoint_id)] for r, _, _ in found]

    async def _serve(
        self, thread_id: str, ns: str, cid: str, incidents: list[Incident], *, latest: bool = False
    ) -> CheckpointTuple | None:
        """Checkpoint `cid`; if it cannot be assembled intact, its newest
        intact ancestor (the unusable ones are withdrawn from every tier).
        With `latest`, `cid` came from the authoritative tier's index, so a
        checkpoint no tier holds is a dangling entry, not an absent thread."""
        current: str | None = cid
        while current is not None:
            try:
                found = await self._checkpoint(thread_id, ns, current, incidents)
                if found is None:
                    if current == cid and not latest:
                        return None
                    incidents.append(
                        Incident(
                            None, "checkpoint", thread_id, ns, f"checkpoint {current}", "missing in every tier", b""
                        )
                    )
                    # A dangling index entry: no bad bytes to refuse, so even
                    # the raise policy falls back, as for a deleted record.
                    current = await self._fall_back(
                        Unusable(thread_id, ns, current, None, "it is listed but missing in every tier"),
                        incidents,
                        missing=True,
                    )
                    continue
                result = (await self._assemble([found], incidents))[0]
                if not isinstance(result, Unusable):
                    if current != cid:
                        for incident in incidents:
                            if incident.served is None:
                                incident.served = f"ancestor checkpoint {current}"
                    return result
                unusable = result
            except Unusable as exc:
                unusable = exc
            current = await self._fall_back(unusable, incidents)
        return None

    async def _fall_back(self, unusable: Unusable, incidents: list[Incident], *, missing: bool = False) -> str:
        """Withdraw an unusable checkpoint and name the one to try instead."""
        key = f"{unusable.thread_id}/{unusable.ns}/{unusable.checkpoint_id}"
        if self.policy.raise_on_loss and not missing:
            reasons = _reasons(incidents)
            await self._settle(incidents, "nothing: CorruptCheckpoint raised (on_corruption='raise')")
            raise CorruptCheckpoint(
                f"checkpoint {unusable.checkpoint_id!r} of thread {unusable.thread_id!r} (ns {unusable.ns!r}) "
                f"cannot be read intact: {unusable.what}. Run `langgraph-durable verify` for details, or use "
                "on_corruption='fallback' to resume from the newest intact checkpoint.",
                key=key,
                reasons=reasons,
            )
        previous = unusable.parent_id
        if previous is None or previous >= unusable.checkpoint_id:
            previous = await self._older(unusable.thread_id, unusable.ns, unusable.checkpoint_id)
        # Withdraw it everywhere, so "latest" moves back and nobody serves it;
        # its bad bytes go to quarantine when the read settles.
        await self._everywhere_reachable(
            lambda t: t.delete_checkpoint(unusable.thread_id, unusable.ns, unusable.checkpoint_id)
        )
        if previous is None:
            await self._no_ancestor(key, incidents)
        logger.error("checkpoint %s is unusable (%s); falling back to %s", key, unusable.what, previous)
        return previous

    async def _older(self, thread_id: str, ns: str, checkpoint_id: str) -> str | None:
        older = await self._authority(
            "ancestor", lambda t: t.list_checkpoints(thread_id, ns, None, checkpoint_id, None, 1)
        )
        return older[0].checkpoint_id if older else None

    async def _no_ancestor(self, key: str, incidents: list[Incident]) -> NoReturn:
        reasons = _reasons(incidents)
        await self._settle(incidents, "nothing: no intact ancestor")
        raise CorruptCheckpoint(
            f"checkpoint {key} cannot be read intact and has no intact ancestor. "
            "Run `langgraph-durable verify` to list the damaged records.",
            key=key,
            reasons=reasons,
        )

    async def _everywhere_reachable(self, call: Callable[[Tier], Any]) -> None:
        for result in await arun_all([functools.partial(call, t) for t in self.tiers]):
            if isinstance(result, TierUnavailable):
                logger.warning("%s", result)
            elif isinstance(result, BaseException):
                raise result

    async def _settle(self, incidents: list[Incident], default: str = "nothing") -> None:
        """Quarantine, log, count and report each bad copy met by a read."""
        for incident in incidents:
            tier_name = incident.tier.name if incident.tier is not None else "every tier"
            if incident.tier is not None:  # a record missing everywhere has no bytes to keep
                try:
                    await incident.tier.quarantine(
                        incident.thread_id,
                        incident.checkpoint_ns,
                        incident.kind,
                        incident.key,
                        incident.reason,
                        incident.envelope,
                    )
                except DurableError as exc:
                    logger.warning("could not quarantine a bad %s in %s: %s", incident.kind, tier_name, exc)
            self.policy.report(
                CorruptionEvent(
                    tier=tier_name,
                    kind=incident.kind,
                    thread_id=incident.thread_id,
                    checkpoint_ns=incident.checkpoint_ns,
                    key=incident.key,
                    reason=incident.reason,
                    served_instead=incident.served or default,
                )
            )
        incidents.clear()

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = thread_of(config, what="get_tuple")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        cid = configurable.get("checkpoint_id")
        await self.ensure_setup()
        if not cid:
            cid = await self._authority("latest checkpoint", lambda t: t.latest_id(thread_id, ns))
            if cid is None:
                return None
        incidents: list[Incident] = []
        try:
            return await self._serve(thread_id, ns, cid, incidents, latest=not configurable.get("checkpoint_id"))
        finally:
            await self._settle(incidents)

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
        thread_id = str(thread_id) if thread_id is not None else None
        ns = configurable.get("checkpoint_ns")  # absent: every namespace
        cid = configurable.get("checkpoint_id")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        await self.ensure_setup()
        rows = await self._authority(
            "checkpoint list", lambda t: t.list_checkpoints(thread_id, ns, cid, before_id, filter, limit)
        )
        incidents: list[Incident] = []
        try:
            found: list[Found] = []
            for row in rows:
                try:
                    item: Found | None = (row, *self.codec.decode_checkpoint(row))
                except BadRecord:
                    try:
                        item = await self._checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id, incidents)
                    except Unusable as exc:
                        await self._omit(exc, incidents)
                        continue
                if item is not None and metadata_matches(item[2], filter):
                    found.append(item)
            out = []
            for result in await self._assemble(found, incidents):
                if isinstance(result, Unusable):
                    await self._omit(result, incidents)
                    continue
                out.append(result)
                if limit is not None and len(out) >= limit:
                    break
            return out
        finally:
            await self._settle(incidents)

    async def _omit(self, unusable: Unusable, incidents: list[Incident]) -> None:
        """`list` leaves an unusable checkpoint out (or raises, by policy)."""
        if self.policy.raise_on_loss:
            await self._fall_back(unusable, incidents)  # raises
        await self._everywhere_reachable(
            lambda t: t.delete_checkpoint(unusable.thread_id, unusable.ns, unusable.checkpoint_id)
        )
        for incident in incidents:
            if incident.served is None:
                incident.served = f"left out of list: {unusable.what}"

    # -- non-resumable actions and resume validation ----------------------------------

    async def actions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's action ledger, from the authoritative tier."""
        await self.ensure_setup()
        raw = await self._authority("action ledger", lambda t: t.read_ledger(thread_id))
        out: dict[str, LedgerEntry] = {}
        for key, envelope in raw.items():
            try:
                out[key] = self.codec.decode_ledger(thread_id, key, envelope)
            except BadRecord as exc:
                out[key] = await self._ledger_from_elsewhere(thread_id, key, envelope, exc.reason)
        return out

    async def _ledger_from_elsewhere(self, thread_id: str, key: str, bad: bytes, reason: str) -> LedgerEntry:
        for tier in self.tiers:
            try:
                other = (await tier.read_ledger(thread_id)).get(key)
            except TierUnavailable:
                continue
            if other is None or other == bad:
                continue
            try:
                entry = self.codec.decode_ledger(thread_id, key, other)
            except BadRecord:
                continue
            logger.error("ledger entry %s/%s was damaged (%s); using the copy in %s", thread_id, key, reason, tier.name)
            return entry
        # Unknown whether the action ran: as unsafe as an unconfirmed one.
        raise CorruptCheckpoint(
            f"the ledger entry for action {key!r} of thread {thread_id!r} is damaged in every tier ({reason}); "
            "whether the action ran is unknown. Record the answer with resolve_action().",
            key=f"{thread_id}/ledger/{key}",
            reasons=[reason],
        )

    async def record_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write one ledger entry through every tier before returning: an
        intent must be durable before the action runs."""
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
        """Verify every copy of every record in every tier (one thread or all).
        With `repair`, replace each bad copy by an intact copy from another
        tier (the bad bytes go to quarantine first)."""
        await self.ensure_setup()
        if thread_id is not None:
            threads = [str(thread_id)]
        else:
            names: set[str] = set()
            for tier in self.tiers:
                names.update(await tier.thread_ids())
            threads = sorted(names)
        report = ScanReport(threads=len(threads))
        decoders: dict[str, Callable[[Any], Any]] = {
            "checkpoint": self.codec.decode_checkpoint,
            "blob": self.codec.decode_blob,
            "write": self.codec.decode_write,
        }
        for done, t in enumerate(threads, 1):
            intact: dict[tuple[Any, ...], Any] = {}
            bad: list[tuple[Tier, Any, BadCopy]] = []
            for tier in self.tiers:
                records = await tier.thread_records(t)
                for kind, rows in (
                    ("checkpoint", records.checkpoints),
                    ("blob", records.blobs),
                    ("write", records.writes),
                ):
                    for row in rows:
                        report.copies_checked += 1
                        try:
                            decoders[kind](row)
                        except BadRecord as exc:
                            copy = BadCopy(tier.name, kind, t, row.checkpoint_ns, record_label(kind, row), exc.reason)  # type: ignore[arg-type]
                            bad.append((tier, row, copy))
                            continue
                        intact.setdefault(record_identity(kind, row), row)
            for tier, row, copy in bad:
                report.bad.append(copy)
                if not repair:
                    continue
                good = intact.get(record_identity(copy.kind, row))
                if good is None:
                    report.unrestorable.append(copy)
                    continue
                await tier.quarantine(t, copy.checkpoint_ns, copy.kind, copy.key, copy.reason, row.envelope)
                if copy.kind == "checkpoint":
                    await tier.write_checkpoint(good, [])
                elif copy.kind == "blob":
                    await tier.write_blobs([good])
                else:
                    await tier.write_writes([good], True)
                report.restored.append(copy)
            if progress is not None:
                progress(done, len(threads))
        return report

    # -- maintenance -------------------------------------------------------------------

    async def _everywhere(self, call: Callable[[Tier], Any]) -> None:
        _raise_first(await arun_all([functools.partial(call, t) for t in self.tiers]))

    async def delete_thread(self, thread_id: str) -> None:
        await self.ensure_setup()
        await self._everywhere(lambda t: t.delete_thread(str(thread_id)))

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        await self.ensure_setup()
        ids = [str(r) for r in run_ids]
        await self._everywhere(lambda t: t.delete_for_runs(ids))

    async def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, channel value and pending write, with the
        same checkpoint ids, re-sealed under the target thread's keys."""
        src, dst = str(source_thread_id), str(target_thread_id)
        await self.ensure_setup()
        rows = await self._authority("copy source", lambda t: t.list_checkpoints(src, None, None, None, None, None))
        by_ns: dict[str, list[CheckpointRow]] = defaultdict(list)
        for row in rows:
            by_ns[row.checkpoint_ns].append(row)
        incidents: list[Incident] = []
        try:
            for ns, ns_rows in by_ns.items():
                await self._copy_namespace(src, dst, ns, ns_rows, incidents)
        finally:
            await self._settle(incidents, "not copied")

    async def _copy_namespace(
        self, src: str, dst: str, ns: str, rows: Sequence[CheckpointRow], incidents: list[Incident]
    ) -> None:
        """Copy the checkpoints of one namespace that can be read intact."""
        candidates: list[Found] = []
        for row in rows:
            try:
                found = await self._checkpoint(src, ns, row.checkpoint_id, incidents)
            except Unusable:
                continue
            if found is not None:
                candidates.append(found)
        keys = [(ch, version_key(v)) for _, cp, _ in candidates for ch, v in cp["channel_versions"].items()]
        blob_map = await self._blobs(src, ns, keys, incidents)
        written, lost = await self._writes(src, ns, [r.checkpoint_id for r, _, _ in candidates], incidents)
        verified = [
            (row, cp, md)
            for row, cp, md in candidates
            if row.checkpoint_id not in lost
            and all((ch, version_key(v)) in blob_map for ch, v in cp["channel_versions"].items())
        ]
        blobs = [self._rekey(b, dst) for b, _ in blob_map.values()]
        writes = [self._rekey(w, dst) for cid, pairs in written.items() if cid not in lost for w, _ in pairs]
        checkpoints = [self._rekey(r, dst) for r, _, _ in sorted(verified, key=lambda item: item[0].checkpoint_id)]
        # Blobs, then checkpoints oldest first, then writes: a reader never
        # sees a checkpoint whose values are not there yet.
        await self._everywhere(lambda t: t.write_blobs(blobs))
        for row in checkpoints:
            await self._everywhere(functools.partial(_write_checkpoint, row))
        await self._everywhere(lambda t: t.write_writes(writes, True))

    def _rekey(self, row: RowT, thread_id: str) -> RowT:
        """The same record under another thread, its envelope re-sealed."""
        moved = replace(row, thread_id=thread_id)
        return replace(moved, envelope=self.codec.reseal(row.context, moved.context, row.envelope))

    async def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
        await self.ensure_setup()
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                await self._everywhere(lambda t: t.delete_thread(thread_id))
                continue
            rows = await self._authority("prune", lambda t: t.list_checkpoints(thread_id, None, None, None, None, None))
            latest: dict[str, CheckpointRow] = {}
            for row in rows:  # newest first
                latest.setdefault(row.checkpoint_ns, row)
            keep: set[tuple[str, str]] = set()
            keep_blobs: set[tuple[str, str, str]] = set()
            incidents: list[Incident] = []
            try:
                for ns, row in latest.items():
                    # The newest *intact* checkpoint survives, never a damaged one.
                    tup = await self._serve(thread_id, ns, row.checkpoint_id, incidents)
                    if tup is None:
                        continue
                    keep.add((ns, tup.checkpoint["id"]))
                    keep_blobs.update((ns, ch, version_key(v)) for ch, v in tup.checkpoint["channel_versions"].items())
            finally:
                await self._settle(incidents)
            await self._everywhere(lambda t: t.prune(thread_id, keep, keep_blobs))


def _reasons(incidents: Sequence[Incident]) -> list[str]:
    return [f"{i.tier.name if i.tier is not None else 'every tier'}: {i.key}: {i.reason}" for i in incidents]


async def _write_checkpoint(row: CheckpointRow, tier: Tier) -> None:
    await tier.write_checkpoint(row, [])
