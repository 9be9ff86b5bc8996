"""`verify` and `repair`: every copy of every record in every tier.

Reads only check what they touch; a scan checks everything, so it is also
where the tiers are compared with each other: a record that one shared tier
holds intact and another shared tier lacks is a lost copy (or a tier restored
from an older backup), reported as *missing* and copied back by `repair`.
(The local tier is a cache of one replica: what it lacks is not missing, and
what only it holds may have been pruned elsewhere, so it is not evidence.)

`repair` also re-seals intact records that an older signing key sealed, and
once a whole-store repair leaves nothing unrestorable, records in each tier
that only the current key is needed from now on.

This file is the async source: ``scan.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..errors import ConfigError, UndecodableRecord
from ..integrity import BadCopy, ScanReport, record_identity, record_label
from ..ledger import newest_entry
from ..model.codec import RecordCodec, version_key
from ..model.records import BadRecord, BlobRow, CheckpointRow, ledger_context, row_fields, with_verified_metadata
from ..model.roles import Roles
from ..tiers.base import KEYS_META, QuarantinedRecord, pack_fields
from ..tiers.protocol_async import AsyncTier

logger = logging.getLogger("langgraph_durable")


# What `AsyncScanner.restore` does with a quarantined copy (`AsyncScanner.outcome`).
RESTORE = "restore"  # put back: its place holds no intact copy
KEEP = "keep"  # left in the quarantine: an intact copy is in its place
REFUSE = "refuse"  # cannot be put back (no row fields, or its tier is not configured)


class AsyncScanner:
    """Verifies (and repairs) every copy of every record of a thread."""

    def __init__(self, tiers: Sequence[AsyncTier], codec: RecordCodec) -> None:
        roles: Roles[AsyncTier] = Roles.of(tiers)
        self.tiers = list(roles.tiers)
        self.shared = list(roles.shared)
        self.codec = codec

    async def scan(
        self, thread_id: str | None, *, repair: bool, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        if thread_id is not None:
            threads = [str(thread_id)]
        else:
            names: set[str] = set()
            for tier in self.tiers:
                names.update(await tier.thread_ids())
            threads = sorted(names)
        report = ScanReport(threads=len(threads))
        for done, t in enumerate(threads, 1):
            await self._thread(t, report, repair=repair)
            await self._ledger(t, report, repair=repair)
            if progress is not None:
                progress(done, len(threads))
        if (
            repair
            and thread_id is None
            and not report.unrestorable
            and not report.not_resealed
            and len(self.codec.keys) > 1
        ):
            # Everything verifies under the current key now: replicas that
            # only have it may open the store.
            for tier in self.tiers:
                await tier.write_meta(KEYS_META, self.codec.fingerprints[0])
        return report

    async def restore(
        self, records: Sequence[QuarantinedRecord]
    ) -> tuple[list[QuarantinedRecord], list[QuarantinedRecord]]:
        """Put quarantined copies back into their tiers' live tables; the next
        read verifies them again. A copy whose slot holds an intact record
        now is not put back over it (it stays quarantined). Returns
        (restored, kept). Raises `ConfigError` for a copy that cannot be put
        back (`outcome` says which and why)."""
        restored: list[QuarantinedRecord] = []
        kept: list[QuarantinedRecord] = []
        for q in records:
            verdict, why = await self.outcome(q)
            if verdict == REFUSE:
                raise ConfigError(f"quarantined record {q.tier}:{q.id} ({q.kind} {q.key}) {why}")
            if verdict == KEEP:
                kept.append(q)
                continue
            tier, row = self._by_name()[q.tier], q.row()
            if isinstance(row, CheckpointRow):
                await tier.write_checkpoint(row, [])
            elif isinstance(row, BlobRow):
                await tier.write_blobs([row])
            else:
                await tier.write_writes([row], True)
            await tier.drop_quarantined([q.id])
            restored.append(q)
        return restored, kept

    def _by_name(self) -> dict[str, AsyncTier]:
        return {t.name: t for t in self.tiers}

    async def outcome(self, q: QuarantinedRecord) -> tuple[str, str]:
        """What `restore` would do with `q` now, and why: `RESTORE` (its
        place holds no intact copy), `KEEP` (it does, e.g. after `repair`
        wrote one: the quarantined copy stays) or `REFUSE` (it cannot be put
        back). Reads only; what `quarantine list` shows."""
        tier = self._by_name().get(q.tier)
        if tier is None:
            return REFUSE, f"is in the {q.tier} tier, which this saver has not configured."
        row = q.row()
        if row is None:
            return REFUSE, (
                "was kept without the fields of its row, so it cannot be put back; it stays in the quarantine "
                "for inspection."
            )
        if await self._intact_in(tier, row):
            return KEEP, "an intact copy is in its place (repaired or rewritten since)"
        return RESTORE, "its place holds no intact copy"

    async def _intact_in(self, tier: AsyncTier, row: Any) -> bool:
        """Whether `tier` holds an intact copy of `row`'s record right now."""
        live: Any
        if isinstance(row, CheckpointRow):
            live = await tier.read_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
        elif isinstance(row, BlobRow):
            blobs = await tier.read_blobs(row.thread_id, row.checkpoint_ns, [(row.channel, row.version)])
            live = blobs.get((row.channel, row.version))
        else:
            rows = await tier.read_writes(row.thread_id, row.checkpoint_ns, [row.checkpoint_id])
            live = next((w for w in rows if (w.task_id, w.idx) == (row.task_id, row.idx)), None)
        if live is None:
            return False
        try:
            self._decode(record_kind(row), live)
        except BadRecord:
            return False
        except UndecodableRecord:
            return True  # it verifies: intact, whatever this reader's serde makes of it
        return True

    def _decode(self, kind: str, row: Any) -> Any:
        if kind == "checkpoint":
            return self.codec.decode_checkpoint(row)
        if kind == "blob":
            return self.codec.decode_blob(row)
        return self.codec.decode_write(row)

    async def _thread(self, t: str, report: ScanReport, *, repair: bool) -> None:
        intact: dict[tuple[Any, ...], Any] = {}
        held_intact: dict[tuple[Any, ...], set[str]] = {}
        bad: list[tuple[AsyncTier, Any, BadCopy]] = []
        old_key: list[tuple[AsyncTier, str, Any]] = []
        versions: dict[tuple[Any, ...], dict[str, Any]] = {}  # checkpoint identity -> channel versions
        for tier in self.tiers:
            records = await tier.thread_records(t)
            for kind, rows in (("checkpoint", records.checkpoints), ("blob", records.blobs), ("write", records.writes)):
                for row in rows:
                    report.copies_checked += 1
                    clean = True  # decoded as written: only such a copy is ever re-sealed
                    try:
                        decoded = self._decode(kind, row)
                    except BadRecord as exc:
                        label = record_label(kind, row)
                        bad.append((tier, row, BadCopy(tier.name, kind, t, row.checkpoint_ns, label, exc.reason)))  # type: ignore[arg-type]
                        continue
                    except UndecodableRecord as exc:
                        # Intact: never bad, never moved. A value is still copied
                        # as bytes to a tier that lacks it; a checkpoint, whose
                        # versions a repair would need, is left alone. Never
                        # re-sealed: an unsigned record whose types the strict
                        # allowlist blocks may be one planted in a shared tier,
                        # and sealing it with the key would make it trusted.
                        report.undecodable.append(f"{tier.name}: {exc}")
                        if kind == "checkpoint":
                            continue
                        decoded, clean = None, False
                    identity = record_identity(kind, row)
                    if isinstance(row, CheckpointRow):  # copied with the columns its record vouches for
                        row = with_verified_metadata(row, decoded[1])
                        versions[identity] = decoded[0]["channel_versions"]
                    intact.setdefault(identity, (kind, row))
                    held_intact.setdefault(identity, set()).add(tier.name)
                    if self.codec.sealed_with_old_key(row.context, row.envelope):
                        if clean:
                            old_key.append((tier, kind, row))
                        else:
                            report.not_resealed += 1
        for tier, row, copy in bad:
            report.bad.append(copy)
            if not repair:
                continue
            good = intact.get(record_identity(copy.kind, row))
            if good is None:
                report.unrestorable.append(copy)
                continue
            await tier.quarantine(
                t, copy.checkpoint_ns, copy.kind, copy.key, copy.reason, row.envelope, pack_fields(row_fields(row))
            )
            await _write(tier, good[0], good[1])
            report.restored.append(copy)
            # It holds an intact copy now: a shared tier that lacks the record
            # gets it below, even when only the local tier held it before.
            held_intact[record_identity(copy.kind, row)].add(tier.name)
        # Copies a shared tier lost while another shared tier holds them intact,
        # and what only the local tier still holds past the shared tiers' newest.
        bad_in = {(tier.name, record_identity(c.kind, row)) for tier, row, c in bad}
        beyond = await self._only_local_beyond(t, intact, held_intact, versions)
        # Channel values and writes before the checkpoints that name them,
        # oldest checkpoint first: a reader of a tier being repaired never
        # meets a checkpoint whose values are not there yet.
        order = {"blob": 0, "write": 1, "checkpoint": 2}
        copies = sorted(intact.items(), key=lambda item: (order[item[1][0]], getattr(item[1][1], "checkpoint_id", "")))
        for identity, (kind, row) in copies:
            holders = held_intact[identity]
            if not holders & {s.name for s in self.shared} and identity not in beyond:
                continue
            for tier in self.shared:
                if tier.name in holders or (tier.name, identity) in bad_in:
                    continue
                why = f"missing (intact in {', '.join(sorted(holders))})"
                copy = BadCopy(tier.name, kind, t, row.checkpoint_ns, record_label(kind, row), why)
                report.missing.append(copy)
                if repair:
                    await _write(tier, kind, row)
                    report.restored.append(copy)
        if repair:
            for tier, kind, row in old_key:
                resealed = replace(row, envelope=self.codec.reseal(row.context, row.context, row.envelope))
                await _write(tier, kind, resealed)
                report.resealed += 1

    async def _only_local_beyond(
        self,
        t: str,
        intact: dict[tuple[Any, ...], Any],
        held_intact: dict[tuple[Any, ...], set[str]],
        versions: dict[tuple[Any, ...], dict[str, Any]],
    ) -> set[tuple[Any, ...]]:
        """Records only the local tier holds intact that belong to checkpoints
        newer than every shared tier's newest of their namespace (and not
        recorded as deleted): the shared tiers lost them, or were rolled back.
        Older local-only records are left alone: another replica may have
        pruned them. With no local tier, or none shared, there is nothing to
        compare."""
        if not self.shared or len(self.shared) == len(self.tiers):
            return set()
        shared_names = {s.name for s in self.shared}
        newest: dict[str, str] = {}
        for (kind, ns, *rest), holders in held_intact.items():
            if kind == "checkpoint" and holders & shared_names:
                newest[ns] = max(newest.get(ns, ""), rest[0])
        beyond: set[tuple[Any, ...]] = set()
        for identity, holders in held_intact.items():
            kind, ns, *rest = identity
            if kind != "checkpoint" or holders & shared_names or rest[0] <= newest.get(ns, ""):
                continue
            cid = rest[0]
            if await self._deleted(t, ns, cid):
                continue
            beyond.add(identity)
            beyond.update(("blob", ns, ch, version_key(v)) for ch, v in versions[identity].items())
            beyond.update(i for i in intact if i[0] == "write" and i[1] == ns and i[2] == cid)
        return {i for i in beyond if i in intact and not held_intact[i] & shared_names}

    async def _deleted(self, t: str, ns: str, cid: str) -> bool:
        """Whether a shared tier recorded the checkpoint as deleted."""
        for tier in self.shared:
            marker = (await tier.head(t, ns)).deleted_through
            if (marker is not None and cid <= marker) or cid in await tier.gone(t, ns, [cid]):
                return True
        return False

    async def _ledger(self, t: str, report: ScanReport, *, repair: bool) -> None:
        copies = [(tier, await tier.read_ledger(t)) for tier in self.tiers]
        for key in sorted({k for _, entries in copies for k in entries}):
            good: list[tuple[Any, bytes]] = []
            bad: list[tuple[AsyncTier, BadCopy]] = []
            for tier, entries in copies:
                envelope = entries.get(key)
                if envelope is None:
                    continue
                report.copies_checked += 1
                try:
                    good.append((self.codec.decode_ledger(t, key, envelope), envelope))
                except BadRecord as exc:
                    bad.append((tier, BadCopy(tier.name, "ledger", t, "", f"action {key}", exc.reason)))
                except UndecodableRecord as exc:
                    report.undecodable.append(f"{tier.name}: {exc}")
                    if self.codec.sealed_with_old_key(ledger_context(t, key), envelope):
                        report.not_resealed += 1
            report.bad.extend(copy for _, copy in bad)
            if not good:
                if repair:
                    report.unrestorable.extend(copy for _, copy in bad)
                continue
            _, chosen = newest_entry(good)
            envelope = chosen
            context = ledger_context(t, key)
            if repair and self.codec.sealed_with_old_key(context, chosen):
                envelope = self.codec.reseal(context, context, chosen)
                report.resealed += 1
            for tier, entries in copies:
                current = entries.get(key)
                if current == envelope:
                    continue
                damaged = [copy for b, copy in bad if b is tier]
                if current is None and tier not in self.shared:
                    continue  # the local cache need not hold it
                if not damaged and current != chosen and tier in self.shared:
                    # A tier that lost the entry, or holds an older state of
                    # it (a rollback): an action must never move backwards.
                    why = "missing" if current is None else "behind (an older state of the action)"
                    report.missing.append(BadCopy(tier.name, "ledger", t, "", f"action {key}", why))
                if repair:
                    await tier.write_ledger(t, key, envelope)
                    report.restored.extend(damaged)


def record_kind(row: Any) -> str:
    return "checkpoint" if isinstance(row, CheckpointRow) else "blob" if isinstance(row, BlobRow) else "write"


async def _write(tier: AsyncTier, kind: str, row: Any) -> None:
    if kind == "checkpoint":
        assert isinstance(row, CheckpointRow)
        await tier.write_checkpoint(row, [])
    elif kind == "blob":
        assert isinstance(row, BlobRow)
        await tier.write_blobs([row])
    else:
        await tier.write_writes([row], True)
