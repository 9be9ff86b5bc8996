"""DeltaChannel threads survive prune, copy_thread and delete_for_runs.

A `DeltaChannel` stores only a sentinel at most checkpoints; LangGraph
rebuilds it from the ancestors' pending writes back to the nearest stored
`_DeltaSnapshot`. Every comparison is with the stock InMemorySaver running
the same graph, on every tier configuration.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict, cast

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from .conftest import CONFIGS
from .graphs import loop_graph

# `items` is written every step, `odd` every other step: their snapshots
# fall on different checkpoints (seeds at different ancestors) and together
# every 12 steps.
ITEMS_EVERY = 4
ODD_EVERY = 3
DELTA_CHANNELS = ("items", "odd")


def extend(state: list[Any], batches: Sequence[list[Any]]) -> list[Any]:
    """A batching-invariant reducer: DeltaChannel passes a batch of writes."""
    return [*state, *(x for batch in batches for x in batch)]


class DeltaState(TypedDict, total=False):
    items: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=ITEMS_EVERY)]
    odd: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=ODD_EVERY)]
    n: int
    limit: int


def delta_graph() -> StateGraph:
    def step(state: DeltaState) -> dict[str, Any]:
        n = state["n"]
        update: dict[str, Any] = {"items": [f"item {n}"], "n": n + 1}
        if n % 2:
            update["odd"] = [n]
        return update

    g = StateGraph(DeltaState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < s["limit"] else END)
    return g


RUNS = [{"items": [], "odd": [], "n": 0, "limit": 24}, {"limit": 45}, {"limit": 50}]


def _cfg(thread: str, run_id: str | None = None) -> dict[str, Any]:
    # As LangGraph's server does: the run id reaches checkpoint metadata.
    return {
        "configurable": {"thread_id": thread},
        "recursion_limit": 200,
        **({"metadata": {"run_id": run_id}} if run_id else {}),
    }


async def _invoke(graph: Any, inputs: Any, cfg: dict[str, Any], use_async: bool) -> None:
    if use_async:
        await graph.ainvoke(inputs, cfg)
    else:
        graph.invoke(inputs, cfg)


async def _values(graph: Any, cfg: dict[str, Any], use_async: bool) -> dict[str, Any]:
    snap = await graph.aget_state(cfg) if use_async else graph.get_state(cfg)
    return snap.values


async def _history(graph: Any, cfg: dict[str, Any], use_async: bool) -> list[tuple[int, dict[str, Any]]]:
    """(step, values) of every checkpoint, newest first, each read back
    through a time-travel get_state on its own config."""
    snaps = [s async for s in graph.aget_state_history(cfg)] if use_async else list(graph.get_state_history(cfg))
    out = []
    for snap in snaps:
        again = await _values(graph, snap.config, use_async)
        assert again == snap.values, f"time travel to step {snap.metadata['step']} reads other values"
        out.append((snap.metadata["step"], snap.values))
    return out


async def _call(saver: Any, name: str, use_async: bool, *args: Any) -> None:
    if use_async:
        await getattr(saver, "a" + name)(*args)
    else:
        getattr(saver, name)(*args)


def _needed_steps(reference: BaseCheckpointSaver, thread: str, start_step: int | None = None) -> list[int]:
    """Steps of the checkpoints kept with the one at `start_step` (default
    the latest), worked out on the reference: it and its ancestors back to
    one at which every checkpoint kept can rebuild its delta channels, i.e.
    the nearest one storing every delta channel it has a version of."""
    by_id = {t.checkpoint["id"]: t for t in reference.list(_cfg(thread))}

    def rebuilding(tup: Any, looking: set[str]) -> set[str]:
        cp = tup.checkpoint
        return {
            ch
            for ch in DELTA_CHANNELS
            if (ch in cp["channel_versions"] and ch not in cp["channel_values"])
            or (ch not in cp["channel_versions"] and ch in looking)
        }

    if start_step is None:
        tup = by_id[max(by_id)]
    else:
        (tup,) = [t for t in by_id.values() if t.metadata["step"] == start_step]
    steps = [tup.metadata["step"]]
    looking = rebuilding(tup, set())
    while tup.parent_config is not None and looking:
        tup = by_id[tup.parent_config["configurable"]["checkpoint_id"]]
        steps.append(tup.metadata["step"])
        looking = rebuilding(tup, looking)
    return steps


async def _list(saver: Any, config: Any, use_async: bool) -> list[Any]:
    if use_async:
        return [t async for t in saver.alist(config)]
    return list(saver.list(config))


async def _scenario(saver: Any, use_async: bool) -> None:
    graph = delta_graph().compile(checkpointer=saver)
    reference = InMemorySaver()
    ref_graph = delta_graph().compile(checkpointer=reference)
    run_ids = [str(uuid.uuid4()) for _ in RUNS]
    for inputs, run_id in zip(RUNS[:2], run_ids, strict=False):
        ref_graph.invoke(inputs, _cfg("t", run_id=run_id))
        await _invoke(graph, inputs, _cfg("t", run_id=run_id), use_async)

    expected = ref_graph.get_state(_cfg("t")).values
    expected_history = await _history(ref_graph, _cfg("t"), False)
    at_step = dict(expected_history)
    assert len(at_step) == len(expected_history), "steps are not unique; the comparison below needs them to be"
    assert len(expected["items"]) == RUNS[1]["limit"] and expected["odd"]
    snapshots = sum(1 for t in reference.list(_cfg("t")) if "items" in t.checkpoint["channel_values"])
    assert snapshots >= 3, "the run should store several snapshots"

    assert await _values(graph, _cfg("t"), use_async) == expected
    assert await _history(graph, _cfg("t"), use_async) == expected_history

    # Our paged history walk (delta_history.py) against LangGraph's default walk over
    # our get_tuple and against the reference, at every checkpoint (matched
    # by step: the ids differ).
    channels = list(DELTA_CHANNELS)
    ours_by_step = {t.metadata["step"]: t.config for t in await _list(saver, _cfg("t"), use_async)}
    theirs_by_step = {t.metadata["step"]: t.config for t in reference.list(_cfg("t"))}
    assert ours_by_step.keys() == theirs_by_step.keys()
    for step, at in ours_by_step.items():
        if use_async:
            ours = await saver.aget_delta_channel_history(config=at, channels=channels)
            walked = await BaseCheckpointSaver.aget_delta_channel_history(saver, config=at, channels=channels)
        else:
            ours = saver.get_delta_channel_history(config=at, channels=channels)
            walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=at, channels=channels)
        theirs = reference.get_delta_channel_history(config=theirs_by_step[step], channels=channels)
        for ch in DELTA_CHANNELS:
            assert [w[1:] for w in ours[ch]["writes"]] == [w[1:] for w in theirs[ch]["writes"]], (step, ch)
            assert [w[1:] for w in walked[ch]["writes"]] == [w[1:] for w in theirs[ch]["writes"]], (step, ch)
            assert ours[ch].get("seed") == walked[ch].get("seed") == theirs[ch].get("seed"), (step, ch)

    # copy_thread: the copy rebuilds the same values, at every checkpoint.
    await _call(saver, "copy_thread", use_async, "t", "copy")
    assert await _values(graph, _cfg("copy"), use_async) == expected
    assert await _history(graph, _cfg("copy"), use_async) == expected_history

    # delete_for_runs of the first run: the second run's checkpoints are
    # rebuilt through the first run's last ones, which must stay.
    await _call(saver, "delete_for_runs", use_async, [run_ids[0]])
    for thread in ("t", "copy"):
        assert await _values(graph, _cfg(thread), use_async) == expected
        history = await _history(graph, _cfg(thread), use_async)
        assert all(values == at_step[step] for step, values in history)
        second_run = {step for step, _ in expected_history if step > RUNS[0]["limit"]}
        assert {step for step, _ in history} == second_run | set(_needed_steps(reference, "t", min(second_run)))
        assert len(history) < len(expected_history), "delete_for_runs deleted nothing"

    # prune keep_latest: exactly the latest and what rebuilds it stay.
    await _call(saver, "prune", use_async, ["t"])
    assert await _values(graph, _cfg("t"), use_async) == expected
    history = await _history(graph, _cfg("t"), use_async)
    assert [step for step, _ in history] == _needed_steps(reference, "t")
    assert 1 < len(history) < len(expected_history)
    assert all(values == at_step[step] for step, values in history)

    # The pruned thread runs on and still matches the reference.
    ref_graph.invoke(RUNS[2], _cfg("t", run_id=run_ids[2]))
    await _invoke(graph, RUNS[2], _cfg("t", run_id=run_ids[2]), use_async)
    assert await _values(graph, _cfg("t"), use_async) == ref_graph.get_state(_cfg("t")).values
    # And so does the copy, untouched by the prune.
    assert await _values(graph, _cfg("copy"), use_async) == expected


@pytest.mark.parametrize("tiers", CONFIGS)
async def test_delta_channel_sync(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as saver:
        await _scenario(saver, use_async=False)


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
async def test_delta_channel_async(make_saver: Any, tiers: str) -> None:
    async with make_saver(tiers) as saver:
        await _scenario(saver, use_async=True)


def test_prune_without_delta_channels_keeps_only_the_latest(make_saver: Any) -> None:
    with make_saver("sqlite") as saver:
        graph = loop_graph(6).compile(checkpointer=saver)
        cfg = _cfg("plain")
        graph.invoke({"messages": [], "n": 0}, cfg)
        before = graph.get_state(cfg).values
        saver.prune(["plain"])
        assert len(list(saver.list(cfg))) == 1
        assert graph.get_state(cfg).values == before


def test_prune_twice_and_exit_durability(make_saver: Any) -> None:
    """A second prune walks from a newer latest over an already pruned
    chain; exit durability stores the run's writes on its first checkpoint."""
    with make_saver("sqlite") as saver:
        graph = delta_graph().compile(checkpointer=saver)
        ref_graph = delta_graph().compile(checkpointer=InMemorySaver())
        for inputs in RUNS:
            for g in (graph, ref_graph):
                g.invoke(inputs, _cfg("x"), durability="exit")
            saver.prune(["x"])
            assert graph.get_state(_cfg("x")).values == ref_graph.get_state(_cfg("x")).values


def test_history_falls_back_to_langgraphs_walk_when_the_chain_is_broken(make_saver: Any, tmp_path: Any) -> None:
    """An ancestor missing from every tier (here: deleted from the only one,
    behind the saver's back): the paged walk does not guess, it answers as
    LangGraph's own walk over get_tuple does."""
    import sqlite3

    with make_saver("sqlite") as saver:
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], _cfg("broken"))
        ids = sorted(t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("broken")))
        with sqlite3.connect(saver.sqlite_path) as conn:
            conn.execute("DELETE FROM lgd_checkpoints WHERE checkpoint_id = ?", (ids[-2],))  # the parent
        channels = list(DELTA_CHANNELS)
        ours = saver.get_delta_channel_history(config=_cfg("broken"), channels=channels)
        walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=_cfg("broken"), channels=channels)
        assert ours == walked
        assert delta_walk_stops_at(saver, ids[-2])


def delta_walk_stops_at(saver: Any, missing: str) -> bool:
    """`delta.walk` over what list() returns names the missing ancestor."""
    from langgraph_durable.model import delta_history as delta

    tuples = list(saver.list(_cfg("broken")))
    latest = max(tuples, key=delta.checkpoint_id)
    found = delta.walk(latest, {delta.checkpoint_id(t): t for t in tuples}, list(DELTA_CHANNELS))
    return found == missing


@pytest.mark.parametrize("tiers", ["sqlite", "postgres", "sqlite+redis+postgres"])
def test_history_drops_a_task_whose_other_write_is_damaged_everywhere(make_saver: Any, tiers: str) -> None:
    """A DeltaChannel's walk decodes only the delta channels' writes, but a
    task that lost another write (here its write to ``n``, damaged in every
    tier) loses its delta write too, as `get_tuple` serves it: the paged
    walk answers as LangGraph's own walk over get_tuple does."""
    from .conftest import REDIS_URL
    from .tamper import WRITE, Rec, flip, open_stores

    with make_saver(tiers, lease_linger=0) as saver:
        graph = delta_graph().compile(checkpointer=saver)
        graph.invoke(RUNS[0], _cfg("hurt"))
        tuples = list(saver.list(_cfg("hurt")))
        # An ancestor a few steps back whose step wrote `items` and `n`.
        victim = next(t for t in tuples[4:] if {w[1] for w in t.pending_writes} >= {"items", "n"})
        cid = victim.config["configurable"]["checkpoint_id"]
        task = next(w[0] for w in victim.pending_writes if w[1] == "n")
        idx = [w[1] for w in victim.pending_writes if w[0] == task].index("n")
        rec = Rec(WRITE, "", (cid, task, idx))
        child = next(t for t in tuples if t.parent_config and t.parent_config["configurable"]["checkpoint_id"] == cid)
        item = f"item {victim.metadata['step']}"
        channels = list(DELTA_CHANNELS)
        intact = saver.get_delta_channel_history(config=child.config, channels=channels)
        assert [item] in [w[2] for w in intact["items"]["writes"]]
        stores = open_stores(saver, REDIS_URL)
        try:
            for store in stores:
                stored = store.get("hurt", rec)
                assert stored is not None and stored.envelope is not None, store.name
                store.put_envelope("hurt", rec, flip(stored.envelope, len(stored.envelope) - 1, 1), stored)
        finally:
            for store in stores:
                store.close()
        ours = saver.get_delta_channel_history(config=child.config, channels=channels)
        walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=child.config, channels=channels)
        assert ours == walked
        assert [item] not in [w[2] for w in ours["items"]["writes"]]  # the task runs again: none of its writes


def test_the_first_page_reaches_as_far_back_as_langgraph_s_counters_say() -> None:
    """LangGraph's metadata counts the super-steps since each DeltaChannel's
    snapshot: the walk reads that many ancestors at once (bounded), not a
    doubling series of small pages; without the counters, a small page."""
    from langgraph.checkpoint.base import CheckpointTuple

    from langgraph_durable.model import delta_history as delta

    def target(metadata: dict[str, Any]) -> CheckpointTuple:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}}
        return CheckpointTuple(config=config, checkpoint=cast(Any, {}), metadata=cast(Any, metadata))

    counters = {"items": [40, 90], "odd": [3, 7]}
    assert delta.first_page(target({delta.DELTA_COUNTERS: counters}), ["items", "odd"]) == 92
    assert delta.first_page(target({delta.DELTA_COUNTERS: counters}), ["odd"]) == 9
    assert delta.first_page(target({delta.DELTA_COUNTERS: {"items": [1, 2]}}), ["items"]) == delta.FIRST_PAGE
    assert delta.first_page(target({delta.DELTA_COUNTERS: {"items": [1, 5000]}}), ["items"]) == delta.MAX_PAGE
    for odd in ({}, {delta.DELTA_COUNTERS: "x"}, {delta.DELTA_COUNTERS: {"items": ["a", True]}}):
        assert delta.first_page(target(odd), ["items"]) == delta.FIRST_PAGE
