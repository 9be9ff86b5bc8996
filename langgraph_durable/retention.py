"""What `prune` and `delete_for_runs` must keep so `DeltaChannel`s still read
back whole. No I/O here.

A `DeltaChannel` stores only a sentinel at most checkpoints. LangGraph
rebuilds its value at checkpoint C by walking C's parent chain
(`get_delta_channel_history`), collecting each ancestor's pending writes,
until it meets an ancestor that stores a value for the channel (a
`_DeltaSnapshot`, or a plain value from before a migration); that value is
the seed and the seed ancestor's own writes are replayed too. Deleting any
checkpoint or write on that stretch makes the channel read back short, with
no error (a missing ancestor just ends the walk).

So a kept checkpoint drags along its ancestors up to, for each delta
channel it rebuilds, the nearest one storing that channel's value (or the
root). And every ancestor kept that way is itself listed by
`get_state_history` and may be read by time travel, so the same holds for it
in turn: the walk goes on until every checkpoint it took can rebuild all its
delta channels, i.e. to the nearest ancestor that stores a value for every
delta channel it has a version of (or the root). With one delta channel, or
several that snapshot together, that is the nearest snapshot; channels
snapshotting at different steps can make it reach further back. Nothing
kept ever reads back a different value than before.

`ReplayPlanner` computes that stretch from what the tiers hold; the chain
fetches the facts it asks for (`Walk.needs`) and asks again, so a walk reads
only the channel values it needs.

Which channels are delta channels is not recorded as such: LangGraph puts
every delta channel of the graph in the checkpoint metadata field
``counters_since_delta_snapshot`` except at the step where it snapshots
(where its value is stored, so nothing needs rebuilding). The union of that
field over a namespace's checkpoints is the set walked; it errs on the side
of keeping more. A thread without delta channels walks nothing and prunes as
before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

DELTA_COUNTERS_KEY = "counters_since_delta_snapshot"
# How many ancestors a walk asks facts for at once: fewer round trips to the
# tiers, at the price of maybe reading a few values past the seed.
DEFAULT_LOOKAHEAD = 32

BlobKey = tuple[str, str]  # channel, version (as tiers key blobs)


@dataclass(frozen=True, slots=True)
class Node:
    """What retention needs to know about one stored checkpoint."""

    checkpoint_id: str
    parent_id: str | None
    versions: Mapping[str, str]  # channel -> version key of the blob it reads
    delta_channels: frozenset[str]  # channels named in its delta counters
    ts: str = ""  # when it was written (the checkpoint's ISO 8601 "ts")

    @classmethod
    def of(
        cls, checkpoint_id: str, parent_id: str | None, checkpoint: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> Node:
        counters = metadata.get(DELTA_COUNTERS_KEY) or {}
        return cls(
            checkpoint_id,
            parent_id or None,
            {ch: str(v) for ch, v in (checkpoint.get("channel_versions") or {}).items()},
            frozenset(counters) if isinstance(counters, Mapping) else frozenset(),
            str(checkpoint.get("ts") or ""),
        )

    def blob_keys(self) -> set[BlobKey]:
        return set(self.versions.items())


def delta_channels(nodes: Iterable[Node | None]) -> frozenset[str]:
    """Every channel any of these checkpoints names as a delta channel."""
    out: set[str] = set()
    for node in nodes:
        if node is not None:
            out |= node.delta_channels
    return frozenset(out)


@dataclass(slots=True)
class Walk:
    """The outcome of walking back from one checkpoint.

    `needs` non-empty: the walk cannot go on until it learns whether these
    blobs hold a value (`ReplayPlanner.learn`); walk again after. Otherwise
    `checkpoints` (the start first, then its ancestors) is everything the
    start's delta channels are rebuilt from, and `broken` says the walk met
    an ancestor that exists but cannot be read, so what lies beyond it is
    unknown.
    """

    checkpoints: list[str] = field(default_factory=list)
    needs: set[BlobKey] = field(default_factory=set)
    broken: bool = False


class ReplayPlanner:
    """The ancestors a kept checkpoint's delta channels are rebuilt from,
    for checkpoints of one (thread, namespace).

    `nodes` maps checkpoint id to its `Node`, or to None for a checkpoint
    that exists but no tier can read intact; an id absent from `nodes` is not
    stored (LangGraph's walk ends there: `get_tuple` returns None).
    """

    def __init__(
        self,
        nodes: Mapping[str, Node | None],
        *,
        channels: Collection[str] | None = None,
        lookahead: int = DEFAULT_LOOKAHEAD,
    ) -> None:
        self.nodes = nodes
        self.channels = frozenset(channels) if channels is not None else delta_channels(nodes.values())
        self.lookahead = lookahead
        # (channel, version) -> does that blob hold a value (not the empty sentinel)?
        self.stored: dict[BlobKey, bool] = {}
        # checkpoint id -> channels a finished walk was still rebuilding when
        # it reached that checkpoint: a later walk arriving with no more than
        # those has nothing new to find past it.
        self._covered: dict[str, frozenset[str]] = {}

    def learn(self, facts: Mapping[BlobKey, bool]) -> None:
        """Record which blobs hold a value. A blob no tier has counts as
        holding none: LangGraph cannot seed from it, so the walk goes on."""
        self.stored.update(facts)

    def walk(self, start: str) -> Walk:
        """Walk back from `start` to where it and every checkpoint passed
        can rebuild their delta channels (module docstring)."""
        result = Walk([start])
        if not self.channels or start not in self.nodes:
            return result
        node = self.nodes[start]
        if node is None:
            result.broken = True
            return result
        rebuilding = self._rebuilding_after(node, set(), result)
        reached: list[tuple[str, frozenset[str]]] = []
        cursor = node.parent_id
        while not result.needs and cursor is not None and rebuilding:
            if cursor not in self.nodes or self._covered.get(cursor, frozenset()) >= rebuilding:
                break
            ancestor = self.nodes[cursor]
            result.checkpoints.append(cursor)
            if ancestor is None:
                result.broken = True
                break
            reached.append((cursor, frozenset(rebuilding)))
            rebuilding = self._rebuilding_after(ancestor, rebuilding, result)
            cursor = ancestor.parent_id
        if result.needs:
            self._look_ahead(cursor, result)
            return result
        for cid, channels in reached:
            self._covered[cid] = self._covered.get(cid, frozenset()) | channels
        return result

    def _rebuilding_after(self, node: Node, rebuilding: set[str], result: Walk) -> set[str]:
        """The delta channels still looking for a seed once the walk has
        taken `node`: those `node` itself must rebuild (a version but no
        stored value: what LangGraph replays when it reads `node`), plus
        those already looked for that `node` has no version of (the walk
        goes on past a branch point where the channel was not written yet).
        A channel stored at `node` is seeded there. Unknown facts go to
        `result.needs` and count as no value for now."""
        left = set()
        for ch in self.channels:
            version = node.versions.get(ch)
            if version is None:
                if ch in rebuilding:
                    left.add(ch)
                continue
            fact = self.stored.get((ch, version))
            if fact is None:
                result.needs.add((ch, version))
            if not fact:
                left.add(ch)
        return left

    def _look_ahead(self, cursor: str | None, result: Walk) -> None:
        """Ask for the facts of the next ancestors too: fewer round trips."""
        for _ in range(self.lookahead):
            node = self.nodes.get(cursor) if cursor is not None else None
            if node is None:
                return
            result.needs.update(
                (ch, v)
                for ch in self.channels
                if (v := node.versions.get(ch)) is not None and (ch, v) not in self.stored
            )
            cursor = node.parent_id


def older_than(nodes: Iterable[str], checkpoint_id: str) -> set[str]:
    """Checkpoint ids older than `checkpoint_id` (ids sort by time)."""
    return {cid for cid in nodes if cid < checkpoint_id}


def blobs_of(nodes: Mapping[str, Node | None], kept: Iterable[str]) -> set[BlobKey]:
    """Every channel value a kept checkpoint reads: dropping one would make
    it unreadable."""
    out: set[BlobKey] = set()
    for cid in kept:
        node = nodes.get(cid)
        if node is not None:
            out |= node.blob_keys()
    return out


# -- retention policy: which checkpoints a sweep keeps ---------------------------------

DEFAULT_SWEEP_RATE = 20.0  # threads a background sweep visits per second
MIN_SWEEP_EVERY_S = 0.05  # a background sweep's shortest period: shorter only spins


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What a retention sweep (`DurableSaver.apply_retention`,
    ``langgraph-durable prune``) keeps, per thread and namespace.

    - `keep_last`: the newest N checkpoints;
    - `keep_for`: checkpoints younger than this many seconds;
    - `delete_idle_after`: delete a whole thread whose newest checkpoint is
      older than this many seconds;
    - `archive_idle_after`: move such a thread to the archive instead
      (``DurableSaver(archive=...)``, `DurableSaver.archive_idle`): it leaves
      the hot tiers once its archive copy is verified, and its next read
      brings it back. Should be shorter than `delete_idle_after` when both
      are given.

    Given to the saver (``DurableSaver(retention=...)``), the policy is
    what `apply_retention` applies by default, and two more fields say how
    the saver sweeps by itself:

    - `every`: seconds between background sweeps (a daemon thread; None,
      the default: none, call `apply_retention` yourself);
    - `rate`: threads a background sweep visits per second, at most
      (default 20; None: no limit).

    A checkpoint is kept when either keep rule keeps it (with neither, every
    checkpoint of a live thread is kept). Whatever the rules say, a sweep
    never removes the newest checkpoint of a namespace, a checkpoint left
    waiting at an `interrupt()` (one with interrupt writes and no child), or
    anything a kept checkpoint needs: its channel values, the records a list
    stored as pieces is rebuilt from, its pending writes, the ancestors a
    LangGraph DeltaChannel is rebuilt from (`ReplayPlanner`). A thread with
    unconfirmed non-resumable actions is left as it is; one waiting at an
    interrupt is never deleted as idle.
    """

    keep_last: int | None = None
    keep_for: float | None = None
    delete_idle_after: float | None = None
    archive_idle_after: float | None = None
    every: float | None = None
    rate: float | None = DEFAULT_SWEEP_RATE

    def __post_init__(self) -> None:
        from .errors import ConfigError

        rules = (self.keep_last, self.keep_for, self.delete_idle_after, self.archive_idle_after)
        if all(rule is None for rule in rules):
            raise ConfigError(
                "a retention policy needs keep_last=, keep_for=, delete_idle_after= or archive_idle_after=."
            )
        if self.keep_last is not None and (
            isinstance(self.keep_last, bool) or not isinstance(self.keep_last, int) or self.keep_last < 1
        ):
            raise ConfigError(f"keep_last= must be a whole number of checkpoints, 1 or more, not {self.keep_last!r}.")
        for name in ("keep_for", "delete_idle_after", "archive_idle_after", "every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ConfigError(f"{name}= must be a number of seconds above 0, not {value!r}.")
        if self.every is not None and not MIN_SWEEP_EVERY_S <= self.every <= threading.TIMEOUT_MAX:
            raise ConfigError(
                f"every= must be between {MIN_SWEEP_EVERY_S:g} s and {threading.TIMEOUT_MAX:.0f} s, not {self.every!r}."
            )
        if self.rate is not None and (
            isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not self.rate > 0
        ):
            raise ConfigError(f"rate= must be threads per second above 0, or None, not {self.rate!r}.")

    def keeps_everything(self) -> bool:
        return self.keep_last is None and self.keep_for is None

    def chosen(self, nodes: Mapping[str, Node | None], now: float, waiting: Collection[str] = ()) -> set[str]:
        """The checkpoints of one namespace the rules keep, before what those
        need is added: the newest (by id, which sorts by time), the waiting
        ones, those the rules keep, and any that could not be read (what it
        is cannot be judged; `verify` / `repair` deal with it)."""
        readable = sorted((cid for cid, n in nodes.items() if n is not None), reverse=True)
        kept = {cid for cid, n in nodes.items() if n is None} | set(waiting) | set(readable[:1])
        if self.keeps_everything():
            return kept | set(readable)
        if self.keep_last is not None:
            kept |= set(readable[: self.keep_last])
        if self.keep_for is not None:
            kept |= {cid for cid in readable if age(cast(Node, nodes[cid]).ts, now) < self.keep_for}
        return kept

    def idle(self, newest_ts: str, now: float) -> bool:
        """Whether a thread whose newest checkpoint was written at `newest_ts` is deleted as idle."""
        return self.delete_idle_after is not None and age(newest_ts, now) >= self.delete_idle_after


def age(ts: str, now: float) -> float:
    """Seconds since `ts` (ISO 8601); 0 for a missing or unreadable one, so
    a checkpoint whose time is unknown counts as new and is kept."""
    return age_seconds(ts, now) or 0.0


def waiting_at_interrupt(nodes: Mapping[str, Node | None], with_interrupts: Collection[str]) -> set[str]:
    """Checkpoints with interrupt writes that no checkpoint continues from."""
    parents = {n.parent_id for n in nodes.values() if n is not None}
    return {cid for cid in with_interrupts if cid not in parents}


@dataclass(frozen=True, slots=True)
class Retained:
    """What a sweep did (or, dry, would do) to one thread."""

    thread_id: str
    kept: int = 0
    deleted: int = 0
    thread_deleted: bool = False


@dataclass(slots=True)
class RetentionReport:
    """What a retention sweep did (with `dry_run`: would do)."""

    dry_run: bool = False
    threads: int = 0  # threads looked at
    threads_deleted: int = 0  # idle threads deleted whole
    checkpoints_deleted: int = 0
    checkpoints_kept: int = 0
    left_alone: list[str] = field(default_factory=list)  # threads with unconfirmed actions
    threads_archived: int = 0  # idle threads moved to the archive (`archive_idle_after`)

    def add(self, retained: Retained, *, unconfirmed: bool = False) -> None:
        self.threads += 1
        self.threads_deleted += retained.thread_deleted
        self.checkpoints_deleted += retained.deleted
        self.checkpoints_kept += retained.kept
        if unconfirmed:
            self.left_alone.append(retained.thread_id)

    def merge(self, other: RetentionReport) -> None:
        """Add what another sweep (of other threads) did."""
        self.threads += other.threads
        self.threads_deleted += other.threads_deleted
        self.checkpoints_deleted += other.checkpoints_deleted
        self.checkpoints_kept += other.checkpoints_kept
        self.left_alone.extend(other.left_alone)
        self.threads_archived += other.threads_archived

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "threads": self.threads,
            "threads_deleted": self.threads_deleted,
            "checkpoints_deleted": self.checkpoints_deleted,
            "checkpoints_kept": self.checkpoints_kept,
            "left_alone": list(self.left_alone),
            "threads_archived": self.threads_archived,
        }


def age_seconds(ts: str | None, now: float | None = None) -> float | None:
    """Seconds since a checkpoint's ISO timestamp (None if it has none)."""
    if not ts:
        return None
    try:
        stamp = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return max(0.0, (time.time() if now is None else now) - stamp.timestamp())
