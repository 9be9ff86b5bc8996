"""Property-based corruption tests against the real tiers.

Each example writes a random history (a chain of checkpoints whose channel
values change, plus pending writes), then damages the stored bytes directly in
one, two or all tiers (flip a byte, truncate, delete, or replace a record with
another record's bytes; see ``tests/tamper.py``), then reads latest, every id
and ``list`` in a random order. Before each read an oracle looks at what every
tier holds (by comparing bytes with the originals, never through the saver)
and says what the read may return:

* a checkpoint that some tier still holds intact (record, every channel value,
  every pending write the authoritative tier lists) is returned *exactly*, the
  tiers the read passed over are repaired (their bytes equal the original
  again), and every bad copy it met is reported as "intact copy from ...";
* otherwise, with on_corruption="raise", `CorruptCheckpoint`; with the
  fallback policy, an *older written* checkpoint, exactly, with a
  `CorruptionEvent` whose ``served_instead`` names it, the unusable one
  withdrawn from every tier and the bad copies quarantined
  (`CorruptCheckpoint` only when no older checkpoint is intact);
* ``list`` returns exactly the usable checkpoints the authoritative tier lists.

A record deleted from the authoritative (farthest) tier counts as deleted, as
the package asks that tier which checkpoints and writes exist; a checkpoint
present in no tier reads as None by id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

from langgraph_durable import CorruptCheckpoint
from langgraph_durable.integrity import CorruptionEvent

from .conftest import REDIS_URL
from .tamper import BLOB, CHECKPOINT, WRITE, Rec, Store, Stored, flip, open_stores, truncate

NS = ""
CHANNELS = ("a", "b", "c")
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
        }
    ),
    min_size=1,
    max_size=4,
)
OPS = ("flip", "flip_raw", "flip_field", "truncate", "truncate_raw", "delete", "drop_field", "replace", "replace_raw")
# Small positions hit the envelope header and the frame's first fields often.
POSITIONS = st.one_of(st.integers(0, 12), st.integers(0, 1 << 16))

SETTINGS = settings(
    max_examples=20,
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
        for ch, value in step["updates"].items():
            counters[ch] = counters.get(ch, 0) + 1
            versions[ch] = f"{counters[ch]:032}.{i:016}"
            values[ch] = value
        cp = generate_checkpoint(channel_values=dict(values), channel_versions=dict(versions))
        cid = cp["id"]
        assert not model.ids or cid > model.ids[-1], "checkpoint ids must increase"
        config = generate_config(model.thread, checkpoint_id=parent) if parent else generate_config(model.thread)
        md = generate_metadata(step=i)
        calls = [(f"task-{i}-{k}", list(call)) for k, call in enumerate(step["writes"])]
        puts.append(Put(config, cp, md, {ch: versions[ch] for ch in step["updates"]}, calls))
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


# --- the oracle: what every tier holds right now ----------------------------------


class World:
    """Every record of the thread in every tier, read directly (not through the saver)."""

    def __init__(self, stores: list[Store], model: Model, orig: dict[Rec, Stored]) -> None:
        self.model = model
        self.orig = orig
        self.names = [s.name for s in stores]
        self.auth = self.names[-1]
        self.held = {s.name: s.get_all(model.thread, model.recs) for s in stores}
        authority = stores[-1]
        self.index = authority.index_ids(model.thread, NS)  # what latest_id picks from
        self.listed = sorted(self.index & authority.record_ids(model.thread, NS), reverse=True)  # what list() gets

    def present(self, rec: Rec, tier: str) -> bool:
        return self.held[tier][rec] is not None

    def intact(self, rec: Rec, tier: str) -> bool:
        held = self.held[tier][rec]
        return held is not None and held.same_record(self.orig[rec])

    def anywhere(self, rec: Rec) -> bool:
        return any(self.present(rec, t) for t in self.names)

    def first_intact(self, rec: Rec) -> int | None:
        return next((i for i, t in enumerate(self.names) if self.intact(rec, t)), None)

    def intact_anywhere(self, rec: Rec) -> bool:
        return self.first_intact(rec) is not None

    def live_writes(self, cid: str) -> list[Rec]:
        """The pending writes of `cid` the authoritative tier lists."""
        return [w for w in self.model.write_recs(cid) if self.present(w, self.auth)]

    def usable(self, cid: str) -> bool:
        recs = [self.model.cp_rec(cid), *self.model.blob_recs(cid), *self.live_writes(cid)]
        return all(self.intact_anywhere(r) for r in recs)

    def expected_writes(self, cid: str) -> list[tuple[str, str, Any]]:
        live = {w.key for w in self.live_writes(cid)}
        kept = [w for w in self.model.writes[cid] if (cid, w[0], w[1]) in live]
        return [(t, ch, v) for t, _, ch, v in sorted(kept, key=lambda w: w[:2])]

    def bad_copies_on_read_path(self, cid: str) -> set[tuple[str, str]]:
        """(tier, kind) of the damaged copies a read of `cid` must meet and report."""
        out = set()
        for rec in [self.model.cp_rec(cid), *self.model.blob_recs(cid)]:
            first = self.first_intact(rec)
            for t in self.names[: first if first is not None else len(self.names)]:
                if self.present(rec, t) and not self.intact(rec, t):
                    out.add((t, rec.kind))
        for w in self.live_writes(cid):
            if not self.intact(w, self.auth):
                out.add((self.auth, WRITE))
        return out

    def describe(self) -> str:
        lines = [f"authority {self.auth}: index {sorted(self.index)}, listed {self.listed}"]
        for rec in self.model.recs:
            states = []
            for t in self.names:
                held = self.held[t][rec]
                states.append(f"{t}:{'-' if held is None else 'ok' if self.intact(rec, t) else 'BAD'}")
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


# --- checks ---------------------------------------------------------------------------


@dataclass
class Ctx:
    policy: str
    model: Model
    events: list[CorruptionEvent]


def assert_exact(ctx: Ctx, world: World, tup: CheckpointTuple, cid: str, what: str) -> None:
    """`tup` is exactly what was written for `cid` (writes: those the authority lists)."""
    base = ctx.model.baseline[cid]
    assert tup.config["configurable"] == {"thread_id": ctx.model.thread, "checkpoint_ns": NS, "checkpoint_id": cid}
    assert tup.checkpoint == base.checkpoint, f"{what}: checkpoint {cid} differs from what was written"
    assert tup.checkpoint["channel_values"] == ctx.model.values[cid], what
    assert tup.metadata == base.metadata, f"{what}: metadata of {cid} differs"
    assert tup.parent_config == base.parent_config, f"{what}: parent of {cid} differs"
    assert tup.pending_writes == world.expected_writes(cid), f"{what}: pending writes of {cid} differ"


def assert_repaired(ctx: Ctx, before: World, after: World, cid: str, *, checkpoint_row: bool, what: str) -> None:
    """Tiers the read passed over (nearer than the first intact copy) hold an
    intact copy again; so does the authority for each pending write it served
    from another tier."""
    recs = ([ctx.model.cp_rec(cid)] if checkpoint_row else []) + ctx.model.blob_recs(cid)
    for rec in recs:
        first = before.first_intact(rec)
        assert first is not None
        for t in before.names[:first]:
            assert after.intact(rec, t), (
                f"{what}: no read-repair of {rec} in {t} (intact copy in {before.names[first]})"
            )
    for w in before.live_writes(cid):
        if not before.intact(w, before.auth):
            assert after.intact(w, before.auth), f"{what}: no read-repair of {w} in {before.auth}"


def assert_events_sane(ctx: Ctx, events: list[CorruptionEvent], names: list[str]) -> None:
    for e in events:
        assert e.thread_id == ctx.model.thread and e.checkpoint_ns == NS, e
        # A record missing from every tier is reported once, for "every tier".
        in_a_tier = e.tier in names or (e.tier == "every tier" and e.reason == "missing in every tier")
        assert in_a_tier and e.kind in (CHECKPOINT, BLOB, WRITE), e


Outcome = tuple[str, Any]  # ("ok", result) or ("corrupt", CorruptCheckpoint)


def check_get(
    ctx: Ctx, before: World, after: World, requested: str | None, outcome: Outcome, events: list[CorruptionEvent]
) -> None:
    what = f"get_tuple({'latest' if requested is None else requested})"
    kind, value = outcome
    target = requested if requested is not None else max(before.index, default=None)
    if target is None:
        assert outcome == ("ok", None), f"{what}: nothing stored, expected None, got {outcome}"
        return
    cp = ctx.model.cp_rec(target)
    if requested is not None and not before.anywhere(cp):
        # deleted from every tier, or withdrawn by an earlier read
        assert outcome == ("ok", None), f"{what}: {target} is in no tier, expected None, got {outcome}"
        return
    if before.usable(target):
        assert kind == "ok" and value is not None, f"{what}: {target} has an intact copy of every part, got {outcome}"
        assert_exact(ctx, before, value, target, what)
        if ctx.policy == "fallback":
            for e in events:
                assert e.served_instead.startswith("intact copy from"), f"{what}: {e}"
            reported = {(e.tier, e.kind) for e in events}
            missed = before.bad_copies_on_read_path(target) - reported
            assert not missed, f"{what}: bad copies read but not reported: {missed}"
        assert_repaired(ctx, before, after, target, checkpoint_row=True, what=what)
        return
    older = [c for c in before.listed if c < target and before.usable(c)]
    if ctx.policy == "raise" and before.anywhere(cp):
        assert kind == "corrupt", f"{what}: {target} cannot be read intact; expected CorruptCheckpoint, got {outcome}"
        for rec in before.model.recs:  # nothing withdrawn under the raise policy
            for t in before.names:
                if rec.kind == CHECKPOINT and before.present(rec, t):
                    assert after.present(rec, t), f"{what}: raise policy withdrew {rec} from {t}"
        return
    if kind == "corrupt":
        assert not older, f"{what}: {target} is unusable but {older[0]} is intact, yet CorruptCheckpoint was raised"
        return
    if value is None:
        assert not older, (
            f"{what}: returned None, but checkpoints were written and {older[0]} is intact ({target} is unusable)"
        )
        return
    served = value.config["configurable"]["checkpoint_id"]
    assert served in ctx.model.ids and served < target, f"{what}: served {served}, not an older written checkpoint"
    assert not older or served >= older[0], (
        f"{what}: served {served}, but the newer ancestor {older[0]} is intact ({target} is unusable)"
    )
    assert_exact(ctx, before, value, served, what)
    if ctx.policy == "fallback":
        assert events, f"{what}: served ancestor {served} instead of {target}, but no CorruptionEvent was reported"
        assert any(served in e.served_instead for e in events), (
            f"{what}: served {served}; no event names it: {[e.served_instead for e in events]}"
        )
    assert not after.anywhere(cp) and target not in after.index, f"{what}: unusable {target} not withdrawn"
    assert_repaired(ctx, before, after, served, checkpoint_row=True, what=what)


def check_list(ctx: Ctx, before: World, after: World, outcome: Outcome, events: list[CorruptionEvent]) -> None:
    kind, value = outcome
    rows = before.listed
    usable = [c for c in rows if before.usable(c)]
    if ctx.policy == "raise" and usable != rows:
        assert kind == "corrupt", f"list: {sorted(set(rows) - set(usable))} unusable, expected CorruptCheckpoint"
        return
    assert kind == "ok", f"list raised {value!r}; usable {usable} of {rows}"
    got = [t.config["configurable"]["checkpoint_id"] for t in value]
    assert got == usable, f"list returned {got}, expected the usable checkpoints {usable} of {rows}"
    for tup, cid in zip(value, got):
        assert_exact(ctx, before, tup, cid, "list")
        assert_repaired(ctx, before, after, cid, checkpoint_row=False, what="list")
    if usable != rows:
        if ctx.policy == "fallback":
            assert events, f"list left out {sorted(set(rows) - set(usable))} but reported no CorruptionEvent"
        for cid in set(rows) - set(usable):
            assert not after.anywhere(ctx.model.cp_rec(cid)), f"list: unusable {cid} not withdrawn"


def check_quarantine(ctx: Ctx, quarantined: list[Any], events: list[CorruptionEvent]) -> None:
    # Every bad copy is kept; a record missing from every tier has no bytes to keep.
    reported = sum(1 for e in events if e.tier != "every tier")
    if reported:
        assert quarantined, "corruption was detected but nothing is quarantined"
        assert len(quarantined) >= reported, f"{reported} bad copies reported, {len(quarantined)} quarantined"


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

    def saver_options(self) -> dict[str, Any]:
        hook: Any = self.events.append if self.policy == "fallback" else "raise"
        return {"sqlite_name": f"{self.model.thread}.sqlite", "on_corruption": hook}

    def tamper(self, saver: Any) -> list[tuple[str, Any]]:
        self.stores = open_stores(saver, REDIS_URL)
        orig, raw = snapshot(self.stores, self.model)
        self.orig = orig
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

    def check(self, read: tuple[str, Any], before: World, outcome: Outcome, first_event: int) -> World:
        """Check one read; returns the world after it (the next read's before)."""
        after = self.world()
        events = self.events[first_event:]
        note(
            f"read {read}: {outcome[0]} {_summary(outcome)}; events {[(e.tier, e.kind, e.key, e.served_instead) for e in events]}"
        )
        assert_events_sane(self.ctx, events, before.names)
        if read[0] == "list":
            check_list(self.ctx, before, after, outcome, events)
        else:
            check_get(self.ctx, before, after, read[1], outcome, events)
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
            for read in reads:
                first_event, counted = len(sc.events), saver.corruptions_detected
                outcome = _catch(
                    lambda: (
                        list(saver.list(generate_config(sc.model.thread)))
                        if read[0] == "list"
                        else saver.get_tuple(_config(sc.model, read))
                    )
                )
                before = sc.check(read, before, outcome, first_event)
                if policy == "fallback":
                    assert saver.corruptions_detected - counted == len(sc.events) - first_event
                check_quarantine(sc.ctx, saver.quarantined(sc.model.thread), sc.events)
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
            for read in reads:
                first_event = len(sc.events)

                async def call(read: tuple[str, Any] = read) -> Any:
                    if read[0] == "list":
                        return [t async for t in saver.alist(generate_config(sc.model.thread))]
                    return await saver.aget_tuple(_config(sc.model, read))

                outcome = await _acatch(call)
                before = sc.check(read, before, outcome, first_event)
                check_quarantine(sc.ctx, await saver.aquarantined(sc.model.thread), sc.events)
        finally:
            sc.close()
    await asyncio.sleep(0)
