"""A DeltaChannel's history as this saver wrote it: `DeltaTrail`.

LangGraph rebuilds a `DeltaChannel` by replaying the pending writes of every
ancestor back to the nearest one that stored the channel's value (its seed,
`delta_history.py`). Read from the tiers, that is a checkpoint, a value and a
few writes to verify and decode per ancestor: about 50 us each, so 5 ms for
a thread 90 steps past its last snapshot, where PostgresSaver answers in one
query.

A saver that writes a thread under its lease already holds all of it: each
checkpoint it puts names its parent and which channels it stored, and each
pending write passes through it. A `DeltaTrail` follows a thread from its
first checkpoint and keeps, for the newest one (the head), the answer the
walk would give: per channel the seed (as the serializer encoded it) and the
writes since, oldest first. A put of the head's child moves it one step on;
nothing is read and only the answer is decoded, so its cost is set by the
writes since the last snapshot.

It answers only what it knows exactly, and gives up (the caller then walks
the tiers as before) on anything else:

- it starts at a thread's first checkpoint (no parent), never in the middle;
- a put whose parent is not the head, a pending write of a checkpoint older
  than the head's parent (whose writes are folded in already; the parent's
  own may still come after its child's put), a channel version it has not
  seen stored, or too many bytes: the whole trail is dropped;
- a channel seeded by a plain value (not a `_DeltaSnapshot`: a channel
  that is not a DeltaChannel, or a thread from before it was one), or whose
  writes the next checkpoint's ``counters_since_delta_snapshot`` does not
  count (not a DeltaChannel: its writes are not kept), is not answered for.

Pure: no I/O, no lock (`OwnHeads`, which holds the trails, locks), nothing
decoded. Which records a saver may follow is its business (`OwnHeads`: only
fenced writes the local tier took, under one lease token).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

# What the serializer made of a value: (type tag, payload).
Dumped = tuple[str, bytes]
# A stored channel value that is not a `_DeltaSnapshot`: a seed the trail
# does not keep (its channel is not answered for).
PLAIN = "plain"
# LangGraph's checkpoint metadata: per DeltaChannel, its counts since its last snapshot.
DELTA_COUNTERS = "counters_since_delta_snapshot"
# Estimated bytes a kept write or seed costs beyond its payload and names.
ITEM_OVERHEAD = 160
# Checkpoints whose writes may arrive before their put (LangGraph overlaps
# a step's writes with the puts, which may lag several steps behind): more
# than this drops the trail.
MAX_EARLY = 256


@dataclass(frozen=True, slots=True)
class TrailWrite:
    """A pending write as `put_writes` stored it, its value still encoded."""

    task_id: str
    idx: int
    channel: str
    task_path: str
    dumped: Dumped

    def cost(self) -> int:
        return ITEM_OVERHEAD + len(self.task_id) + len(self.channel) + len(self.task_path) + len(self.dumped[1])


@dataclass(frozen=True, slots=True)
class TrailPut:
    """What a `put` stored, as a trail needs it: the checkpoint, its parent,
    its channel versions, the channels it wrote a value record for (with the
    version: `stored`, a `_DeltaSnapshot`'s encoding, `PLAIN` for another
    value, None for none: an empty record) and the DeltaChannels its
    metadata counts updates of since their last snapshot."""

    checkpoint_id: str
    parent_id: str | None
    versions: Mapping[str, str]
    stored: Mapping[str, tuple[str, Dumped | str | None]]
    counted: frozenset[str]
    # The local file's ``PRAGMA data_version`` before a first checkpoint was
    # written (`DeltaTrail.file_version`).
    file_version: int | None = None


# Per channel: the seed (None: no ancestor stored the channel) and the
# writes since, oldest first, as (task id, encoded value).
History = tuple[Dumped | None, tuple[tuple[str, Dumped], ...]]


@dataclass(slots=True)
class _Step:
    """A checkpoint the trail has not folded in yet: what its value records
    hold, by channel version, its DeltaChannels counted since their
    snapshots and its pending writes by (task id, idx)."""

    checkpoint_id: str
    stored: dict[str, tuple[str, Dumped | str | None]]
    counted: frozenset[str]
    writes: dict[tuple[str, int], TrailWrite] = field(default_factory=dict)
    # Its estimated bytes, kept up to date as writes join it (`_step_size`).
    size: int = 0

    def __post_init__(self) -> None:
        self.size = _step_size(self)


@dataclass(slots=True)
class DeltaTrail:
    """The walk's answer for the head's DeltaChannels, kept up to date by
    this saver's own puts and writes (see the module docstring).

    The head's parent is kept apart, not folded in yet: LangGraph may store
    its writes after the head's put (the input of a resumed run, on the
    async face), and they are still taken then."""

    head: _Step
    # The local file's ``PRAGMA data_version`` before the trail began: it
    # moves when another connection commits to the file (a process sharing
    # it, a hand that changed a record), and then the trail is not trusted:
    # a read goes to the file, and sees (and repairs) what was done to it.
    file_version: int | None
    parent: _Step | None = None
    # The walk's answer for the parent (what its own ancestors hold).
    histories: dict[str, History] = field(default_factory=dict)
    # Channels the trail does not answer for (see the module docstring).
    unanswered: set[str] = field(default_factory=set)
    # Writes of checkpoints still to be put.
    early: dict[str, dict[tuple[str, int], TrailWrite]] = field(default_factory=dict)
    # Estimated bytes of it all (`_count` counts them again from scratch),
    # kept up to date part by part: each channel's history, the early writes.
    size: int = 0
    history_sizes: dict[str, int] = field(default_factory=dict)
    early_size: int = 0

    @classmethod
    def start(cls, put: TrailPut) -> DeltaTrail | None:
        """A trail at a thread's first checkpoint, or None when `put` is not
        one (it has a parent) or names a version it did not store."""
        if (
            put.parent_id is not None
            or put.file_version is None
            or any(put.stored.get(ch, ("",))[0] != v for ch, v in put.versions.items())
        ):
            return None
        stored = {ch: put.stored[ch] for ch in put.versions}
        trail = cls(_Step(put.checkpoint_id, stored, put.counted), put.file_version)
        trail.size = trail._count()
        return trail

    def advance(self, put: TrailPut) -> bool:
        """The head's child was put: fold the parent into the histories, and
        make the head the parent and the child the head. False if it cannot
        be followed (the caller drops the trail)."""
        if put.parent_id != self.head.checkpoint_id:
            return False
        stored: dict[str, tuple[str, Dumped | str | None]] = {}
        for ch, v in put.versions.items():
            record = put.stored.get(ch)
            if record is None or record[0] != v:
                record = self.head.stored.get(ch)  # carried unchanged from the head
            if record is None or record[0] != v:
                return False  # a version stored by a put this trail did not see
            stored[ch] = record
        if self.parent is not None:
            self.histories, self.unanswered = _fold(
                self.histories, self.unanswered, self.parent, self.head, self.history_sizes
            )
        self.parent = self.head
        early = self.early.pop(put.checkpoint_id, {})
        self.early_size -= sum(w.cost() for w in early.values())
        self.head = _Step(put.checkpoint_id, stored, put.counted, early)
        self._sum_up()
        return True

    def add_writes(self, checkpoint_id: str, writes: Iterable[TrailWrite], *, upsert: bool) -> bool:
        """Pending writes stored for `checkpoint_id` (replacing those of the
        same (task, idx) with `upsert`, as the tiers do, else kept first).
        False when they cannot be followed: writes of a checkpoint older than
        the head's parent, whose history has been folded already."""
        step: _Step | None = None
        if checkpoint_id == self.head.checkpoint_id:
            step = self.head
        elif self.parent is not None and checkpoint_id == self.parent.checkpoint_id:
            step = self.parent
        elif checkpoint_id > self.head.checkpoint_id:  # ids grow: a checkpoint still to be put
            if checkpoint_id not in self.early and len(self.early) >= MAX_EARLY:
                return False
        else:
            return False
        into = step.writes if step is not None else self.early.setdefault(checkpoint_id, {})
        for w in writes:
            key = (w.task_id, w.idx)
            if upsert or key not in into:
                old = into.get(key)
                into[key] = w
                grown = w.cost() - (old.cost() if old is not None else 0)
                self.size += grown
                if step is not None:
                    step.size += grown
                else:
                    self.early_size += grown
        return True

    def answer(self, checkpoint_id: str, channels: Collection[str]) -> dict[str, History] | None:
        """The walk's answer for `channels` of `checkpoint_id`: per channel
        its seed and writes; None unless it is the head and every channel is
        one the trail answers for."""
        if checkpoint_id != self.head.checkpoint_id:
            return None
        histories, unanswered = self.histories, self.unanswered
        if self.parent is not None:
            histories, unanswered = _fold(histories, unanswered, self.parent, self.head)
        if any(ch in unanswered for ch in channels):
            return None
        return {ch: histories.get(ch, (None, ())) for ch in channels}

    def _sum_up(self) -> None:
        """`size` from the sizes kept part by part (`_count` without the walk)."""
        size = ITEM_OVERHEAD + sum(self.history_sizes.values()) + self.head.size + self.early_size
        size += self.parent.size if self.parent is not None else 0
        self.size = size + sum(ITEM_OVERHEAD + len(ch) for ch in self.unanswered)

    def _count(self) -> int:
        """The estimated bytes of the whole trail, counted from scratch."""
        size = ITEM_OVERHEAD
        for ch, (seed, writes) in self.histories.items():
            size += ITEM_OVERHEAD + len(ch) + (len(seed[1]) if seed is not None else 0) + _writes_size(writes)
        size += sum(_step_size(step) for step in (self.head, self.parent) if step is not None)
        size += sum(w.cost() for ws in self.early.values() for w in ws.values())
        return size + sum(ITEM_OVERHEAD + len(ch) for ch in self.unanswered)


def _step_size(step: _Step) -> int:
    size = ITEM_OVERHEAD + len(step.checkpoint_id) + sum(w.cost() for w in step.writes.values())
    for ch, (v, record) in step.stored.items():
        size += ITEM_OVERHEAD + len(ch) + len(v)
        size += len(record[1]) if isinstance(record, tuple) else 0
    return size


def _fold(
    histories: Mapping[str, History],
    unanswered: Collection[str],
    step: _Step,
    child: _Step,
    sizes: dict[str, int] | None = None,
) -> tuple[dict[str, History], set[str]]:
    """The walk's answer for `child`, from `histories` (the answer for
    `step`, its parent): the channels `step` stored a value of start again
    from it (a `_DeltaSnapshot`; a plain value is not answered for), the
    others add `step`'s writes, in the order LangGraph applies them. Returns
    it and the channels not answered for now: those of `unanswered` not
    seeded again by a snapshot, those seeded by a plain value, and those
    written with no DeltaChannel counting them at `child` (not one).
    `sizes`, if given, holds each history's estimated bytes (as `_count`
    counts them) and is updated to those of the answer, without a walk of
    the histories."""
    by_channel: dict[str, list[TrailWrite]] = {}
    for w in sorted(step.writes.values(), key=lambda w: (w.task_path, w.task_id, w.idx)):
        by_channel.setdefault(w.channel, []).append(w)
    out: dict[str, History] = {}
    new_sizes: dict[str, int] = {}
    gone = set(unanswered)
    for ch in {*histories, *by_channel, *step.stored}:
        written = tuple((w.task_id, w.dumped) for w in by_channel.get(ch, ()))
        value = step.stored[ch][1] if ch in step.stored else None
        if value == PLAIN:
            gone.add(ch)
            continue
        if value is not None:
            assert not isinstance(value, str)
            out[ch] = (value, written)
            if sizes is not None:
                new_sizes[ch] = ITEM_OVERHEAD + len(ch) + len(value[1]) + _writes_size(written)
            gone.discard(ch)
            continue
        if ch in unanswered:
            continue
        seed, before = histories.get(ch, (None, ()))
        if seed is None and ch not in child.counted and child.stored.get(ch, ("", None))[1] in (None, PLAIN):
            gone.add(ch)  # writes that no DeltaChannel counted: a plain channel's
            continue
        out[ch] = (seed, before + written)
        if sizes is not None:
            new_sizes[ch] = sizes.get(ch, ITEM_OVERHEAD + len(ch)) + _writes_size(written)
    if sizes is not None:
        sizes.clear()
        sizes.update(new_sizes)
    return out, gone


def _writes_size(written: Iterable[tuple[str, Dumped]]) -> int:
    return sum(ITEM_OVERHEAD + len(task_id) + len(d[1]) for task_id, d in written)


def trail_put(
    checkpoint_id: str,
    parent_id: str | None,
    versions: Mapping[str, str],
    stored: Mapping[str, tuple[str, Dumped | str | None]],
    metadata: Mapping[str, object],
    file_version: int | None = None,
) -> TrailPut:
    """A `TrailPut` of a checkpoint: `versions` its channel versions (as
    stored), `stored` what `RecordCodec.encode_put` said it wrote,
    `metadata` the checkpoint's (its ``counters_since_delta_snapshot``) and
    `file_version` the local file's data version before a first checkpoint
    was written."""
    counters = metadata.get(DELTA_COUNTERS)
    counted = frozenset(ch for ch in counters if isinstance(ch, str)) if isinstance(counters, Mapping) else frozenset()
    return TrailPut(checkpoint_id, parent_id, dict(versions), dict(stored), counted, file_version)
