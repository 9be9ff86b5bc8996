# WARNING: this file is generated from langgraph_durable/engine/journal_async.py; edit that file and run tools/async_to_sync.py. DO NOT EDIT.
"""Catch-up: shipping to each shared tier what it is owed, in order.

A record is owed to a shared tier that has not acknowledged it (`backlog.py`):
the tier was down or slow when it was written, the saver writes behind
(``write="local"``), or the process died between the local commit and the
acknowledgement. `catch_up` ships the owed records oldest first, so each
tier receives a thread's records in the order they were written; a tier
that fails is left alone for the rest of the pass (its later records wait,
keeping the order). It runs at setup (what a dead process left), in the
background replicator (`replicator.py`) and when the saver drains on close.

Every record read back from the local tier is verified first: a damaged or
planted local row is quarantined locally and never shipped, and never keeps
the saver from starting.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import LeaseLost, TierUnavailable
from ..integrity import record_label
from ..model.backlog import JournalEntry, MemoryBacklog
from ..model.codec import RecordCodec, version_key
from ..model.deltas import Piece
from ..model.records import BadRecord, BlobRow, CheckpointRow, WriteRow, row_fields
from ..tiers.base import pack_fields
from ..tiers.protocol import Tier
from ..tiers.sqlite.tier import SqliteTier
from .concurrency import run_all

logger = logging.getLogger("langgraph_durable")

# Journal entries read per round of a pass.
BATCH = 256
# A thread's entries shipped to a tier in one transaction (`Tier.write_batch`):
# a whole round's (`BATCH`), so that a run's end ships a run of up to ~120
# steps (a put and a put_writes each) in one transaction per tier.
GROUP = BATCH


class Journal:
    """Ships owed records from the local tier (or the memory backlog) to the
    shared tiers."""

    def __init__(
        self, local: SqliteTier | None, shared: Sequence[Tier], codec: RecordCodec, memory: MemoryBacklog
    ) -> None:
        self.local = local
        self.shared = list(shared)
        self.names = [t.name for t in self.shared]
        self.codec = codec
        self.memory = memory
        # Writes refused by a newer lease holder since the saver started.
        self.refused = 0

    def catch_up(
        self,
        thread_id: str | None = None,
        *,
        between: Callable[[], Any] | None = None,
        skip: Callable[[JournalEntry], bool] | None = None,
    ) -> int:
        """One pass over everything owed (by one thread, or all); returns how
        many entries were settled (shipped wherever they were owed, or
        dropped as not to be shipped). A tier that fails is skipped until
        the next pass. `between` runs after each round of `BATCH` entries
        (a pass lasts while runs keep writing: the replicator gives back the
        leases of runs that ended meanwhile). Entries `skip` names are left
        for a later pass."""
        blocked: set[str] = set()
        settled = 0
        after = 0
        while True:
            try:
                batch = self.local.pending_journal(BATCH, after, thread_id=thread_id) if self.local is not None else []
            except TierUnavailable as exc:  # the local file is unreadable: its entries wait
                logger.warning("cannot read the local journal (%s); its entries are shipped later", exc)
                batch = []
            if not batch:
                break
            after = batch[-1].seq
            if skip is not None:
                batch = [e for e in batch if not skip(e)]
            settled += self._ship_batch(batch, blocked)
            if len(blocked) == len(self.shared):
                return settled
            if between is not None:
                settled += between()
        for entry in self.memory.pending():
            if thread_id is None or entry.thread_id == thread_id:
                settled += self._ship(entry, blocked)
        return settled

    def owes(self, thread_id: str) -> bool:
        """Whether a shared tier is still owed a record of this thread."""
        if any(entry.thread_id == thread_id for entry in self.memory.pending()):
            return True
        return self.local is not None and bool(self.local.pending_journal(1, 0, thread_id=thread_id))

    def _ship_batch(self, batch: Sequence[JournalEntry], blocked: set[str]) -> int:
        """Ship a round's entries. A thread's entries go out together, in one
        transaction per tier (`_ship_group`), in the order they were written;
        an entry that needs a check of its own (`_alone`) goes by itself."""
        settled = 0
        group: list[JournalEntry] = []
        # Stable: each thread's entries keep their order; threads' relative
        # order does not matter.
        for entry in sorted(batch, key=lambda e: e.thread_id):
            if group and (
                self._alone(entry)
                or entry.thread_id != group[0].thread_id
                or entry.fence != group[0].fence
                or len(group) >= GROUP
            ):
                settled += self._ship_group(group, blocked)
                group = []
            if self._alone(entry):
                settled += self._ship(entry, blocked)
            else:
                group.append(entry)
        if group:
            settled += self._ship_group(group, blocked)
        return settled

    @staticmethod
    def _alone(entry: JournalEntry) -> bool:
        """Shipped by itself: kept in memory (no local copy), or a checkpoint
        never acknowledged that `_ship` checks against the shared history first."""
        return entry.in_memory or (entry.kind == "checkpoint" and not entry.acked and entry.fence is None)

    def _ship_group(self, group: Sequence[JournalEntry], blocked: set[str]) -> int:
        """`_ship` for consecutive entries of one thread under one fence: each
        tier takes all that it is owed in one transaction (`write_batch`),
        the fenced tier first, and the acknowledgements are one local
        transaction. Should the fence refuse them, they go one by one through
        `_ship`, which tells a refused record from one already shipped."""
        if len(group) == 1:
            return self._ship(group[0], blocked)
        settled = 0
        loaded: list[tuple[JournalEntry, Any]] = []
        for entry in group:
            if not any(entry.owes(t.name) and t.name not in blocked for t in self.shared):
                continue
            records = self._load_or_drop(entry)
            if records is None:
                settled += 1
                continue
            loaded.append((entry, records))
        if not loaded:
            return settled
        fence = group[0].fence
        took: dict[int, list[str]] = {entry.seq: [] for entry, _ in loaded}

        def owed_to(tier: Tier) -> list[tuple[JournalEntry, Any]]:
            return [(entry, records) for entry, records in loaded if entry.owes(tier.name)]

        first = next((t for t in self.shared if fence is not None and t.name == fence.tier), None)
        if fence is not None and first is not None and first.name not in blocked and owed_to(first):
            try:
                self._write_many(first, owed_to(first), dataclasses.replace(fence, late=True))
            except LeaseLost:
                for entry, _ in loaded:
                    settled += self._ship(entry, blocked)
                return settled
            except TierUnavailable:
                blocked.add(first.name)
            else:
                for entry, _ in owed_to(first):
                    took[entry.seq].append(first.name)
        rest = [t for t in self.shared if t is not first and t.name not in blocked and owed_to(t)]
        results = run_all([functools.partial(self._write_many, t, owed_to(t), None) for t in rest])
        for tier, result in zip(rest, results):
            if isinstance(result, TierUnavailable):
                blocked.add(tier.name)
            elif isinstance(result, BaseException):
                raise result
            else:
                for entry, _ in owed_to(tier):
                    took[entry.seq].append(tier.name)
        acks = [(entry.seq, took[entry.seq]) for entry, _ in loaded if took[entry.seq]]
        if acks and self.local is not None:
            self.local.journal_acked_many(acks, everyone=self.names)
        shipped = []
        for entry, _ in loaded:
            owed = entry.owed if entry.owed is not None else self.names
            if took[entry.seq] and all(n in took[entry.seq] for n in owed):
                shipped.append(entry.seq)
        self.memory.outbox.done(shipped)
        return settled + len(shipped)

    @staticmethod
    def _write_many(tier: Tier, items: Sequence[tuple[JournalEntry, Any]], fence: Any) -> None:
        checkpoints = [(records[0], records[1]) for _, records in items if records[0] != "writes"]
        writes = [w for _, records in items if records[0] == "writes" for w in records[1]]
        tier.write_batch(checkpoints, writes, fence=fence)

    def _ship(self, entry: JournalEntry, blocked: set[str]) -> int:
        """Ship one entry to the tiers that owe it and are not blocked. 1 if
        it is settled now."""
        tiers = [t for t in self.shared if entry.owes(t.name) and t.name not in blocked]
        if not tiers:
            return 0
        loaded = self._load_or_drop(entry)
        if loaded is None:
            return 1
        if entry.kind == "checkpoint" and not entry.acked and entry.fence is None:
            newer = self._moved_on(loaded[0])
            if newer is not None:
                # Never acknowledged, and the thread went on without it (another
                # replica ran it): shipping it now would graft a branch onto a
                # history that moved on.
                logger.warning("journal entry %s: checkpoint %s of thread %r not shipped: the thread moved on to %s", entry.seq, entry.checkpoint_id, entry.thread_id, newer)  # fmt: skip
                self._withdraw_local(entry, loaded, f"not shipped: the thread moved on to {newer}")
                self._drop(entry)
                return 1
        fence = entry.fence
        took: list[str] = []
        first = [t for t in tiers if fence is not None and t.name == fence.tier]
        if first:
            # A write-behind write goes to its lease's tier first, fenced: if
            # another writer took the thread over meanwhile, it goes nowhere.
            assert fence is not None
            try:
                self._write(first[0], loaded, dataclasses.replace(fence, late=True))
                took.append(first[0].name)
            except LeaseLost as exc:
                if self._landed(first[0], loaded):
                    # Shipped meanwhile by another pass (a drain in another
                    # thread, or another saver on this file) before the lease moved on.
                    took.append(first[0].name)
                else:
                    self.refused += 1
                    logger.error("journal entry %s of thread %r not shipped: %s", entry.seq, entry.thread_id, exc)
                    self._withdraw_local(entry, loaded, "refused at shipping: another writer took the thread over")
                    self._drop(entry)
                    return 1
            except TierUnavailable:
                blocked.add(first[0].name)
        rest = [t for t in tiers if t.name not in took and t.name != (fence.tier if fence else None)]
        results = run_all([functools.partial(self._write, t, loaded, None) for t in rest])
        for tier, result in zip(rest, results):
            if isinstance(result, TierUnavailable):
                blocked.add(tier.name)
            elif isinstance(result, BaseException):
                raise result
            else:
                took.append(tier.name)
        if not took:
            return 0
        self._acked(entry, took)
        left = [n for n in (entry.owed if entry.owed is not None else self.names) if n not in took]
        if not left:
            self.memory.outbox.done([entry.seq])
            logger.debug("journal entry %s (%s %s) shipped", entry.seq, entry.kind, entry.checkpoint_id)
        return 0 if left else 1

    def _load_or_drop(self, entry: JournalEntry) -> Any:
        """`_load`; None, with the entry dropped, if it is not to be shipped:
        its local copy is damaged (quarantined by `_load`) or was deleted
        meanwhile (delete_thread, prune)."""
        try:
            loaded = self._load(entry)
        except BadRecord as exc:
            logger.error("journal entry %s (%s %s/%s/%s) was not shipped: %s", entry.seq, entry.kind, entry.thread_id, entry.checkpoint_ns, entry.checkpoint_id, exc.reason)  # fmt: skip
            loaded = None
        if loaded is None:
            self._drop(entry)
        return loaded

    def _landed(self, tier: Tier, loaded: Any) -> bool:
        """Whether `tier` already holds these very records."""
        try:
            if loaded[0] == "writes":
                rows = loaded[1]
                first = rows[0]
                held = tier.read_writes(first.thread_id, first.checkpoint_ns, [first.checkpoint_id])
                have = {(w.task_id, w.idx): w.envelope for w in held}
                return all(have.get((w.task_id, w.idx)) == w.envelope for w in rows)
            row = loaded[0]
            held_row = tier.read_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
            return held_row is not None and held_row.envelope == row.envelope
        except TierUnavailable:
            return False

    def _withdraw_local(self, entry: JournalEntry, loaded: Any, reason: str) -> None:
        """A record the shared tiers will never take: out of the local file's
        read path too, into its quarantine (restorable, never deleted).
        Left there, this replica would read it back as the thread's latest
        and copy it into the shared tiers, without its ancestors."""
        if entry.in_memory or self.local is None:
            return
        rows = loaded[1] if loaded[0] == "writes" else [loaded[0]]
        for row in rows:
            kind = "checkpoint" if isinstance(row, CheckpointRow) else "write"
            key = (
                f"checkpoint {row.checkpoint_id}"
                if kind == "checkpoint"
                else f"write {row.task_id}/{row.idx} of checkpoint {row.checkpoint_id}"
            )
            try:
                self.local.quarantine(
                    row.thread_id, row.checkpoint_ns, kind, key, reason, row.envelope, pack_fields(row_fields(row))
                )
                self.local.remove_copy(kind, row)
            except TierUnavailable as exc:
                logger.warning("could not withdraw %s of thread %r locally: %s", key, row.thread_id, exc)

    def _write(self, tier: Tier, loaded: Any, fence: Any) -> None:
        if loaded[0] == "writes":
            _, rows, upsert = loaded
            tier.write_writes(rows, upsert, fence=fence)
        else:
            row, blobs = loaded
            tier.write_checkpoint(row, blobs, fence=fence)

    def _acked(self, entry: JournalEntry, tiers: Sequence[str]) -> None:
        if entry.in_memory:
            self.memory.acked(entry.seq, tiers)
        elif self.local is not None:
            self.local.journal_acked(entry.seq, tiers, everyone=self.names)

    def _drop(self, entry: JournalEntry) -> None:
        self.memory.outbox.done([entry.seq])
        if entry.in_memory:
            self.memory.drop(entry.seq)
        elif self.local is not None:
            self.local.journal_drop(entry.seq)

    def _load(self, entry: JournalEntry) -> Any:
        """The entry's records: ``(row, blobs)`` for a checkpoint, ``("writes",
        rows, upsert)`` for writes; None if the local tier no longer has them.
        Local copies are verified (`BadRecord` after quarantining a bad one)."""
        if entry.in_memory:
            if entry.kind == "checkpoint":
                return entry.checkpoint, list(entry.blobs)
            return "writes", list(entry.writes), entry.upsert
        kept = self.memory.outbox.get(entry)
        if kept is not None:
            return kept
        assert self.local is not None
        if entry.kind == "checkpoint":
            row = self.local.read_checkpoint(entry.thread_id, entry.checkpoint_ns, entry.checkpoint_id)
            if row is None:
                return None
            return row, self._verified_local_blobs(row)
        rows = [
            w
            for w in self.local.read_writes(entry.thread_id, entry.checkpoint_ns, [entry.checkpoint_id])
            if w.task_id == entry.task_id
        ]
        good: list[WriteRow] = []
        for w in rows:
            try:
                self.codec.decode_write(w)
            except BadRecord as exc:
                self._quarantine_local("write", w, exc.reason)
                continue
            good.append(w)
        return ("writes", good, False) if good else None

    def _moved_on(self, row: CheckpointRow) -> str | None:
        """A checkpoint newer than `row` that a reachable shared tier holds."""
        heads = run_all([functools.partial(t.head, row.thread_id, row.checkpoint_ns) for t in self.shared])
        for h in heads:
            if isinstance(h, BaseException) and not isinstance(h, TierUnavailable):
                raise h
        newer = [
            cid
            for h in heads
            if not isinstance(h, BaseException) and (cid := h.checkpoint_id) and cid > row.checkpoint_id
        ]
        return max(newer) if newer else None

    def _verified_local_blobs(self, row: CheckpointRow) -> list[BlobRow]:
        """A journaled checkpoint's local row and channel values, verified.
        Raises `BadRecord` (after quarantining the bad copy) when any fails."""
        assert self.local is not None
        try:
            checkpoint, _ = self.codec.decode_checkpoint(row)
        except BadRecord as exc:
            self._quarantine_local("checkpoint", row, exc.reason)
            raise
        keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
        blobs: list[BlobRow] = []
        while keys:
            found = self.local.read_blobs(row.thread_id, row.checkpoint_ns, keys)
            based: set[tuple[str, str]] = set()
            for blob in found.values():
                try:
                    # Verified, not decoded: a piece is told by its type tag.
                    value = self.codec.open_blob(blob, decode=False)[2]
                except BadRecord as exc:
                    self._quarantine_local("blob", blob, exc.reason)
                    raise BadRecord(
                        f"its channel value {blob.channel} @ {blob.version} is damaged ({exc.reason})"
                    ) from exc
                blobs.append(blob)
                if isinstance(value, Piece):
                    # Shipped with what it is rebuilt from (idempotent where
                    # an earlier entry shipped them already).
                    based.update((blob.channel, v) for v in value.base)
            keys = sorted(based - {(b.channel, b.version) for b in blobs})
        return blobs

    def _quarantine_local(self, kind: str, row: Any, reason: str) -> None:
        assert self.local is not None
        self.local.quarantine(row.thread_id, row.checkpoint_ns, kind, record_label(kind, row), reason, row.envelope, pack_fields(row_fields(row)))  # fmt: skip
        self.local.remove_copy(kind, row)
        logger.error("local %s %s is damaged (%s): quarantined, not shipped", kind, record_label(kind, row), reason)
