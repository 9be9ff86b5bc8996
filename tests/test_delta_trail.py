"""A DeltaChannel's history answered from what the saver wrote: `DeltaTrail`.

Under its lease a saver follows each thread it started, and answers
`get_delta_channel_history` for the newest checkpoint from memory
(`model/delta_trail.py`). Every answer here is compared with LangGraph's own
walk over this saver's `get_tuple` and with the stock InMemorySaver running
the same graph, on both faces, and the tests check that the trail answered
(or, where it must not, that it did not).
"""

from __future__ import annotations

import contextlib
import gc
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_durable import DurableSaver, TierUnavailable
from langgraph_durable.model.codec import RecordCodec
from langgraph_durable.model.delta_trail import PLAIN, DeltaTrail, TrailPut, TrailWrite, trail_put
from langgraph_durable.model.own_heads import OwnHeads

from .conftest import SaverFactory
from .tamper import flip
from .test_delta import DELTA_CHANNELS, RUNS, delta_graph, extend
from .test_lease_linger import alistening, listening, wait_until_kept
from .test_local_reads import count_shared_reads

# A local cache in front of a shared tier: where a run's lease is kept after
# it, and with it what the saver wrote.
KEPT = ["sqlite+redis+postgres", "sqlite+postgres", "sqlite+redis"]


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many histories the trail answered (a list of one count)."""
    count = [0]
    real = RecordCodec.decode_trail

    def spy(self: RecordCodec, histories: Any) -> Any:
        count[0] += 1
        return real(self, histories)

    monkeypatch.setattr(RecordCodec, "decode_trail", spy)
    yield count


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 200}


async def _open(saver: DurableSaver, face: str) -> None:
    if face == "async":
        await alistening(saver)
    else:
        listening(saver)


async def _run(graph: Any, inputs: Any, cfg: dict[str, Any], face: str, **kwargs: Any) -> Any:
    """A run, and the lease kept after it. A run's end is seen when its
    stream writer is freed, which a reference cycle can put off until the
    garbage is collected: then the next run of the thread is not this one's
    successor for the saver, and nothing it wrote is trusted any more."""
    out = await graph.ainvoke(inputs, cfg, **kwargs) if face == "async" else graph.invoke(inputs, cfg, **kwargs)
    gc.collect()
    await wait_until_kept(graph.checkpointer, cfg["configurable"]["thread_id"])
    return out


async def _head_history(saver: DurableSaver, thread: str, channels: list[str], face: str) -> tuple[Any, Any]:
    """(this saver's answer, LangGraph's walk over its get_tuple) at the head."""
    if face == "async":
        head = await saver.aget_tuple(_cfg(thread))
        assert head is not None
        ours = await saver.aget_delta_channel_history(config=head.config, channels=channels)
        walked = await BaseCheckpointSaver.aget_delta_channel_history(saver, config=head.config, channels=channels)
    else:
        head = saver.get_tuple(_cfg(thread))
        assert head is not None
        ours = saver.get_delta_channel_history(config=head.config, channels=channels)
        walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=head.config, channels=channels)
    return ours, walked


def _same(ours: Any, walked: Any, theirs: Any, channels: list[str]) -> None:
    """The same writes (task ids differ from the reference's: compared with
    LangGraph's walk over this saver) and seeds, channel by channel."""
    for ch in channels:
        assert ours[ch]["writes"] == walked[ch]["writes"], ch
        assert [w[1:] for w in ours[ch]["writes"]] == [w[1:] for w in theirs[ch]["writes"]], ch
        assert ours[ch].get("seed") == walked[ch].get("seed") == theirs[ch].get("seed"), ch
        assert ("seed" in ours[ch]) == ("seed" in theirs[ch]), ch


def _reference_history(ref: InMemorySaver, thread: str, channels: list[str]) -> Any:
    head = ref.get_tuple(_cfg(thread))
    assert head is not None
    return ref.get_delta_channel_history(config=head.config, channels=channels)


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
@pytest.mark.parametrize("tiers", KEPT)
async def test_the_trail_answers_as_langgraphs_walk_across_snapshots_and_runs(
    make_saver: SaverFactory, answered: list[int], tiers: str, durability: str, face: str
) -> None:
    """Two DeltaChannels snapshotting at different steps, three runs of one
    thread (each resuming the last): after every run the head's history is
    what LangGraph's walk and the stock saver find, and the state read back
    is the reference's. It is answered from memory after the first run, and
    after a resumed one whose run took the lease straight from the last
    (a lease given back in between, as on a loaded machine it may be, or
    taken while the last run's end is not seen yet, is not trusted)."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    channels = list(DELTA_CHANNELS)
    ref_saver = InMemorySaver()
    ref = delta_graph().compile(checkpointer=ref_saver)
    async with make_saver(tiers) as saver:
        await _open(saver, face)
        graph = delta_graph().compile(checkpointer=saver)
        from_memory: list[bool] = []
        for inputs in RUNS:
            await _run(graph, inputs, _cfg(thread), face, durability=durability)
            ref.invoke(inputs, _cfg(thread), durability=durability)
            before = answered[0]
            ours, walked = await _head_history(saver, thread, channels, face)
            from_memory.append(answered[0] == before + 1)
            _same(ours, walked, _reference_history(ref_saver, thread, channels), channels)
            state = await graph.aget_state(_cfg(thread)) if face == "async" else graph.get_state(_cfg(thread))
            assert state.values == ref.get_state(_cfg(thread)).values
        assert from_memory[0], "the trail did not answer after the thread's first run"
        assert any(from_memory[1:]), "no resumed run's history was answered from memory"


class ParallelState(TypedDict, total=False):
    items: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=5)]
    n: int


def _parallel_graph(fail: list[bool], ask: bool) -> StateGraph:
    """Each step runs two nodes at once: `good` appends to the DeltaChannel;
    `flaky` raises while `fail[0]` (its partner's writes are kept as the
    checkpoint's pending writes) or, with `ask`, waits for a human (an
    interrupt's pending write) before appending too."""

    def good(state: ParallelState) -> dict[str, Any]:
        return {"items": [f"good {state.get('n', 0)}"]}

    def flaky(state: ParallelState) -> dict[str, Any]:
        n = state.get("n", 0)
        if n == 3 and fail[0]:
            fail[0] = False
            raise RuntimeError("flaky failed once")
        answer = interrupt(f"step {n}?") if ask and n == 4 else "auto"
        return {"items": [f"flaky {n} {answer}"]}

    def count(state: ParallelState) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    g = StateGraph(ParallelState)
    g.add_node("good", good)
    g.add_node("flaky", flaky)
    g.add_node("count", count)
    g.add_edge(START, "good")
    g.add_edge(START, "flaky")
    g.add_edge("good", "count")
    g.add_edge("flaky", "count")
    g.add_conditional_edges("count", lambda s: ["good", "flaky"] if s["n"] < 9 else END)
    return g


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_the_trail_keeps_a_failed_steps_writes_and_an_interrupt(
    make_saver: SaverFactory, answered: list[int], face: str
) -> None:
    """A step whose one node fails (its partner's writes stay pending on the
    checkpoint, and the retry does not run it again), then an interrupt and
    its resume: the head's history is LangGraph's walk's and the stock
    saver's at every stop, answered from memory once runs end normally."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ref_saver = InMemorySaver()
    ref_fail, fail = [True], [True]
    ref = _parallel_graph(ref_fail, ask=True).compile(checkpointer=ref_saver)
    async with make_saver("sqlite+redis+postgres") as saver:
        await _open(saver, face)
        graph = _parallel_graph(fail, ask=True).compile(checkpointer=saver)
        stops: list[Any] = [{"items": [], "n": 0}, None, Command(resume="yes")]
        for inputs in stops:
            try:
                await _run(graph, inputs, _cfg(thread), face)
            except RuntimeError:
                gc.collect()  # the failed run's end (its lease is given back, not kept)
            with contextlib.suppress(RuntimeError):
                ref.invoke(inputs, _cfg(thread))
            ours, walked = await _head_history(saver, thread, ["items"], face)
            _same(ours, walked, _reference_history(ref_saver, thread, ["items"]), ["items"])
            state = await graph.aget_state(_cfg(thread)) if face == "async" else graph.get_state(_cfg(thread))
            assert state.values == ref.get_state(_cfg(thread)).values
            asked = [[i.value for i in t.interrupts] for t in state.tasks]
            assert asked == [[i.value for i in t.interrupts] for t in ref.get_state(_cfg(thread)).tasks]
        assert not fail[0] and len(state.values["items"]) == 18
        # After the interrupt and after its resume, at least.
        assert answered[0] >= 2


def test_a_thread_changed_in_the_local_file_by_another_hand_is_walked_again(
    make_saver: SaverFactory, answered: list[int]
) -> None:
    """Another connection commits to the local file under a kept lease (here
    a pending write damaged by hand): the trail is no longer trusted, the
    read walks the file, serves the intact copy from a shared tier and
    repairs the local one; nothing is served from memory after that."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    events: list[Any] = []
    ref = delta_graph().compile(checkpointer=InMemorySaver())
    with make_saver("sqlite+redis+postgres", on_corruption=events.append) as saver:
        listening(saver)
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], _cfg(thread))
        ref.invoke(RUNS[0], _cfg(thread))
        assert graph.get_state(_cfg(thread)).values == ref.get_state(_cfg(thread)).values
        assert answered[0] == 1
        with sqlite3.connect(saver.sqlite_path or "") as conn:
            cid, task_id, idx, record = conn.execute(
                "SELECT checkpoint_id, task_id, idx, record FROM lgd_writes WHERE thread_id = ? AND channel = 'items' "
                "ORDER BY checkpoint_id DESC LIMIT 1 OFFSET 1",
                (thread,),
            ).fetchone()
            conn.execute(
                "UPDATE lgd_writes SET record = ? WHERE thread_id = ? AND checkpoint_id = ? AND task_id = ? AND idx = ?",
                (flip(bytes(record), len(record) - 1, 0x01), thread, cid, task_id, idx),
            )
        calls = count_shared_reads(saver)
        assert graph.get_state(_cfg(thread)).values == ref.get_state(_cfg(thread)).values
        assert answered[0] == 1
        assert sum(calls.values()) > 0  # the intact copy came from a shared tier
        assert [(e.tier, e.kind) for e in events] == [("sqlite", "write")]
        assert saver.verify(thread).bad == []


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_no_trail_without_a_lease_or_for_a_fork(make_saver: SaverFactory, answered: list[int], tiers: str) -> None:
    """SQLite alone keeps no lease after a run (another process may share the
    file), and a run forked from an older checkpoint is not the head's child:
    both are walked, and walked right."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ref_saver = InMemorySaver()
    ref = delta_graph().compile(checkpointer=ref_saver)
    with make_saver(tiers) as saver:
        if tiers != "sqlite":
            listening(saver)
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], _cfg(thread))
        ref.invoke(RUNS[0], _cfg(thread))
        expect = 0 if tiers == "sqlite" else 1
        assert graph.get_state(_cfg(thread)).values == ref.get_state(_cfg(thread)).values
        assert answered[0] == expect
        # Fork from the checkpoint at step 10, on both.
        (mine,) = [s for s in graph.get_state_history(_cfg(thread)) if s.metadata["step"] == 10]
        (theirs,) = [s for s in ref.get_state_history(_cfg(thread)) if s.metadata["step"] == 10]
        graph.invoke({"limit": 14}, mine.config)
        ref.invoke({"limit": 14}, theirs.config)
        before = answered[0]
        assert graph.get_state(_cfg(thread)).values == ref.get_state(_cfg(thread)).values
        assert answered[0] == before


# -- the trail itself, without I/O ---------------------------------------------------


def _put(cid: str, parent: str | None, stored: dict[str, Any], versions: dict[str, str], counted: set[str]) -> TrailPut:
    return trail_put(cid, parent, versions, stored, {"counters_since_delta_snapshot": dict.fromkeys(counted)}, 7)


def _w(task: str, idx: int, channel: str, value: bytes) -> TrailWrite:
    return TrailWrite(task, idx, channel, "", ("msgpack", value))


def test_a_trail_starts_only_at_a_first_checkpoint_and_follows_only_its_children() -> None:
    root = _put("01", None, {"items": ("1", None)}, {"items": "1"}, set())
    assert DeltaTrail.start(_put("02", "01", {}, {}, set())) is None  # not a first checkpoint
    assert DeltaTrail.start(trail_put("01", None, {"items": "1"}, {"items": ("1", None)}, {})) is None  # no version
    trail = DeltaTrail.start(root)
    assert trail is not None and trail.answer("01", ["items"]) == {"items": (None, ())}
    assert trail.add_writes("01", [_w("a", 0, "items", b"x")], upsert=False)
    assert not trail.advance(_put("03", "02", {}, {"items": "1"}, {"items"}))  # not the head's child
    # A version the trail never saw stored.
    assert not trail.advance(_put("02", "01", {}, {"items": "2"}, {"items"}))


def test_a_trail_folds_writes_in_task_order_and_restarts_at_a_snapshot() -> None:
    trail = DeltaTrail.start(
        _put("01", None, {"items": ("1", None), "n": ("1", PLAIN)}, {"items": "1", "n": "1"}, set())
    )
    assert trail is not None
    # Written out of order, and again (insert-or-ignore keeps the first).
    assert trail.add_writes("01", [_w("b", 0, "items", b"B"), _w("b", 1, "n", b"N")], upsert=False)
    assert trail.add_writes("01", [_w("a", 0, "items", b"A")], upsert=False)
    assert trail.add_writes("01", [_w("a", 0, "items", b"again")], upsert=False)
    assert trail.advance(
        _put("02", "01", {"items": ("2", None), "n": ("2", PLAIN)}, {"items": "2", "n": "2"}, {"items"})
    )
    assert trail.answer("02", ["items"]) == {"items": (None, (("a", ("msgpack", b"A")), ("b", ("msgpack", b"B"))))}
    assert trail.answer("02", ["n"]) is None  # a plain channel: not answered for
    assert trail.answer("01", ["items"]) is None  # only the head
    # A snapshot stored at 02: the seed of 03's history, with 02's writes.
    snapshot = ("msgpack", b"S")
    trail.head.stored["items"] = ("2", snapshot)
    assert trail.add_writes("02", [_w("c", 0, "items", b"C")], upsert=False)
    assert trail.advance(_put("03", "02", {"n": ("3", PLAIN)}, {"items": "2", "n": "3"}, set()))
    assert trail.answer("03", ["items"]) == {"items": (snapshot, (("c", ("msgpack", b"C")),))}


def test_the_trails_size_kept_step_by_step_is_its_recount() -> None:
    """A trail's bytes are kept up to date part by part (each history, each
    step, the early writes) rather than counted again at every put: after
    any mix of snapshots, plain values, late, early and replaced writes they
    are what a count from scratch gives."""
    import random

    rng = random.Random(7)
    trail = DeltaTrail.start(
        _put("0001", None, {"items": ("1", None), "n": ("1", PLAIN)}, {"items": "1", "n": "1"}, set())
    )
    assert trail is not None
    versions = {"items": "1", "n": "1"}
    for step in range(2, 120):
        head, cid = trail.head.checkpoint_id, f"{step:04d}"
        for target in (head, trail.parent.checkpoint_id if trail.parent else head, f"{step + 1:04d}"):
            batch = [
                _w(rng.choice("abc"), rng.randrange(3), rng.choice(["items", "n", "other"]), b"x" * rng.randrange(40))
                for _ in range(rng.randrange(3))
            ]
            assert trail.add_writes(target, batch, upsert=rng.random() < 0.3)
            assert trail.size == trail._count()
        stored: dict[str, Any] = {}
        if rng.random() < 0.2:
            versions["items"] = str(step)
            stored["items"] = (versions["items"], ("msgpack", b"S" * rng.randrange(60)))
        if rng.random() < 0.5:
            versions["n"] = str(step)
            stored["n"] = (versions["n"], PLAIN)
        assert trail.advance(_put(cid, head, stored, dict(versions), {"items"}))
        assert trail.size == trail._count(), step
    assert trail.histories  # the walk did carry a history along


def test_late_writes_of_the_heads_parent_count_and_older_ones_drop_the_trail() -> None:
    """LangGraph may store a checkpoint's writes after its child's put (a
    resumed run's input, on the async face): the head's parent is not folded
    in yet, so they are still taken; writes of an older checkpoint are not."""
    trail = DeltaTrail.start(_put("01", None, {"items": ("1", None)}, {"items": "1"}, set()))
    assert trail is not None and trail.advance(_put("02", "01", {}, {"items": "1"}, {"items"}))
    assert trail.add_writes("05", [_w("e", 0, "items", b"E")], upsert=False)  # ahead of its put
    assert trail.add_writes("01", [_w("a", 0, "items", b"A")], upsert=False)  # the parent's, late
    assert trail.answer("02", ["items"]) == {"items": (None, (("a", ("msgpack", b"A")),))}
    assert trail.advance(_put("03", "02", {}, {"items": "1"}, {"items"}))
    assert not trail.add_writes("01", [_w("b", 0, "items", b"B")], upsert=False)  # folded already


def test_the_trail_counts_against_the_heads_memory_and_a_large_one_is_dropped(
    make_saver: SaverFactory, answered: list[int]
) -> None:
    """A trail is part of `OwnHeads`' bytes; one over a quarter of them is
    not kept (the history is walked instead, and is the same)."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ref = delta_graph().compile(checkpointer=InMemorySaver())
    with make_saver("sqlite+redis+postgres") as saver:
        listening(saver)
        own = saver._runtime.own
        assert own is not None
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], _cfg(thread))
        ref.invoke(RUNS[0], _cfg(thread))
        with_trail = own.usage()["heads_bytes"]
        trail = own._own[(thread, "")].trail
        assert trail is not None and trail.size > 0 and with_trail > trail.size
        own.max_bytes = 4 * trail.size - 1  # the next write finds it too large
        graph.invoke(RUNS[1], _cfg(thread))
        ref.invoke(RUNS[1], _cfg(thread))
        assert own._own[(thread, "")].trail is None
        before = answered[0]
        assert graph.get_state(_cfg(thread)).values == ref.get_state(_cfg(thread)).values
        assert answered[0] == before


def test_a_run_carries_on_trusting_only_a_lease_it_kept_itself(
    make_saver: SaverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next run of a thread takes the lease anew (a new token). What the
    saver wrote under the last one stays trusted only if the saver kept that
    lease all along: one it stopped keeping (a renewal that failed) may have
    expired, and a change that takes no lease (delete_thread, copy_thread)
    gone ahead meanwhile, though the lease still names this saver."""
    carried: list[tuple[str, int, int]] = []
    real = OwnHeads.carry

    def spy(self: OwnHeads, thread_id: str, token: int, new_token: int) -> None:
        carried.append((thread_id, token, new_token))
        real(self, thread_id, token, new_token)

    monkeypatch.setattr(OwnHeads, "carry", spy)
    kept, dropped = f"t-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite+redis+postgres") as saver:
        listening(saver)
        graph = delta_graph().compile(checkpointer=saver)
        for thread in (kept, dropped):
            graph.invoke(RUNS[0], _cfg(thread))
            gc.collect()
            assert saver._runtime.leases.kept(thread, time.monotonic()) is not None
        saver._runtime.leases.unkeep(dropped)  # as a failed renewal does: no longer trusted
        for thread in (kept, dropped):
            graph.invoke(RUNS[1], _cfg(thread))
        assert [(t, old, new) for t, old, new in carried] == [(kept, 1, 2)]
        own = saver._runtime.own
        assert own is not None and own._own[(dropped, "")].trail is None
        assert own._own[(kept, "")].trail is not None


def test_a_write_that_fails_after_a_tier_took_it_stops_the_trail(
    make_saver: SaverFactory, redis_proxy: tuple[Any, str]
) -> None:
    """With write="all" a pending write fails when Redis is cut off, though
    the local file and Postgres may hold it (pending writes are not
    withdrawn): the thread's heads and trail are forgotten, not left to
    answer without it."""
    proxy, proxied = redis_proxy
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver("sqlite+redis+postgres", write="all", redis=proxied, call_timeout=1.0) as saver:
        listening(saver)
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], _cfg(thread))
        own = saver._runtime.own
        assert own is not None and own._own[(thread, "")].trail is not None
        head = saver.get_tuple(_cfg(thread))
        assert head is not None
        proxy.cut()
        try:
            with pytest.raises(TierUnavailable):
                saver.put_writes(head.config, [("items", ["late"])], "task-late")
        finally:
            proxy.restore()
        assert (thread, "") not in own._own
