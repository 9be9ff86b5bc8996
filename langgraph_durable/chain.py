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

import copy
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
)

from .codec import DEFAULT_MAX_ID_BYTES, RecordCodec, check_key_part, thread_id_of, thread_of
from .concurrency import Lock, run_all
from .errors import ConfigError, DurableError, TierUnavailable
from .integrity import (
    Incident,
    IntegrityPolicy,
    ScanReport,
)
from .journal import Journal
from .lease import Fence
from .ledger import LedgerEntry
from .maintenance import Maintenance
from .reads import TierReader
from .records import BlobRow, CheckpointRow, WriteRow
from .resume import ResumeGate
from .scan import Scanner
from .tiers.base import KEYS_META, QuarantinedRecord, key_mismatch_message
from .tiers.protocol import Tier
from .tiers.sqlite import SqliteTier
from .validation import ValidationHook

logger = logging.getLogger("langgraph_durable")

BlobKey = tuple[str, str]
Found = tuple[CheckpointRow, dict[str, Any], dict[str, Any]]  # row, checkpoint, metadata
RowT = TypeVar("RowT", CheckpointRow, BlobRow, WriteRow)


def _raise_first(results: Sequence[Any]) -> None:
    for r in results:
        if isinstance(r, BaseException):
            raise r


class TierChain:
    """Reads and writes LangGraph records across an ordered list of tiers."""

    def __init__(
        self,
        local: SqliteTier | None,
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
        self.reads = TierReader(self.tiers, codec, self.policy)
        self.maintenance = Maintenance(self.tiers, codec, self.reads)
        self._views: dict[int, TierChain] = {}
        self._ready = False
        # First use may come from many tasks (or threads) at once; the pools
        # must be opened and the schema migrated exactly once.
        self._setup_lock = Lock()

    def with_codec(self, codec: RecordCodec) -> TierChain:
        """This chain decoding with `codec` (a `with_allowlist` clone's): the
        same tiers and connections, another serializer."""
        if codec is self.codec:
            return self
        view = self._views.get(id(codec))
        if view is None or view.codec is not codec:
            view = copy.copy(self)
            view.codec = codec
            view.reads = TierReader(self.tiers, codec, self.policy)
            view.maintenance = Maintenance(self.tiers, codec, view.reads)
            view._views = {}
            self._views[id(codec)] = view
        return view

    # -- lifecycle --------------------------------------------------------------

    def setup(self) -> None:
        """Create or migrate every tier's schema, then push forward any local
        journal entry a crash left unacknowledged. Idempotent."""
        with self._setup_lock:
            self._setup()

    def ensure_setup(self) -> None:
        if self._ready:
            return
        with self._setup_lock:
            if not self._ready:
                self._setup()

    def _setup(self) -> None:
        for tier in self.tiers:
            tier.setup()
        self._check_keys()
        if self.local is not None and self.shared:
            Journal(self.local, self.shared, self.codec).replay()
        self._ready = True

    def _check_keys(self) -> None:
        """Refuse to run with a signing key that does not match the store.

        Each tier records the fingerprints of the keys its records may be
        sealed with. A saver with another key would see every record fail its
        checksum and take it all for corruption; this is a configuration
        error, found before anything is read or quarantined."""
        accepted = self.codec.fingerprints
        stored: list[tuple[Tier, set[str] | None]] = []
        for tier in self.tiers:
            value = tier.read_meta(KEYS_META)
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
                tier.write_meta(KEYS_META, ",".join(sorted(union)))

    def close(self) -> None:
        # The local tier is shared by both faces; the saver closes it.
        for tier in self.shared:
            tier.close()

    # -- writes -------------------------------------------------------------------

    def put(
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
        self.ensure_setup()
        fenced = self._fenced_first(fence, lambda t: t.write_checkpoint(row, blobs, fence=fence))
        shared = [t for t in self.shared if t not in fenced]
        seq = None
        if self.local is not None and self.local not in fenced:
            seq = self.local.write_checkpoint(row, blobs, journal=bool(shared))
        results = run_all([functools.partial(t.write_checkpoint, row, blobs) for t in shared])
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
        self.ensure_setup()
        fenced = self._fenced_first(fence, lambda t: t.write_writes(rows, upsert, fence=fence))
        shared = [t for t in self.shared if t not in fenced]
        seq = None
        if self.local is not None and self.local not in fenced:
            seq = self.local.write_writes(rows, upsert, journal=bool(shared))
        # No withdrawal on failure, unlike put(): a task's writes are what it
        # really produced, so the copies that did land may be served (reads
        # take the union of the tiers) and spare the task a rerun; retrying
        # is idempotent.
        results = run_all([functools.partial(t.write_writes, rows, upsert) for t in shared])
        if self.local is not None:
            self.local.journal_done(seq)
        _raise_first(results)

    def _fenced_first(self, fence: Fence | None, write: Callable[[Tier], Any]) -> list[Tier]:
        """A fenced write (lease.py) goes to the lease tier first, alone: reads
        take the union of what every tier holds and repair the gaps, so a
        write the fence refuses (`LeaseLost`) must reach no tier at all. The
        tiers written, for the caller to skip."""
        if fence is None:
            return []
        write(self.tiers[-1])
        return [self.tiers[-1]]

    # -- reads ----------------------------------------------------------------------

    def _authority(self, what: str, call: Callable[[Tier], Any]) -> Any:
        """Ask the farthest reachable tier; nearer ones answer only when it is down."""
        return (self._authority_tier(what, call))[1]

    def _authority_tier(self, what: str, call: Callable[[Tier], Any]) -> tuple[Tier, Any]:
        """`_authority`, also naming the tier that answered."""
        last: TierUnavailable | None = None
        for i, tier in enumerate(reversed(self.tiers)):
            try:
                result = call(tier)
            except TierUnavailable as exc:
                last = exc
                continue
            if i:
                logger.warning("degraded read: %s answered by %s (%s)", what, tier.name, last)
            return tier, result
        assert last is not None
        raise last

    # The reader (reads.py) owns every read; these names stay for the
    # maintenance code below.

    def _checkpoint(self, thread_id: str, ns: str, cid: str, incidents: list[Incident]) -> Found | None:
        return self.reads.checkpoint(thread_id, ns, cid, incidents)

    def _blobs(
        self, thread_id: str, ns: str, keys: Sequence[BlobKey], incidents: list[Incident]
    ) -> dict[BlobKey, tuple[BlobRow, Any]]:
        return self.reads.blobs(thread_id, ns, keys, incidents)

    def _writes(
        self, thread_id: str, ns: str, cids: Sequence[str], incidents: list[Incident]
    ) -> tuple[dict[str, list[tuple[WriteRow, PendingWrite]]], dict[str, str]]:
        """Pending writes, and (always empty now: a bad write no longer makes
        its checkpoint unusable) the checkpoints whose writes were lost."""
        return self.reads.writes(thread_id, ns, cids, incidents), {}

    def _serve(
        self, thread_id: str, ns: str, cid: str, incidents: list[Incident], *, latest: bool = False
    ) -> CheckpointTuple | None:
        if latest:
            return self.reads.latest(thread_id, ns, incidents)
        return self.reads.serve(thread_id, ns, cid, incidents)

    def _settle(self, incidents: list[Incident], default: str = "nothing") -> None:
        self.reads.settle(incidents, default)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = thread_of(config, what="get_tuple")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        self.ensure_setup()
        return self.reads.get_tuple(thread_id, ns, configurable.get("checkpoint_id"))

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
        thread_id = thread_id_of(thread_id, what="list") if thread_id is not None else None
        ns = configurable.get("checkpoint_ns")  # absent: every namespace
        if ns:
            check_key_part(ns, what="list: checkpoint_ns", limit=None)
        cid = configurable.get("checkpoint_id")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        self.ensure_setup()
        return self.reads.list_tuples(thread_id, ns, cid, before_id, filter, limit)

    # -- non-resumable actions and resume validation ----------------------------------

    def actions(self, thread_id: str) -> dict[str, LedgerEntry]:
        """The thread's action ledger, reconciled across the tiers."""
        thread_id = thread_id_of(thread_id, what="actions")
        self.ensure_setup()
        return self.reads.ledger(thread_id)

    def record_action(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write one ledger entry through every tier before returning: an
        intent must be durable before the action runs."""
        check_key_part(entry.key, what="action key", limit=DEFAULT_MAX_ID_BYTES)
        envelope = self.codec.encode_ledger(thread_id, entry)
        self.ensure_setup()
        self._everywhere(lambda t: t.write_ledger(thread_id, entry.key, envelope))

    def validate(
        self, tup: CheckpointTuple, validators: Sequence[Any], hook: ValidationHook | None
    ) -> CheckpointTuple:
        """The checkpoint a run may resume from (`resume.ResumeGate`)."""
        return ResumeGate(self.actions, self.get_tuple, self.put).validate(tup, validators, hook)

    # -- verify / repair ------------------------------------------------------------

    def scan(
        self, thread_id: str | None, *, repair: bool, progress: Callable[[int, int], None] | None = None
    ) -> ScanReport:
        """Verify every copy of every record in every tier (one thread or
        all), and compare the shared tiers; with `repair`, restore bad and
        missing copies from intact ones and re-seal old-key records
        (`scan.Scanner`)."""
        self.ensure_setup()
        return Scanner(self.tiers, self.codec).scan(thread_id, repair=repair, progress=progress)

    def restore_quarantined(
        self, records: Sequence[QuarantinedRecord]
    ) -> tuple[list[QuarantinedRecord], list[QuarantinedRecord]]:
        """Put quarantined copies back (`scan.Scanner.restore`)."""
        self.ensure_setup()
        return Scanner(self.tiers, self.codec).restore(records)

    # -- maintenance -------------------------------------------------------------------

    def _everywhere(self, call: Callable[[Tier], Any]) -> None:
        _raise_first(run_all([functools.partial(call, t) for t in self.tiers]))

    def delete_thread(self, thread_id: str) -> None:
        self.ensure_setup()
        self.maintenance.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        self.ensure_setup()
        self.maintenance.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.ensure_setup()
        self.maintenance.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
        self.ensure_setup()
        self.maintenance.prune(thread_ids, strategy=strategy)


def _reasons(incidents: Sequence[Incident]) -> list[str]:
    return [f"{i.tier.name if i.tier is not None else 'every tier'}: {i.key}: {i.reason}" for i in incidents]
