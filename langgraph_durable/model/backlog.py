"""What the shared tiers are owed: records a tier has not acknowledged yet.

A write that a shared tier missed (it was down, slow, or the saver writes
behind, ``write="local"``) is *owed* to that tier. With a local tier the debt
is a row of the local journal, committed in the same SQLite transaction as
the record itself, so it survives the process: `JournalEntry` is one such
row. Without a local tier (or while the local disk refuses writes) it is
kept in memory by `MemoryBacklog`, with the records themselves, and lost if
the process dies; ``repair`` then finds and fills the gaps.

`journal_async.AsyncJournal.catch_up` ships what is owed, in order.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .lease import Fence
from .records import BlobRow, CheckpointRow, WriteRow

# Which tiers must hold a record before ``put`` / ``put_writes`` return:
# "shared": the local journal (if any) and at least one shared tier; a tier
#     that is down is skipped and caught up later (the default). A run's
#     write with a local tier and two shared ones: the lease's tier and the
#     journal; the replicator ships it to the other (`ships_behind`).
# "all": every configured tier, or `TierUnavailable` and nothing written.
# "local": the local journal only (fsynced); a background replicator ships
#     to the shared tiers (write-behind).
WriteMode = Literal["shared", "all", "local"]
WRITE_MODES: tuple[str, ...] = ("shared", "all", "local")
# A tier call that takes longer than this counts as a failure (async face;
# the sync drivers are bounded by their socket timeouts).
DEFAULT_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Owed:
    """The journal entry to record with a local write: which shared tiers
    still owe the record, whether one has it already (`acked`), and the
    write's fence when it is shipped later (write-behind)."""

    tiers: tuple[str, ...]
    acked: bool = False
    fence: Fence | None = None


@dataclass(slots=True)
class JournalEntry:
    """One record owed to some shared tiers. `rows`/`blobs` are held only by
    the memory backlog; a journal entry's records are read from the local tier."""

    seq: int
    kind: str  # "checkpoint" or "writes"
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str | None
    owed: tuple[str, ...] | None  # None: every shared tier (entries from before owed was recorded)
    acked: bool  # some shared tier has it: it was acknowledged to the caller
    fence: Fence | None
    created_at: float
    checkpoint: CheckpointRow | None = None
    blobs: Sequence[BlobRow] = ()
    writes: Sequence[WriteRow] = ()
    upsert: bool = False
    in_memory: bool = field(default=False)

    def owes(self, tier: str) -> bool:
        return self.owed is None or tier in self.owed


def encode_fence(fence: Fence | None) -> str | None:
    if fence is None:
        return None
    return f"{fence.tier}\x1f{fence.holder}\x1f{fence.token}\x1f{fence.ttl}\x1f{fence.thread_id}"


def decode_fence(text: str | None) -> Fence | None:
    if not text:
        return None
    tier, holder, token, ttl, thread_id = text.split("\x1f", 4)
    return Fence(thread_id, holder, int(token), float(ttl), tier)


@dataclass(frozen=True, slots=True)
class Lag:
    """How far the shared tiers are behind: records owed (per tier and in
    all) and the age in seconds of the oldest one (0 when nothing is owed)."""

    records: int
    seconds: float
    by_tier: dict[str, int]
    archive: ArchiveLag | None = None
    """The archive's own lag (``archive=``), apart: it is never on a step's path."""

    @property
    def caught_up(self) -> bool:
        return self.records == 0


@dataclass(frozen=True, slots=True)
class ArchiveLag:
    """How far the archive is behind: threads noted and not shipped yet, and
    the age in seconds of the oldest such note (0 when none)."""

    threads: int
    seconds: float
    reachable: bool = True  # whether the replica's last call reached the object store
    segments: int = 0  # segments written since start
    records: int = 0  # records in them
    failing: tuple[str, ...] = ()
    """Threads the object store refused while it answered for others (a
    bad name, a refused object): retried with backoff, the rest shipped."""
    failing_error: str = ""  # the last such refusal

    @property
    def caught_up(self) -> bool:
        return self.threads == 0


# What `Outbox` keeps at most: journal entries, and bytes of their records.
OUTBOX_ENTRIES = 4096
OUTBOX_BYTES = 32 * 1024 * 1024


class Outbox:
    """The records of journal entries this saver just wrote, kept in memory
    until they have shipped: the replicator, or a run's end, then ships them
    without reading them back from the local file and verifying them again
    (they never left this process), and with just the channel values their
    write carried, as a write-through would have sent them. An entry is
    found only under its own journal seq and key; one not here (forgotten
    to stay within `OUTBOX_ENTRIES` / `OUTBOX_BYTES`, or written by an
    earlier process) is read from the local file as before. Thread-safe;
    shared by both faces."""

    def __init__(self, max_entries: int = OUTBOX_ENTRIES, max_bytes: int = OUTBOX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, tuple[tuple[str, str, str, str | None], Any, int]] = OrderedDict()
        self._bytes = 0
        # The checkpoints kept, for `holds` (a read asks it when a tier lacks one).
        self._checkpoints: Counter[tuple[str, str, str]] = Counter()

    @staticmethod
    def _key(entry: JournalEntry) -> tuple[str, str, str, str | None]:
        return entry.thread_id, entry.checkpoint_ns, entry.checkpoint_id, entry.task_id

    def keep_checkpoint(self, seq: int, row: CheckpointRow, blobs: Sequence[BlobRow]) -> None:
        size = len(row.envelope) + sum(len(b.envelope) for b in blobs)
        self._keep(seq, (row.thread_id, row.checkpoint_ns, row.checkpoint_id, None), (row, list(blobs)), size)

    def keep_writes(self, seq: int, rows: Sequence[WriteRow], upsert: bool) -> None:
        first = rows[0]
        key = (first.thread_id, first.checkpoint_ns, first.checkpoint_id, first.task_id)
        self._keep(seq, key, ("writes", list(rows), upsert), sum(len(w.envelope) for w in rows))

    def _keep(self, seq: int, key: tuple[str, str, str, str | None], records: Any, size: int) -> None:
        with self._lock:
            self._let_go(self._kept.pop(seq, None))
            self._kept[seq] = (key, records, size)
            self._bytes += size
            if key[3] is None:
                self._checkpoints[key[:3]] += 1
            while self._kept and (len(self._kept) > self.max_entries or self._bytes > self.max_bytes):
                self._let_go(self._kept.popitem(last=False)[1])

    def _let_go(self, kept: tuple[tuple[str, str, str, str | None], Any, int] | None) -> None:
        """(Under the lock.) Account for an entry no longer kept."""
        if kept is None:
            return
        self._bytes -= kept[2]
        key = kept[0]
        if key[3] is None:
            self._checkpoints[key[:3]] -= 1
            if self._checkpoints[key[:3]] <= 0:
                del self._checkpoints[key[:3]]

    def get(self, entry: JournalEntry) -> Any:
        """The records of `entry` (as `AsyncJournal._load` returns them), or None."""
        with self._lock:
            kept = self._kept.get(entry.seq)
        if kept is None or kept[0] != self._key(entry):
            return None
        if entry.kind == "checkpoint" and kept[0][3] is None:
            return kept[1]
        if entry.kind == "writes" and kept[0][3] is not None:
            return kept[1]
        return None

    def holds(self, thread_id: str, ns: str, checkpoint_id: str) -> bool:
        """Whether checkpoint `checkpoint_id` is kept here: written by this
        saver and still to be shipped (the journal brings it to the shared
        tiers that lack it, in order, with its ancestors)."""
        with self._lock:
            return (thread_id, ns, checkpoint_id) in self._checkpoints

    def done(self, seqs: Collection[int]) -> None:
        """These entries are settled (shipped, or dropped)."""
        with self._lock:
            for seq in seqs:
                self._let_go(self._kept.pop(seq, None))

    def forget(self) -> None:
        """Records were deleted or pruned locally: what is owed is read from
        the local file again (an entry whose records are gone is dropped there)."""
        with self._lock:
            self._kept.clear()
            self._checkpoints.clear()
            self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)


class MemoryBacklog:
    """Owed records kept in memory: a saver without a local tier, or whose
    local disk refused a write. Thread-safe; shared by both faces. Its
    `outbox` keeps the local journal's newest entries' records (`Outbox`)."""

    def __init__(self, *, outbox_bytes: int = OUTBOX_BYTES) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, JournalEntry] = {}
        self._seq = itertools.count(1)
        # `outbox_bytes`: a saver's share of ``memory_budget`` (memory_budget.py).
        self.outbox = Outbox(max_bytes=outbox_bytes)

    def owe_checkpoint(
        self, row: CheckpointRow, blobs: Sequence[BlobRow], tiers: Sequence[str], *, acked: bool = True
    ) -> None:
        self._add(
            JournalEntry(
                0, "checkpoint", row.thread_id, row.checkpoint_ns, row.checkpoint_id, None, tuple(tiers), acked, None,
                time.time(), checkpoint=row, blobs=blobs, in_memory=True,
            )
        )  # fmt: skip

    def owe_writes(self, rows: Sequence[WriteRow], upsert: bool, tiers: Sequence[str]) -> None:
        first = rows[0]
        self._add(
            JournalEntry(
                0, "writes", first.thread_id, first.checkpoint_ns, first.checkpoint_id, first.task_id, tuple(tiers),
                True, None, time.time(), writes=rows, upsert=upsert, in_memory=True,
            )
        )  # fmt: skip

    def _add(self, entry: JournalEntry) -> None:
        with self._lock:
            entry.seq = next(self._seq)
            self._entries[entry.seq] = entry

    def pending(self) -> list[JournalEntry]:
        with self._lock:
            return [self._entries[k] for k in sorted(self._entries)]

    def acked(self, seq: int, tiers: Sequence[str]) -> None:
        with self._lock:
            entry = self._entries.get(seq)
            if entry is None:
                return
            entry.owed = tuple(t for t in entry.owed or () if t not in tiers)
            if not entry.owed:
                del self._entries[seq]

    def drop(self, seq: int) -> None:
        with self._lock:
            self._entries.pop(seq, None)

    def __len__(self) -> int:
        return len(self._entries)


def lag_of(entries: Sequence[JournalEntry], shared: Sequence[str], now: float) -> Lag:
    by_tier = {name: sum(1 for e in entries if e.owes(name)) for name in shared}
    oldest = min((e.created_at for e in entries), default=now)
    return Lag(records=len(entries), seconds=max(0.0, now - oldest), by_tier=by_tier)
