"""Property-based corruption tests against the real tiers.

Each example writes a random history (a chain of checkpoints whose channel
values change, plus pending writes; the ``log`` channel grows, so it is
stored as list pieces, ``langgraph_durable/model/deltas.py``), then damages the
stored bytes directly in one, two or all tiers (flip a byte, truncate, delete,
or replace a record with another record's bytes; see ``tests/tamper.py``),
then reads latest, every id and ``list`` in a random order.

No oracle re-implements the read policy. Before and after each read the test
looks at what every tier holds (`World`: bytes compared with the originals,
never through the saver), and checks invariants any correct policy keeps.
A checkpoint is *servable* when its record and each of its channel values
(with every record a list piece is rebuilt from) have an intact copy in some
tier. After every read:

1. What is served is the requested checkpoint X (latest: the newest written)
   or an ancestor, exactly as written (checkpoint, metadata, parent, values;
   pending writes: each as written, a task whose writes all had an intact
   copy served whole). Only the fallback policy serves an ancestor of a
   requested id, and only when nothing between it and X is servable; a
   servable X is always served. `CorruptCheckpoint` only when X is not
   servable (fallback: no ancestor either); None only when no tier holds X's
   record at all (latest: no intact checkpoint anywhere). The read reports
   (`CorruptionEvent`s, or the count under the raise policy) whenever it does
   not serve X (unless what is newer is simply gone from every tier), never
   when every stored copy was intact and X is served, and each report names
   a copy that was bad in that tier (or a record with no intact copy at all).
   A `list` is newest first, exact, and holds every servable checkpoint the
   shared tiers list.
2. Nothing with an intact copy is lost: a record that had one in some tier
   still has one in some tier, or (a checkpoint withdrawn by the fallback
   policy) in a quarantine with its exact bytes. A bad copy the read removed
   or replaced is in its tier's quarantine with its bytes, and reported.
3. A checkpoint served by `get_tuple` is intact in every tier afterwards (its
   record and the pending writes served: read-repair asks every tier).
4. The same read again changes nothing: the same result (or None for an id
   the first read withdrew), nothing reported that the first read did not,
   every tier's bytes, the Redis index and the quarantine unchanged.
5. At the end of the example, `repair` then `verify` report no missing
   copies, and as bad only copies of records with no intact copy anywhere.
"""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
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

    @functools.cached_property
    def recs(self) -> list[Rec]:
        """Every record of the history (call after `plan`)."""
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


# --- what every tier holds ------------------------------------------------------------

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
    """The record's key in events, reports and the quarantine."""
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

    def bad(self, rec: Rec, tier: str) -> bool:
        return self.present(rec, tier) and not self.intact(rec, tier)

    def anywhere(self, rec: Rec) -> bool:
        """An intact copy in some tier."""
        return any(self.intact(rec, t) for t in self.names)

    def nowhere(self, rec: Rec) -> bool:
        """No copy at all, intact or not, in any tier."""
        return not any(self.present(rec, t) for t in self.names)

    def any_bad(self) -> bool:
        return any(self.bad(rec, t) for t in self.names for rec in self.model.recs)

    def needs(self, cid: str) -> list[Rec]:
        """The records checkpoint `cid` is assembled from (a list piece: with
        every record it is rebuilt from)."""
        out = [Model.cp_rec(cid)]
        for ch, v in sorted(self.model.versions[cid].items()):
            out.append(Rec(BLOB, NS, (ch, v)))
            out += [Rec(BLOB, NS, (ch, b)) for b in self.model.pieces.get((ch, v), ())]
        return out

    def servable(self, cid: str) -> bool:
        return all(self.anywhere(r) for r in self.needs(cid))

    def listed(self, cid: str) -> bool:
        """Intact in a tier `list` asks (the shared ones; SQLite only alone)."""
        rec = Model.cp_rec(cid)
        shared = [t for t in self.names if t != "sqlite"] or self.names
        return any(self.intact(rec, t) and (t != "redis" or cid in self.zset) for t in shared)

    def raw(self) -> tuple[Any, ...]:
        """Every stored byte and the Redis index, to compare two worlds."""
        held = {t: {r: (h.raw if h else None) for r, h in recs.items()} for t, recs in self.held.items()}
        return held, sorted(self.zset)

    def describe(self) -> str:
        lines = [f"redis index: {sorted(self.zset)}"] if "redis" in self.names else []
        for rec in self.model.recs:
            states = []
            for t in self.names:
                states.append(f"{t}:{'-' if not self.present(rec, t) else 'ok' if self.intact(rec, t) else 'BAD'}")
            lines.append(f"  {rec}: {' '.join(states)}")
        return "\n".join(lines)


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


Outcome = tuple[str, Any]  # ("ok", result) or ("corrupt", CorruptCheckpoint)


@dataclass
class Seen:
    """One read and the tiers around it."""

    read: tuple[str, Any]
    before: World
    outcome: Outcome
    events: list[CorruptionEvent]  # reported through the hook (fallback policy)
    counted: int  # `corruptions_detected` added by the read (both policies)
    after: World
    quarantine: list[Any]  # all of the thread's, after the read
    new: list[Any]  # those the read added

    @property
    def what(self) -> str:
        return "list" if self.read[0] == "list" else f"get_tuple({self.read[1] or 'latest'})"


def chain(model: Model, cid: str) -> list[str]:
    """`cid` and its ancestors, newest first."""
    out: list[str] = []
    current: str | None = cid
    while current is not None:
        out.append(current)
        current = model.parent[current]
    return out


def assert_exact(model: Model, before: World, tup: CheckpointTuple, what: str) -> list[Rec]:
    """`tup` is exactly what was written for its checkpoint; its pending
    writes each as written, whole for every task whose writes all had an
    intact copy. Returns the records of the writes served."""
    cid = tup.config["configurable"]["checkpoint_id"]
    base = model.baseline[cid]
    assert tup.config["configurable"] == {"thread_id": model.thread, "checkpoint_ns": NS, "checkpoint_id": cid}
    assert tup.checkpoint == base.checkpoint, f"{what}: checkpoint {cid} differs from what was written"
    assert tup.checkpoint["channel_values"] == model.values[cid], what
    assert tup.metadata == base.metadata, f"{what}: metadata of {cid} differs"
    assert tup.parent_config == base.parent_config, f"{what}: parent of {cid} differs"
    written = sorted(model.writes[cid], key=lambda w: w[:2])
    # A write served had an intact copy (two writes of a task may look alike).
    remaining = iter(w for w in written if before.anywhere(Rec(WRITE, NS, (cid, w[0], w[1]))))
    served: list[Rec] = []
    for got in tup.pending_writes:
        match = next((w for w in remaining if (w[0], w[2], w[3]) == tuple(got)), None)
        assert match is not None, f"{what}: pending write {got} of {cid} was not written intact (or out of order)"
        served.append(Rec(WRITE, NS, (cid, match[0], match[1])))
    for task in {w[0] for w in written}:
        recs = [Rec(WRITE, NS, (cid, t, i)) for t, i, _, _ in written if t == task]
        if all(before.anywhere(r) for r in recs):
            assert all(r in served for r in recs), f"{what}: the intact writes of task {task} of {cid} were lost"
    return served


def reported(policy: str, seen: Seen) -> int:
    return len(seen.events) if policy == "fallback" else seen.counted


def check_get(policy: str, model: Model, seen: Seen) -> None:
    """Invariants 1 and 3 for `get_tuple`."""
    b, what = seen.before, seen.what
    kind, value = seen.outcome
    latest = seen.read[0] == "latest"
    target = model.ids[-1] if latest else seen.read[1]
    line = chain(model, target)
    if kind == "corrupt":
        assert not b.servable(target), f"{what}: CorruptCheckpoint, but {target} was servable"
        if policy == "fallback":
            servable = [c for c in line if b.servable(c)]
            assert not servable, f"{what}: CorruptCheckpoint, but ancestor {servable[0]} was servable"
        assert reported(policy, seen) > 0, f"{what}: CorruptCheckpoint with nothing reported"
        return
    if value is None:
        if latest:
            assert not any(b.anywhere(Model.cp_rec(c)) for c in model.ids), f"{what}: None, but a checkpoint is intact"
        else:
            assert b.nowhere(Model.cp_rec(target)), f"{what}: None, but a tier held the record"
        return
    served = value.config["configurable"]["checkpoint_id"]
    assert served in line, f"{what}: served {served}, not {target} or an ancestor"
    skipped = line[: line.index(served)]
    passed = [c for c in skipped if b.servable(c)]
    assert not passed, f"{what}: served {served}, but {passed[0]} was servable"
    if skipped and not latest:
        assert policy == "fallback", f"{what}: the raise policy served ancestor {served}"
    gone = latest and all(b.nowhere(Model.cp_rec(c)) for c in skipped)
    if skipped and not gone:
        assert reported(policy, seen) > 0, f"{what}: served ancestor {served} with nothing reported"
    if not skipped and not b.any_bad():
        assert reported(policy, seen) == 0, f"{what}: reported {seen.events} with no bad copy stored"
    writes = assert_exact(model, b, value, what)
    # 3. read-repair: the served record and writes are intact in every tier now.
    for rec in [Model.cp_rec(served), *writes]:
        for t in seen.after.names:
            assert seen.after.intact(rec, t), f"{what}: served {rec}, but it is not intact in {t} afterwards"


def check_list(policy: str, model: Model, seen: Seen) -> None:
    """Invariant 1 for `list`."""
    b = seen.before
    kind, value = seen.outcome
    if kind == "corrupt":
        assert policy == "raise", f"list: CorruptCheckpoint under the fallback policy: {value}"
        assert any(not b.servable(c) for c in model.ids), "list: CorruptCheckpoint with every checkpoint servable"
        assert seen.counted > 0, "list: CorruptCheckpoint with nothing reported"
        return
    ids = [t.config["configurable"]["checkpoint_id"] for t in value]
    assert ids == sorted(set(ids), reverse=True), f"list: {ids} is not newest first"
    assert set(ids) <= set(model.ids), f"list: {ids} holds ids never written"
    for tup in value:
        assert_exact(model, b, tup, "list")
    lost = [c for c in model.ids if b.listed(c) and b.servable(c) and c not in ids]
    assert not lost, f"list: {ids} leaves out servable {lost}"
    if not b.any_bad() and all(c in ids for c in model.ids if b.listed(c)):
        assert reported(policy, seen) == 0, f"list: reported {seen.events} with no bad copy stored"


def check_reports(model: Model, seen: Seen) -> None:
    """Invariant 1: each report names a bad copy of that tier, or a record
    no tier holds intact."""
    b = seen.before
    by_label = {(r.kind, label(r)): r for r in model.recs}
    for e in seen.events:
        assert e.thread_id == model.thread and e.checkpoint_ns == NS, e
        rec = by_label.get((e.kind, e.key))
        assert rec is not None, f"{seen.what}: reported an unknown record: {e}"
        if e.tier in b.names:
            assert b.bad(rec, e.tier), f"{seen.what}: reported a copy that was not bad: {e}"
            continue
        assert e.tier == "every tier", e
        bases = [Rec(BLOB, NS, (rec.key[0], v)) for v in model.pieces.get(rec.key, ())] if rec.kind == BLOB else []
        assert not b.anywhere(rec) or not all(b.anywhere(r) for r in bases), (
            f"{seen.what}: reported as lost everywhere, but intact in some tier: {e}"
        )


def check_kept(policy: str, model: Model, seen: Seen) -> None:
    """Invariant 2: nothing intact is lost; what went is in the quarantine."""
    b, a, what = seen.before, seen.after, seen.what
    for rec in model.recs:
        if not b.anywhere(rec) or a.anywhere(rec):
            continue
        withdrawn = policy == "fallback" and rec.kind == CHECKPOINT
        # A task that lost a write loses them all: the others are withdrawn.
        withdrawn = withdrawn or (rec.kind == WRITE and _task_lost_a_write(model, b, rec))
        assert withdrawn, f"{what}: {rec} had an intact copy, now none"
        kept = [q for q in seen.quarantine if (q.kind, q.key) == (rec.kind, label(rec))]
        assert any(bytes(q.record) == b.good[rec][0] for q in kept), f"{what}: withdrew {rec} but kept no intact copy"
    new = {(q.tier, q.kind, q.key, bytes(q.record)) for q in seen.new}
    told = {(e.tier, e.kind, e.key) for e in seen.events}
    for t in b.names:
        for rec in model.recs:
            old, now = b.held[t][rec], a.held[t][rec]
            if not b.bad(rec, t) or (now is not None and old is not None and now.raw == old.raw):
                continue
            view = saver_view(t, rec, old)
            assert view is not None
            assert (t, rec.kind, label(rec), view[0]) in new, f"{what}: the bad {rec} in {t} went unquarantined"
            if policy == "fallback":
                assert (t, rec.kind, label(rec)) in told, f"{what}: the bad {rec} in {t} went unreported"


def _task_lost_a_write(model: Model, world: World, rec: Rec) -> bool:
    """Whether another write of `rec`'s task has no intact copy in `world`."""
    return any(o.kind == WRITE and o.key[:2] == rec.key[:2] and o != rec and not world.anywhere(o) for o in model.recs)


def check_again(policy: str, model: Model, first: Seen, again: Seen) -> None:
    """Invariant 4: the same read again changes nothing. Two exceptions, both
    what a read left undone about a checkpoint it could not serve (no tier
    holds its record intact after it): a `list` that withdraws a checkpoint
    read from one tier leaves the bad copies other tiers hold of it, and a read
    that raises leaves a Redis index entry with no record; the next read moves
    the first to the quarantine (reporting them) and drops the second."""
    what = first.what
    lost = {label(r) for r in model.recs if r.kind == CHECKPOINT and not first.after.anywhere(r)}
    held, now = first.after.held, again.after.held
    for t in first.after.names:
        for rec in model.recs:
            old, new = held[t][rec], now[t][rec]
            if (old and old.raw) == (new and new.raw):
                continue
            moved = new is None and label(rec) in lost and first.after.bad(rec, t)
            assert moved, f"{what} again changed {rec} in {t}"
    gone = {f"checkpoint {c}" for c in first.after.zset - again.after.zset}
    assert gone <= lost and again.after.zset <= first.after.zset, f"{what} again changed the redis index"
    late = [(q.tier, q.key) for q in again.new if q.key not in lost]
    assert not late, f"{what} again quarantined {late}"
    if policy == "fallback":
        told = {(e.kind, e.key) for e in first.events}
        more = [e for e in again.events if (e.kind, e.key) not in told and e.key not in lost]
        assert not more, f"{what} again reported {more}"
    elif not (lost & {f"checkpoint {c}" for c in model.ids if first.before.anywhere(Model.cp_rec(c))}):
        assert again.counted <= first.counted, f"{what} again reported more"
    (k1, v1), (k2, v2) = first.outcome, again.outcome
    target = first.read[1] or model.ids[-1]
    if k2 == "ok" and v2 is None:
        # The first read fell back past the requested checkpoint (or found no
        # intact ancestor), withdrawing it: gone now (`check_get` checks None).
        served = None if k1 == "corrupt" or v1 is None else v1.config["configurable"]["checkpoint_id"]
        if first.read[0] != "list" and served != target:
            return
    assert k2 == k1, f"{what} again: {_summary(again.outcome)}, first {_summary(first.outcome)}"
    if k1 == "ok":
        assert v1 == v2, f"{what} again served {_summary(again.outcome)}, first {_summary(first.outcome)}"


def check_scan(model: Model, repaired: Any, verified: Any, final: World) -> None:
    """Invariant 5: after `repair`, `verify` finds only what no tier holds
    intact, and nothing missing."""
    by_label = {(r.kind, label(r)): r for r in model.recs}
    assert not verified.missing, f"verify after repair: {verified.missing}"
    for copy in [*repaired.unrestorable, *verified.bad]:
        rec = by_label[(copy.kind, copy.key)]
        assert not final.anywhere(rec), f"{copy}: reported bad after repair, but intact in some tier"
    bad = {(c.tier, by_label[(c.kind, c.key)]) for c in verified.bad}
    stored = {(t, r) for t in final.names for r in model.recs if final.bad(r, t)}
    assert bad == stored, f"verify: reported {bad - stored}, missed {stored - bad}"


# --- one example -----------------------------------------------------------------------


class Scenario:
    """Shared by the sync and async faces: build, tamper, then check reads."""

    def __init__(self, data: Any, steps: list[dict[str, Any]], policy: str) -> None:
        self.data = data
        self.policy = policy
        self.events: list[CorruptionEvent] = []
        self.model = Model(f"t-{uuid.uuid4().hex[:12]}")
        self.puts = plan(self.model, steps)
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
        reads = self.data.draw(st.permutations(reads), label="reads")
        note(f"history: {self.model.ids}")
        note("after tampering:\n" + self.world().describe())
        return reads

    def world(self) -> World:
        return World(self.stores, self.model, self.orig)

    def seen(
        self, read: tuple[str, Any], before: World, outcome: Outcome, first_event: int, counted: int, quarantine: list
    ) -> Seen:
        new = [q for q in quarantine if (q.tier, q.id) not in self.quarantine_seen]
        self.quarantine_seen |= {(q.tier, q.id) for q in quarantine}
        seen = Seen(read, before, outcome, self.events[first_event:], counted, self.world(), quarantine, new)
        note(
            f"{seen.what}: {outcome[0]} {_summary(outcome)}; "
            f"events {[(e.tier, e.kind, e.key, e.served_instead) for e in seen.events]}"
        )
        return seen

    def check(self, first: Seen, again: Seen) -> None:
        for seen in (first, again):
            check_reports(self.model, seen)
            if seen.read[0] == "list":
                check_list(self.policy, self.model, seen)
            else:
                check_get(self.policy, self.model, seen)
            check_kept(self.policy, self.model, seen)
        check_again(self.policy, self.model, first, again)

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


def _config(model: Model, read: tuple[str, Any]) -> Any:
    return stored_config(model, read[1]) if read[0] == "id" else generate_config(model.thread)


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


def run_sync(make_saver: Any, tiers: str, policy: str, data: Any, steps: list[dict[str, Any]]) -> None:
    sc = Scenario(data, steps, policy)
    thread = sc.model.thread
    with make_saver(tiers, **sc.saver_options()) as saver:
        try:
            for p in sc.puts:
                stored = saver.put(p.config, p.checkpoint, p.metadata, p.new_versions)
                for task, writes in p.writes:
                    saver.put_writes(stored, writes, task)
            for cid in sc.model.ids:
                check_baseline(sc.model, cid, saver.get_tuple(stored_config(sc.model, cid)))
            reads = sc.tamper(saver)
            sc.seen(("setup", None), sc.world(), ("ok", None), 0, 0, saver.quarantined(thread))

            def once(read: tuple[str, Any], before: World) -> Seen:
                first_event, counted = len(sc.events), saver.corruptions_detected
                outcome = _catch(
                    lambda: (
                        list(saver.list(generate_config(thread)))
                        if read[0] == "list"
                        else saver.get_tuple(_config(sc.model, read))
                    )
                )
                counted = saver.corruptions_detected - counted
                return sc.seen(read, before, outcome, first_event, counted, saver.quarantined(thread))

            before = sc.world()
            for read in reads:
                first = once(read, before)
                again = once(read, first.after)
                sc.check(first, again)
                before = again.after
            repaired = saver.repair(thread)
            check_scan(sc.model, repaired, saver.verify(thread), sc.world())
        finally:
            sc.close()


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
def test_reads_after_corruption_keep_the_invariants(
    make_saver: Any, tiers: str, policy: str, data: Any, steps: list[dict[str, Any]]
) -> None:
    run_sync(make_saver, tiers, policy, data, steps)


@SETTINGS
@given(data=st.data(), steps=STEPS)
async def test_async_reads_after_corruption_keep_the_invariants(
    make_saver: Any, data: Any, steps: list[dict[str, Any]]
) -> None:
    sc = Scenario(data, steps, "fallback")
    thread = sc.model.thread
    async with make_saver("sqlite+redis+postgres", **sc.saver_options()) as saver:
        try:
            for p in sc.puts:
                stored = await saver.aput(p.config, p.checkpoint, p.metadata, p.new_versions)
                for task, writes in p.writes:
                    await saver.aput_writes(stored, writes, task)
            for cid in sc.model.ids:
                check_baseline(sc.model, cid, await saver.aget_tuple(stored_config(sc.model, cid)))
            reads = sc.tamper(saver)
            sc.seen(("setup", None), sc.world(), ("ok", None), 0, 0, await saver.aquarantined(thread))

            async def once(read: tuple[str, Any], before: World) -> Seen:
                first_event, counted = len(sc.events), saver.corruptions_detected

                async def call() -> Any:
                    if read[0] == "list":
                        return [t async for t in saver.alist(generate_config(thread))]
                    return await saver.aget_tuple(_config(sc.model, read))

                outcome = await _acatch(call)
                counted = saver.corruptions_detected - counted
                return sc.seen(read, before, outcome, first_event, counted, await saver.aquarantined(thread))

            before = sc.world()
            for read in reads:
                first = await once(read, before)
                again = await once(read, first.after)
                sc.check(first, again)
                before = again.after
            repaired = await saver.arepair(thread)
            check_scan(sc.model, repaired, await saver.averify(thread), sc.world())
        finally:
            sc.close()
    await asyncio.sleep(0)


# --- the checker fails a known-bad saver ---------------------------------------------------


def _serving_the_parent_as_latest(make_saver: Any) -> Any:
    """`make_saver`, whose savers' `get_tuple` answers a read of the latest
    checkpoint with that checkpoint's parent: an older state, each record
    exactly as written, as a stale head would serve it. Reads by id are left
    alone, so the history still reads back as written before the damage."""

    def make(which: str, /, **options: Any) -> Any:
        saver = make_saver(which, **options)
        real = saver.get_tuple

        def stale(config: Any) -> CheckpointTuple | None:
            tup = real(config)
            if tup is None or config["configurable"].get("checkpoint_id") or tup.parent_config is None:
                return tup
            return real(tup.parent_config)

        saver.get_tuple = stale
        return saver

    return make


class _OneCopyDamaged:
    """Hypothesis' `data`, drawing the damage as the property does but to one
    copy in one tier: every checkpoint then keeps an intact copy elsewhere,
    so the stale saver's answer is wrong in every example (the checker must
    say so), not only in those whose damage happens to leave the latest
    servable."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        if label == "number of tampers":
            strategy = strategy.filter(lambda n: n == 1)
        elif label == "tiers":
            strategy = strategy.filter(lambda tiers: len(tiers) == 1)
        return self.data.draw(strategy, label=label)


# Three examples, and no shrinking: a failure here is the checker missing a bug, found as it is.
@settings(SETTINGS, max_examples=3, phases=(Phase.generate,))
@given(data=st.data(), steps=STEPS.filter(lambda steps: len(steps) >= 2))
def test_the_checker_fails_a_saver_serving_an_older_checkpoint_as_latest(
    make_saver: Any, data: Any, steps: list[dict[str, Any]]
) -> None:
    """The property's own body (`run_sync`: the model, the tier snapshots and
    every check) run against a saver known to be wrong must fail, naming the
    newer checkpoint it should have served: an oracle that passed this
    would pass a saver that loses the newest step."""
    stale = _serving_the_parent_as_latest(make_saver)
    with pytest.raises(AssertionError, match=r"^get_tuple\(latest\): served [\w-]+, but [\w-]+ was servable"):
        run_sync(stale, "sqlite+redis+postgres", "fallback", _OneCopyDamaged(data), steps)
