"""Property-based corruption tests against the real tiers.

Each example writes a random history (a chain of checkpoints whose channel
values change, plus pending writes), then damages the stored bytes directly in
one, two or all tiers (flip a byte, truncate, delete, or replace a record with
another record's bytes; see ``tests/tamper.py``), then reads latest, every id
and ``list`` in a random order. Before each read an oracle (`Sim`) looks at
what every tier holds (comparing bytes with the originals, never through the
saver) and works out from the rules below exactly what the read must return,
which `CorruptionEvent`s it must report, what every tier must hold afterwards
(repairs, withdrawals, bad copies moved or left in place, the Redis index) and
which copies it must add to the quarantine. Every read is checked on all four.

The rules (``langgraph_durable/engine/reads_async.py``):

* latest: each tier names its newest id (its head: the newest entry of its
  index, a Redis index entry whose hash field is gone included); those ids,
  newest first, are tried in turn and the first that can be served is. One no
  tier holds (a dangling Redis entry) is dropped from the index of each tier
  that named it; if all dangle, the newest checkpoint before the last one that
  any tier lists is served.
* a checkpoint record is read from every tier: the farthest tier's intact copy
  is served, every tier that lacks it or holds a bad copy gets it written, and
  every bad copy is reported ("intact copy from <tier>") and quarantined. A
  tier that lacked the record gets it with every channel value record the
  read opened intact, where that tier holds no copy at all (a bad one stays:
  values are insert-or-ignore).
* channel values: nearest tier first; the tiers nearer than the first intact
  copy are repaired; the bad copies met are reported and quarantined. A
  growing list stored as a piece (``langgraph_durable/model/deltas.py``; the
  ``log`` channel here appends to itself) also needs every record its piece
  names, read the same way; one with no intact copy anywhere makes the value
  unusable ("missing in every tier" for it, tier none), as if it were bad.
  The saver that wrote the newest checkpoint rebuilds that checkpoint's lists
  from what it remembers storing instead (their own records still read).
* pending writes: the union of every tier's, each from its farthest intact
  copy, every tier repaired. A task with a write that no tier holds intact
  loses all its writes ("no write: task T runs again"); the checkpoint stays
  usable.
* a checkpoint whose record or one of whose channel values has no intact copy
  anywhere is unusable. Fallback policy: it is withdrawn (its intact record
  copies moved to each tier's quarantine, its bad copies quarantined) and its
  newest intact ancestor is served (by parent pointer; by the newest older
  checkpoint any tier lists when the record itself, or the ancestor, is gone),
  the events saying "ancestor checkpoint <id>"; `CorruptCheckpoint` if none is
  left. Raise policy: `CorruptCheckpoint`; nothing is withdrawn and the bad
  copies without an intact twin stay where they are.
* identical copies: a record with no intact copy whose bad copies (two or
  more) are all the very same bytes (the envelope the saver sees: b"" for a
  Redis frame that cannot be unpacked) is reported ("the same bytes fail in
  every tier") but not quarantined, and its checkpoint not withdrawn; the read
  still falls back (or drops the task's writes).
* ``list``: the union of the shared tiers' listings (Redis and Postgres;
  SQLite only when it is the only tier), newest first; a row whose record is
  bad in the listing tier is read again from every tier as above; unusable
  ones are withdrawn and left out (fallback) or raise.
* a bad copy is quarantined by moving it: into the quarantine, and out of the
  live table only if it is still that very copy (one repaired meanwhile stays).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

from langgraph_durable import CorruptCheckpoint
from langgraph_durable.integrity import CorruptionEvent

from .conftest import REDIS_URL
from .tamper import BLOB, CHECKPOINT, WRITE, Rec, Store, Stored, flip, open_stores, truncate

NS = ""
CHANNELS = ("a", "b", "c")
GROWING = "log"
WRITE_CHANNELS = ("x", "y")
VALUES = st.one_of(
    st.none(),
    st.integers(-1000, 1000),
    st.text(max_size=5),
    st.lists(st.integers(0, 9), max_size=3),
)
STEPS = st.lists(
    st.fixed_dictionaries(
        {
            "updates": st.dictionaries(st.sampled_from(CHANNELS), VALUES, max_size=3),
            "writes": st.lists(
                st.lists(st.tuples(st.sampled_from(WRITE_CHANNELS), VALUES), min_size=1, max_size=2), max_size=2
            ),
            # Append to the growing list `log` (stored as pieces).
            "grow": st.booleans(),
        }
    ),
    min_size=1,
    max_size=4,
)
OPS = ("flip", "flip_raw", "flip_field", "truncate", "truncate_raw", "delete", "drop_field", "replace", "replace_raw")
# Small positions hit the envelope header and the frame's first fields often.
POSITIONS = st.one_of(st.integers(0, 12), st.integers(0, 1 << 16))

# LANGGRAPH_DURABLE_PROPERTY_EXAMPLES=500 explores further than CI's 20 per configuration.
SETTINGS = settings(
    max_examples=int(os.environ.get("LANGGRAPH_DURABLE_PROPERTY_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the model: what was written ------------------------------------------------


@dataclass
class Model:
    thread: str
    ids: list[str] = field(default_factory=list)  # oldest first
    parent: dict[str, str | None] = field(default_factory=dict)
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: dict[str, list[tuple[str, int, str, Any]]] = field(default_factory=dict)  # task, idx, channel, value
    baseline: dict[str, CheckpointTuple] = field(default_factory=dict)
    # (channel, version) of a value stored as a piece -> the versions it is rebuilt from
    pieces: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    @staticmethod
    def cp_rec(cid: str) -> Rec:
        return Rec(CHECKPOINT, NS, (cid,))

    def blob_recs(self, cid: str) -> list[Rec]:
        return [Rec(BLOB, NS, (ch, v)) for ch, v in sorted(self.versions[cid].items())]

    def write_recs(self, cid: str) -> list[Rec]:
        return [Rec(WRITE, NS, (cid, task, idx)) for task, idx, _, _ in self.writes[cid]]

    @property
    def recs(self) -> list[Rec]:
        out = [self.cp_rec(c) for c in reversed(self.ids)]
        out += list(dict.fromkeys(r for c in self.ids for r in self.blob_recs(c)))
        out += [r for c in reversed(self.ids) for r in self.write_recs(c)]
        return out


@dataclass
class Put:
    config: Any  # RunnableConfig
    checkpoint: Any  # Checkpoint
    metadata: Any  # CheckpointMetadata
    new_versions: dict[str, str]
    writes: list[tuple[str, list[tuple[str, Any]]]]  # task_id, [(channel, value)]


def plan(model: Model, steps: list[dict[str, Any]]) -> list[Put]:
    """The puts and put_writes of a history, recorded in the model."""
    puts: list[Put] = []
    values: dict[str, Any] = {}
    versions: dict[str, str] = {}
    counters: dict[str, int] = {}
    parent: str | None = None
    for i, step in enumerate(steps):
        updates = dict(step["updates"])
        if step.get("grow"):
            updates[GROWING] = [*values.get(GROWING, []), f"entry {i}"]
        for ch, value in updates.items():
            counters[ch] = counters.get(ch, 0) + 1
            versions[ch] = f"{counters[ch]:032}.{i:016}"
            values[ch] = value
        cp = generate_checkpoint(channel_values=dict(values), channel_versions=dict(versions))
        cid = cp["id"]
        assert not model.ids or cid > model.ids[-1], "checkpoint ids must increase"
        config = generate_config(model.thread, checkpoint_id=parent) if parent else generate_config(model.thread)
        md = generate_metadata(step=i)
        calls = [(f"task-{i}-{k}", list(call)) for k, call in enumerate(step["writes"])]
        puts.append(Put(config, cp, md, {ch: versions[ch] for ch in updates}, calls))
        model.ids.append(cid)
        model.parent[cid] = parent
        model.versions[cid] = dict(versions)
        model.values[cid] = dict(values)
        model.metadata[cid] = dict(md)
        model.writes[cid] = [(task, idx, ch, v) for task, call in calls for idx, (ch, v) in enumerate(call)]
        parent = cid
    return puts


def stored_config(model: Model, cid: str) -> Any:
    return generate_config(model.thread, checkpoint_id=cid)


def check_baseline(model: Model, cid: str, tup: CheckpointTuple | None) -> None:
    """Before any tampering every checkpoint reads back as written."""
    assert tup is not None, cid
    assert tup.config["configurable"]["checkpoint_id"] == cid
    assert tup.checkpoint["channel_values"] == model.values[cid]
    assert tup.checkpoint["channel_versions"] == model.versions[cid]
    assert all(tup.metadata.get(k) == v for k, v in model.metadata[cid].items())
    parent = model.parent[cid]
    assert (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id") == parent
    assert tup.pending_writes == [(t, ch, v) for t, _, ch, v in sorted(model.writes[cid], key=lambda w: w[:2])]
    model.baseline[cid] = tup


# --- the oracle: what every tier holds, and what a read must do ---------------------

IDENTICAL = "the same bytes fail in every tier"
View = tuple[bytes, tuple[str, ...]]  # the envelope the saver sees, the key fields its checksum covers


def _frame_parts(raw: bytes, n: int) -> list[Any]:
    """A Redis frame as the saver unpacks it: a damaged one (undecodable, wrong
    shape or types) has empty fields and an empty envelope."""
    try:
        parts = ormsgpack.unpackb(raw)
    except Exception:
        parts = None
    if (
        isinstance(parts, list)
        and len(parts) == n
        and isinstance(parts[-1], bytes)
        and all(p is None or isinstance(p, (str, float, int)) for p in parts[:-1])
    ):
        return parts
    return [None] * (n - 1) + [b""]


def _context(meta: tuple[Any, ...] | list[Any]) -> tuple[str, ...]:
    """Key fields as the checksum context spells them (None and "" alike)."""
    return tuple(f"{m or ''}" for m in meta)


def saver_view(tier: str, rec: Rec, held: Stored | None) -> View | None:
    """What the saver reads from one stored copy."""
    if held is None:
        return None
    if tier == "redis" and rec.kind != BLOB:
        parts = _frame_parts(held.raw, 4 if rec.kind == CHECKPOINT else 3)
        return parts[-1], _context(parts[:1] if rec.kind == CHECKPOINT else parts[:2])
    return held.raw, _context(held.meta or ())


def label(rec: Rec) -> str:
    """The record's key in events and in the quarantine."""
    if rec.kind == CHECKPOINT:
        return f"checkpoint {rec.key[0]}"
    if rec.kind == BLOB:
        return f"channel {rec.key[0]} @ {rec.key[1]}"
    cid, task, idx = rec.key
    return f"write {task}/{idx} of checkpoint {cid}"


class World:
    """Every record of the thread in every tier, and the Redis index, read
    directly (not through the saver)."""

    def __init__(self, stores: list[Store], model: Model, orig: dict[Rec, Stored]) -> None:
        self.model = model
        self.orig = orig
        self.names = [s.name for s in stores]
        self.held = {s.name: s.get_all(model.thread, model.recs) for s in stores}
        redis = [s for s in stores if s.name == "redis"]
        self.zset: set[str] = redis[0].index_ids(model.thread, NS) if redis else set()
        self.good: dict[Rec, View] = {}
        for rec in model.recs:
            envelope = orig[rec].envelope
            assert envelope is not None and orig[rec].meta is not None
            self.good[rec] = (envelope, _context(orig[rec].meta))

    def present(self, rec: Rec, tier: str) -> bool:
        return self.held[tier][rec] is not None

    def intact(self, rec: Rec, tier: str) -> bool:
        return saver_view(tier, rec, self.held[tier][rec]) == self.good[rec]

    def describe(self) -> str:
        lines = [f"redis index: {sorted(self.zset)}"] if "redis" in self.names else []
        for rec in self.model.recs:
            states = []
            for t in self.names:
                held = self.held[t][rec]
                states.append(f"{t}:{'-' if held is None else 'ok' if self.intact(rec, t) else 'BAD'}")
            lines.append(f"  {rec}: {' '.join(states)}")
        return "\n".join(lines)


REPAIRED = "repaired"  # an intact copy the read wrote (compared by content, not bytes)
Copy = Stored | str | None


@dataclass
class Inc:
    """A bad copy (or a record missing everywhere: tier None) a read meets."""

    tier: str | None
    rec: Rec
    envelope: bytes = b""
    copy: Copy = None  # what the tier held when the read met it
    served: str | None = None
    keep: bool = False  # left in place: identical copies, or the raise policy
    identical: bool = False

    @property
    def key(self) -> str:
        return label(self.rec)


@dataclass(frozen=True)
class Ev:
    tier: str
    kind: str
    key: str
    served: str
    identical: bool


class SimUnusable(Exception):
    def __init__(self, cid: str, parent: str | None, what: str, keep: bool) -> None:
        super().__init__(what)
        self.cid, self.parent, self.what, self.keep = cid, parent, what, keep


class SimCorrupt(Exception):
    """The read must raise CorruptCheckpoint."""


Served = tuple[str, list[tuple[str, str, Any]]]  # checkpoint id, its pending writes


class Sim:
    """Runs one read on a model of the tiers (a copy of `World`), by the
    rules in the module docstring: what it returns, reports, repairs, moves
    and quarantines."""

    def __init__(self, world: World, policy: str) -> None:
        self.w = world
        self.policy = policy
        self.model = world.model
        self.names = world.names
        self.state: dict[str, dict[Rec, Copy]] = {t: dict(world.held[t]) for t in self.names}
        self.zset = set(world.zset)
        self.events: list[Ev] = []
        self.quarantine: list[tuple[str, str, str, bool, bytes]] = []  # tier, kind, key, withdrawn, bytes

    # -- the state -------------------------------------------------------------------

    def view(self, t: str, rec: Rec) -> View | None:
        copy = self.state[t][rec]
        if copy is None:
            return None
        if copy == REPAIRED:
            return self.w.good[rec]
        assert isinstance(copy, Stored)
        return saver_view(t, rec, copy)

    def present(self, t: str, rec: Rec) -> bool:
        return self.state[t][rec] is not None

    def intact(self, t: str, rec: Rec) -> bool:
        return self.view(t, rec) == self.w.good[rec]

    def write(self, t: str, rec: Rec) -> None:
        """A repair: tier `t` gets the intact copy (a checkpoint: also its index entry)."""
        self.state[t][rec] = REPAIRED
        if t == "redis" and rec.kind == CHECKPOINT:
            self.zset.add(rec.key[0])

    def remove(self, t: str, rec: Rec) -> None:
        self.state[t][rec] = None
        if t == "redis" and rec.kind == CHECKPOINT:
            self.zset.discard(rec.key[0])

    def bad(self, t: str, rec: Rec) -> Inc:
        view = self.view(t, rec)
        assert view is not None
        return Inc(t, rec, view[0], self.state[t][rec])

    def listed(self, t: str) -> list[str]:
        """The ids tier `t` lists: its rows (Redis: index entries with a hash field)."""
        ids = [c for c in self.model.ids if self.present(t, Model.cp_rec(c))]
        return [c for c in ids if c in self.zset] if t == "redis" else ids

    def head(self, t: str) -> str | None:
        ids = self.zset if t == "redis" else self.listed(t)
        return max(ids, default=None)

    def older(self, cid: str) -> str | None:
        """The newest checkpoint before `cid` that any tier lists."""
        return max((c for t in self.names for c in self.listed(t) if c < cid), default=None)

    @staticmethod
    def identical(bad: list[Inc]) -> bool:
        if len(bad) < 2 or len({i.envelope for i in bad}) != 1:
            return False
        for i in bad:
            i.keep = i.identical = True
        return True

    # -- one record ------------------------------------------------------------------

    def checkpoint(self, cid: str, incidents: list[Inc], lacking: list[str] | None = None) -> bool:
        """The record, from every tier; False if no tier holds it. The tiers
        that held no copy go into `lacking`: they get the values too."""
        rec = Model.cp_rec(cid)
        good = [t for t in self.names if self.intact(t, rec)]
        if good and lacking is not None:
            lacking.extend(t for t in self.names if not self.present(t, rec))
        bad = [self.bad(t, rec) for t in self.names if self.present(t, rec) and not self.intact(t, rec)]
        incidents.extend(bad)
        if good:
            for i in bad:
                i.served = f"intact copy from {good[-1]}"
            for t in self.names:
                if not self.intact(t, rec):
                    self.write(t, rec)
            return True
        if bad:
            keep = self.identical(bad)
            raise SimUnusable(cid, None, "the checkpoint record is damaged in every tier", keep)
        return False

    def blobs(
        self, keys: list[tuple[str, str]], incidents: list[Inc], opened_out: set[tuple[str, str]] | None = None
    ) -> set[tuple[str, str]]:
        opened = self.open_blobs(keys, incidents)
        # The saver that wrote the newest checkpoint rebuilds its lists from
        # what it remembers storing, not from the records its pieces name.
        remembered = set(self.model.versions[self.model.ids[-1]].items())
        based = {
            (k[0], v)
            for k in dict.fromkeys(keys)
            if k in opened and k not in remembered
            for v in self.model.pieces.get(k, ())
        }
        more = sorted(based - opened)
        if more:
            opened |= self.open_blobs(more, incidents)
        if opened_out is not None:
            opened_out |= opened
        found = set()
        for key in dict.fromkeys(keys):
            if key not in opened:
                continue
            if key not in remembered and any((key[0], v) not in opened for v in self.model.pieces.get(key, ())):
                incidents.append(Inc(None, Rec(BLOB, NS, key)))  # a piece it is rebuilt from is gone
                continue
            found.add(key)
        return found

    def open_blobs(self, keys: list[tuple[str, str]], incidents: list[Inc]) -> set[tuple[str, str]]:
        found = set()
        for key in dict.fromkeys(keys):
            rec = Rec(BLOB, NS, key)
            first = next((i for i, t in enumerate(self.names) if self.intact(t, rec)), None)
            met = self.names[:first] if first is not None else self.names
            bad = [self.bad(t, rec) for t in met if self.present(t, rec)]
            if first is not None:
                found.add(key)
                for i in bad:
                    i.served = f"intact copy from {self.names[first]}"
                for t in met:
                    self.write(t, rec)
            else:
                self.identical(bad)
            incidents.extend(bad)
        return found

    def writes(self, cid: str, incidents: list[Inc]) -> list[tuple[str, str, Any]]:
        kept, dropped = [], set()
        for task, idx, channel, value in self.model.writes[cid]:
            rec = Rec(WRITE, NS, (cid, task, idx))
            holders = [t for t in self.names if self.present(t, rec)]
            if not holders:
                continue  # lost everywhere: not a pending write any more
            good = [t for t in holders if self.intact(t, rec)]
            bad = [self.bad(t, rec) for t in holders if not self.intact(t, rec)]
            if good:
                for i in bad:
                    i.served = f"intact copy from {good[-1]}"
                for t in self.names:
                    if not self.intact(t, rec):
                        self.write(t, rec)
                kept.append((task, idx, channel, value))
            else:
                self.identical(bad)
                for i in bad:
                    i.served = f"no write: task {task} runs again"
                dropped.add(task)
            incidents.extend(bad)
        return [(t, ch, v) for t, _, ch, v in sorted(kept, key=lambda w: w[:2]) if t not in dropped]

    def copy_values(self, lacking: list[str], opened: set[tuple[str, str]]) -> None:
        """A checkpoint copied whole into tiers that lacked it: the value
        records its read opened intact, insert-or-ignore."""
        for t in lacking:
            for key in opened:
                if not self.present(t, Rec(BLOB, NS, key)):
                    self.write(t, Rec(BLOB, NS, key))

    def assemble(
        self, cids: list[str], incidents: list[Inc], opened: set[tuple[str, str]] | None = None
    ) -> list[Served | SimUnusable]:
        versions = self.model.versions
        found = self.blobs([(ch, v) for c in cids for ch, v in versions[c].items()], incidents, opened)
        writes = {c: self.writes(c, incidents) for c in cids}
        out: list[Served | SimUnusable] = []
        for c in cids:
            absent = [(ch, v) for ch, v in versions[c].items() if (ch, v) not in found]
            labels = {f"channel {ch} @ {v}" for ch, v in absent}
            for ch, v in absent:
                if not any(i.rec.kind == BLOB and i.key == f"channel {ch} @ {v}" for i in incidents):
                    incidents.append(Inc(None, Rec(BLOB, NS, (ch, v))))
            if absent:
                names = ", ".join(f"{ch} @ {v}" for ch, v in absent)
                keep = any(i.keep for i in incidents if i.rec.kind == BLOB and i.key in labels)
                what = f"channel value(s) {names} missing or damaged in every tier"
                out.append(SimUnusable(c, self.model.parent[c], what, keep))
            else:
                out.append((c, writes[c]))
        return out

    # -- serving and falling back -------------------------------------------------------

    def serve(self, cid: str, incidents: list[Inc]) -> Served | None:
        current = cid
        while True:
            lacking: list[str] = []
            try:
                if not self.checkpoint(current, incidents, lacking):
                    if current == cid:
                        return None
                    incidents.append(Inc(None, Model.cp_rec(current)))  # an ancestor gone from every tier
                    current = self.fall_back(SimUnusable(current, None, "missing", False), incidents, missing=True)
                    continue
                opened: set[tuple[str, str]] = set()
                result = self.assemble([current], incidents, opened)[0]
                self.copy_values(lacking, opened)
                if not isinstance(result, SimUnusable):
                    if current != cid:
                        for i in incidents:
                            if i.served is None:
                                i.served = f"ancestor checkpoint {current}"
                    return result
                unusable = result
            except SimUnusable as exc:
                unusable = exc
            current = self.fall_back(unusable, incidents)

    def fall_back(self, unusable: SimUnusable, incidents: list[Inc], *, missing: bool = False) -> str:
        if self.policy == "raise" and not missing:
            for i in incidents:
                if i.served is None:
                    i.keep = True  # left in place
            self.settle(incidents, "nothing: CorruptCheckpoint raised (on_corruption='raise')")
            raise SimCorrupt
        previous = unusable.parent if unusable.parent is not None else self.older(unusable.cid)
        if not missing and not unusable.keep:
            self.withdraw(unusable.cid)
        if previous is None:
            self.settle(incidents, "nothing: no intact ancestor")
            raise SimCorrupt
        return previous

    def withdraw(self, cid: str) -> None:
        rec = Model.cp_rec(cid)
        for t in self.names:
            if self.intact(t, rec):
                self.quarantine.append((t, CHECKPOINT, label(rec), True, self.w.good[rec][0]))
                self.remove(t, rec)

    def settle(self, incidents: list[Inc], default: str = "nothing") -> None:
        seen = set()
        for i in incidents:
            identity = (i.tier, i.rec)
            if identity in seen:
                continue
            seen.add(identity)
            if i.tier is not None and not i.keep:
                self.quarantine.append((i.tier, i.rec.kind, i.key, False, i.envelope))
                if self.state[i.tier][i.rec] is i.copy:  # still that very copy: moved out
                    self.remove(i.tier, i.rec)
            self.events.append(Ev(i.tier or "every tier", i.rec.kind, i.key, i.served or default, i.identical))
        incidents.clear()

    # -- the reads -----------------------------------------------------------------------

    def get(self, cid: str | None) -> tuple[str, Any]:
        incidents: list[Inc] = []
        try:
            return "ok", (self.serve(cid, incidents) if cid else self.latest(incidents))
        except SimCorrupt:
            return "corrupt", None
        finally:
            self.settle(incidents)

    def latest(self, incidents: list[Inc]) -> Served | None:
        heads = {t: self.head(t) for t in self.names}
        candidates = sorted({h for h in heads.values() if h}, reverse=True)
        for cid in candidates:
            served = self.serve(cid, incidents)
            if served is not None:
                return served
            for t, head in heads.items():  # a dangling index entry
                if head == cid:
                    self.remove(t, Model.cp_rec(cid))
        if candidates:
            older = self.older(candidates[-1])
            if older is not None:
                return self.serve(older, incidents)
        return None

    def list(self) -> tuple[str, Any]:
        names = self.names
        shared = names[1:] if len(names) > 1 and names[0] == "sqlite" else names
        rows: dict[str, str] = {}
        for t in shared:
            for cid in self.listed(t):
                rows.setdefault(cid, t)
        incidents: list[Inc] = []
        try:
            found, lacking = [], []
            for cid in sorted(rows, reverse=True):
                if self.intact(rows[cid], Model.cp_rec(cid)):
                    found.append(cid)
                    continue
                try:
                    if self.checkpoint(cid, incidents, lacking):
                        found.append(cid)
                except SimUnusable as exc:
                    self.omit(exc, incidents)
            opened: set[tuple[str, str]] = set()
            assembled = self.assemble(found, incidents, opened)
            self.copy_values(lacking, opened)
            out = []
            for result in assembled:
                if isinstance(result, SimUnusable):
                    self.omit(result, incidents)
                else:
                    out.append(result)
            return "ok", out
        except SimCorrupt:
            return "corrupt", None
        finally:
            self.settle(incidents)

    def omit(self, unusable: SimUnusable, incidents: list[Inc]) -> None:
        if self.policy == "raise":
            self.fall_back(unusable, incidents)  # raises
        if not unusable.keep:
            self.withdraw(unusable.cid)
        for i in incidents:
            if i.served is None:
                i.served = f"left out of list: {unusable.what}"

    def run(self, read: tuple[str, Any]) -> tuple[str, Any]:
        if read[0] == "list":
            return self.list()
        return self.get(read[1])


# --- tampering ----------------------------------------------------------------------


@dataclass(frozen=True)
class Tamper:
    rec: Rec
    tiers: tuple[str, ...]
    op: str
    pos: int
    mask: int
    fraction: float
    other: Rec | None

    def apply(self, stores: list[Store], thread: str, orig_raw: dict[str, dict[Rec, Stored]]) -> None:
        for s in stores:
            if s.name not in self.tiers:
                continue
            cur = s.get(thread, self.rec)
            if cur is None:
                continue
            original = orig_raw[s.name][self.rec]
            envelope = cur.envelope if cur.envelope is not None else cur.raw
            if self.op == "flip":
                s.put_envelope(thread, self.rec, flip(envelope, self.pos, self.mask), original)
            elif self.op == "flip_raw":
                s.put_raw(thread, self.rec, flip(cur.raw, self.pos, self.mask), original)
            elif self.op == "flip_field" and self.rec.kind != BLOB:
                s.flip_field(thread, self.rec, self.pos, self.mask, original)
            elif self.op == "flip_field":
                s.put_envelope(thread, self.rec, flip(envelope, self.pos, self.mask), original)
            elif self.op == "truncate":
                s.put_envelope(thread, self.rec, truncate(envelope, self.fraction), original)
            elif self.op == "truncate_raw":
                s.put_raw(thread, self.rec, truncate(cur.raw, self.fraction), original)
            elif self.op == "delete":
                s.delete(thread, self.rec)
            elif self.op == "drop_field":
                s.drop_field(thread, self.rec)
            elif self.op == "replace":
                other = orig_raw[s.name][self.other].envelope if self.other else b"\xd7LGD"
                s.put_envelope(thread, self.rec, other or b"", original)
            elif self.op == "replace_raw":
                other = orig_raw[s.name][self.other].raw if self.other else b"\xd7LGD"
                s.put_raw(thread, self.rec, other, original)
            else:  # pragma: no cover
                raise AssertionError(self.op)


def draw_tampers(data: Any, model: Model, names: list[str]) -> list[Tamper]:
    recs = model.recs
    out = []
    for _ in range(data.draw(st.integers(1, 4), label="number of tampers")):
        rec = data.draw(st.sampled_from(recs), label="record")
        tiers = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True), label="tiers")
        op = data.draw(st.sampled_from(OPS), label="op")
        others = [r for r in recs if r != rec]
        other = data.draw(st.sampled_from(others), label="other") if op.startswith("replace") and others else None
        out.append(
            Tamper(
                rec,
                tuple(tiers),
                op,
                data.draw(POSITIONS, label="pos") if "flip" in op else 0,
                data.draw(st.integers(1, 255), label="mask") if "flip" in op else 0,
                data.draw(st.integers(0, 99), label="percent kept") / 100 if "truncate" in op else 0.0,
                other,
            )
        )
    return out


def snapshot(stores: list[Store], model: Model) -> tuple[dict[Rec, Stored], dict[str, dict[Rec, Stored]]]:
    """The intact records (every tier holds the same ones before tampering)."""
    raw: dict[str, dict[Rec, Stored]] = {}
    for s in stores:
        raw[s.name] = {}
        for rec, held in s.get_all(model.thread, model.recs).items():
            assert held is not None, f"write-through: {s.name} lacks {rec}"
            raw[s.name][rec] = held
    orig = raw[stores[0].name]
    for s in stores[1:]:
        for rec in model.recs:
            assert raw[s.name][rec].same_record(orig[rec]), f"{s.name} holds a different {rec}"
    return orig, raw


def piece_base(envelope: bytes | None) -> tuple[str, ...] | None:
    """The versions a piece is rebuilt from, read from its envelope's bytes
    (magic, format, tag length, tag, 16-byte digest, payload), or None."""
    if not envelope or envelope[:4] != b"\xd7LGD":
        return None
    end = 6 + envelope[5]
    if envelope[6:end] != b"lgd-delta":
        return None
    return tuple(ormsgpack.unpackb(envelope[end + 16 :])[1])


# --- checks ---------------------------------------------------------------------------


@dataclass
class Ctx:
    policy: str
    model: Model
    events: list[CorruptionEvent]


Outcome = tuple[str, Any]  # ("ok", result) or ("corrupt", CorruptCheckpoint)


def assert_exact(ctx: Ctx, tup: CheckpointTuple, served: Served, what: str) -> None:
    """`tup` is exactly what was written for the checkpoint, with the expected pending writes."""
    cid, writes = served
    base = ctx.model.baseline[cid]
    assert tup.config["configurable"] == {"thread_id": ctx.model.thread, "checkpoint_ns": NS, "checkpoint_id": cid}
    assert tup.checkpoint == base.checkpoint, f"{what}: checkpoint {cid} differs from what was written"
    assert tup.checkpoint["channel_values"] == ctx.model.values[cid], what
    assert tup.metadata == base.metadata, f"{what}: metadata of {cid} differs"
    assert tup.parent_config == base.parent_config, f"{what}: parent of {cid} differs"
    assert tup.pending_writes == writes, f"{what}: pending writes of {cid}: got {tup.pending_writes}, expected {writes}"


def assert_repaired(expected: Sim, after: World, what: str) -> None:
    """Every tier holds what the rules say after the read: repaired copies
    intact, withdrawn and quarantined ones gone, the others untouched."""
    for t in expected.names:
        for rec in expected.model.recs:
            want, got = expected.state[t][rec], after.held[t][rec]
            if want is None:
                assert got is None, f"{what}: {rec} should be gone from {t} (withdrawn or quarantined)"
            elif want == REPAIRED or expected.intact(t, rec):
                assert after.intact(rec, t), (
                    f"{what}: {rec} in {t} should be intact ({'repaired' if want == REPAIRED else 'untouched'})"
                )
            else:
                assert isinstance(want, Stored)
                assert got is not None and got.raw == want.raw, (
                    f"{what}: the bad copy of {rec} in {t} should be left in place"
                )
    if "redis" in expected.names:
        assert after.zset == expected.zset, (
            f"{what}: redis index {sorted(after.zset)}, expected {sorted(expected.zset)}"
        )


def assert_events_sane(ctx: Ctx, events: list[CorruptionEvent], names: list[str]) -> None:
    for e in events:
        assert e.thread_id == ctx.model.thread and e.checkpoint_ns == NS, e
        # A record missing from every tier is reported once, for "every tier";
        # so is a list whose pieces cannot all be read (saying which one).
        nowhere = e.reason == "missing in every tier" or (e.kind == BLOB and "it is rebuilt from" in e.reason)
        in_a_tier = e.tier in names or (e.tier == "every tier" and nowhere)
        assert in_a_tier and e.kind in (CHECKPOINT, BLOB, WRITE), e


def check_events(ctx: Ctx, expected: Sim, events: list[CorruptionEvent], counted: int, what: str) -> None:
    """Exactly the expected bad copies are reported, each saying what was served instead."""
    assert counted == len(expected.events), f"{what}: {counted} corruptions counted, expected {len(expected.events)}"
    if ctx.policy != "fallback":
        return  # the raise policy has no hook: only the count
    got = Counter(Ev(e.tier, e.kind, e.key, e.served_instead, IDENTICAL in e.reason) for e in events)
    want = Counter(expected.events)
    assert got == want, f"{what}: events differ\n  unexpected: {list(got - want)}\n  missing: {list(want - got)}"


def check_get(ctx: Ctx, expected: tuple[str, Any], outcome: Outcome, what: str) -> None:
    kind, value = outcome
    if expected[0] == "corrupt":
        assert kind == "corrupt", f"{what}: expected CorruptCheckpoint, got {_summary(outcome)}"
        return
    assert kind == "ok", f"{what}: raised {value!r}, expected {expected[1][0] if expected[1] else None}"
    if expected[1] is None:
        assert value is None, f"{what}: expected None, got {_summary(outcome)}"
        return
    assert value is not None, f"{what}: got None, expected {expected[1][0]}"
    assert_exact(ctx, value, expected[1], what)


def check_list(ctx: Ctx, expected: tuple[str, Any], outcome: Outcome) -> None:
    kind, value = outcome
    if expected[0] == "corrupt":
        assert kind == "corrupt", f"list: expected CorruptCheckpoint, got {_summary(outcome)}"
        return
    assert kind == "ok", f"list raised {value!r}, expected {[c for c, _ in expected[1]]}"
    got = [t.config["configurable"]["checkpoint_id"] for t in value]
    assert got == [c for c, _ in expected[1]], f"list returned {got}, expected {[c for c, _ in expected[1]]}"
    for tup, served in zip(value, expected[1]):
        assert_exact(ctx, tup, served, "list")


def check_quarantine(expected: Sim, new: list[Any], what: str) -> None:
    """The read quarantined exactly the bad copies it moved (not the identical
    ones it left in place) and the withdrawn checkpoints' intact copies."""
    got = Counter((q.tier, q.kind, q.key, q.reason.startswith("withdrawn"), bytes(q.record)) for q in new)
    want = Counter(expected.quarantine)
    assert got == want, (
        f"{what}: quarantine differs\n  unexpected: {[x[:4] for x in got - want]}\n  missing: {[x[:4] for x in want - got]}"
    )


# --- one example -----------------------------------------------------------------------


class Scenario:
    """Shared by the sync and async faces: build, tamper, then check reads."""

    def __init__(self, data: Any, steps: list[dict[str, Any]], policy: str) -> None:
        self.data = data
        self.policy = policy
        self.events: list[CorruptionEvent] = []
        self.model = Model(f"t-{uuid.uuid4().hex[:12]}")
        self.puts = plan(self.model, steps)
        self.ctx = Ctx(policy, self.model, self.events)
        self.stores: list[Store] = []
        self.quarantine_seen: set[tuple[str, str]] = set()

    def saver_options(self) -> dict[str, Any]:
        hook: Any = self.events.append if self.policy == "fallback" else "raise"
        return {"sqlite_name": f"{self.model.thread}.sqlite", "on_corruption": hook}

    def tamper(self, saver: Any) -> list[tuple[str, Any]]:
        self.stores = open_stores(saver, REDIS_URL)
        orig, raw = snapshot(self.stores, self.model)
        self.orig = orig
        self.model.pieces = {
            rec.key: base for rec, held in orig.items() if rec.kind == BLOB and (base := piece_base(held.envelope))
        }
        event(f"{len(self.model.pieces)} list piece(s)")
        if self.model.pieces:
            note(f"pieces: {self.model.pieces}")
        names = [s.name for s in self.stores]
        tampers = draw_tampers(self.data, self.model, names)
        for t in tampers:
            note(
                f"tamper: {t.op} {t.rec} in {list(t.tiers)} pos={t.pos} mask={t.mask} keep={t.fraction} other={t.other}"
            )
            t.apply(self.stores, self.model.thread, raw)
        reads: list[tuple[str, Any]] = [("latest", None), ("list", None)] + [("id", c) for c in self.model.ids]
        reads = [*self.data.draw(st.permutations(reads), label="reads"), ("latest", None), ("list", None)]
        note(f"history: {self.model.ids}")
        note("after tampering:\n" + self.world().describe())
        return reads

    def world(self) -> World:
        return World(self.stores, self.model, self.orig)

    def expect(self, before: World, read: tuple[str, Any]) -> tuple[Sim, tuple[str, Any]]:
        sim = Sim(before, self.policy)
        return sim, sim.run(read)

    def new_quarantined(self, quarantined: list[Any]) -> list[Any]:
        new = [q for q in quarantined if (q.tier, q.id) not in self.quarantine_seen]
        self.quarantine_seen |= {(q.tier, q.id) for q in quarantined}
        return new

    def check(
        self,
        read: tuple[str, Any],
        before: World,
        expected: tuple[Sim, tuple[str, Any]],
        outcome: Outcome,
        first_event: int,
        counted: int,
        quarantined: list[Any],
    ) -> World:
        """Check one read; returns the world after it (the next read's before)."""
        sim, result = expected
        after = self.world()
        events = self.events[first_event:]
        what = "list" if read[0] == "list" else f"get_tuple({'latest' if read[1] is None else read[1]})"
        note(
            f"read {read}: {outcome[0]} {_summary(outcome)}; expected {result[0]} {_summary_expected(result)}; "
            f"events {[(e.tier, e.kind, e.key, e.served_instead) for e in events]}"
        )
        assert_events_sane(self.ctx, events, before.names)
        if read[0] == "list":
            check_list(self.ctx, result, outcome)
        else:
            check_get(self.ctx, result, outcome, what)
        check_events(self.ctx, sim, events, counted, what)
        assert_repaired(sim, after, what)
        check_quarantine(sim, self.new_quarantined(quarantined), what)
        return after

    def close(self) -> None:
        for s in self.stores:
            s.close()


def _summary(outcome: Outcome) -> str:
    kind, value = outcome
    if kind == "corrupt":
        return str(value)[:120]
    if value is None:
        return "None"
    if isinstance(value, list):
        return str([t.config["configurable"]["checkpoint_id"] for t in value])
    return value.config["configurable"]["checkpoint_id"]


def _summary_expected(result: tuple[str, Any]) -> str:
    kind, value = result
    if kind == "corrupt" or value is None:
        return str(value)
    if isinstance(value, list):
        return str([c for c, _ in value])
    return value[0]


def _config(model: Model, read: tuple[str, Any]) -> Any:
    return stored_config(model, read[1]) if read[0] == "id" else generate_config(model.thread)


def run_sync(make_saver: Any, tiers: str, policy: str, data: Any, steps: list[dict[str, Any]]) -> None:
    sc = Scenario(data, steps, policy)
    with make_saver(tiers, **sc.saver_options()) as saver:
        try:
            for p in sc.puts:
                stored = saver.put(p.config, p.checkpoint, p.metadata, p.new_versions)
                for task, writes in p.writes:
                    saver.put_writes(stored, writes, task)
            for cid in sc.model.ids:
                check_baseline(sc.model, cid, saver.get_tuple(stored_config(sc.model, cid)))
            reads = sc.tamper(saver)
            before = sc.world()
            sc.new_quarantined(saver.quarantined(sc.model.thread))
            for read in reads:
                expected = sc.expect(before, read)
                first_event, counted = len(sc.events), saver.corruptions_detected
                outcome = _catch(
                    lambda: (
                        list(saver.list(generate_config(sc.model.thread)))
                        if read[0] == "list"
                        else saver.get_tuple(_config(sc.model, read))
                    )
                )
                counted = saver.corruptions_detected - counted
                quarantined = saver.quarantined(sc.model.thread)
                before = sc.check(read, before, expected, outcome, first_event, counted, quarantined)
        finally:
            sc.close()


def _catch(call: Callable[[], Any]) -> Outcome:
    try:
        return ("ok", call())
    except CorruptCheckpoint as exc:
        return ("corrupt", exc)


async def _acatch(call: Callable[[], Any]) -> Outcome:
    try:
        return ("ok", await call())
    except CorruptCheckpoint as exc:
        return ("corrupt", exc)


# --- the tests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tiers", "policy"),
    [
        ("sqlite+redis+postgres", "fallback"),
        ("sqlite+redis+postgres", "raise"),
        ("redis+postgres", "fallback"),
        ("sqlite+redis", "raise"),
        ("sqlite", "fallback"),
    ],
)
@SETTINGS
@given(data=st.data(), steps=STEPS)
def test_reads_after_corruption_are_exact_or_fall_back(
    make_saver: Any, tiers: str, policy: str, data: Any, steps: list[dict[str, Any]]
) -> None:
    run_sync(make_saver, tiers, policy, data, steps)


@SETTINGS
@given(data=st.data(), steps=STEPS)
async def test_async_reads_after_corruption_are_exact_or_fall_back(
    make_saver: Any, data: Any, steps: list[dict[str, Any]]
) -> None:
    sc = Scenario(data, steps, "fallback")
    async with make_saver("sqlite+redis+postgres", **sc.saver_options()) as saver:
        try:
            for p in sc.puts:
                stored = await saver.aput(p.config, p.checkpoint, p.metadata, p.new_versions)
                for task, writes in p.writes:
                    await saver.aput_writes(stored, writes, task)
            for cid in sc.model.ids:
                check_baseline(sc.model, cid, await saver.aget_tuple(stored_config(sc.model, cid)))
            reads = sc.tamper(saver)
            before = sc.world()
            sc.new_quarantined(await saver.aquarantined(sc.model.thread))
            for read in reads:
                expected = sc.expect(before, read)
                first_event, counted = len(sc.events), saver.corruptions_detected

                async def call(read: tuple[str, Any] = read) -> Any:
                    if read[0] == "list":
                        return [t async for t in saver.alist(generate_config(sc.model.thread))]
                    return await saver.aget_tuple(_config(sc.model, read))

                outcome = await _acatch(call)
                counted = saver.corruptions_detected - counted
                quarantined = await saver.aquarantined(sc.model.thread)
                before = sc.check(read, before, expected, outcome, first_event, counted, quarantined)
        finally:
            sc.close()
    await asyncio.sleep(0)
