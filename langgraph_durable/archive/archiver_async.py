"""The archive's I/O: ship a thread's new records, archive an idle thread,
bring one back, rebuild the hot tiers from the archive.

Every decision about what a segment holds, what a thread's archive copy
is, and whether it holds everything the hot tiers hold is `segments`'. The
hot tiers are reached through the tier chain (its guarded tiers, the same
breakers and timeouts as every other call); the object store through
`store_async.AsyncArchiveStore`.

Whether a thread is archived is the hot tiers' word, not the object
store's: archiving writes an ``archived`` flag into every tier (with the
deletion marker the thread had before) just before it deletes the thread
there, a bring-back clears it just after it wrote the thread back, and
``delete_thread`` clears it. So a read that misses asks the system of
record, never the object store, unless the thread was archived; a deleted
thread is never brought back, even while the object store cannot be told;
and the replica tells a deleted thread (deletion marker, no flag) from an
archived one. Archiving and bringing back both run under the thread's
writer lease, so neither races the other or a run. The ``archived/``
objects in the store only list the archived threads for people and for a
restore after the hot tiers were lost.

This file is the async source: ``archiver.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from ..engine.concurrency import amaybe_await, refuse_awaitable
from ..errors import ConfigError, CorruptCheckpoint, DurableError, ThreadArchived, ThreadBusy, TierUnavailable
from ..ledger import LedgerEntry, newest_entry
from ..model.codec import thread_id_of
from ..model.pins import is_pin_key, pins_of
from ..model.records import BadRecord, BlobRow, CheckpointRow, WriteRow, key_fingerprint, open_envelope_any
from ..retention import Retained, RetentionPolicy, age_seconds
from ..tiers.base import ARCHIVE_META, STORE_ID_META, archive_owed_key, archived_key
from ..tiers.protocol_async import AsyncTier
from .judging import Judged, judged, settled, summary, untouched, valid
from .reports import ArchiveCheck, ArchiveOutcome, ArchiveRefused, ArchiveReport, HotCopy, NotYet, RestoreReport
from .segments import (
    ARCHIVED,
    OWNER,
    THREADS,
    Segment,
    ThreadImage,
    head_tag,
    id_key,
    is_digest_folder,
    is_segment_name,
    marker_key,
    name_tag,
    name_time,
    new_store_id,
    open_marker,
    open_owner,
    read_owner,
    seal_marker,
    seal_owner,
    segment_name,
    segments_prefix,
    thread_folder,
    thread_of_folder,
    thread_of_id_object,
)
from .store_async import STORE_KEY_OBJECT, AsyncArchiveStore

if TYPE_CHECKING:
    from ..engine.chain_async import AsyncTierChain

logger = logging.getLogger("langgraph_durable")

# Segments older than this are folded into one when a ship finds
# `COMPACT_AT` of them: a restore ``--until`` a time within it is exact to
# the replica's pass, and one before it to the compaction.
COMPACT_AFTER_S = 24 * 3600.0
COMPACT_AT = 16
# What the replica remembers of the archive copies it shipped: each
# thread's segment names and a digest of every record it shipped (not the
# records), so a pass reads only the segments another writer added since,
# whatever the size of the thread's history. Weighed in records and names
# (about 200 bytes each), least recently shipped out.
MEMO_THREADS = 10_000
MEMO_ENTRIES = 250_000


class AsyncArchiver:
    """One saver's archive: its object store and the tier chain it copies from and to."""

    def __init__(self, store: AsyncArchiveStore, chain: AsyncTierChain, *, key_fingerprint: str | None = None) -> None:
        self.store = store
        self.chain = chain
        # The full fingerprint of the store's key the operator vouches for
        # (`archive_key_fingerprint=`): the only way a key kept in the bucket
        # is ever taken.
        self.key_fingerprint = key_fingerprint
        # The store that owns the prefix (`claim`): every segment is bound to it.
        self.store_id: str | None = None
        self._claimed = False
        self._key_kept = False
        self._memo: OrderedDict[str, tuple[list[str], ThreadImage, int]] = OrderedDict()
        self._memo_entries = 0

    # -- who owns the archive ------------------------------------------------------------

    @property
    def _keys(self) -> Sequence[bytes]:
        return self.chain.codec.keys

    async def _ready(self) -> None:
        """The chain set up (the store's key) and the prefix claimed (its id)."""
        await self.chain.ensure_setup()
        if not self._claimed:
            await self.claim()

    def _own_id(self) -> str:
        assert self.store_id is not None, "claim() first"
        return self.store_id

    def _holder(self) -> AsyncTier:
        """Where the store keeps its id: the system of record, or the local
        file of a store that has no shared tier."""
        holder = self.chain.roles.authority or self.chain.local
        assert holder is not None
        return holder

    async def trusted_key(self) -> str | None:
        """The store's key the archive keeps (base64), for a store whose hot
        tiers hold none: only when the operator vouched for it with its full
        fingerprint. None when the archive keeps no key and belongs to no
        store (a new store may make its own). Anyone who can write the bucket
        can write a key there, so anything else is a `ConfigError`."""
        url = self.store.url
        kept = await self.store.store_key_object()
        if kept is None:
            if self.key_fingerprint is not None:
                raise ConfigError(
                    f"Archive(key_fingerprint=) names the key of the store to rebuild, but the archive at {url} "
                    f"keeps no store key ({STORE_KEY_OBJECT} is missing): check the archive URL, or put "
                    f"{STORE_KEY_OBJECT} back from a version of the bucket you trust."
                )
            owner = await self.store.get(OWNER)
            if owner is not None:
                raise ConfigError(
                    f"the archive at {url} belongs to another store ({_named(read_owner(owner))}) and this "
                    "store's tiers hold no key: a store sealed with its own signing key needs that key "
                    "(signing_key=); a new store needs its own archive prefix (archive='s3://BUCKET/OTHER-PREFIX')."
                )
            return None
        text = kept["store_key"]
        fingerprint = key_fingerprint(base64.b64decode(text), full=True)
        if self.key_fingerprint is None:
            raise ConfigError(
                f"this store's tiers hold no key and the archive at {url} keeps one (fingerprint "
                f"{_short(fingerprint)}...), which is never taken from the bucket alone: to rebuild this store "
                "from its archive, pass the full fingerprint of its key that `langgraph-durable doctor` printed "
                "(kept with your secrets) as Archive(key_fingerprint=) (or LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT); "
                "a new store needs its own archive prefix."
            )
        if fingerprint != self.key_fingerprint:
            raise ConfigError(
                f"the store key the archive at {url} keeps (fingerprint {_short(fingerprint)}...) is not the key "
                "whose fingerprint you gave (Archive(key_fingerprint=)): the bucket's copy was replaced, or this is "
                f"another store's archive. Put {STORE_KEY_OBJECT} and {OWNER} back from a version of the bucket you "
                "trust, or check the archive URL."
            )
        return text

    async def claim(self, *, at_setup: bool = False) -> None:
        """Make sure this store owns the prefix, and learn its id: the
        prefix's owner object must verify under this store's keys and name
        this store's id (kept in the system of record), else the prefix is
        another store's and this is a `ConfigError` naming both. A prefix
        without one (new, or written by an older version) is claimed,
        unless it keeps another store's key. A store whose system of record
        lost its id (rebuilt from the archive) takes the one the owner
        object names: it verifies under the key the operator trusts.

        Once the system of record says this store owns this URL, the object
        store is not asked again. `at_setup`: an object store or system of
        record that cannot be reached leaves this to the archive's first use."""
        chain = self.chain
        holder = self._holder()
        here = f"{self.store.bucket}/{self.store.prefix}"
        if self.key_fingerprint is not None and chain.store_key and chain.codec.key:
            ours = key_fingerprint(chain.codec.key, full=True)
            if ours != self.key_fingerprint:
                raise ConfigError(
                    f"Archive(key_fingerprint=) names another key than this store's (fingerprint {_short(ours)}...): "
                    "its tiers hold their own key, so the option is not needed here; remove it, or check which "
                    "store these tiers are."
                )
        try:
            mine = await holder.read_meta(STORE_ID_META)
            if mine and await holder.read_meta(ARCHIVE_META) == here:
                self.store_id, self._claimed = mine, True
                return
            key = chain.codec.key
            if not key:
                if chain.read_only:
                    return  # nothing verifies without a key: every segment is reported unusable
                raise ConfigError(
                    "the archive needs records sealed with a key: pass signing_key=, or give the store Redis or "
                    "Postgres (which keep the store's own key)."
                )
            fingerprint = key_fingerprint(key, full=True)
            data = await self.store.get(OWNER)
            if data is not None:
                try:
                    owner = open_owner(data, self._keys)
                except BadRecord:
                    raise ConfigError(_another_store(self.store.url, read_owner(data), mine, fingerprint)) from None
                if mine is not None and owner["store"] != mine:
                    raise ConfigError(_another_store(self.store.url, owner, mine, fingerprint))
                mine = owner["store"]
                reseal = owner["key"] != fingerprint  # a rotated signing key: sealed with the new one from now on
            else:
                # The key object names the store's id too: a store rebuilt
                # from the archive reads its own segments again, whichever of
                # its faces (or replicas) claims first.
                kept = await self.store.store_key_object() if chain.store_key else None
                if kept is not None and base64.b64decode(kept["store_key"]) != key:
                    theirs = key_fingerprint(base64.b64decode(kept["store_key"]), full=True)
                    raise ConfigError(_another_store(self.store.url, {"key": theirs}, mine, fingerprint))
                mine = mine or (kept or {}).get("store") or new_store_id()
                reseal = True
            if chain.read_only:
                self.store_id, self._claimed = mine, True
                return
            mine = await holder.create_meta(STORE_ID_META, mine)  # a replica claiming at once: one id holds
            sealed = seal_owner(mine, fingerprint, key)
            if data is None and not await self.store.create(OWNER, sealed):
                # Another store (or a replica of this one) claimed the prefix
                # since it was read: its claim stands, and is checked as any.
                first = await self.store.get(OWNER) or b""
                try:
                    owner = open_owner(first, self._keys)
                except BadRecord:
                    raise ConfigError(_another_store(self.store.url, read_owner(first), mine, fingerprint)) from None
                if owner["store"] != mine:
                    raise ConfigError(_another_store(self.store.url, owner, mine, fingerprint))
                reseal = False
            elif reseal and data is not None:
                await self.store.put(OWNER, sealed)
            if reseal:
                logger.info(
                    "the archive at %s belongs to this store (id %s); the fingerprint of its key is %s",
                    self.store.url,
                    mine,
                    fingerprint,
                )
            await holder.write_meta(ARCHIVE_META, here)
        except TierUnavailable as exc:
            if not at_setup:
                raise
            logger.info("the archive's owner is checked at its first use (%s)", exc)
            return
        self.store_id, self._claimed = mine, True

    async def segment_keys(self, thread_id: str, strays: list[str] | None = None) -> list[str]:
        """The thread's segments; any other object in its folder is left
        out (named in `strays`): one object nobody can read must not keep
        the thread's segments from being read."""
        keys: list[str] = []
        for key in await self.store.keys(segments_prefix(thread_id)):
            if is_segment_name(key):
                keys.append(key)
            else:
                logger.warning("archive object %s of thread %r is not a segment; skipped", key, thread_id)
                if strays is not None:
                    strays.append(key)
        return keys

    async def _segments(self, thread_id: str, keys: Sequence[str], bad: list[str] | None) -> list[Segment]:
        segments: list[Segment] = []
        for key in keys:
            data = await self.store.get(key)
            if data is None:
                continue  # compacted meanwhile: the compacted segment holds it
            try:
                segments.append(Segment.open(thread_id, key, data, self._keys, self.store_id))
            except BadRecord as exc:
                if bad is not None:
                    bad.append(key)
                logger.warning("archive segment %s of thread %r is unusable (%s); left out", key, thread_id, exc.reason)
        return segments

    async def image(
        self,
        thread_id: str,
        *,
        until: float | None = None,
        bad: list[str] | None = None,
        keys: Sequence[str] | None = None,
        strays: list[str] | None = None,
    ) -> ThreadImage:
        """The thread's archive copy, its segments (or those of `keys`)
        verified and replayed in order, those cut after `until` left out. A
        segment that does not verify is left out too and named in `bad`; an
        object that is no segment, in `strays`."""
        await self._ready()  # the store's key and id, which verify the segments
        listed = list(keys) if keys is not None else await self.segment_keys(thread_id, strays)
        chosen = [k for k in listed if until is None or name_time(k) <= until]
        return ThreadImage.fold(thread_id, await self._segments(thread_id, chosen, bad), until=until)

    async def _image_for_ship(self, thread_id: str, keys: list[str], bad: list[str]) -> ThreadImage:
        """The thread's archive copy, digested (`_digested`): what this
        archiver remembers of it plus the segments listed since (all of them
        again when another writer's segment sorts among the known ones, or
        one of them is gone)."""
        memo = self._memo.pop(thread_id, None)
        if memo is not None:
            self._memo_entries -= memo[2]
            known, image, _ = memo
            if keys[: len(known)] == known:
                image = _copy(image)
                for segment in await self._segments(thread_id, keys[len(known) :], bad):
                    image.apply(_digested_segment(segment))
                return image
        return _digested(ThreadImage.fold(thread_id, await self._segments(thread_id, keys, bad)))

    def _remember(self, thread_id: str, keys: list[str], image: ThreadImage) -> None:
        weight = image.records + len(image.gone) + len(keys)
        if weight > MEMO_ENTRIES // 4:
            return  # a thread that big is listed and read whole again: rare, and never a quarter of the memo
        self._memo[thread_id] = (keys, image, weight)
        self._memo_entries += weight
        while self._memo and (len(self._memo) > MEMO_THREADS or self._memo_entries > MEMO_ENTRIES):
            _, (_, _, dropped) = self._memo.popitem(last=False)
            self._memo_entries -= dropped

    async def marker(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's ``archived`` object in the store (its listing entry). None if there is none."""
        await self._ready()
        data = await self.store.get(marker_key(thread_id))
        if data is None:
            return None
        try:
            return open_marker(thread_id, data, self._keys, self.store_id)
        except BadRecord as exc:
            logger.warning("the archive marker of thread %r is unusable (%s); ignored", thread_id, exc.reason)
            return None

    async def listed_archived(self) -> list[str]:
        """Threads with an ``archived/`` object in the store."""
        out: list[str] = []
        for key in await self.store.keys(f"{ARCHIVED}/"):
            try:
                out.append(await self._thread_of(key.rsplit("/", 1)[-1]))
            except ValueError:
                continue
        return sorted(out)

    async def _thread_of(self, folder: str) -> str:
        """The thread id a folder name stands for (a digest folder's from its
        id object); ValueError for a name this library never makes."""
        if is_digest_folder(folder):
            return thread_of_id_object(folder, await self.store.get(id_key(folder)))
        return thread_of_folder(folder)

    async def archived_threads(self) -> list[str]:
        """Threads that live only in the archive: listed there, and flagged
        archived in the hot tiers."""
        return [t for t in await self.listed_archived() if await self.flag(t) is not None]

    async def holding_runs(self, run_ids: Sequence[str]) -> list[str]:
        """Archived threads whose archive copy holds a checkpoint of one of
        these runs (`delete_for_runs` brings them back first, so the runs go
        from them too). Reads each archived thread's copy: a cost in
        proportion to the archive, paid by `delete_for_runs` only."""
        wanted = set(run_ids)
        out: list[str] = []
        for thread_id in await self.archived_threads():
            image = await self.image(thread_id)
            if any(row.run_id in wanted for row in image.checkpoints.values()):
                out.append(thread_id)
        return out

    async def archived_thread_ids(self) -> list[str]:
        """Every thread with a copy in the archive."""
        out: list[str] = []
        for folder in await self.store.folders(f"{THREADS}/"):
            try:
                out.append(await self._thread_of(folder))
            except ValueError:
                continue
        return sorted(out)

    # -- the hot tiers' word -------------------------------------------------------------

    async def flag(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's ``archived`` flag, as the most authoritative tier that
        answers has it: None if the thread is not archived."""
        await self.chain.ensure_setup()
        for tier in self.chain.roles.by_authority():
            try:
                value = await tier.read_meta(archived_key(thread_id))
            except TierUnavailable:
                continue
            return _flag(value)
        return None

    async def _unflag(self, thread_id: str, flag: dict[str, Any], tiers: Sequence[AsyncTier]) -> None:
        """The thread is back: its previous deletion marker again, and no
        flag, in the authority first (which must answer) and every other
        tier that answers (one that does not keeps a flag the authority's
        word overrides)."""
        for tier in tiers:
            try:
                await tier.mark_deleted(thread_id, flag.get("previous_marker"))
                await tier.write_meta(archived_key(thread_id), None)
            except TierUnavailable as exc:
                if tier is tiers[0]:
                    raise
                logger.warning("archive: %s tier keeps thread %r flagged archived (%s)", tier.name, thread_id, exc)

    async def _set_flag(self, thread_id: str, value: dict[str, Any] | None, tiers: Sequence[AsyncTier]) -> None:
        text = json.dumps(value, sort_keys=True) if value is not None else None
        for tier in tiers:
            await tier.write_meta(archived_key(thread_id), text)

    async def forget(self, thread_id: str) -> None:
        """After ``delete_thread``: the thread is not archived any more
        (deleted), in every tier that answers, and its listing entry goes
        (the replica's next pass records the deletion in its copy)."""
        tiers = list(self.chain.roles.by_authority())
        for tier in tiers:
            try:
                await tier.write_meta(archived_key(thread_id), None)
            except TierUnavailable:
                if tier is tiers[0]:
                    raise  # its flag would bring the thread back: delete again when it answers
        self._forget_memo(thread_id)
        with _quietly():
            await self.store.delete([marker_key(thread_id)])

    # -- reading the hot tiers -------------------------------------------------------

    async def hot(self, thread_id: str, tiers: Sequence[AsyncTier], *, known: ThreadImage | None = None) -> HotCopy:
        """What `tiers` hold of the thread, each record verified (a bad copy
        is not archived: the read path or `repair` deals with it, but it
        counts as held), and its ledger reconciled as reads reconcile it. A
        record `known` holds byte for byte was verified when it was shipped:
        it is not verified again."""
        copy = HotCopy()
        verified = _Verified(known)
        ledgers: dict[str, list[tuple[LedgerEntry, bytes]]] = {}
        # The most authoritative tier's copy first: where tiers differ, its bytes win.
        for tier in reversed(tiers):
            records = await tier.thread_records(thread_id)
            for c in records.checkpoints:
                ckey = (c.checkpoint_ns, c.checkpoint_id)
                copy.seen.add(ckey)
                if ckey not in copy.checkpoints and (
                    verified.checkpoint(ckey, c) or self._intact(c.context, c.envelope)
                ):
                    copy.checkpoints[ckey] = c
            for b in records.blobs:
                bkey = (b.checkpoint_ns, b.channel, b.version)
                if bkey not in copy.blobs and (verified.blob(bkey, b) or self._intact(b.context, b.envelope)):
                    copy.blobs[bkey] = b
            for w in records.writes:
                wkey = (w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx)
                if wkey not in copy.writes and (verified.write(wkey, w) or self._intact(w.context, w.envelope)):
                    copy.writes[wkey] = w
            for key, envelope in (await tier.read_ledger(thread_id)).items():
                try:
                    entry = self.chain.codec.decode_ledger(thread_id, key, envelope)
                except (BadRecord, DurableError):
                    continue
                ledgers.setdefault(key, []).append((entry, envelope))
            marker = (await tier.head(thread_id, "")).deleted_through
            if marker and marker > (copy.deleted_through or ""):
                copy.deleted_through = marker
        copy.ledger = {key: newest_entry(copies)[1] for key, copies in ledgers.items()}
        return copy

    def _intact(self, context: str, envelope: bytes) -> bool:
        try:
            open_envelope_any(context, envelope, self._keys)
        except BadRecord:
            return False
        return True

    # -- shipping --------------------------------------------------------------------

    async def ship(self, thread_id: str, *, tiers: Sequence[AsyncTier] | None = None) -> int:
        """Write what the hot tiers hold of the thread and its archive copy
        lacks as one segment, with the deletions they recorded. The records
        shipped (0 when the copy was current). Raises `NotYet` while the
        local journal still owes the shared tiers some of the thread."""
        await self._ready()
        if tiers is None and await self.chain.journal.owes(thread_id):
            raise NotYet(thread_id)
        asked = list(tiers) if tiers is not None else [self.chain.roles.last_resort]
        at = time.time()  # the segment's time: what the hot tiers held then
        owed = await self.chain.roles.last_resort.read_meta(archive_owed_key(thread_id))
        keys = await self.segment_keys(thread_id)
        bad: list[str] = []
        image = await self._image_for_ship(thread_id, keys, bad)
        hot = await self.hot(thread_id, asked, known=image)
        # Archived (flagged): the hot tiers are meant to lack what it held,
        # under the deletion marker archiving left; a pin or an answer
        # written meanwhile is shipped, nothing is taken for deleted.
        flag = await self.flag(thread_id) if hot.deleted_through else None
        deleted = flag.get("previous_marker") if flag is not None else hot.deleted_through
        if _two_histories(image, list(hot.checkpoints.values()), deleted):
            # Shipped, the archive copy would hold both: one thread with two
            # roots after any restore. The thread's failure, reported.
            raise ArchiveRefused(thread_id, _another_history(thread_id))
        segment = _missing(image, hot)
        archived_through = str(flag.get("newest") or "") if flag is not None else ""
        absent = [key for key in image.checkpoints if key not in hot.seen and key[1] > archived_through]
        if absent:
            marker = hot.deleted_through if flag is None else None
            segment.gone = await self._recorded_gone(thread_id, absent, marker, asked[-1])
        if not hot.seen and not hot.ledger and hot.deleted_through and not image.empty and flag is None:
            # Nothing left in the hot tiers, under a deletion marker, and not
            # archived: deleted.
            segment.deleted_through = hot.deleted_through
        if not segment:
            self._remember(thread_id, keys, image)
            await self._paid(thread_id, owed)
            return 0
        await self._keep_key()
        newest, writes = _head(hot)
        name = segments_prefix(thread_id) + segment_name(at, head_tag(newest, writes, hot.ledger))
        await self.store.put(name, segment.seal(name, self.chain.codec.key, self._own_id()))
        folder = thread_folder(thread_id)
        if is_digest_folder(folder) and not keys:
            # Its first segment: listings (a restore of every thread) learn the id from it.
            await self.store.put(id_key(folder), thread_id.encode("utf-8"))
        image.apply(_digested_segment(segment))
        keys = sorted([*keys, name])
        if segment.deleted_through is not None and not hot.seen:
            # The thread was deleted: what the archive held of it goes too,
            # but the segment that says so (a replay of older segments left
            # by an interrupted delete ends in it), and any it cannot read.
            await self.store.delete([k for k in keys if k != name and k not in bad])
            keys = [k for k in keys if k == name or k in bad]
        elif not bad:
            keys = await self._compact(thread_id, keys, at)
        self._remember(thread_id, keys, image)
        await self._paid(thread_id, owed)
        return segment.records + len(segment.gone)

    async def owe(self, thread_id: str) -> None:
        """Before a deletion in the thread (`delete_for_runs`, `prune`): note
        in the hot tiers that the archive has yet to learn of it, so that a
        rescan after a restart ships it even when the thread's head did not
        change. The authority must take the note (else the deletion waits)."""
        value = f"{time.time_ns()}-{os.urandom(4).hex()}"
        tiers = list(self.chain.roles.by_authority())
        for tier in tiers:
            try:
                await tier.write_meta(archive_owed_key(thread_id), value)
            except TierUnavailable:
                if tier is tiers[0]:
                    raise

    async def _paid(self, thread_id: str, owed: str | None) -> None:
        """A ship read the hot tiers after `owed` was noted: the note goes,
        unless a deletion noted another one since (its value differs)."""
        if owed is None:
            return
        if await self.chain.roles.last_resort.read_meta(archive_owed_key(thread_id)) != owed:
            return
        for tier in self.chain.roles.by_authority():
            try:
                await tier.write_meta(archive_owed_key(thread_id), None)
            except TierUnavailable:
                continue  # only the authority's note is read (`changed`)

    async def _compact(self, thread_id: str, keys: list[str], now: float) -> list[str]:
        """Fold the thread's segments older than `COMPACT_AFTER_S` into one
        when there are `COMPACT_AT` of them: exactly those listed, named
        with the oldest one's time and keeping when each entry was first
        shipped (a restore ``--until`` any time finds what it found before).
        Only when every segment verified."""
        old = [k for k in keys if name_time(k) < now - COMPACT_AFTER_S]
        if len(old) < COMPACT_AT:
            return keys
        bad: list[str] = []
        folded = await self.image(thread_id, keys=old, bad=bad)
        if bad:
            return keys
        whole = folded.compacted(name_time(old[0]))
        name = segments_prefix(thread_id) + segment_name(whole.at, name_tag(old[-1]))
        await self.store.put(name, whole.seal(name, self.chain.codec.key, self._own_id()))
        await self.store.delete(old)
        return sorted([name, *(k for k in keys if k not in old)])

    async def _recorded_gone(
        self, thread_id: str, absent: Sequence[tuple[str, str]], deleted_through: str | None, tier: AsyncTier
    ) -> list[tuple[str, str]]:
        """Which archived checkpoints no hot tier holds because they were
        deleted (recorded: `mark_gone`, a deletion marker), not lost: a tier
        that lost a record does not get to delete the archive's copy."""
        gone = [(ns, cid) for ns, cid in absent if deleted_through and cid <= deleted_through]
        rest = [(ns, cid) for ns, cid in absent if not (deleted_through and cid <= deleted_through)]
        for ns in sorted({ns for ns, _ in rest}):
            ids = [cid for n, cid in rest if n == ns]
            gone += [(ns, cid) for cid in sorted(await tier.gone(thread_id, ns, ids))]
        return gone

    async def _keep_key(self) -> None:
        """The first segment this process writes: the archive gets a copy of
        the store's own key (a key of the user's stays the user's). It is
        read back only on the operator's word (`trusted_key`)."""
        if self._key_kept or not self.chain.store_key or not self.chain.codec.key:
            return
        text = base64.b64encode(self.chain.codec.key).decode()
        kept = await self.store.keep_store_key(text, self._own_id())
        if kept != text:
            # `claim` found this store's key here, or none: someone replaced it since.
            logger.error(
                "the archive at %s keeps another store key than this store's (someone replaced %s): a "
                "restore would refuse it. Put it back from a version of the bucket you trust.",
                self.store.url,
                STORE_KEY_OBJECT,
            )
        self._key_kept = True

    async def changed(self, thread_id: str) -> bool:
        """Whether the thread's newest checkpoint or its pending writes differ
        from what its newest segment was cut at, or its ledger does: from a
        listing, one head and one ledger read."""
        keys = await self.segment_keys(thread_id)
        tier = self.chain.roles.last_resort
        if await tier.read_meta(archive_owed_key(thread_id)) is not None:
            return True  # a deletion the archive has yet to learn of
        head = await tier.head(thread_id, "")
        ledger = await tier.read_ledger(thread_id)
        tag = head_tag(head.checkpoint_id, [(w.task_id, w.idx) for w in head.writes], ledger)
        if not keys:
            return head.checkpoint_id is not None
        return name_tag(keys[-1]) != tag

    # -- archiving idle threads ------------------------------------------------------

    async def archive_thread(
        self,
        thread_id: str,
        *,
        idle_after: float,
        now: float,
        dry_run: bool,
        hold: Callable[[str], Any],
        release: Callable[[Any], Any],
    ) -> ArchiveOutcome:
        """Move one thread to the archive if its newest checkpoint is older
        than `idle_after` seconds: under its writer lease (`hold`), ship it,
        read its archive copy back and check that it holds every record any
        hot tier holds, byte for byte, flag it archived in every tier and
        delete it there. A pinned thread, a busy one, one a tier cannot be
        read from, or one whose ledger changed meanwhile stays."""
        thread_id = thread_id_of(thread_id, what="archive_idle")
        outcome = ArchiveOutcome(thread_id)
        tiers = list(self.chain.tiers)
        hot = await self.hot(thread_id, tiers)
        reason = self._keeps(thread_id, hot, idle_after, now)
        if reason:
            outcome.skipped = reason
            return outcome
        outcome.records = hot.records
        if dry_run:
            outcome.archived = True
            return outcome
        try:
            lease = await hold(thread_id)
        except ThreadBusy:
            outcome.skipped = "busy"
            return outcome
        try:
            hot = await self.hot(thread_id, tiers)  # again, under the lease
            reason = self._keeps(thread_id, hot, idle_after, now)
            if reason:
                outcome.skipped = reason
                return outcome
            # Shipped from a fresh read of the copy (not what this process
            # remembers of it), which is then checked once more.
            self._forget_memo(thread_id)
            await self.ship(thread_id, tiers=tiers)
            known_bad: list[str] = []
            image = await self.image(thread_id, bad=known_bad)
            if not image.holds(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger):
                outcome.skipped = "archive copy incomplete"
                logger.warning("thread %r not archived: its archive copy lacks records the hot tiers hold", thread_id)
                return outcome
            # A pin or an operator's answer recorded meanwhile (they take no
            # lease) would be deleted with the thread: look once more.
            if (await self.hot(thread_id, tiers)).ledger != hot.ledger:
                outcome.skipped = "ledger changed"
                return outcome
            newest = max(cid for _, cid in hot.checkpoints)
            # What a retention sweep needs to pass the thread over unread (`judging.untouched`).
            info = {
                "at": now,
                "newest": newest,
                "records": hot.records,
                "summary": summary(hot.checkpoints.values(), self.chain.codec),
            }
            marker = seal_marker(thread_id, info, self.chain.codec.key, self._own_id())
            await self.store.put(marker_key(thread_id), marker)
            # Segments that did not verify when the copy was checked: what
            # they held, the others hold too. Any other found bad later is not.
            flag = {**info, "previous_marker": hot.deleted_through, "known_bad": known_bad}
            await self._set_flag(thread_id, flag, tiers)
            # With its deletion marker (`delete_thread`): a copy another
            # replica's cache still holds is known to be gone, not lost.
            await self.chain.maintenance.delete_thread(thread_id)
            self.chain.forget_thread(thread_id)
            self._forget_memo(thread_id)
            outcome.archived = True
        finally:
            await release(lease)
        return outcome

    async def archive_threads(
        self,
        thread_ids: Sequence[str],
        report: ArchiveReport,
        *,
        idle_after: float,
        now: float,
        hold: Callable[[str], Any],
        release: Callable[[Any], Any],
        ask: Callable[[str, str], Any],
        timed: Callable[[str], AbstractContextManager[None]],
        pace: Callable[[], Any] | None = None,
    ) -> ArchiveReport:
        """`archive_thread` for each of `thread_ids`, into `report`: first
        `pace()` (a rate limit; on the async face awaited if it returns an
        awaitable), then `ask(thread_id, what)` another saver for the lease
        it keeps, each timed by `timed(op)` (the metrics hooks). A hot tier
        that cannot be read leaves that thread as it is; the object store
        down stops."""
        for thread_id in thread_ids:
            if pace is not None:
                if True:  # ASYNC
                    await amaybe_await(pace())
                else:
                    refuse_awaitable(pace(), "pace")
            await ask(thread_id, "archive_idle")
            try:
                with timed("archive_thread"):
                    try:
                        outcome = await self.archive_thread(
                            thread_id,
                            idle_after=idle_after,
                            now=now,
                            dry_run=report.dry_run,
                            hold=hold,
                            release=release,
                        )
                    except TierUnavailable as exc:
                        if exc.tier == "archive" and await self._answers():
                            # Told apart inside `timed`: the hooks count an error, not the store down.
                            raise ArchiveRefused(str(thread_id), exc) from exc
                        raise
            except ArchiveRefused as exc:
                # A name or an object the store will not take: the other
                # threads are archived, this one stays hot until the next sweep.
                logger.warning("thread %r not archived: the object store refused it (%s)", thread_id, exc)
                outcome = ArchiveOutcome(str(thread_id), skipped=f"archive refused it: {_first_line(exc)}")
            except TierUnavailable as exc:
                if exc.tier == "archive":
                    raise  # the object store is down: no thread can be archived
                outcome = ArchiveOutcome(str(thread_id), skipped=f"{exc.tier} tier unreachable")
            report.threads.append(outcome)
        return report

    async def _answers(self) -> bool:
        """Whether the object store answers a call that names no thread."""
        try:
            await self.store.keys(OWNER)
        except TierUnavailable:
            return False
        return True

    def _keeps(self, thread_id: str, hot: HotCopy, idle_after: float, now: float) -> str:
        """Why the thread stays in the hot tiers ("" if it does not)."""
        if not hot.checkpoints:
            return "no checkpoints"
        if self._pinned(thread_id, hot.ledger):
            return "pinned"
        newest_ts = self._newest_ts(hot)
        idle = age_seconds(newest_ts, now) if newest_ts else None
        if idle is None or idle < idle_after:
            return "not idle"
        return ""

    def _forget_memo(self, thread_id: str) -> None:
        memo = self._memo.pop(thread_id, None)
        if memo is not None:
            self._memo_entries -= memo[2]

    def _pinned(self, thread_id: str, ledger: dict[str, bytes]) -> bool:
        entries = {}
        for key, envelope in ledger.items():
            if is_pin_key(key):
                try:
                    entries[key] = self.chain.codec.decode_ledger(thread_id, key, envelope)
                except (BadRecord, DurableError):
                    continue
        return bool(pins_of(thread_id, entries))

    def _newest_ts(self, hot: HotCopy) -> str:
        rows = sorted(hot.checkpoints.values(), key=lambda r: r.checkpoint_id)
        for row in reversed(rows):
            try:
                checkpoint, _ = self.chain.codec.decode_checkpoint(row)
            except (BadRecord, DurableError):
                continue
            return str(checkpoint.get("ts") or "")
        return ""

    # -- retention ---------------------------------------------------------------------

    async def judge(self, thread_id: str, policy: RetentionPolicy, now: float) -> Judged | None:
        """What a retention sweep would do to this archived thread, judged on
        its archive copy as the hot tiers would judge it (`judging`); None
        if it is not archived (any more). The copy is read only when the
        flag's summary cannot rule every rule out. A copy with a segment
        that does not verify is left as it is, and said so in the log: what
        the segment held cannot be judged."""
        flag = await self.flag(thread_id)
        if flag is None:
            return None
        found = valid(flag.get("summary"))
        if found is not None and untouched(policy, found, now):
            return Judged(Retained(thread_id, kept=found["checkpoints"]), flag=flag)
        bad: list[str] = []
        image = await self.image(thread_id, bad=bad)
        unreadable = sorted(set(bad) - set(flag.get("known_bad") or ()))
        if unreadable:
            logger.warning(
                "retention left archived thread %r as it is: %d of its archive segments do not verify (%s)",
                thread_id,
                len(unreadable),
                ", ".join(unreadable),
            )
            return Judged(Retained(thread_id, kept=len(image.checkpoints)), unreadable=True, flag=flag)
        return dataclasses.replace(judged(image, policy, now, self.chain.codec), flag=flag)

    async def settle(self, thread_id: str, judged: Judged, policy: RetentionPolicy, now: float) -> None:
        """A sweep read the archived thread's copy and nothing goes: the flag
        says so (`judging.settled`), with the copy's summary, so that the
        next sweep under the same rules need not read it again. Only while
        the flag is still the one judged (the caller holds the thread's
        lease); best effort, in the tiers that answer."""
        if judged.flag is None or judged.summary is None or await self.flag(thread_id) != judged.flag:
            return
        flag = {**judged.flag, "summary": {**judged.summary, "settled": settled(policy, now)}}
        tiers = list(self.chain.roles.by_authority())
        try:
            await self._set_flag(thread_id, flag, tiers[:1])
        except TierUnavailable:
            return
        for tier in tiers[1:]:
            try:
                await self._set_flag(thread_id, flag, [tier])
            except TierUnavailable:
                continue  # its flag keeps the older summary: only a cost

    # -- bringing back -----------------------------------------------------------------

    async def bring_back(
        self, thread_id: str, *, hold: Callable[[str], Any] | None = None, release: Callable[[Any], Any] | None = None
    ) -> bool:
        """If the hot tiers flag the thread archived, copy it back into every
        hot tier and clear the flag. Whether it did. Under the thread's
        writer lease: taken with `hold` (None: the caller's run holds it).
        A segment that does not verify leaves the thread archived and raises
        `CorruptCheckpoint`: serving an older state as the newest would be
        serving what was not the newest."""
        if await self.flag(thread_id) is None:
            return False
        lease = await hold(thread_id) if hold is not None else None
        try:
            flag = await self.flag(thread_id)  # again, under the lease
            if flag is None:
                return False
            found: list[str] = []
            image = await self.image(thread_id, bad=found)
            held = (await tiers_first(list(self.chain.roles.by_authority())).thread_records(thread_id)).checkpoints
            if _two_histories(image, held, flag.get("previous_marker")):
                raise _another_history(thread_id)
            bad = sorted(set(found) - set(flag.get("known_bad") or ()))
            if bad:
                raise CorruptCheckpoint(
                    f"thread {thread_id!r} is archived, and {len(bad)} of its archive segments do not verify "
                    f"({', '.join(bad)}): it stays archived rather than come back without them. "
                    "`langgraph-durable restore` brings back what verifies, if that is what you want.",
                    key=f"{thread_id}/archive",
                    reasons=[f"archive: {key}: does not verify" for key in bad],
                )
            tiers = list(self.chain.roles.by_authority())
            await self._write(image, tiers)
            await self._unflag(thread_id, flag, tiers)
        finally:
            if lease is not None and release is not None:
                await release(lease)
        with _quietly():
            await self.store.delete([marker_key(thread_id)])
        self.chain.forget_thread(thread_id)
        logger.info("thread %r brought back from the archive (%d records)", thread_id, image.records)
        return True

    async def _write(self, image: ThreadImage, tiers: Sequence[AsyncTier]) -> None:
        """The image's records into `tiers`, the authority first (`tiers`
        as `roles.by_authority` orders them): values, then checkpoints
        oldest first with their writes, in one transaction per tier where it
        can; a ledger entry only where it is newer than the tier's (an entry
        never moves backwards). The authority unreachable raises before
        anything is written; another tier that is down is left to reads."""
        thread_id = image.thread_id
        checkpoints = sorted(image.checkpoints.values(), key=lambda r: (r.checkpoint_id, r.checkpoint_ns))
        blobs = list(image.blobs.values())
        writes = list(image.writes.values())
        for tier in tiers:
            try:
                await self._write_tier(tier, thread_id, checkpoints, blobs, writes, image)
            except TierUnavailable as exc:
                if tier is tiers[0]:
                    raise  # the authority: nothing was written anywhere
                # Another tier's copy comes from reads (read-repair) and `repair`.
                logger.warning("archive: %s tier missed thread %r coming back (%s)", tier.name, thread_id, exc)

    async def _write_tier(
        self,
        tier: AsyncTier,
        thread_id: str,
        checkpoints: Sequence[Any],
        blobs: Sequence[Any],
        writes: Sequence[Any],
        image: ThreadImage,
    ) -> None:
        if checkpoints:
            batch = [(c, blobs if i == 0 else []) for i, c in enumerate(checkpoints)]
            await tier.write_batch(batch, writes)
        elif blobs:
            await tier.write_blobs(blobs)
        held = await tier.read_ledger(thread_id) if image.ledger else {}
        for key, envelope in image.ledger.items():
            if self._newer(thread_id, key, envelope, held.get(key)):
                await tier.write_ledger(thread_id, key, envelope)
        if image.gone:
            await tier.mark_gone(thread_id, sorted(image.gone))

    def _newer(self, thread_id: str, key: str, envelope: bytes, held: bytes | None) -> bool:
        if held is None or held == envelope:
            return held is None
        codec = self.chain.codec
        try:
            mine = codec.decode_ledger(thread_id, key, envelope)
        except (BadRecord, DurableError):
            return False
        try:
            theirs = codec.decode_ledger(thread_id, key, held)
        except (BadRecord, DurableError):
            return True  # a damaged entry: the archive's intact one replaces it
        return newest_entry([(theirs, 0), (mine, 1)])[1] == 1

    # -- verify ------------------------------------------------------------------------

    async def check(self, thread_ids: Sequence[str] | None = None) -> ArchiveCheck:
        """`verify`'s look at the archive: every segment of these threads
        (default: every thread the archive or a hot tier holds) verified,
        and each thread's hot copy held against it. A thread whose hot
        tiers lack checkpoints newer than the newest they hold, which the
        archive holds and no deletion covers, was rolled back (or lost them
        everywhere). Reads only."""
        await self._ready()
        report = ArchiveCheck(signed=bool(self.chain.codec.key))
        tiers = list(self.chain.tiers)
        if thread_ids is None:
            hot_ids: set[str] = set()
            for tier in tiers:
                hot_ids.update(await tier.thread_ids())
            thread_ids = sorted(hot_ids | set(await self.archived_thread_ids()))
        for thread_id in thread_ids:
            report.threads += 1
            keys = await self.segment_keys(thread_id)
            report.segments += len(keys)
            image = await self.image(thread_id, keys=keys, bad=report.bad_segments)
            hot = await self.hot(thread_id, tiers)
            if not hot.seen and await self.flag(thread_id) is not None:
                continue  # archived: the hot tiers are meant to be empty
            if not image.holds(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger):
                report.behind += 1
            for ns in sorted({ns for ns, _ in image.checkpoints}):
                held = max((cid for n, cid in hot.seen if n == ns), default="")
                newer = [cid for n, cid in image.checkpoints if n == ns and cid > held]
                if not newer:
                    continue
                gone = set(
                    await self._recorded_gone(thread_id, [(ns, c) for c in newer], hot.deleted_through, tiers[-1])
                )
                if len(gone) < len(newer):
                    report.rolled_back.append(thread_id)
                    break
        return report

    # -- disaster recovery -------------------------------------------------------------

    async def restore(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        until: float | None = None,
        hold: Callable[[str], Any] | None = None,
        release: Callable[[Any], Any] | None = None,
    ) -> RestoreReport:
        """Rebuild the hot tiers from the archive: every thread it holds (or
        `thread_ids`), as of its newest segment (or the newest cut by
        `until`). With every thread, one listed as archived stays there,
        flagged in the hot tiers as it was (its next read brings it back);
        a thread named is brought back, under its writer lease (`hold`, if
        given: a run going on raises `ThreadBusy`). Records already in a
        tier are written again as they are (immutable): running it twice is
        harmless."""
        await self._ready()
        tiers = list(self.chain.roles.by_authority())
        report = RestoreReport()
        listed = set(await self.listed_archived())
        for thread_id in thread_ids if thread_ids is not None else await self.archived_thread_ids():
            lease = await hold(thread_id) if hold is not None and thread_ids is not None else None
            try:
                await self._restore_one(thread_id, thread_ids is None, until, tiers, listed, report)
            finally:
                if lease is not None and release is not None:
                    await release(lease)
        return report

    async def _restore_one(
        self,
        thread_id: str,
        every: bool,
        until: float | None,
        tiers: Sequence[AsyncTier],
        listed: set[str],
        report: RestoreReport,
    ) -> None:
        image = await self.image(thread_id, until=until, bad=report.bad_segments, strays=report.unrecognised)
        if image.empty:
            return
        flag = await self.flag(thread_id)
        if await self._deleted_since(image, flag, tiers_first(tiers)):
            report.deleted.append(thread_id)
            return
        hot = (await tiers_first(tiers).thread_records(thread_id)).checkpoints
        hot_rows = bool(hot)
        if hot_rows and _two_histories(image, hot, None):  # `_deleted_since` left out what was deleted
            # A saver that could not see the archived thread started another
            # history on its id: merging the two would give the thread two
            # roots. Left as it is, as `import` leaves such a mix.
            logger.warning(
                "restore left thread %r as it is: the hot tiers hold another history on its id than its archive copy",
                thread_id,
            )
            report.conflicts.append(thread_id)
            return
        if every and until is None and not hot_rows and (thread_id in listed or flag is not None):
            if flag is None and image.checkpoints:
                newest = max(cid for _, cid in image.checkpoints)
                await self._set_flag(thread_id, {"newest": newest, "previous_marker": None}, tiers)
                for tier in tiers:
                    await tier.mark_deleted(thread_id, newest)
            report.archived += 1
            return
        await self._write(image, tiers)
        if flag is not None:
            await self._unflag(thread_id, flag, tiers)
        if thread_id in listed:
            with _quietly():
                await self.store.delete([marker_key(thread_id)])
        self.chain.forget_thread(thread_id)
        report.threads += 1
        report.records += image.records

    async def _deleted_since(self, image: ThreadImage, flag: dict[str, Any] | None, authority: AsyncTier) -> bool:
        """Leave out of `image` what the system of record records as deleted
        (a deletion made while the object store was down reaches the
        archive only later; a restore must not undo it meanwhile). Whether
        that leaves the thread without a checkpoint: deleted. An archived
        thread's own marker is no deletion: the one before it (in its flag)
        is. The authority's word alone counts: a marker planted in another
        tier does not get to hide a thread."""
        if not image.checkpoints:
            return False
        if flag is not None:
            marker = flag.get("previous_marker")
        else:
            marker = (await authority.head(image.thread_id, "")).deleted_through
        doomed = {key for key in image.checkpoints if marker and key[1] <= marker}
        for ns in sorted({ns for ns, _ in image.checkpoints}):
            ids = [cid for n, cid in image.checkpoints if n == ns and (n, cid) not in doomed]
            doomed.update((ns, cid) for cid in await authority.gone(image.thread_id, ns, ids))
        if not doomed:
            return False
        image.checkpoints = {k: r for k, r in image.checkpoints.items() if k not in doomed}
        image.writes = {k: r for k, r in image.writes.items() if (k[0], k[1]) not in doomed}
        if not image.checkpoints:
            return True
        image.gone.update(doomed)
        return False


def _another_history(thread_id: str) -> ThreadArchived:
    return ThreadArchived(
        f"thread {thread_id!r} is archived, and the hot tiers hold another history on its id (written by a saver "
        "without archive=, or by a direct put): it is neither brought back nor shipped over the archive copy, which "
        "would give the thread two roots. Both are left as they are; delete_thread drops both.",
        thread_id=thread_id,
    )


def _two_histories(image: ThreadImage, hot: Sequence[CheckpointRow], deleted_through: str | None) -> bool:
    """Whether the hot tiers and the archive copy hold two histories of the
    thread: each has a root checkpoint (no parent) in the root namespace,
    and not the same one. A thread has one root; a side whose oldest
    checkpoints were pruned or deleted has none to tell by, and is never
    taken for another history. What a deletion covers (`deleted_through`)
    is not the archive's history any more."""
    archived = {
        cid
        for (ns, cid), row in image.checkpoints.items()
        if ns == "" and row.parent_id is None and not (deleted_through and cid <= deleted_through)
    }
    held = {row.checkpoint_id for row in hot if row.checkpoint_ns == "" and row.parent_id is None}
    return bool(archived and held) and archived.isdisjoint(held)


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [""])[0][:200]


def _short(fingerprint: str) -> str:
    """A fingerprint's first 16 hex digits: enough to tell keys apart in a
    message, never enough to vouch for a key (that takes all 64)."""
    return fingerprint[: len("hmac-sha256:") + 16]


def _named(owner: dict[str, str]) -> str:
    store = owner.get("store") or "unknown id"
    key = owner.get("key")
    return f"store {store}, key {_short(key)}..." if key else f"store {store}"


def _another_store(url: str, theirs: dict[str, str], mine: str | None, fingerprint: str) -> str:
    ours = f"store {mine}, key {_short(fingerprint)}..." if mine else f"key {_short(fingerprint)}..., no store id yet"
    return (
        f"the archive at {url} belongs to another store ({_named(theirs)}), not this one ({ours}): give each store "
        "its own archive prefix (archive='s3://BUCKET/OTHER-PREFIX'). If it is this store's, sealed with a signing key "
        "this saver no longer accepts, add that key to signing_keys=."
    )


class _Verified:
    """Whether a hot record is one the archive copy holds byte for byte
    (so it verified when it was shipped). `image` is digested."""

    def __init__(self, image: ThreadImage | None) -> None:
        self.image = image

    def checkpoint(self, key: tuple[str, str], row: Any) -> bool:
        return self.image is not None and self.image.checkpoints.get(key) == _digest_row(row)

    def blob(self, key: tuple[str, str, str], row: Any) -> bool:
        return self.image is not None and self.image.blobs.get(key) == _digest_row(row)

    def write(self, key: tuple[str, str, str, int], row: Any) -> bool:
        return self.image is not None and self.image.writes.get(key) == _digest_row(row)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


_R = TypeVar("_R", CheckpointRow, BlobRow, WriteRow)


def _digest_row(row: _R) -> _R:
    """The row with its envelope's digest for the envelope: equal to another
    row's digest exactly when the rows are (what ship compares), at a few
    dozen bytes whatever the record's size."""
    return dataclasses.replace(row, envelope=_digest(row.envelope))


def _digested(image: ThreadImage) -> ThreadImage:
    """What the replica keeps of a thread's archive copy between passes:
    its keys, deletions and times as they are, its records as digests."""
    out = _copy(image)
    out.checkpoints = {k: _digest_row(r) for k, r in image.checkpoints.items()}
    out.blobs = {k: _digest_row(r) for k, r in image.blobs.items()}
    out.writes = {k: _digest_row(r) for k, r in image.writes.items()}
    out.ledger = {k: _digest(v) for k, v in image.ledger.items()}
    return out


def _digested_segment(segment: Segment) -> Segment:
    return dataclasses.replace(
        segment,
        checkpoints=[_digest_row(r) for r in segment.checkpoints],
        blobs=[_digest_row(r) for r in segment.blobs],
        writes=[_digest_row(r) for r in segment.writes],
        ledger={k: _digest(v) for k, v in segment.ledger.items()},
    )


def _missing(image: ThreadImage, hot: HotCopy) -> Segment:
    """`ThreadImage.missing` against a digested image: the hot records it
    lacks, or holds other bytes of, whole."""
    s = Segment(image.thread_id)
    s.checkpoints = [r for k, r in hot.checkpoints.items() if image.checkpoints.get(k) != _digest_row(r)]
    s.blobs = [r for k, r in hot.blobs.items() if k not in image.blobs]
    s.writes = [r for k, r in hot.writes.items() if image.writes.get(k) != _digest_row(r)]
    s.ledger = {k: v for k, v in hot.ledger.items() if image.ledger.get(k) != _digest(v)}
    return s


def tiers_first(tiers: Sequence[AsyncTier]) -> AsyncTier:
    return tiers[0]


def _flag(value: str | None) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        flag = json.loads(value)
    except ValueError:
        return {"previous_marker": None}  # a flag all the same: the thread is archived
    return flag if isinstance(flag, dict) else {"previous_marker": None}


def _copy(image: ThreadImage) -> ThreadImage:
    return ThreadImage(
        image.thread_id,
        dict(image.checkpoints),
        dict(image.blobs),
        dict(image.writes),
        dict(image.ledger),
        image.deleted_through,
        set(image.gone),
        image.segments,
        image.newest_at,
        dict(image.first),
    )


class _quietly:
    """The object store's listing entries are informational: a failure to
    drop one is logged, never raised."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if isinstance(exc, TierUnavailable):
            logger.warning("archive: %s (its listing entry stays until the next bring-back or restore)", exc)
            return True
        return False


def _head(hot: HotCopy) -> tuple[str | None, list[tuple[str, int]]]:
    ids = [cid for ns, cid in hot.checkpoints if ns == ""]
    newest = max(ids, default=None)
    return newest, [(t, i) for ns, c, t, i in hot.writes if ns == "" and c == newest]
