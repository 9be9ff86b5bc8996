# WARNING: generated from journal_async.py by langgraph_durable/_codegen.py. DO NOT EDIT.
# Edit the async source and run `python -m langgraph_durable._codegen`.
"""The local journal: what a crash left unacknowledged by the shared tiers.

A write commits to the local SQLite file together with a journal entry; the
entry is done once the shared tiers acknowledged. At setup, whatever is still
journaled is shipped again, in order, after verifying every record: a local
row that was damaged (or planted) is quarantined locally and never shipped,
and never keeps the saver from starting.

This file is the async source. ``journal.py`` is generated from it by
``langgraph_durable/_codegen.py``; edit this one and regenerate.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from .codec import RecordCodec, version_key
from .concurrency import run_all
from .integrity import record_label
from .records import BadRecord, BlobRow, CheckpointRow, row_fields
from .tiers.base import pack_fields
from .tiers.protocol import Tier
from .tiers.sqlite import SqliteTier

logger = logging.getLogger("langgraph_durable")


def _raise_first(results: Sequence[Any]) -> None:
    for r in results:
        if isinstance(r, BaseException):
            raise r


class Journal:
    """Ships journaled records from the local tier to the shared ones."""

    def __init__(self, local: SqliteTier, shared: Sequence[Tier], codec: RecordCodec) -> None:
        self.local = local
        self.shared = list(shared)
        self.codec = codec

    def replay(self) -> None:
        """Push to the shared tiers what a crash left unacknowledged, in
        order. Every record is verified first: a damaged or planted local row
        is quarantined (locally) and never shipped, and never blocks startup."""
        local = self.local
        for seq, kind, thread_id, ns, cid, task_id in local.pending_journal():
            try:
                if kind == "checkpoint":
                    row = local.read_checkpoint(thread_id, ns, cid)
                    if row is not None:
                        blobs = self._verified_local_blobs(row)
                        newer = self._moved_on(row)
                        if newer is not None:
                            # Never acknowledged, and the thread went on without
                            # it (another replica ran it): shipping it now would
                            # graft a branch onto a history that moved on.
                            logger.warning(
                                "journal entry %s: checkpoint %s of thread %r not shipped: the thread moved on to %s",
                                seq, cid, thread_id, newer,
                            )  # fmt: skip
                        else:
                            _raise_first(
                                run_all([functools.partial(t.write_checkpoint, row, blobs) for t in self.shared])
                            )
                else:
                    rows = [w for w in local.read_writes(thread_id, ns, [cid]) if w.task_id == task_id]
                    good = []
                    for w in rows:
                        try:
                            self.codec.decode_write(w)
                        except BadRecord as exc:
                            self._quarantine_local("write", w, exc.reason)
                            continue
                        good.append(w)
                    _raise_first(run_all([functools.partial(t.write_writes, good, False) for t in self.shared]))
            except BadRecord as exc:
                logger.error(
                    "journal entry %s (%s %s/%s/%s) was not shipped: %s", seq, kind, thread_id, ns, cid, exc.reason
                )
            local.journal_done(seq)
            logger.info("replayed journal entry %s (%s %s/%s/%s) to the shared tiers", seq, kind, thread_id, ns, cid)

    def _moved_on(self, row: CheckpointRow) -> str | None:
        """A checkpoint newer than `row` that a shared tier holds, if any."""
        heads = run_all([functools.partial(t.head, row.thread_id, row.checkpoint_ns) for t in self.shared])
        _raise_first(heads)
        newer = [h[0] for h in heads if not isinstance(h, BaseException) and h[0] and h[0] > row.checkpoint_id]
        return max(newer) if newer else None

    def _verified_local_blobs(self, row: CheckpointRow) -> list[BlobRow]:
        """A journaled checkpoint's local row and channel values, verified.
        Raises `BadRecord` (after quarantining the bad copy) when any fails."""
        try:
            checkpoint, _ = self.codec.decode_checkpoint(row)
        except BadRecord as exc:
            self._quarantine_local("checkpoint", row, exc.reason)
            raise
        keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
        blobs = list((self.local.read_blobs(row.thread_id, row.checkpoint_ns, keys)).values())
        for blob in blobs:
            try:
                self.codec.decode_blob(blob)
            except BadRecord as exc:
                self._quarantine_local("blob", blob, exc.reason)
                raise BadRecord(f"its channel value {blob.channel} @ {blob.version} is damaged ({exc.reason})") from exc
        return blobs

    def _quarantine_local(self, kind: str, row: Any, reason: str) -> None:
        self.local.quarantine(
            row.thread_id, row.checkpoint_ns, kind, record_label(kind, row), reason, row.envelope,
            pack_fields(row_fields(row)),
        )  # fmt: skip
        self.local.remove_copy(kind, row)
        logger.error("local %s %s is damaged (%s): quarantined, not shipped", kind, record_label(kind, row), reason)
