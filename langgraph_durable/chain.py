# WARNING: generated from chain_async.py by langgraph_durable/_codegen.py. DO NOT EDIT.
# Edit the async source and run `python -m langgraph_durable._codegen`.
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
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple, PendingWrite

from .codec import RecordCodec, assemble_tuple, thread_of, version_key
from .concurrency import run_all
from .errors import ConfigError, CorruptCheckpoint, DurableError, TierUnavailable
from .records import BadRecord, BlobRow, CheckpointRow, WriteRow, metadata_matches
from .tiers.sqlite import SqliteTier

logger = logging.getLogger("langgraph_durable")

Tier = Any  # SqliteTier | RedisTier | PostgresTier: same method names
BlobKey = tuple[str, str]
RowT = TypeVar("RowT", CheckpointRow, BlobRow, WriteRow)


def _raise_first(results: Sequence[Any]) -> None:
    for r in results:
        if isinstance(r, BaseException):
            raise r


class TierChain:
    """Reads and writes LangGraph records across an ordered list of tiers."""

    def __init__(self, local: SqliteTier | None, shared: Sequence[Tier], codec: RecordCodec) -> None:
        if local is None and not shared:
            raise ConfigError("at least one tier is needed: pass sqlite=, redis= or postgres=.")
        self.local = local
        self.shared = list(shared)
        self.tiers: list[Tier] = ([local] if local is not None else []) + self.shared
        self.codec = codec
        self._ready = False

    # -- lifecycle --------------------------------------------------------------

    def setup(self) -> None:
        """Create or migrate every tier's schema, then push forward any local
        journal entry a crash left unacknowledged. Idempotent."""
        for tier in self.tiers:
            tier.setup()
        self._replay_journal()
        self._ready = True

    def ensure_setup(self) -> None:
        if not self._ready:
            self.setup()

    def close(self) -> None:
        # The local tier is shared by both faces; the saver closes it.
        for tier in self.shared:
            tier.close()

    def _replay_journal(self) -> None:
        if self.local is None or not self.shared:
            return
        for seq, kind, thread_id, ns, cid, task_id in self.local.pending_journal():
            if kind == "checkpoint":
                row = self.local.read_checkpoint(thread_id, ns, cid)
                if row is not None:
                    checkpoint, _ = self.codec.decode_checkpoint(row)
                    keys = [(ch, version_key(v)) for ch, v in checkpoint["channel_versions"].items()]
                    blobs = list((self.local.read_blobs(thread_id, ns, keys)).values())
                    _raise_first(
                        run_all([functools.partial(t.write_checkpoint, row, blobs) for t in self.shared])
                    )
            else:
                rows = [w for w in self.local.read_writes(thread_id, ns, [cid]) if w.task_id == task_id]
                _raise_first(run_all([functools.partial(t.write_writes, rows, False) for t in self.shared]))
            self.local.journal_done(seq)
            logger.info("replayed journal entry %s (%s %s/%s/%s) to the shared tiers", seq, kind, thread_id, ns, cid)

    # -- writes -------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        # Serialize before touching any tier: a bad value writes nothing.
        row, blobs = self.codec.encode_checkpoint(config, checkpoint, metadata, new_versions)
        self.ensure_setup()
        seq = None
        if self.local is not None:
            seq = self.local.write_checkpoint(row, blobs, journal=bool(self.shared))
        results = run_all([functools.partial(t.write_checkpoint, row, blobs) for t in self.shared])
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
                    tier.delete_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
                except DurableError as exc:
                    logger.error("could not withdraw checkpoint %s from %s: %s", row.checkpoint_id, tier.name, exc)
            if self.local is not None:
                self.local.journal_done(seq)
            raise failed[0]
        if self.local is not None:
            self.local.journal_done(seq)
        return {
            "configurable": {
                "thread_id": row.thread_id,
                "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.checkpoint_id,
            }
        }

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        rows, upsert = self.codec.encode_writes(config, writes, task_id, task_path)
        if not rows:
            return
        self.ensure_setup()
        seq = None
        if self.local is not None:
            seq = self.local.write_writes(rows, upsert, journal=bool(self.shared))
        # No withdrawal on failure, unlike put(): writes are only ever read
        # from the authoritative tier, so a copy that reached only a nearer
        # tier is invisible, and retrying is idempotent.
        results = run_all([functools.partial(t.write_writes, rows, upsert) for t in self.shared])
        if self.local is not None:
            self.local.journal_done(seq)
        _raise_first(results)

    # -- reads ----------------------------------------------------------------------

    def _authority(self, what: str, call: Callable[[Tier], Any]) -> Any:
        """Ask the farthest reachable tier; nearer ones answer only when it is down."""
        last: TierUnavailable | None = None
        for i, tier in enumerate(reversed(self.tiers)):
            try:
                result = call(tier)
            except TierUnavailable as exc:
                last = exc
                continue
            if i:
                logger.warning("degraded read: %s answered by %s (%s)", what, tier.name, last)
            return result
        assert last is not None
        raise last

    def _checkpoint(
        self, thread_id: str, ns: str, cid: str
    ) -> tuple[CheckpointRow, dict[str, Any], dict[str, Any]] | None:
        """A verified checkpoint row, nearest tier first, repairing the nearer tiers."""
        lacking: list[Tier] = []
        reasons: list[str] = []
        unreachable: TierUnavailable | None = None
        for tier in self.tiers:
            try:
                row = tier.read_checkpoint(thread_id, ns, cid)
            except TierUnavailable as exc:
                unreachable = exc
                continue
            if row is None:
                lacking.append(tier)
                continue
            try:
                checkpoint, metadata = self.codec.decode_checkpoint(row)
            except BadRecord as exc:
                reasons.append(f"{tier.name}: {exc.reason}")
                logger.error("corrupt checkpoint %s/%s/%s in %s: %s", thread_id, ns, cid, tier.name, exc.reason)
                lacking.append(tier)
                continue
            self._repair(lacking, lambda t: t.write_checkpoint(row, []))
            return row, checkpoint, metadata
        if reasons:
            raise CorruptCheckpoint(
                f"checkpoint {cid!r} of thread {thread_id!r} (ns {ns!r}) has no intact copy in any tier "
                f"({'; '.join(reasons)}). Run `langgraph-durable verify` to list damaged records.",
                key=f"{thread_id}/{ns}/{cid}",
                reasons=reasons,
            )
        if unreachable is not None and not lacking:
            raise unreachable
        return None

    def _repair(self, tiers: Sequence[Tier], write: Callable[[Tier], Any]) -> None:
        """Copy a good record into nearer tiers; a failure here never fails the read."""
        for tier in tiers:
            try:
                write(tier)
            except DurableError as exc:
                logger.warning("read-repair into %s failed: %s", tier.name, exc)

    def _blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, tuple[BlobRow, Any]]:
        """Verified blobs (row and decoded value), nearest tier first."""
        found: dict[BlobKey, tuple[BlobRow, Any]] = {}
        missing = list(dict.fromkeys(keys))
        lacking: list[Tier] = []
        reasons: list[str] = []
        for tier in self.tiers:
            if not missing:
                break
            try:
                rows = tier.read_blobs(thread_id, ns, missing)
            except TierUnavailable:
                continue
            good: list[BlobRow] = []
            for key, brow in rows.items():
                try:
                    found[key] = (brow, self.codec.decode_blob(brow))
                    good.append(brow)
                except BadRecord as exc:
                    reasons.append(f"{tier.name} {key[0]}@{key[1]}: {exc.reason}")
                    logger.error(
                        "corrupt blob %s/%s/%s@%s in %s: %s", thread_id, ns, key[0], key[1], tier.name, exc.reason
                    )
            if good:
                self._repair(lacking, lambda t: t.write_blobs(good))
            missing = [k for k in missing if k not in found]
            lacking.append(tier)
        if missing:
            names = ", ".join(f"{c}@{v}" for c, v in missing)
            raise CorruptCheckpoint(
                f"thread {thread_id!r} (ns {ns!r}): channel value(s) {names} are missing or damaged in every "
                f"tier{' (' + '; '.join(reasons) + ')' if reasons else ''}.",
                key=f"{thread_id}/{ns}/{names}",
                reasons=reasons,
            )
        return found

    def _writes(
        self, thread_id: str, ns: str, cids: Sequence[str]
    ) -> dict[str, list[tuple[WriteRow, PendingWrite]]]:
        """Pending writes of these checkpoints, from the authoritative tier."""
        rows = self._authority("pending writes", lambda t: t.read_writes(thread_id, ns, cids))
        out: dict[str, list[tuple[WriteRow, PendingWrite]]] = defaultdict(list)
        for w in rows:
            try:
                out[w.checkpoint_id].append((w, self.codec.decode_write(w)))
            except BadRecord as exc:
                out[w.checkpoint_id].append(self._write_from_elsewhere(w, exc.reason))
        return out

    def _write_from_elsewhere(self, bad: WriteRow, reason: str) -> tuple[WriteRow, PendingWrite]:
        reasons = [f"authoritative copy: {reason}"]
        for tier in self.tiers:
            try:
                rows = tier.read_writes(bad.thread_id, bad.checkpoint_ns, [bad.checkpoint_id])
            except TierUnavailable:
                continue
            for w in rows:
                if (w.task_id, w.idx) == (bad.task_id, bad.idx) and w.envelope != bad.envelope:
                    try:
                        return w, self.codec.decode_write(w)
                    except BadRecord as exc:
                        reasons.append(f"{tier.name}: {exc.reason}")
        raise CorruptCheckpoint(
            f"pending write {bad.task_id}/{bad.idx} of checkpoint {bad.checkpoint_id!r} "
            f"(thread {bad.thread_id!r}) has no intact copy ({'; '.join(reasons)}).",
            key=f"{bad.thread_id}/{bad.checkpoint_ns}/{bad.checkpoint_id}/{bad.task_id}/{bad.idx}",
            reasons=reasons,
        )

    def _tuples(
        self, found: Sequence[tuple[CheckpointRow, dict[str, Any], dict[str, Any]]]
    ) -> list[CheckpointTuple]:
        """Attach channel values and pending writes, batched per (thread, ns)."""
        groups: dict[tuple[str, str], list[tuple[CheckpointRow, dict[str, Any], dict[str, Any]]]] = defaultdict(list)
        for item in found:
            groups[(item[0].thread_id, item[0].checkpoint_ns)].append(item)
        done: dict[tuple[str, str, str], CheckpointTuple] = {}
        for (thread_id, ns), items in groups.items():
            keys = [(ch, version_key(v)) for _, cp, _ in items for ch, v in cp["channel_versions"].items()]
            blobs = self._blobs(thread_id, ns, keys)
            writes = self._writes(thread_id, ns, [row.checkpoint_id for row, _, _ in items])
            for row, cp, md in items:
                values = {ch: blobs[(ch, version_key(v))][1] for ch, v in cp["channel_versions"].items()}
                done[(thread_id, ns, row.checkpoint_id)] = assemble_tuple(
                    row, cp, md, values, writes.get(row.checkpoint_id, [])
                )
        return [done[(r.thread_id, r.checkpoint_ns, r.checkpoint_id)] for r, _, _ in found]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = thread_of(config, what="get_tuple")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        cid = configurable.get("checkpoint_id")
        self.ensure_setup()
        if not cid:
            cid = self._authority("latest checkpoint", lambda t: t.latest_id(thread_id, ns))
            if cid is None:
                return None
        found = self._checkpoint(thread_id, ns, cid)
        if found is None:
            return None
        return (self._tuples([found]))[0]

    def list_tuples(
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
        self.ensure_setup()
        rows = self._authority(
            "checkpoint list", lambda t: t.list_checkpoints(thread_id, ns, cid, before_id, filter, limit)
        )
        found = []
        for row in rows:
            try:
                cp, md = self.codec.decode_checkpoint(row)
                item = (row, cp, md)
            except BadRecord:
                repaired = self._checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
                if repaired is None:
                    continue
                item = repaired
            if metadata_matches(item[2], filter):
                found.append(item)
                if limit is not None and len(found) >= limit:
                    break
        return self._tuples(found)

    # -- maintenance -------------------------------------------------------------------

    def _everywhere(self, call: Callable[[Tier], Any]) -> None:
        _raise_first(run_all([functools.partial(call, t) for t in self.tiers]))

    def delete_thread(self, thread_id: str) -> None:
        self.ensure_setup()
        self._everywhere(lambda t: t.delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        self.ensure_setup()
        ids = [str(r) for r in run_ids]
        self._everywhere(lambda t: t.delete_for_runs(ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, channel value and pending write, with the
        same checkpoint ids, re-sealed under the target thread's keys."""
        src, dst = str(source_thread_id), str(target_thread_id)
        self.ensure_setup()
        rows = self._authority("copy source", lambda t: t.list_checkpoints(src, None, None, None, None, None))
        by_ns: dict[str, list[CheckpointRow]] = defaultdict(list)
        for row in rows:
            by_ns[row.checkpoint_ns].append(row)
        for ns, ns_rows in by_ns.items():
            verified = []
            for row in ns_rows:
                found = self._checkpoint(src, ns, row.checkpoint_id)
                if found is not None:
                    verified.append(found)
            keys = [(ch, version_key(v)) for _, cp, _ in verified for ch, v in cp["channel_versions"].items()]
            blobs = [self._rekey(b, dst) for b, _ in (self._blobs(src, ns, keys)).values()]
            written = self._writes(src, ns, [r.checkpoint_id for r, _, _ in verified])
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

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
        self.ensure_setup()
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                self._everywhere(lambda t: t.delete_thread(thread_id))
                continue
            rows = self._authority("prune", lambda t: t.list_checkpoints(thread_id, None, None, None, None, None))
            latest: dict[str, CheckpointRow] = {}
            for row in rows:  # newest first
                latest.setdefault(row.checkpoint_ns, row)
            keep: set[tuple[str, str]] = set()
            keep_blobs: set[tuple[str, str, str]] = set()
            for ns, row in latest.items():
                found = self._checkpoint(thread_id, ns, row.checkpoint_id)
                if found is None:
                    continue
                keep.add((ns, row.checkpoint_id))
                keep_blobs.update((ns, ch, version_key(v)) for ch, v in found[1]["channel_versions"].items())
            self._everywhere(lambda t: t.prune(thread_id, keep, keep_blobs))


def _write_checkpoint(row: CheckpointRow, tier: Tier) -> None:
    tier.write_checkpoint(row, [])
