"""The archive's I/O: ship a thread's new records, archive an idle thread,
bring one back, rebuild the hot tiers from the archive.

Every decision about what a segment holds, what a thread's archive copy
is, and whether it holds everything the hot tiers hold is `segments`'. The
hot tiers are reached through the tier chain (its guarded tiers, the same
breakers and timeouts as every other call); the object store through
`store_async.AsyncArchiveStore`.

This file is the async source: ``archiver.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DurableError, ThreadBusy
from ..model.codec import thread_id_of
from ..model.pins import is_pin_key, pins_of
from ..model.records import BadRecord, open_envelope_any
from ..retention import age_seconds
from ..tiers.protocol_async import AsyncTier
from .reports import ArchiveOutcome, HotCopy, RestoreReport
from .segments import (
    THREADS,
    Segment,
    ThreadImage,
    head_tag,
    marker_key,
    name_tag,
    name_time,
    open_marker,
    seal_marker,
    segment_name,
    segments_prefix,
    thread_of_folder,
)
from .store_async import AsyncArchiveStore

if TYPE_CHECKING:
    from ..engine.chain_async import AsyncTierChain

logger = logging.getLogger("langgraph_durable")

# A thread's segments are folded into one when a ship finds this many.
COMPACT_AT = 16


class AsyncArchiver:
    """One saver's archive: its object store and the tier chain it copies from and to."""

    def __init__(self, store: AsyncArchiveStore, chain: AsyncTierChain) -> None:
        self.store = store
        self.chain = chain
        self._key_kept = False

    # -- reading the archive ---------------------------------------------------------

    @property
    def _keys(self) -> Sequence[bytes]:
        return self.chain.codec.keys

    async def segment_keys(self, thread_id: str) -> list[str]:
        return await self.store.keys(segments_prefix(thread_id))

    async def image(self, thread_id: str, *, until: float | None = None, bad: list[str] | None = None) -> ThreadImage:
        """The thread's archive copy, its segments verified and replayed in
        order (those cut after `until` left out). A segment that does not
        verify is left out too and named in `bad` (else logged)."""
        segments: list[Segment] = []
        for key in await self.segment_keys(thread_id):
            if until is not None and name_time(key) > until:
                continue
            data = await self.store.get(key)
            if data is None:
                continue  # compacted meanwhile
            try:
                segments.append(Segment.open(thread_id, key, data, self._keys))
            except BadRecord as exc:
                if bad is not None:
                    bad.append(key)
                logger.warning("archive segment %s of thread %r is unusable (%s); left out", key, thread_id, exc.reason)
        return ThreadImage.fold(thread_id, segments)

    async def marker(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's ``archived`` marker: it left the hot tiers. None if it did not."""
        data = await self.store.get(marker_key(thread_id))
        if data is None:
            return None
        try:
            return open_marker(thread_id, data, self._keys)
        except BadRecord as exc:
            logger.warning("the archive marker of thread %r is unusable (%s); ignored", thread_id, exc.reason)
            return None

    async def archived_threads(self) -> list[str]:
        """Threads that live only in the archive."""
        from .segments import ARCHIVED

        out: list[str] = []
        for key in await self.store.keys(f"{ARCHIVED}/"):
            try:
                out.append(thread_of_folder(key.rsplit("/", 1)[-1]))
            except ValueError:
                continue
        return sorted(out)

    async def archived_thread_ids(self) -> list[str]:
        """Every thread with a copy in the archive."""
        out: list[str] = []
        for folder in await self.store.folders(f"{THREADS}/"):
            try:
                out.append(thread_of_folder(folder))
            except ValueError:
                continue
        return sorted(out)

    # -- reading the hot tiers -------------------------------------------------------

    async def hot(self, thread_id: str, tiers: Sequence[AsyncTier]) -> HotCopy:
        """What `tiers` hold of the thread, each record verified (a bad copy
        is not archived: the read path or `repair` deals with it)."""
        copy = HotCopy()
        # The most authoritative tier's copy first: where tiers differ, its bytes win.
        for tier in reversed(tiers):
            records = await tier.thread_records(thread_id)
            for c in records.checkpoints:
                if self._intact(c.context, c.envelope):
                    copy.checkpoints.setdefault((c.checkpoint_ns, c.checkpoint_id), c)
            for b in records.blobs:
                if self._intact(b.context, b.envelope):
                    copy.blobs.setdefault((b.checkpoint_ns, b.channel, b.version), b)
            for w in records.writes:
                if self._intact(w.context, w.envelope):
                    copy.writes.setdefault((w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx), w)
            for key, envelope in (await tier.read_ledger(thread_id)).items():
                copy.ledger.setdefault(key, envelope)
            marker = (await tier.head(thread_id, "")).deleted_through
            if marker and marker > (copy.deleted_through or ""):
                copy.deleted_through = marker
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
        shipped (0 when the copy was current)."""
        await self.chain.ensure_setup()
        asked = list(tiers) if tiers is not None else [self.chain.roles.last_resort]
        hot = await self.hot(thread_id, asked)
        image = await self.image(thread_id)
        segment = image.missing(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger)
        absent = [key for key in image.checkpoints if key not in hot.checkpoints]
        if absent:
            segment.gone = await self._recorded_gone(thread_id, absent, hot.deleted_through, asked[-1])
        if not hot.checkpoints and not hot.ledger and hot.deleted_through and not image.empty:
            # Nothing left in the hot tiers, under a deletion marker: deleted,
            # unless it was archived (then the hot tiers are meant to be empty).
            if await self.marker(thread_id) is not None:
                return 0
            segment.deleted_through = hot.deleted_through
        if not segment:
            return 0
        await self._keep_key()
        keys = await self.segment_keys(thread_id)
        compact = len(keys) >= COMPACT_AT and segment.deleted_through is None
        if compact:
            # One segment holding the whole copy, the older ones then deleted:
            # a bring-back reads a bounded number of objects. Replayed after
            # any older segment a crash left behind, it ends in the same state.
            # What the archive holds that the hot tiers lost (not recorded
            # as deleted) stays in it.
            gone = set(segment.gone)
            whole = Segment(thread_id)
            whole.checkpoints = [c for k, c in {**image.checkpoints, **hot.checkpoints}.items() if k not in gone]
            whole.blobs = list({**image.blobs, **hot.blobs}.values())
            whole.writes = [w for k, w in {**image.writes, **hot.writes}.items() if (k[0], k[1]) not in gone]
            whole.ledger = {**image.ledger, **hot.ledger}
            whole.gone = sorted(gone | image.gone)
            segment = whole
        newest, writes = _head(hot)
        name = segments_prefix(thread_id) + segment_name(time.time(), head_tag(newest, writes))
        await self.store.put(name, segment.seal(name, self.chain.codec.key))
        if compact:
            await self.store.delete([k for k in keys if k != name])
        if segment.deleted_through is not None and not hot.checkpoints:
            # The thread was deleted: what the archive held of it goes too,
            # but the segment that says so (a replay of older segments left
            # by an interrupted delete ends in it).
            await self.store.delete([k for k in await self.segment_keys(thread_id) if k != name])
        return segment.records + len(segment.gone)

    async def _recorded_gone(
        self, thread_id: str, absent: Sequence[tuple[str, str]], deleted_through: str | None, tier: AsyncTier
    ) -> list[tuple[str, str]]:
        """Which archived checkpoints the hot tiers lack because they were
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
        the store's own key (a key of the user's stays the user's)."""
        if self._key_kept or not self.chain.store_key or not self.chain.codec.key:
            return
        await self.store.keep_store_key(base64.b64encode(self.chain.codec.key).decode())
        self._key_kept = True

    async def changed(self, thread_id: str) -> bool:
        """Whether the thread's newest checkpoint or its pending writes differ
        from what its newest segment was cut at: from a listing and one head."""
        keys = await self.segment_keys(thread_id)
        head = await self.chain.roles.last_resort.head(thread_id, "")
        tag = head_tag(head.checkpoint_id, [(w.task_id, w.idx) for w in head.writes])
        if not keys:
            return head.checkpoint_id is not None
        return name_tag(keys[-1]) != tag

    async def forget(self, thread_id: str) -> None:
        """The thread was deleted: it is no longer archived, and its copy goes
        (with the replica's next pass, which records the deletion)."""
        await self.store.delete([marker_key(thread_id)])

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
        than `idle_after` seconds: ship it, read its archive copy back and
        check that it holds every record any hot tier holds, byte for byte,
        then mark it archived and delete it from the hot tiers. Under the
        thread's writer lease (`hold`), so no run writes it meanwhile; a
        pinned thread, a busy one, or one a tier cannot be read from stays."""
        thread_id = thread_id_of(thread_id, what="archive_idle")
        outcome = ArchiveOutcome(thread_id)
        tiers = list(self.chain.tiers)
        hot = await self.hot(thread_id, tiers)
        if not hot.checkpoints:
            outcome.skipped = "no checkpoints"
            return outcome
        if self._pinned(thread_id, hot.ledger):
            outcome.skipped = "pinned"
            return outcome
        newest_ts = self._newest_ts(hot)
        idle = age_seconds(newest_ts, now) if newest_ts else None
        if idle is None or idle < idle_after:
            outcome.skipped = "not idle"
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
            await self.ship(thread_id, tiers=tiers)
            image = await self.image(thread_id)
            if not image.holds(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger):
                outcome.skipped = "archive copy incomplete"
                logger.warning("thread %r not archived: its archive copy lacks records the hot tiers hold", thread_id)
                return outcome
            newest = max(cid for _, cid in hot.checkpoints)
            info = {"at": now, "newest": newest, "newest_ts": newest_ts, "records": hot.records}
            await self.store.put(marker_key(thread_id), seal_marker(thread_id, info, self.chain.codec.key))
            # With its marker (`delete_thread`): a copy another replica's
            # cache still holds is known to be gone, not lost.
            await self.chain.maintenance.delete_thread(thread_id)
            self.chain.forget_thread(thread_id)
            outcome.archived = True
            outcome.records = hot.records
        finally:
            await release(lease)
        return outcome

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

    # -- bringing back -----------------------------------------------------------------

    async def bring_back(self, thread_id: str) -> bool:
        """If the thread lives only in the archive, copy it back into every
        hot tier and drop its marker. Whether it did."""
        if await self.marker(thread_id) is None:
            return False
        image = await self.image(thread_id)
        await self._write(image, list(self.chain.tiers))
        await self.store.delete([marker_key(thread_id)])
        self.chain.forget_thread(thread_id)
        logger.info("thread %r brought back from the archive (%d records)", thread_id, image.records)
        return True

    async def _write(self, image: ThreadImage, tiers: Sequence[AsyncTier]) -> None:
        """The image's records into `tiers`: values, then checkpoints oldest
        first with their writes, in one transaction per tier where it can."""
        thread_id = image.thread_id
        checkpoints = sorted(image.checkpoints.values(), key=lambda r: (r.checkpoint_id, r.checkpoint_ns))
        blobs = list(image.blobs.values())
        writes = list(image.writes.values())
        for tier in tiers:
            if checkpoints:
                batch = [(c, blobs if i == 0 else []) for i, c in enumerate(checkpoints)]
                await tier.write_batch(batch, writes)
            elif blobs:
                await tier.write_blobs(blobs)
            for key, envelope in image.ledger.items():
                await tier.write_ledger(thread_id, key, envelope)
            if image.gone:
                await tier.mark_gone(thread_id, sorted(image.gone))

    # -- disaster recovery -------------------------------------------------------------

    async def restore(self, thread_ids: Sequence[str] | None = None, *, until: float | None = None) -> RestoreReport:
        """Rebuild the hot tiers from the archive: every thread it holds (or
        `thread_ids`), as of its newest segment (or the newest cut by
        `until`). With every thread, one that was archived stays there,
        marked in the hot tiers as it was (its next read brings it back); a
        thread named is brought back. Records already in a tier are written
        again as they are (immutable): running it twice is harmless."""
        await self.chain.ensure_setup()
        tiers = list(self.chain.tiers)
        report = RestoreReport()
        archived = set(await self.archived_threads())
        for thread_id in thread_ids if thread_ids is not None else await self.archived_thread_ids():
            image = await self.image(thread_id, until=until, bad=report.bad_segments)
            if image.empty:
                continue
            if thread_id in archived and until is None and thread_ids is None:
                newest = max(cid for _, cid in image.checkpoints) if image.checkpoints else None
                if newest is not None:
                    for tier in tiers:
                        await tier.mark_deleted(thread_id, newest)
                report.archived += 1
                continue
            await self._write(image, tiers)
            if thread_id in archived:
                await self.store.delete([marker_key(thread_id)])
            self.chain.forget_thread(thread_id)
            report.threads += 1
            report.records += image.records
        return report


def _head(hot: HotCopy) -> tuple[str | None, list[tuple[str, int]]]:
    ids = [cid for ns, cid in hot.checkpoints if ns == ""]
    newest = max(ids, default=None)
    return newest, [(t, i) for ns, c, t, i in hot.writes if ns == "" and c == newest]
