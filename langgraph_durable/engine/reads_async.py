"""Reading across the tiers: verify every copy, reconcile, repair, fall back.

Records are immutable, so any tier holding a verified copy may serve one.
What can go stale or be lost is *which* records exist: the newest checkpoint
of a thread, its pending writes, a ledger entry. No single tier's absence is
trusted for those, not even the system of record's: each read asks every
reachable tier, takes the union of what verifies, and copies it back into the
tiers that lacked it. A deletion is told apart from a loss by the marker
`delete_thread` leaves behind (`mark_deleted`: "deleted through checkpoint
id m"), under one rule, `_deleted`: the marker discredits only a copy that no
reachable shared tier holds. `delete_thread` removes every checkpoint from
every tier, so a shared tier (Redis, Postgres; SQLite when it is the only
tier) that holds checkpoint c holds a copy written after the deletion, and
is believed about c even if c <= m: a thread deleted and then written again
with the same or older ids (an import, a restore from a backup,
`copy_thread`) reads back whole. A copy that only a replica's local cache
holds, with c <= m in a shared tier that lacks it, is what that cache kept
of a deleted checkpoint: it is not served, and not written back.

A bad copy is moved to its own tier's quarantine (restorable) and, where
another tier holds an intact copy, replaced by it. Nothing intact is ever
deleted to recover: a checkpoint that cannot be assembled intact from any tier
is *withdrawn* (its copies quarantined, so that "latest" moves back) and the
newest intact ancestor is served instead.

This file is the async source: ``reads.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NoReturn, cast

from langgraph.checkpoint.base import CheckpointTuple, PendingWrite

from ..errors import CorruptCheckpoint, DurableError, TierUnavailable, UndecodableRecord
from ..integrity import CorruptionEvent, Incident, IntegrityPolicy, Unusable
from ..ledger import LedgerEntry, newest_entry
from ..model.codec import RecordCodec, assemble_tuple, version_key
from ..model.decisions import Bad, Intact, Undecodable, Verdict, choose_copy, fall_back, latest_attempts
from ..model.delta_history import DELTA_COUNTERS
from ..model.deltas import MSGPACK_TAG, DeltaMemo, Last, Piece, whole_payload
from ..model.records import (
    BadRecord,
    BlobRow,
    CheckpointRow,
    WriteRow,
    metadata_matches,
    row_fields,
    with_verified_metadata,
)
from ..model.roles import Roles
from ..tiers.base import Head, pack_fields
from ..tiers.protocol_async import AsyncTier
from .concurrency import amaybe_await, arun_all, refuse_awaitable
from .guard_async import AsyncGuardedTier, overlap

logger = logging.getLogger("langgraph_durable")

BlobKey = tuple[str, str]
Found = tuple[CheckpointRow, dict[str, Any], dict[str, Any]]  # row, checkpoint, metadata
WriteKey = tuple[str, str, int]  # checkpoint id, task id, idx
Opened = tuple[BlobRow, str, bytes, Any]
# Parent pointers of recently served checkpoints kept for `stub`.
PARENTS_REMEMBERED = 1024  # verified row, type tag, payload, piece or value


class AsyncTierReader:
    """Every read of records: by id, latest, list, pending writes, ledger."""

    def __init__(
        self,
        tiers: Sequence[AsyncTier],
        codec: RecordCodec,
        policy: IntegrityPolicy,
        deltas: DeltaMemo | None = None,
        owed: Callable[[str, str, str], bool] | None = None,
    ) -> None:
        self.roles: Roles[AsyncTier] = Roles.of(tiers)
        self.tiers = list(self.roles.tiers)
        self.codec = codec
        self.policy = policy
        # Only looking (the CLI's read commands): bad copies are reported,
        # logged and counted, never repaired, withdrawn or quarantined.
        self.read_only = False
        # Whether this saver's journal still ships a checkpoint (`Outbox.holds`):
        # a shared tier that lacks it is behind, not missing it.
        self.owed = owed
        # What this saver stored last (deltas.py): a list it wrote itself is
        # rebuilt from there instead of from the records its piece names.
        self.deltas = deltas
        self._parents: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._parents_lock = threading.Lock()
        # Reads that met a bad copy (`settle`), so far: one that did is not
        # kept by the read cache (read_cache.py).
        self.incident_reads = 0
        # The local cache alone, for reads that need no other tier
        # (`local_list`); it repairs nothing (there is no other tier).
        self._local_only: AsyncTierReader | None = None
        if self.roles.cache is not None:
            self._local_only = AsyncTierReader([self.roles.cache], codec, policy, deltas)

    # -- asking every reachable tier ------------------------------------------------

    async def _each(self, what: str, call: Callable[[AsyncTier], Any]) -> list[tuple[AsyncTier, Any]]:
        """`call` on every tier at once: (tier, result) of each reachable
        one, nearest first. `TierUnavailable` only when none is reachable."""
        results = await arun_all([functools.partial(call, t) for t in self.tiers], overlap=overlap(self.tiers))
        out: list[tuple[AsyncTier, Any]] = []
        down: list[TierUnavailable] = []
        for tier, result in zip(self.tiers, results):
            if isinstance(result, TierUnavailable):
                down.append(result)
                continue
            if isinstance(result, BaseException):
                raise result
            out.append((tier, result))
        if not out:
            out = await _probe_skipped(self.tiers, results, what, call)
        if not out:
            assert down
            raise TierUnavailable.every(down)
        if down:
            logger.debug("degraded read: %s without %s (%s)", what, down[-1].tier, down[-1])
        return out

    async def _repair(self, tiers: Sequence[AsyncTier], write: Callable[[AsyncTier], Any]) -> None:
        """Copy a good record into tiers that lacked it or held a bad copy; a
        failure here never fails the read. A read-only reader writes nothing."""
        if self.read_only:
            return
        for tier in dict.fromkeys(tiers):
            try:
                await write(tier)
            except DurableError as exc:
                logger.warning("read-repair into %s failed: %s", tier.name, exc)

    def _verdict(self, row: CheckpointRow | None) -> Verdict[Found]:
        """One copy of a checkpoint record, checked and decoded (`choose_copy`)."""
        if row is None:
            return None
        try:
            checkpoint, metadata = self.codec.decode_checkpoint(row)
        except BadRecord as exc:
            return Bad(exc)
        except UndecodableRecord as exc:
            return Undecodable(exc)
        return Intact((row, checkpoint, metadata))

    @staticmethod
    def _identical(bad: Sequence[Incident]) -> bool:
        """Two or more tiers hold the very same bad bytes for a record, and no
        tier an intact copy: no bit flip does that, a signing key other than
        the writer's does (or bytes written that way everywhere: a truncated
        envelope, an unknown format, a Redis frame seen as b""). Such copies
        are reported and read around, never quarantined or withdrawn: moving
        them would destroy what the right key still reads."""
        if len(bad) < 2 or len({i.envelope for i in bad}) != 1:
            return False
        for incident in bad:
            incident.keep = True
            incident.reason += (
                " (the same bytes fail in every tier: if this saver's signing key is not the one the store was "
                "written with, fix the key; nothing was quarantined)"
            )
        return True

    # -- one checkpoint -----------------------------------------------------------

    async def checkpoint(
        self,
        thread_id: str,
        ns: str,
        cid: str,
        incidents: list[Incident],
        copies: Sequence[tuple[AsyncTier, CheckpointRow | None]] | None = None,
        lacking_out: list[AsyncTier] | None = None,
    ) -> Found | None:
        """A verified checkpoint row, asked of every reachable tier (or taken
        from `copies`, what they answered already); tiers that lacked it or
        held a bad copy get the good one. None if no tier has it; `Unusable`
        if every copy is bad. The tiers that lack it get it with its values
        and pending writes (`_copy_whole`); with `lacking_out` they are
        added there instead, for a caller that reads those anyway and copies
        it after (`serve`, `list_tuples`)."""
        if copies is None:
            copies = await self._each("checkpoint", lambda t: t.read_checkpoint(thread_id, ns, cid))
        verdicts: list[tuple[AsyncTier, Verdict[Found]]] = [(t, self._verdict(row)) for t, row in copies]
        choice = choose_copy(verdicts)
        good, lacking = choice.served, choice.lacking
        rows_of = {id(t): row for t, row in copies}
        bad: list[Incident] = []
        for tier, error in choice.bad:
            row = rows_of[id(tier)]
            assert row is not None and isinstance(error, BadRecord)
            bad.append(
                Incident(tier, "checkpoint", thread_id, ns, f"checkpoint {cid}", error.reason, row.envelope, row=row)
            )
        if good is None and choice.undecodable is not None:
            incidents.extend(bad)
            raise choice.undecodable
        if good is None:
            if bad:
                keep = self._identical(bad)
                incidents.extend(bad)
                # No parent pointer: the bad copies' own is not to be trusted.
                unusable = Unusable(thread_id, ns, cid, None, "the checkpoint record is damaged in every tier")
                unusable.keep = keep
                raise unusable
            return None
        source, found = good
        local = self.roles.cache
        only_local = local is not None and all(row is None for t, row in copies if t is not local)
        if only_local and local is not None and lacking and await self._deleted(thread_id, ns, cid, lacking):
            # Deleted through another replica: this cached copy is stale, not
            # something the shared tiers lost. It goes too.
            await self._repair([local], lambda t: t.delete_checkpoint(thread_id, ns, cid))
            return None
        far = self.roles.last_resort
        if not only_local and far is not local and far in lacking and await self._deleted(thread_id, ns, cid, [far]):
            # The system of record lacks it and recorded its deletion, and this
            # saver's journal does not owe it: a shared tier that still holds
            # it missed the deletion (down while it ran, or restored from a
            # snapshot taken before it). Served, it would be copied back into
            # the system of record and the thread would come back for good.
            holders = [t for t, row in copies if row is not None]
            await self._repair(holders, lambda t: t.delete_checkpoint(thread_id, ns, cid))
            return None
        for incident in bad:
            incident.served = f"intact copy from {source.name}"
        incidents.extend(bad)
        row, checkpoint, metadata = found
        if bad:
            # Those tiers held the row, written with its channel values.
            fixed = with_verified_metadata(row, metadata)
            await self._repair([i.tier for i in bad], lambda t: t.write_checkpoint(fixed, []))
        if lacking and self.owed is not None and self.owed(thread_id, ns, cid):
            lacking = [t for t in lacking if t is local]  # the journal ships it, ancestors first
        if lacking_out is not None:
            lacking_out.extend(lacking)
        elif lacking:
            keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
            rows: list[BlobRow] = []
            await self.blobs(thread_id, ns, keys, incidents, opened_out=rows)
            await self.writes(thread_id, ns, [cid], incidents)
            await self._copy_whole(lacking, found, rows)
        return found

    async def _copy_whole(self, tiers: Sequence[AsyncTier], found: Found, blobs: Sequence[BlobRow]) -> None:
        """Copy a checkpoint into tiers that lack it: its row with the
        channel values read intact for it (`blobs`: a list piece's older
        records too, where the read opened them), in one transaction per
        tier, after its pending writes (the read copied those). Copied alone,
        the row was a checkpoint its tier could not serve: read from that
        tier alone (the others down, or a replica that reads it first), it
        was withdrawn as damaged and fallen back past. Values stay
        insert-or-ignore: a bad copy in the tier is not overwritten here."""
        row, _, metadata = found
        fixed = with_verified_metadata(row, metadata)
        mine = [b for b in blobs if b.thread_id == row.thread_id and b.checkpoint_ns == row.checkpoint_ns]
        await self._repair(tiers, lambda t: t.write_batch([(fixed, mine)], []))

    async def _deleted(self, thread_id: str, ns: str, cid: str, lacking: Sequence[AsyncTier]) -> bool:
        """Whether checkpoint `cid`, held by the local cache alone, was
        deleted rather than lost by the shared tiers: a shared tier in
        `lacking` (every reachable one lacks it) recorded it as deleted, the
        thread through it (`mark_deleted`, ``cid <= marker``) or its run
        (`gone`). Never for a checkpoint this saver's journal still owes the
        shared tiers: written here after the deletion (deleting a thread
        drops what was owed of it), not shipped yet. False when no tier in
        `lacking` answers: a deletion no tier vouches for is not assumed.

        The caller asks only about a copy no reachable shared tier holds: a
        shared tier holding `cid` got it after the deletion (which removed
        it from every tier), whatever the marker says, and a shared tier
        that lacks it while another holds it lost it (a Redis TTL, a tier
        down during the write), which no marker turns into a deletion."""
        if self.owed is not None and self.owed(thread_id, ns, cid):
            return False

        async def deleted(tier: AsyncTier) -> bool:
            marker = (await tier.head(thread_id, ns)).deleted_through
            return (marker is not None and cid <= marker) or cid in await tier.gone(thread_id, ns, [cid])

        try:
            answers = await _each_of(lacking, [], "deletion record", deleted)
        except TierUnavailable:
            return False
        return any(answer for _, answer in answers)

    async def blobs(
        self,
        thread_id: str,
        ns: str,
        keys: Sequence[BlobKey],
        incidents: list[Incident],
        pieces: dict[BlobKey, BlobRow] | None = None,
        opened_out: list[BlobRow] | None = None,
        copied_later: Collection[AsyncTier] = (),
    ) -> dict[BlobKey, tuple[BlobRow, Any]]:
        """Verified channel values (row and decoded value), nearest tier
        first; nearer tiers that lacked one or held a bad copy get the good
        one (a tier in `copied_later` that lacked one does not: the caller
        copies the whole checkpoint there next, `opened_out`'s records with
        it). Keys no tier holds intact are absent from the result. A list
        stored as a piece (`deltas.py`) is rebuilt from the records it names,
        read the same way (their rows go into `pieces`, if given); one that
        cannot be rebuilt intact is absent too."""
        opened = await self._open_blobs(thread_id, ns, keys, incidents, decode=True, copied_later=copied_later)
        chained = {key: o[3] for key, o in opened.items() if isinstance(o[3], Piece)}
        known: dict[BlobKey, Last] = {}
        # Asked for the records a piece is rebuilt from (`pieces`): read them,
        # even when this saver still remembers the list (`DeltaMemo.stored`).
        for key, piece in list(chained.items()) if pieces is None else []:
            last = self.deltas.stored(thread_id, ns, *key) if self.deltas is not None else None
            if last is not None and last.count == piece.count and last.chain[:-1] == piece.base:
                known[key] = last
                del chained[key]
        if chained:
            needed = {(key[0], v) for key, piece in chained.items() for v in piece.base}
            more = sorted(needed - opened.keys())
            if more:
                opened.update(
                    await self._open_blobs(thread_id, ns, more, incidents, decode=False, copied_later=copied_later)
                )
        found: dict[BlobKey, tuple[BlobRow, Any]] = {}
        for key in dict.fromkeys(keys):
            if key not in opened:
                continue
            row, _, _, value = opened[key]
            if isinstance(value, Piece):
                try:
                    if key in known:
                        whole = whole_payload(known[key].count, known[key].elements)
                        value = self.codec.rebuild_value((MSGPACK_TAG, whole), [])
                    else:
                        value = self._rebuild(key, value, opened)
                except BadRecord as exc:
                    label = f"channel {key[0]} @ {key[1]}"
                    incidents.append(Incident(None, "blob", thread_id, ns, label, exc.reason, b""))
                    continue
            found[key] = (row, value)
        if pieces is not None:
            pieces.update({key: o[0] for key, o in opened.items() if key not in found})
        if opened_out is not None:
            opened_out.extend(o[0] for o in opened.values())
        return found

    def _rebuild(self, key: BlobKey, piece: Piece, opened: Mapping[BlobKey, Opened]) -> Any:
        """A list stored as `piece`, from the verified records it names."""
        channel = key[0]
        chain: list[Piece] = []
        for i, version in enumerate(piece.base):
            record = opened.get((channel, version))
            if record is None:
                raise BadRecord(f"the list piece {version} it is rebuilt from is missing or damaged in every tier")
            if i and not isinstance(record[3], Piece):
                raise BadRecord(f"the record {version} it is rebuilt from is not a list piece")
            if i:
                chain.append(record[3])
        snapshot = opened[(channel, piece.base[0])]
        if isinstance(snapshot[3], Piece):
            raise BadRecord(f"the snapshot {piece.base[0]} it is rebuilt from is itself a piece")
        return self.codec.rebuild_value((snapshot[1], snapshot[2]), [*chain, piece])

    async def _open_blobs(
        self,
        thread_id: str,
        ns: str,
        keys: Sequence[BlobKey],
        incidents: list[Incident],
        *,
        decode: bool,
        copied_later: Collection[AsyncTier] = (),
    ) -> dict[BlobKey, Opened]:
        """Verified blob records, nearest tier first, repairing nearer tiers
        (see `blobs`): (row, type tag, payload, value: its `Piece` if it is
        one, else with `decode` the decoded value, else None)."""
        found: dict[BlobKey, Opened] = {}
        found_in: dict[BlobKey, str] = {}
        missing = list(dict.fromkeys(keys))
        lacking: list[AsyncTier] = []
        bad: dict[BlobKey, list[Incident]] = defaultdict(list)
        undecodable: dict[BlobKey, UndecodableRecord] = {}
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
                    found[key] = (brow, *self.codec.open_blob(brow, decode=decode))
                    found_in[key] = tier.name
                    good.append(brow)
                except BadRecord as exc:
                    label = f"channel {key[0]} @ {key[1]}"
                    bad[key].append(Incident(tier, "blob", thread_id, ns, label, exc.reason, brow.envelope, row=brow))
                except UndecodableRecord as exc:
                    undecodable.setdefault(key, exc)  # intact: another tier's copy may decode
            fix = [t for t in lacking if t not in copied_later]
            fix += [i.tier for key in rows if key in found for i in bad.get(key, []) if i.tier is not tier]
            if good:
                await self._repair(fix, lambda t: t.write_blobs(good))
            missing = [k for k in missing if k not in found]
            lacking.append(tier)
        for key, key_incidents in bad.items():
            if key in found:
                for incident in key_incidents:
                    incident.served = f"intact copy from {found_in[key]}"
            else:
                self._identical(key_incidents)
            incidents.extend(key_incidents)
        for key, refused in undecodable.items():
            if key not in found:
                raise refused
        return found

    async def writes(
        self,
        thread_id: str,
        ns: str,
        cids: Sequence[str],
        incidents: list[Incident],
        copies: Sequence[tuple[AsyncTier, Sequence[WriteRow]]] | None = None,
        *,
        local_asked: bool = False,
        channels: Collection[str] | None = None,
    ) -> dict[str, list[tuple[WriteRow, PendingWrite]]]:
        """The pending writes of these checkpoints (with `channels`, only the
        writes to those: every write is still verified, as what a task loses
        depends on all of them, but only those are decoded): the union of what every
        reachable tier holds intact (or of `copies`, what they answered
        already; a write one tier lost is still served, and copied back). A
        task with a write that no tier holds intact loses all its writes, so
        LangGraph runs it again instead of resuming from a partial set; the
        checkpoint itself stays usable. Its other writes are withdrawn into
        each tier's quarantine (as an unusable checkpoint is), so that once
        the bad copies are quarantined too, a later read does not serve the
        rest of the task's writes as if they were all."""
        if not cids:
            return {}
        # Copies the heads brought stand in for asking the tiers, but a tier
        # whose head is older (a local cache that lost the checkpoint) is taken
        # to hold none of its writes: before a task is dropped, or an
        # undecodable write raised, for want of an intact copy, every tier is
        # asked for its own.
        given, start = copies is not None, len(incidents)
        if copies is None:
            copies = await self._each("pending writes", lambda t: t.read_writes(thread_id, ns, cids))
        else:
            wanted = set(cids)
            copies = [(tier, [w for w in rows if w.checkpoint_id in wanted]) for tier, rows in copies]
        holders: dict[WriteKey, list[tuple[AsyncTier, WriteRow]]] = defaultdict(list)
        # Farthest first, so that an upserted special write (an interrupt, an
        # error) is taken from the system of record when copies differ.
        for tier, rows in reversed(copies):
            for w in rows:
                holders[(w.checkpoint_id, w.task_id, w.idx)].append((tier, w))
        reachable = [tier for tier, _ in copies]
        chosen: dict[WriteKey, tuple[WriteRow, PendingWrite]] = {}
        intact: dict[WriteKey, list[tuple[AsyncTier, WriteRow]]] = defaultdict(list)
        served_from: dict[int, WriteKey] = {}  # a bad copy whose intact twin was found
        dropped: set[tuple[str, str]] = set()
        fix: dict[tuple[Any, bool], list[WriteRow]] = defaultdict(list)  # (tier, replace) -> rows to write
        for key, held in holders.items():
            good: tuple[AsyncTier, WriteRow, PendingWrite] | None = None
            bad: list[Incident] = []
            undecodable: UndecodableRecord | None = None
            for tier, w in held:
                try:
                    if channels is None or w.channel in channels:
                        decoded = self.codec.decode_write(w)
                    else:
                        decoded = self.codec.check_write(w)
                except BadRecord as exc:
                    label = f"write {w.task_id}/{w.idx} of checkpoint {w.checkpoint_id}"
                    bad.append(Incident(tier, "write", thread_id, ns, label, exc.reason, w.envelope, row=w))
                    continue
                except UndecodableRecord as exc:
                    undecodable = undecodable or exc  # intact: another tier's copy may decode
                    continue
                intact[key].append((tier, w))
                if good is None:
                    good = (tier, w, decoded)
            if good is None and undecodable is not None:
                if given:
                    del incidents[start:]
                    return await self.writes(thread_id, ns, cids, incidents, channels=channels)
                incidents.extend(bad)
                raise undecodable
            if good is None:
                self._identical(bad)
                for incident in bad:
                    incident.served = f"no write: task {key[1]} runs again"
                dropped.add((key[0], key[1]))
            else:
                source, w, decoded = good
                chosen[key] = (w, decoded)
                for incident in bad:
                    incident.served = f"intact copy from {source.name}"
                    served_from[id(incident)] = key
                have = {id(t) for t, _ in held}
                for tier in reachable:
                    if any(i.tier is tier for i in bad):
                        fix[(tier, True)].append(w)
                    elif id(tier) not in have:
                        # Insert-or-ignore: never over a write stored meanwhile.
                        fix[(tier, False)].append(w)
            incidents.extend(bad)
        if given and dropped:
            del incidents[start:]
            return await self.writes(thread_id, ns, cids, incidents, channels=channels)
        local = self.roles.cache
        if given and not local_asked and local is not None and fix.get((local, False)):
            # The write is copied into the local cache, taken to hold none:
            # it may hold a bad copy, which must be replaced, not kept.
            try:
                held_locally = await local.read_writes(thread_id, ns, cids)
            except TierUnavailable:
                held_locally = []
            if held_locally:
                del incidents[start:]
                copies = [(t, held_locally if t is local else rows) for t, rows in copies]
                return await self.writes(thread_id, ns, cids, incidents, copies, local_asked=True, channels=channels)
        for incident in incidents:
            of = served_from.get(id(incident))
            if of is not None and (of[0], of[1]) in dropped:
                incident.served = f"no write: task {of[1]} runs again"
        for (tier, replace), rows in fix.items():
            # Not the writes of a task that runs again: they are withdrawn.
            rows = [w for w in rows if (w.checkpoint_id, w.task_id) not in dropped]
            if rows:
                await self._repair([tier], lambda t: t.write_writes(rows, replace))
        for key, held_intact in intact.items():
            if (key[0], key[1]) in dropped:
                await self._withdraw_writes(thread_id, ns, key, held_intact)
        out: dict[str, list[tuple[WriteRow, PendingWrite]]] = defaultdict(list)
        for (cid, task_id, _), pair in chosen.items():
            if (cid, task_id) not in dropped and (channels is None or pair[0].channel in channels):
                out[cid].append(pair)
        return out

    async def assemble(
        self,
        found: Sequence[Found],
        incidents: list[Incident],
        writes: Sequence[tuple[AsyncTier, Sequence[WriteRow]]] | None = None,
        channels: Collection[str] | None = None,
        blob_rows: list[BlobRow] | None = None,
        copied_later: Collection[AsyncTier] = (),
    ) -> list[CheckpointTuple | Unusable]:
        """Attach channel values and pending writes, batched per (thread, ns)
        (`writes`: every reachable tier's writes of the one checkpoint in
        `found`, if they were read already; `channels`: only these channels'
        values and pending writes, the rest left out (a DeltaChannel's walk); `blob_rows`: receives every value record
        the read opened intact, `blobs`' ``opened_out``; `copied_later`:
        tiers the caller copies the checkpoint into next, with those records). A
        checkpoint missing an intact channel value comes back `Unusable`."""
        groups: dict[tuple[str, str], list[Found]] = defaultdict(list)
        for item in found:
            groups[(item[0].thread_id, item[0].checkpoint_ns)].append(item)
        done: dict[tuple[str, str, str], CheckpointTuple | Unusable] = {}
        for (thread_id, ns), items in groups.items():
            versions = [
                {ch: v for ch, v in cp["channel_versions"].items() if channels is None or ch in channels}
                for _, cp, _ in items
            ]
            keys = [(ch, version_key(v)) for vs in versions for ch, v in vs.items()]
            blobs = await self.blobs(thread_id, ns, keys, incidents, opened_out=blob_rows, copied_later=copied_later)
            pending = await self.writes(
                thread_id, ns, [row.checkpoint_id for row, _, _ in items], incidents, writes, channels=channels
            )
            for (row, cp, md), wanted in zip(items, versions):
                cid = row.checkpoint_id
                absent = [(ch, version_key(v)) for ch, v in wanted.items() if (ch, version_key(v)) not in blobs]
                for ch, v in absent:
                    key = f"channel {ch} @ {v}"
                    if not any(i.kind == "blob" and i.key == key for i in incidents):
                        incidents.append(Incident(None, "blob", thread_id, ns, key, "missing in every tier", b""))
                if absent:
                    names = ", ".join(f"{ch} @ {v}" for ch, v in absent)
                    what = f"channel value(s) {names} missing or damaged in every tier"
                    unusable = Unusable(thread_id, ns, cid, row.parent_id, what)
                    labels = {f"channel {ch} @ {v}" for ch, v in absent}
                    unusable.keep = any(i.keep for i in incidents if i.kind == "blob" and i.key in labels)
                    done[(thread_id, ns, cid)] = unusable
                    continue
                values = {ch: blobs[(ch, version_key(v))][1] for ch, v in wanted.items()}
                done[(thread_id, ns, cid)] = assemble_tuple(row, cp, md, values, pending.get(cid, []))
        return [done[(r.thread_id, r.checkpoint_ns, r.checkpoint_id)] for r, _, _ in found]

    # -- serving, and falling back ------------------------------------------------------

    async def serve(
        self,
        thread_id: str,
        ns: str,
        cid: str,
        incidents: list[Incident],
        heads: Sequence[tuple[AsyncTier, Head]] | None = None,
    ) -> CheckpointTuple | None:
        """Checkpoint `cid`; if it cannot be assembled intact, its newest
        intact ancestor (the unusable ones are withdrawn). None if no tier
        has `cid` at all. `heads`: every reachable tier's `head`, each naming
        `cid`, whose rows and writes stand in for asking again."""
        current: str | None = cid
        while current is not None:
            first = heads if current == cid else None
            lacking: list[AsyncTier] = []
            try:
                found = await self.checkpoint(
                    thread_id, ns, current, incidents, [(t, h.row) for t, h in first] if first else None, lacking
                )
                if found is None:
                    if current == cid:
                        return None
                    # An ancestor named by a parent pointer that no tier has.
                    incidents.append(
                        Incident(
                            None, "checkpoint", thread_id, ns, f"checkpoint {current}", "missing in every tier", b""
                        )
                    )
                    current = await self._fall_back(
                        Unusable(thread_id, ns, current, None, "it is missing in every tier"), incidents, missing=True
                    )
                    continue
                writes = [(t, h.writes) for t, h in first] if first else None
                rows: list[BlobRow] = []
                result = (
                    await self.assemble(
                        [found], incidents, writes, blob_rows=rows if lacking else None, copied_later=lacking
                    )
                )[0]
                if lacking:
                    await self._copy_whole(lacking, found, rows)
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
        plan = fall_back(
            unusable.checkpoint_id,
            unusable.parent_id,
            raise_on_loss=self.policy.raise_on_loss,
            missing=missing,
            keep=unusable.keep,
        )
        if plan.raise_corrupt:
            reasons = _reasons(incidents)
            for incident in incidents:
                # Left in place: every later read must refuse just the same
                # until someone repairs or restores it.
                if incident.served is None:
                    incident.keep = True
            await self.settle(incidents, "nothing: CorruptCheckpoint raised (Integrity(on_corruption='raise'))")
            raise CorruptCheckpoint(
                f"checkpoint {unusable.checkpoint_id!r} of thread {unusable.thread_id!r} (ns {unusable.ns!r}) "
                f"cannot be read intact: {unusable.what}. Run `langgraph-durable verify` for details, or use "
                "Integrity(on_corruption='fallback') to resume from the newest intact checkpoint.",
                key=key,
                reasons=reasons,
            )
        previous = plan.next
        if plan.ask_older:
            previous = await self._older(unusable.thread_id, unusable.ns, unusable.checkpoint_id)
        if plan.withdraw:
            await self._withdraw(unusable)
        if previous is None:
            await self._no_ancestor(key, incidents)
        logger.error("checkpoint %s is unusable (%s); falling back to %s", key, unusable.what, previous)
        return previous

    async def _withdraw(self, unusable: Unusable) -> None:
        """Move the intact copies of an unusable checkpoint into each tier's
        quarantine, so "latest" moves back and nobody serves it; `restore`
        puts them back. Its damaged copies are quarantined when the read
        settles; its channel values and writes stay where they are. A
        read-only reader only falls back past it."""
        if self.read_only:
            return
        t, ns, cid = unusable.thread_id, unusable.ns, unusable.checkpoint_id
        for tier, row in await self._each("withdrawal", lambda x: x.read_checkpoint(t, ns, cid)):
            if row is None:
                continue
            try:
                self.codec.decode_checkpoint(row)
            except BadRecord:
                continue  # a damaged copy: an incident of its own
            try:
                await tier.quarantine(
                    t, ns, "checkpoint", f"checkpoint {cid}", f"withdrawn: {unusable.what}", row.envelope,
                    pack_fields(row_fields(row)),
                )  # fmt: skip
                await tier.remove_copy("checkpoint", row)
            except DurableError as exc:
                logger.warning("could not withdraw checkpoint %s from %s: %s", cid, tier.name, exc)

    async def _withdraw_writes(
        self, thread_id: str, ns: str, key: WriteKey, copies: Sequence[tuple[AsyncTier, WriteRow]]
    ) -> None:
        """Move the intact copies of a write whose task lost another write
        into each tier's quarantine (`restore` puts them back). A read-only
        reader only leaves the task out."""
        if self.read_only:
            return
        cid, task_id, idx = key
        for tier, row in copies:
            try:
                await tier.quarantine(
                    thread_id, ns, "write", f"write {task_id}/{idx} of checkpoint {cid}",
                    f"withdrawn: task {task_id} lost another write and runs again", row.envelope,
                    pack_fields(row_fields(row)),
                )  # fmt: skip
                await tier.remove_copy("write", row)
            except DurableError as exc:
                logger.warning("could not withdraw a write of task %s from %s: %s", task_id, tier.name, exc)

    async def _older(self, thread_id: str, ns: str, checkpoint_id: str) -> str | None:
        """The newest checkpoint before `checkpoint_id` that any tier lists."""
        answers = await self._each(
            "ancestor", lambda t: t.list_checkpoints(thread_id, ns, None, checkpoint_id, None, 1)
        )
        ids = [rows[0].checkpoint_id for _, rows in answers if rows]
        return max(ids) if ids else None

    async def _no_ancestor(self, key: str, incidents: list[Incident]) -> NoReturn:
        reasons = _reasons(incidents)
        await self.settle(incidents, "nothing: no intact ancestor")
        raise CorruptCheckpoint(
            f"checkpoint {key} cannot be read intact and has no intact ancestor. "
            "Run `langgraph-durable verify` to list the damaged records.",
            key=key,
            reasons=reasons,
        )

    async def settle(self, incidents: list[Incident], default: str = "nothing") -> None:
        """Quarantine, log, count and report each bad copy met by a read."""
        if incidents:
            self.incident_reads += 1  # not a read to keep (read_cache.py)
        seen: set[tuple[Any, ...]] = set()
        for incident in incidents:
            tier_name = incident.tier.name if incident.tier is not None else "every tier"
            identity = (tier_name, incident.kind, incident.thread_id, incident.checkpoint_ns, incident.key)
            if identity in seen:
                continue
            seen.add(identity)
            if incident.tier is not None and not incident.keep and not self.read_only:  # no bytes if missing everywhere
                try:
                    fields = pack_fields(row_fields(incident.row)) if incident.row is not None else b""
                    await incident.tier.quarantine(
                        incident.thread_id,
                        incident.checkpoint_ns,
                        incident.kind,
                        incident.key,
                        incident.reason,
                        incident.envelope,
                        fields,
                    )
                    if incident.row is not None and await self._still_there(incident):
                        # Only this bad copy: one repaired meanwhile stays.
                        await incident.tier.remove_copy(incident.kind, incident.row)
                except DurableError as exc:
                    logger.warning("could not quarantine a bad %s in %s: %s", incident.kind, tier_name, exc)
            pending = self.policy.report(
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
            if pending is not None:
                try:
                    if True:  # ASYNC
                        await amaybe_await(pending)  # an async on_corruption hook is awaited
                    else:
                        refuse_awaitable(pending)  # the sync face cannot: it says why (logged)
                except Exception:  # a hook never breaks a read
                    logger.exception("on_corruption hook failed")
        incidents.clear()

    @staticmethod
    async def _still_there(incident: Incident) -> bool:
        """Whether the tier still holds this very bad copy, key fields
        included. `remove_copy` compares the envelope only, and a copy whose
        parent id (or a write's channel) alone was damaged has the intact
        envelope: once read-repair has rewritten it, removing "those bytes"
        would remove the repaired copy."""
        row = incident.row
        if isinstance(row, CheckpointRow):
            return await incident.tier.read_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id) == row
        if isinstance(row, WriteRow):
            return row in await incident.tier.read_writes(row.thread_id, row.checkpoint_ns, [row.checkpoint_id])
        return True  # a blob has no key fields: its envelope says it all

    # -- the public reads ------------------------------------------------------------------

    async def latest(self, thread_id: str, ns: str, incidents: list[Incident]) -> CheckpointTuple | None:
        """The newest checkpoint any reachable tier holds intact. A tier that
        lost it (or was rolled back) is not believed over the others, and a
        deletion marker (`mark_deleted`) hides only what was deleted: a copy
        that the local cache alone holds, covered by a shared tier's marker
        (`_deleted`, asked by `checkpoint`), never a checkpoint a shared tier
        holds, which was written after the deletion (same ids or not).

        One round trip per tier in the common case: every tier's `head`
        brings the newest checkpoint's row and pending writes (what can go
        stale) along with its id. When every reachable tier names the same
        checkpoint, those answers are all the read needs, and its channel
        values (immutable) come from the nearest tier that holds them."""
        heads = await self._each("latest checkpoint", lambda t: t.head(thread_id, ns))
        ids = [h.checkpoint_id for _, h in heads]
        newest = max((i for i in ids if i), default=None)
        local = self.roles.cache
        behind = self._only_local_behind(local, heads, newest) if local is not None and newest else None
        attempts = latest_attempts(heads, ids, local, behind)
        if attempts and attempts[0].heads is not None:
            # Every reachable tier holds it (no marker can call it deleted),
            # or only the local cache is behind.
            return await self.serve(thread_id, ns, attempts[0].checkpoint_id, incidents, attempts[0].heads)
        candidates = [a.checkpoint_id for a in attempts]
        for cid in candidates:
            # `checkpoint` tells a copy only this replica's cache still has
            # (lost by the shared tiers, or deleted through another replica)
            # apart, and drops it when it was deleted: then None.
            tup = await self.serve(thread_id, ns, cid, incidents)
            if tup is not None:
                return tup
            # An index entry with no record behind it in any tier (a Redis id
            # whose hash field is gone), or a deleted copy: nothing to lose by
            # dropping it.
            for tier, h in heads:
                if h.checkpoint_id == cid:
                    await self._repair([tier], lambda t: t.delete_checkpoint(thread_id, ns, cid))
        if candidates:
            # Every tier's index named checkpoints that none of them serves.
            older = await self._older(thread_id, ns, candidates[-1])
            if older is not None:
                return await self.serve(thread_id, ns, older, incidents)
        return None

    @staticmethod
    def _only_local_behind(
        local: AsyncTier, heads: Sequence[tuple[AsyncTier, Head]], newest: str
    ) -> list[tuple[AsyncTier, Head]] | None:
        """When only the local cache is behind (a checkpoint another replica
        wrote, a cold cache): every shared tier's head names `newest`, and the
        local tier's own newest is older, so it lacks `newest` and its pending
        writes. Then the heads are the whole answer, the local tier's standing
        for a tier that lacks the checkpoint (`serve` copies it there), as
        when every tier agrees. None otherwise: the read asks again."""
        mine = next((h for t, h in heads if t is local), None)
        shared = [h for t, h in heads if t is not local]
        if mine is None or not shared or any(h.checkpoint_id != newest or h.row is None for h in shared):
            return None
        if mine.checkpoint_id is not None and mine.checkpoint_id >= newest:
            return None
        lacks = Head(newest, mine.deleted_through)
        return [(t, lacks if t is local else h) for t, h in heads]

    async def stub(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        """Checkpoint `checkpoint_id` without its channel values and writes
        (its config, parent and versions: what a walk up the parent chain
        needs), from the nearest tier holding it, verified. None when no tier
        has it or the nearest copy is bad: the caller then reads it in full,
        which reports and repairs a bad copy."""
        with self._parents_lock:
            known = self._parents.get((thread_id, ns, checkpoint_id), False)
        if known is not False:
            parent, counters = known
            config: Any = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            }
            metadata: Any = {DELTA_COUNTERS: counters} if counters is not None else {}
            return CheckpointTuple(config=config, checkpoint=cast(Any, {}), metadata=metadata, parent_config=parent)
        for tier in self.tiers:
            try:
                row = await tier.read_checkpoint(thread_id, ns, checkpoint_id)
            except TierUnavailable:
                continue
            if row is None:
                continue
            try:
                checkpoint, metadata = self.codec.decode_checkpoint(row)
            except BadRecord:
                return None
            return assemble_tuple(row, checkpoint, metadata, {}, [])
        return None

    async def local_latest(
        self, thread_id: str, ns: str, checkpoint_id: str, write_keys: frozenset[tuple[str, int]]
    ) -> CheckpointTuple | None:
        """The newest checkpoint from the local tier alone, if it holds exactly
        what this saver wrote last under the thread's lease (`own_heads.OwnHeads`):
        that checkpoint as its head, those pending writes, every record intact.
        None otherwise (also on a bad copy): the caller then reads as usual,
        across the tiers, where bad copies are reported and repaired."""
        local = self.roles.cache
        if local is None:
            return None
        try:
            head = await local.head(thread_id, ns)
        except TierUnavailable:
            return None
        if head.checkpoint_id != checkpoint_id or head.row is None:
            return None
        if {(w.task_id, w.idx) for w in head.writes} != write_keys or head.deleted_through:
            return None
        try:
            checkpoint, metadata = self.codec.decode_checkpoint(head.row)
            pending = [(w, self.codec.decode_write(w)) for w in head.writes]
        except BadRecord:
            return None
        keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
        incidents: list[Incident] = []
        found = await self.blobs(thread_id, ns, keys, incidents)
        if incidents:
            await self.settle(incidents)
        if any(key not in found for key in keys):
            return None
        values = {ch: found[(ch, version_key(v))][1] for ch, v in checkpoint["channel_versions"].items()}
        return assemble_tuple(head.row, checkpoint, metadata, values, pending)

    async def local_list(
        self,
        thread_id: str,
        ns: str,
        before_id: str | None,
        limit: int,
        channels: Collection[str] | None,
        mine: Mapping[str, frozenset[tuple[str, int]]],
    ) -> list[CheckpointTuple] | None:
        """`list` of the checkpoints before `before_id` (the newest without
        it; every channel's values without `channels`), from the local tier
        alone, as far back as they are among `mine` (what this saver wrote
        under the lease it still holds, with the keys of their pending
        writes, `OwnHeads.mine`); only `channels`' values. None on anything
        unexpected (a bad or missing record, a pending write missing or too
        many): the caller then reads the usual way, across the tiers, where
        bad copies are reported and repaired. Nothing is written or reported
        here."""
        reader = self._local_only
        if reader is None:
            return None
        local = reader.roles.last_resort  # its only tier
        try:
            rows, writes = await local.list_page(thread_id, ns, before_id, limit)
            found: list[Found] = []
            for row in rows:
                if row.checkpoint_id not in mine:
                    break  # older than the lease: another writer's, maybe
                found.append((row, *self.codec.decode_checkpoint(row)))
            held: dict[str, set[tuple[str, int]]] = defaultdict(set)
            for w in writes:
                held[w.checkpoint_id].add((w.task_id, w.idx))
            if any(held.get(row.checkpoint_id, set()) != mine[row.checkpoint_id] for row, _, _ in found):
                return None  # the local copy lost a write, or holds one this saver did not write
            incidents: list[Incident] = []
            assembled = await reader.assemble(found, incidents, [(local, writes)], channels=channels)
        except (TierUnavailable, BadRecord):
            return None
        if incidents:
            return None
        out = [t for t in assembled if not isinstance(t, Unusable)]
        return out if len(out) == len(assembled) else None

    async def get_tuple(self, thread_id: str, ns: str, cid: str | None) -> CheckpointTuple | None:
        incidents: list[Incident] = []
        try:
            tup = await (self.serve(thread_id, ns, cid, incidents) if cid else self.latest(thread_id, ns, incidents))
        finally:
            await self.settle(incidents)
        if tup is not None:
            self._remember_parent(tup)
        return tup

    def _remember_parent(self, tup: CheckpointTuple) -> None:
        """A served checkpoint's parent pointer and its DeltaChannels' counts
        since their snapshots (immutable): what `stub` needs when LangGraph
        asks for its DeltaChannel history right after."""
        conf = tup.config["configurable"]
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        counters = (tup.metadata or {}).get(DELTA_COUNTERS)
        with self._parents_lock:
            self._parents[key] = (tup.parent_config, counters)
            while len(self._parents) > PARENTS_REMEMBERED:
                self._parents.popitem(last=False)

    async def list_tuples(
        self,
        thread_id: str | None,
        ns: str | None,
        cid: str | None,
        before_id: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
        channels: Collection[str] | None = None,
    ) -> list[CheckpointTuple]:
        """`list`: the union of the shared tiers' indexes (see `rows`),
        verified and assembled, newest first (`channels`: see `assemble`)."""
        copies = None
        if thread_id is not None and ns is not None and cid is None and not filter and limit is not None:
            ordered, copies = await self._page(thread_id, ns, before_id, limit)
        else:
            ordered = await self.rows(thread_id, ns, cid, before_id, filter, limit)
        incidents: list[Incident] = []
        try:
            found: list[Found] = []
            lacking: list[tuple[Found, list[AsyncTier]]] = []
            for row in ordered:
                try:
                    item: Found | None = (row, *self.codec.decode_checkpoint(row))
                except BadRecord:
                    # The tiers that lack it get it after `assemble` has read
                    # its values (all of them: with `channels`, right away).
                    tiers: list[AsyncTier] = []
                    try:
                        item = await self.checkpoint(
                            row.thread_id, row.checkpoint_ns, row.checkpoint_id, incidents,
                            lacking_out=tiers if channels is None else None,
                        )  # fmt: skip
                    except Unusable as exc:
                        await self._omit(exc, incidents)
                        continue
                    if item is not None and tiers and metadata_matches(item[2], filter):
                        lacking.append((item, tiers))
                if item is not None and metadata_matches(item[2], filter):
                    found.append(item)
            rows: list[BlobRow] = []
            assembled = await self.assemble(
                found, incidents, copies, channels=channels, blob_rows=rows if lacking else None
            )
            for item, tiers in lacking:
                await self._copy_whole(tiers, item, rows)
            out = []
            for result in assembled:
                if isinstance(result, Unusable):
                    await self._omit(result, incidents)
                    continue
                out.append(result)
                if limit is not None and len(out) >= limit:
                    break
            return out
        finally:
            await self.settle(incidents)

    async def rows(
        self,
        thread_id: str | None,
        ns: str | None,
        cid: str | None,
        before_id: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        """Checkpoint rows as `list_checkpoints` gives them, from every
        reachable shared tier at once, deduplicated, newest first: one tier
        that lost a checkpoint does not hide it. The local cache of one
        replica may hold what another pruned, so it answers only when it is
        the only tier (or no shared tier is reachable)."""
        shared = list(self.roles.shared) if self.roles.cache is not None else self.tiers
        # What the shared tiers are still owed, asked *before* them: a record
        # shipped in between is then in their answer, never in neither.
        owed = await self._owed_rows(thread_id, ns, cid, before_id, filter, limit) if shared is not self.tiers else []
        answers = await _each_of(
            shared, self.tiers, "checkpoint list",
            lambda t: t.list_checkpoints(thread_id, ns, cid, before_id, filter, limit),
        )  # fmt: skip
        rows: dict[tuple[str, str, str], CheckpointRow] = {}
        for _, tier_rows in answers:
            for row in tier_rows:
                rows.setdefault((row.thread_id, row.checkpoint_ns, row.checkpoint_id), row)
        for row in owed:
            rows.setdefault((row.thread_id, row.checkpoint_ns, row.checkpoint_id), row)
        return sorted(rows.values(), key=lambda r: r.checkpoint_id, reverse=True)

    async def _page(
        self, thread_id: str, ns: str, before_id: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[tuple[AsyncTier, list[WriteRow]]] | None]:
        """A page of one (thread, ns)'s history, as `rows` lists it, with the
        pending writes of its checkpoints read in the same round trip to each
        shared tier (`list_page`), and then from the local cache (which may
        hold writes not shipped yet). Those copies stand in for `writes`
        asking every tier again (see `assemble`) when each shared tier that
        answered listed every checkpoint on the page (none is only in the
        local journal, owed to them), so that each checkpoint's writes are
        still the union of every reachable tier's; otherwise None, and
        `writes` asks as it always did."""
        local = self.roles.cache
        shared = list(self.roles.shared) if local is not None else self.tiers
        owed = await self._owed_rows(thread_id, ns, None, before_id, None, limit) if local is not None else []
        answers = await _each_of(
            shared, self.tiers, "checkpoint list", lambda t: t.list_page(thread_id, ns, before_id, limit)
        )
        rows: dict[str, CheckpointRow] = {}
        for _, (tier_rows, _) in answers:
            for row in tier_rows:
                rows.setdefault(row.checkpoint_id, row)
        for row in owed:
            rows.setdefault(row.checkpoint_id, row)
        ordered = sorted(rows.values(), key=lambda r: r.checkpoint_id, reverse=True)
        listed = [{r.checkpoint_id for r in tier_rows} for _, (tier_rows, _) in answers]
        if any(ids != listed[0] for ids in listed) or len(ordered) != len(listed[0]):
            # A tier (or, for a checkpoint still owed to them, every shared
            # tier) was not asked for the writes of a checkpoint on the page.
            return ordered, None
        copies = [(tier, writes) for tier, (_, writes) in answers]
        if local is not None and all(tier is not local for tier, _ in copies) and ordered:
            with contextlib.suppress(TierUnavailable):  # as `writes` would: the shared tiers' copies
                copies.insert(0, (local, await local.read_writes(thread_id, ns, [r.checkpoint_id for r in ordered])))
        return ordered, copies

    async def _owed_rows(
        self,
        thread_id: str | None,
        ns: str | None,
        cid: str | None,
        before_id: str | None,
        filter: Any,
        limit: int | None,
    ) -> list[CheckpointRow]:
        """Local checkpoints the shared tiers are still owed (written behind,
        or while they were down): this replica's own writes, listed before
        they are shipped. Only the newest `limit` local rows can be among the
        newest `limit` of the union, so no more are read."""
        local: Any = self.roles.cache
        try:
            owed = {
                (e.thread_id, e.checkpoint_ns, e.checkpoint_id)
                for e in await local.pending_journal(thread_id=thread_id)
                if e.kind == "checkpoint"
            }
            if not owed:
                return []
            listed = await local.list_checkpoints(thread_id, ns, cid, before_id, filter, None if filter else limit)
        except TierUnavailable:
            return []
        return [r for r in listed if (r.thread_id, r.checkpoint_ns, r.checkpoint_id) in owed]

    async def _omit(self, unusable: Unusable, incidents: list[Incident]) -> None:
        """`list` leaves an unusable checkpoint out (or raises, by policy)."""
        if self.policy.raise_on_loss:
            await self._fall_back(unusable, incidents)  # raises
        if not unusable.keep:
            await self._withdraw(unusable)
        for incident in incidents:
            if incident.served is None:
                incident.served = f"left out of list: {unusable.what}"

    async def ledger(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's action ledger, reconciled across every reachable tier:
        an entry never moves backwards (a confirmed action stays confirmed
        even where one tier lost or rolled back its copy), and tiers that are
        behind get the winning copy."""
        copies = await self._each("action ledger", lambda t: t.read_ledger(thread_id))
        keys = sorted({key for _, entries in copies for key in entries})
        out: dict[str, LedgerEntry] = {}
        for key in keys:
            candidates: list[tuple[LedgerEntry, bytes]] = []
            reasons: list[str] = []
            for tier, entries in copies:
                envelope = entries.get(key)
                if envelope is None:
                    continue
                try:
                    candidates.append((self.codec.decode_ledger(thread_id, key, envelope), envelope))
                except BadRecord as exc:
                    logger.error("ledger entry %s/%s is damaged in %s (%s)", thread_id, key, tier.name, exc.reason)
                    reasons.append(f"{tier.name}: {exc.reason}")
            if not candidates:
                # Unknown whether the action ran: as unsafe as an unconfirmed one.
                raise CorruptCheckpoint(
                    f"the ledger entry for action {key!r} of thread {thread_id!r} is damaged in every tier "
                    f"({'; '.join(reasons)}); whether the action ran is unknown. Record the answer with "
                    "resolve_action().",
                    key=f"{thread_id}/ledger/{key}",
                    reasons=reasons,
                )
            entry, envelope = newest_entry(candidates)
            out[key] = entry
            # Bring behind tiers forward (lacking the entry, holding an older
            # state, or a damaged copy), each only if it still holds what we
            # saw: a task of this run may be confirming the action right now,
            # and a blind write could put an older state over its confirmation.
            for tier, entries in copies:
                seen = entries.get(key)
                if seen != envelope:
                    await self._repair([tier], lambda t: t.swap_ledger(thread_id, key, seen, envelope))
        return out


async def _each_of(
    tiers: Sequence[AsyncTier], fallback: Sequence[AsyncTier], what: str, call: Callable[[AsyncTier], Any]
) -> list[tuple[AsyncTier, Any]]:
    """`call` on `tiers` at once; if none is reachable, on the first
    reachable tier of `fallback` (the local cache) instead."""
    results = await arun_all([functools.partial(call, t) for t in tiers], overlap=overlap(tiers))
    out = [(t, r) for t, r in zip(tiers, results) if not isinstance(r, BaseException)]
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, TierUnavailable):
            raise r
    if out:
        if len(out) < len(tiers):
            logger.debug("degraded read: %s from %s only", what, ", ".join(t.name for t, _ in out))
        return out
    probed = await _probe_skipped(tiers, results, what, call)
    if probed:
        return probed
    down = [r for r in results if isinstance(r, TierUnavailable)]
    for tier in fallback:
        if tier in tiers:
            continue
        try:
            result = await call(tier)
        except TierUnavailable as exc:
            down.append(exc.detached())  # no frames kept: see `TierUnavailable.detached`
            continue
        logger.debug("degraded read: %s answered by %s (%s)", what, tier.name, down[0])
        return [(tier, result)]
    raise TierUnavailable.every(down)


async def _probe_skipped(
    tiers: Sequence[AsyncTier], results: Sequence[Any], what: str, call: Callable[[AsyncTier], Any]
) -> list[tuple[AsyncTier, Any]]:
    """No tier answered `call`: before the read fails, try it once on each
    tier its circuit breaker skipped, as an early half-open probe
    (`Breaker.allow_early`: once per outage, as writes do in
    `AsyncTierChain._half_open`). A tier that came back while its breaker
    still waits out its backoff (Redis restarted, then Postgres dropped)
    thus answers the read, and its breaker closes. A tier that failed in
    this very call is not tried again."""
    out: list[tuple[AsyncTier, Any]] = []
    for tier, result in zip(tiers, results):
        breaker = getattr(tier, "breaker", None)
        if not (isinstance(result, TierUnavailable) and result.skipped) or breaker is None:
            continue
        if not breaker.allow_early(time.monotonic()):
            continue  # its early probe was spent in this outage
        guard = cast(AsyncGuardedTier, tier)
        try:
            answer = await guard.probe(functools.partial(call, guard.tier))
        except TierUnavailable:
            continue
        logger.warning("%s tier answered %s as a probe while no other tier answered", tier.name, what)
        out.append((tier, answer))
    return out


def _reasons(incidents: Sequence[Incident]) -> list[str]:
    return [f"{i.tier.name if i.tier is not None else 'every tier'}: {i.key}: {i.reason}" for i in incidents]
