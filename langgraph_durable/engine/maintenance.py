# WARNING: this file is generated from langgraph_durable/engine/maintenance_async.py; edit that file and run tools/async_to_sync.py. DO NOT EDIT.
"""Whole-thread operations: delete, delete runs, copy, prune.

None of them may remove what a surviving checkpoint still needs: the
ancestors and writes a LangGraph `DeltaChannel` is rebuilt from (module
`retention` decides which), and never the newest intact checkpoint any tier
holds (a tier that lost it does not get to decide what "latest" is).
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from langgraph.checkpoint.base import INTERRUPT

from ..integrity import Incident, Unusable
from ..model.codec import EMPTY, RecordCodec, thread_id_of, version_key
from ..model.deltas import DeltaMemo
from ..model.pins import pinned_ids
from ..model.records import BadRecord, BlobRow, CheckpointRow, WriteRow
from ..retention import Node, ReplayPlanner, Retained, RetentionPolicy, Walk, blobs_of, older_than, waiting_at_interrupt
from ..tiers.protocol import Tier
from .concurrency import run_all
from .reads import Found, TierReader

logger = logging.getLogger("langgraph_durable")

RowT = TypeVar("RowT", CheckpointRow, BlobRow, WriteRow)


class Maintenance:
    """delete_thread, delete_for_runs, copy_thread and prune, on every tier."""

    def __init__(
        self, tiers: Sequence[Tier], codec: RecordCodec, reads: TierReader, deltas: DeltaMemo | None = None
    ) -> None:
        self.tiers = list(tiers)
        self.codec = codec
        self.reads = reads
        # What this saver stored last (deltas.py): a thread deleted, pruned or
        # copied over starts again from a whole copy.
        self.deltas = deltas or DeltaMemo()

    def _everywhere(self, call: Callable[[Tier], Any]) -> None:
        for result in run_all([functools.partial(call, t) for t in self.tiers]):
            if isinstance(result, BaseException):
                raise result

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread everywhere, leaving a marker in every tier: "every
        checkpoint of the thread up to id m was deleted", m the newest id any
        tier held (or an older marker's, if that is newer: a marker never
        moves back, or what a replica's cache kept from an earlier deletion
        would pass for a copy the shared tiers lost). A copy that another
        replica's local cache still holds is then known to be deleted, not
        lost; a checkpoint written again afterwards, with the same or older
        ids, is served as any other (see `reads`, `_deleted`).

        The marker is left before anything is deleted: a replica that finds
        the shared tiers without a checkpoint its cache holds finds the
        marker too, and does not write its copy back. On failure (a tier
        unreachable) the error is raised; what was deleted so far stays
        deleted, the marker stays, and calling it again finishes the job."""
        thread_id = thread_id_of(thread_id, what="delete_thread")
        self.deltas.forget(thread_id)
        newest = self.reads._each("delete_thread", lambda t: t.list_checkpoints(thread_id, None, None, None, None, 1))
        heads = self.reads._each("delete_thread", lambda t: t.head(thread_id, ""))
        ids = [rows[0].checkpoint_id for _, rows in newest if rows]
        ids += [h.deleted_through for _, h in heads if h.deleted_through]
        if ids:
            self._everywhere(lambda t: t.mark_deleted(thread_id, max(ids)))
        self._everywhere(lambda t: t.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str], ask: Callable[[str], Any] | None = None) -> None:
        """Delete the checkpoints and writes of these runs, except those a
        surviving checkpoint rebuilds a `DeltaChannel` from (its ancestors
        back to stored snapshots, with their writes; see `retention`):
        deleting them would make that channel read back short, silently.
        Those stay, listed and readable as before, until nothing needs them
        (a later `delete_for_runs` or `prune`). `ask(thread_id)` is called
        for each thread that loses a checkpoint, before anything is deleted
        (`LeaseKeeper.ask_kept_back`)."""
        if not run_ids:
            return
        ids = [str(r) for r in run_ids]
        self.deltas.forget()
        retain = sorted(self._needed_by_survivors(set(ids)))
        if retain:
            logger.info("delete_for_runs keeps %d checkpoint(s) surviving delta channels still read", len(retain))
        doomed: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for run_id in ids:
            for row in self.reads.rows(None, None, None, None, {"run_id": run_id}, None):
                if row.run_id == run_id and (row.thread_id, row.checkpoint_ns, row.checkpoint_id) not in retain:
                    doomed[row.thread_id].append((row.checkpoint_ns, row.checkpoint_id))
        if ask is not None:
            for thread_id in sorted(doomed):
                ask(thread_id)
        self._everywhere(lambda t: t.delete_for_runs(ids, retain))
        # Recorded, so that a copy another replica's local cache still holds
        # is known to be deleted rather than taken for one the tiers lost.
        for thread_id, gone in doomed.items():
            self._everywhere(lambda t: t.mark_gone(thread_id, gone))

    def _needed_by_survivors(self, run_ids: set[str]) -> set[tuple[str, str, str]]:
        """(thread, ns, id) of the checkpoints of `run_ids` that checkpoints
        of other runs rebuild their delta channels from."""
        threads: set[str] = set()
        for run_id in sorted(run_ids):
            rows = self.reads.rows(None, None, None, None, {"run_id": run_id}, None)
            threads.update(r.thread_id for r in rows if r.run_id in run_ids)
        needed: set[tuple[str, str, str]] = set()
        incidents: list[Incident] = []
        try:
            for thread_id in sorted(threads):
                rows = self.reads.rows(thread_id, None, None, None, None, None)
                pinned = self.pinned(thread_id)
                by_ns: dict[str, list[CheckpointRow]] = defaultdict(list)
                for row in rows:
                    by_ns[row.checkpoint_ns].append(row)
                for ns, ns_rows in by_ns.items():
                    # A pinned checkpoint survives its run's deletion (model/pins.py).
                    in_runs = {r.checkpoint_id for r in ns_rows if r.run_id in run_ids}
                    kept = {cid for n, cid in pinned if n == ns} & in_runs
                    needed.update((thread_id, ns, cid) for cid in kept)
                    doomed = in_runs - kept
                    if not doomed:
                        continue
                    nodes = self._nodes(thread_id, ns, ns_rows, incidents)
                    planner = ReplayPlanner(nodes)
                    if not planner.channels:
                        continue
                    # Newest first, so older walks stop where a newer one
                    # already went; a survivor older than every doomed
                    # checkpoint has none of them among its ancestors.
                    oldest = min(doomed)
                    for row in ns_rows:
                        if row.checkpoint_id in doomed or row.checkpoint_id < oldest:
                            continue
                        walk = self._replay_walk(planner, thread_id, ns, row.checkpoint_id, incidents)
                        reads = set(walk.checkpoints)
                        if walk.broken:  # what lies past an unreadable ancestor is unknown: keep it
                            reads |= older_than(nodes, walk.checkpoints[-1])
                        needed.update((thread_id, ns, cid) for cid in reads & doomed)
        finally:
            self.reads.settle(incidents)
        return needed

    def pinned(self, thread_id: str) -> set[tuple[str, str]]:
        """(namespace, checkpoint id) of the thread's pins: nothing removes them."""
        return pinned_ids(thread_id, self.reads.ledger(thread_id))

    def _nodes(
        self, thread_id: str, ns: str, rows: Sequence[CheckpointRow], incidents: list[Incident]
    ) -> dict[str, Node | None]:
        """What retention needs of each listed checkpoint; None for one no
        tier holds intact."""
        nodes: dict[str, Node | None] = {}
        for row in rows:
            try:
                checkpoint, metadata = self.codec.decode_checkpoint(row)
            except BadRecord:
                try:
                    found = self.reads.checkpoint(thread_id, ns, row.checkpoint_id, incidents)
                except Unusable:
                    found = None
                if found is None:
                    nodes[row.checkpoint_id] = None
                    continue
                row, checkpoint, metadata = found
            nodes[row.checkpoint_id] = Node.of(row.checkpoint_id, row.parent_id, checkpoint, metadata)
        return nodes

    def _replay_walk(
        self, planner: ReplayPlanner, thread_id: str, ns: str, start: str, incidents: list[Incident]
    ) -> Walk:
        """`planner.walk(start)`, reading the channel values it asks about."""
        while True:
            walk = planner.walk(start)
            if not walk.needs:
                return walk
            found = self.reads.blobs(thread_id, ns, sorted(walk.needs), incidents)
            planner.learn({key: key in found and found[key][1] is not EMPTY for key in walk.needs})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, channel value and pending write, with the
        same checkpoint ids, re-sealed under the target thread's keys."""
        src = thread_id_of(source_thread_id, what="copy_thread: source")
        dst = thread_id_of(target_thread_id, what="copy_thread: target")
        self.deltas.forget(dst)
        # The copies keep their ids, maybe ids a deletion of the target
        # covered: its marker stays (it hides only copies that other replicas'
        # caches kept of what was deleted), and the copies, written into
        # every tier, are served all the same (`reads._deleted`).
        rows = self.reads.rows(src, None, None, None, None, None)
        by_ns: dict[str, list[CheckpointRow]] = defaultdict(list)
        for row in rows:
            by_ns[row.checkpoint_ns].append(row)
        incidents: list[Incident] = []
        try:
            for ns, ns_rows in by_ns.items():
                self._copy_namespace(src, dst, ns, ns_rows, incidents)
        finally:
            self.reads.settle(incidents, "not copied")

    def _copy_namespace(
        self, src: str, dst: str, ns: str, rows: Sequence[CheckpointRow], incidents: list[Incident]
    ) -> None:
        """Copy the checkpoints of one namespace that can be read intact."""
        candidates: list[Found] = []
        for row in rows:
            try:
                found = self.reads.checkpoint(src, ns, row.checkpoint_id, incidents)
            except Unusable:
                continue
            if found is not None:
                candidates.append(found)
        keys = [(ch, version_key(v)) for _, cp, _ in candidates for ch, v in cp["channel_versions"].items()]
        pieces: dict[tuple[str, str], BlobRow] = {}  # what lists stored as pieces are rebuilt from
        blob_map = self.reads.blobs(src, ns, keys, incidents, pieces)
        written = self.reads.writes(src, ns, [r.checkpoint_id for r, _, _ in candidates], incidents)
        verified = [
            (row, cp, md)
            for row, cp, md in candidates
            if all((ch, version_key(v)) in blob_map for ch, v in cp["channel_versions"].items())
        ]
        blobs = [self._rekey(b, dst) for b in [*(b for b, _ in blob_map.values()), *pieces.values()]]
        writes = [self._rekey(w, dst) for pairs in written.values() for w, _ in pairs]
        checkpoints = [self._rekey(r, dst) for r, _, _ in sorted(verified, key=lambda item: item[0].checkpoint_id)]
        # Blobs, then checkpoints oldest first, then writes: a reader never
        # sees a checkpoint whose values are not there yet.
        self._everywhere(lambda t: t.write_blobs(blobs))
        for row in checkpoints:
            self._everywhere(functools.partial(_write_checkpoint, row))
        self._everywhere(lambda t: t.write_writes(writes, True))

    def _rekey(self, row: RowT, thread_id: str) -> RowT:
        """The same record under another thread, its envelope re-sealed."""
        moved = replace(row, thread_id=thread_id)
        return replace(moved, envelope=self.codec.reseal(row.context, moved.context, row.envelope))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", note_gone: bool = False) -> None:
        """keep_latest: per namespace, the newest intact checkpoint and what
        its delta channels are rebuilt from; delete: the whole thread."""
        for thread_id in [thread_id_of(t, what="prune") for t in thread_ids]:
            self.deltas.forget(thread_id)
            pinned = strategy == "delete" and bool(self.pinned(thread_id))
            if pinned:
                logger.info("prune(strategy='delete') keeps thread %r's pinned checkpoints (and its newest)", thread_id)
            if strategy == "delete" and not pinned:
                # As `delete_thread`: with its marker, so that a copy another
                # replica's local cache still holds is known to be deleted,
                # not taken for one the shared tiers lost and written back.
                self.delete_thread(thread_id)
                continue
            self.retain(thread_id, _KEEP_LATEST, 0.0, unconfirmed=False, dry_run=False, note_gone=note_gone)

    def retain(
        self,
        thread_id: str,
        policy: RetentionPolicy,
        now: float,
        *,
        unconfirmed: bool,
        dry_run: bool,
        ask: Callable[[str], Any] | None = None,
        note_gone: bool = False,
    ) -> Retained:
        """Apply `policy` to one thread (`retention.RetentionPolicy` says what
        is kept); with `dry_run` only count. `unconfirmed`: the thread has
        non-resumable actions nobody confirmed, so it is left as it is.
        `ask(thread_id)` runs before the thread is deleted or pruned: another
        saver that keeps its lease (``lease_linger``) is asked to give it back
        and stop serving it from its cache (`LeaseKeeper.ask_kept_back`).
        `note_gone` (a store with an archive): each checkpoint removed is
        recorded as deleted (`mark_gone`), a note of its id in every tier."""
        rows = self.reads.rows(thread_id, None, None, None, None, None)
        if unconfirmed or not rows:
            return Retained(thread_id, kept=len(rows))
        keep: set[tuple[str, str]] = set()
        keep_blobs: set[tuple[str, str, str]] = set()
        pinned = self.pinned(thread_id)
        newest_ts = ""
        waiting_anywhere = False
        incidents: list[Incident] = []
        try:
            for ns in sorted({row.checkpoint_ns for row in rows}):
                # The newest intact checkpoint any tier holds survives:
                # never a damaged one, and never one tier's older view.
                tup = self.reads.latest(thread_id, ns, incidents)
                if tup is None:
                    continue
                newest_ts = max(newest_ts, str(tup.checkpoint.get("ts") or ""))
                nodes = self._nodes(thread_id, ns, [r for r in rows if r.checkpoint_ns == ns], incidents)
                waiting = self._waiting(thread_id, ns, nodes, incidents)
                waiting_anywhere = waiting_anywhere or bool(waiting)
                chosen = policy.chosen(nodes, now, waiting) | {tup.checkpoint["id"]}
                chosen |= {cid for n, cid in pinned if n == ns and cid in nodes}
                # Delta channels are rebuilt from their ancestors' writes back
                # to their nearest stored snapshot: those ancestors stay, with
                # their writes and values (module `retention`).
                planner = ReplayPlanner(nodes)
                for cid in sorted(chosen):
                    walk = self._replay_walk(planner, thread_id, ns, cid, incidents)
                    reads = set(walk.checkpoints) | {cid}
                    if walk.broken:  # what lies past an unreadable ancestor is unknown: keep it
                        reads |= older_than(nodes, walk.checkpoints[-1])
                    keep.update((ns, c) for c in reads)
                    keep_blobs.update((ns, ch, v) for ch, v in blobs_of(nodes, reads))
                keep_blobs.update((ns, ch, version_key(v)) for ch, v in tup.checkpoint["channel_versions"].items())
                # Lists stored as pieces keep what they are rebuilt from.
                pieces: dict[tuple[str, str], BlobRow] = {}
                kept = sorted((ch, v) for n, ch, v in keep_blobs if n == ns)
                self.reads.blobs(thread_id, ns, kept, incidents, pieces)
                keep_blobs.update((ns, ch, v) for ch, v in pieces)
        finally:
            self.reads.settle(incidents)
        if newest_ts and not waiting_anywhere and not pinned and policy.idle(newest_ts, now):
            if not dry_run:
                if ask is not None:
                    ask(thread_id)
                self.delete_thread(thread_id)  # with its marker, for other replicas' caches
            return Retained(thread_id, deleted=len(rows), thread_deleted=True)
        dropped = [r for r in rows if (r.checkpoint_ns, r.checkpoint_id) not in keep]
        if dropped and not dry_run:
            if ask is not None:
                ask(thread_id)
            self.deltas.forget(thread_id)
            self._everywhere(lambda t: t.prune(thread_id, keep, keep_blobs))
            if note_gone:
                # Recorded as `delete_for_runs` records them: the archive's
                # copy learns they were deleted, not lost, and a restore does
                # not bring them back.
                gone = sorted({(r.checkpoint_ns, r.checkpoint_id) for r in dropped})
                self._everywhere(lambda t: t.mark_gone(thread_id, gone))
        return Retained(thread_id, kept=len(rows) - len(dropped), deleted=len(dropped))

    def _waiting(self, thread_id: str, ns: str, nodes: dict[str, Node | None], incidents: list[Incident]) -> set[str]:
        """Checkpoints left waiting at an `interrupt()`: interrupt writes, no child."""
        parents = {n.parent_id for n in nodes.values() if n is not None}
        leaves = sorted(cid for cid, n in nodes.items() if n is not None and cid not in parents)
        writes = self.reads.writes(thread_id, ns, leaves, incidents)
        with_interrupts = {cid for cid, ws in writes.items() if any(w.channel == INTERRUPT for w, _ in ws)}
        return waiting_at_interrupt(nodes, with_interrupts)


# `prune(strategy="keep_latest")`: the newest checkpoint of each namespace, as a policy.
_KEEP_LATEST = RetentionPolicy(keep_last=1)


def _write_checkpoint(row: CheckpointRow, tier: Tier) -> None:
    tier.write_checkpoint(row, [])
