"""Checkpoint ids are what LangGraph writes (lowercase UUID strings), checked
before any record is written; no accepted id poisons the thread's order or its
deletion marker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_durable import ConfigError, DurableSaver

from .conftest import CONFIGS
from .graphs import loop_graph
from .test_errors import LEASES, _added, _footprint
from .test_tamper import _ids_in_every_tier

GOOD = str(uuid6(clock_seq=-1))
# By name: GOOD is made at import, and test ids must be the same in every
# pytest-xdist worker.
BAD_IDS = {
    "not-a-uuid": "not-a-uuid",
    "uppercase": GOOD.upper(),  # sorts below every lowercase id
    "no-dashes": GOOD.replace("-", ""),
    "braces": "{" + GOOD + "}",
    "urn": "urn:uuid:" + GOOD,
    "trailing-space": GOOD + " ",
    "not-hex": GOOD[:-1] + "g",
    "empty": "",
    "uuid-object": uuid.UUID(GOOD),  # a UUID object, not its text
    "int": 5,
}
SOME = ["sqlite", "sqlite+redis+postgres"]
# Every bad id on the cheapest tier set (the check is the same whatever the
# tiers), and one on each other set, to show no record reaches a shared tier.
CASES = [pytest.param("sqlite", bad, id=f"sqlite-{name}") for name, bad in BAD_IDS.items()] + [
    pytest.param(tiers, BAD_IDS["not-a-uuid"], id=f"{tiers}-not-a-uuid") for tiers in SOME if tiers != "sqlite"
]


def _cfg(thread: str, cid: Any = None) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **({"checkpoint_id": cid} if cid else {})}}


def _run_twice(saver: DurableSaver, thread: str) -> Any:
    graph = loop_graph(2).compile(checkpointer=saver)
    graph.invoke({"messages": [], "n": 0}, _cfg(thread))
    graph.invoke({"messages": ["again"], "n": 0}, _cfg(thread))
    return graph.get_state(_cfg(thread))


async def _arun_twice(saver: DurableSaver, thread: str) -> Any:
    graph = loop_graph(2).compile(checkpointer=saver)
    await graph.ainvoke({"messages": [], "n": 0}, _cfg(thread))
    await graph.ainvoke({"messages": ["again"], "n": 0}, _cfg(thread))
    return await graph.aget_state(_cfg(thread))


async def _call(saver: DurableSaver, face: str, method: str, *args: Any, **kwargs: Any) -> Any:
    """`saver.<method>` on the sync face, `saver.a<method>` on the async one;
    a listing read to its end."""
    if face == "sync":
        out = getattr(saver, method)(*args, **kwargs)
        return list(out) if method == "list" else out
    out = getattr(saver, "a" + method)(*args, **kwargs)
    return [t async for t in out] if method == "list" else await out


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize(("tiers", "bad"), CASES)
async def test_a_checkpoint_id_langgraph_never_writes_is_refused_with_nothing_written(
    tiers: str, bad: Any, face: str, make_saver: Any
) -> None:
    """Before: "not-a-uuid" was stored, became the thread's latest (ids
    compare as strings), every later run failed with a bare binascii.Error,
    and after `delete_thread` the marker it left hid every new run."""
    checkpoint = generate_checkpoint() | {"id": bad}
    async with make_saver(tiers) as saver:
        saver.setup()
        before = _footprint(saver)
        with pytest.raises(ConfigError, match="lowercase UUID string") as caught:
            await _call(saver, face, "put", _cfg("t"), checkpoint, generate_metadata(), {})
        assert "put: checkpoint['id']" in str(caught.value)
        # The id is checked as the checkpoint is encoded, after the put took
        # the thread's writer lease (LEASES): no record, in any tier.
        assert _added(before, _footprint(saver), but=LEASES) == []
        await _call(saver, face, "delete_thread", "t")
        state = _run_twice(saver, "t") if face == "sync" else await _arun_twice(saver, "t")
    assert state.values["messages"][-1].startswith("message 1") and state.values["n"] == 2
    assert "again" in state.values["messages"]


def _config_calls(bad: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """(method, args, kwargs) of each call that reads a checkpoint id from a
    config, with `bad` there: both faces make every one."""
    return [
        ("put", (_cfg("t", bad), generate_checkpoint(), generate_metadata(), {}), {}),
        ("put_writes", (_cfg("t", bad), [("ch", 1)], "task"), {}),
        ("get_tuple", (_cfg("t", bad),), {}),
        ("list", (_cfg("t", bad),), {}),
        ("list", (_cfg("t"),), {"before": _cfg("t", bad)}),
        ("list", (_cfg("t"),), {"before": {"checkpoint_id": bad}}),
    ]


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", SOME)
async def test_a_malformed_checkpoint_id_in_a_config_is_refused(tiers: str, face: str, make_saver: Any) -> None:
    """The config's checkpoint_id names a checkpoint: for `put` (the parent),
    `put_writes`, `get_tuple`, `list` and `list(before=)` one that is no
    checkpoint id is a `ConfigError`, not a silent miss, and nothing is
    written. (A get of an id that cannot exist could return None; an error
    says the caller passed something that is not a checkpoint id, typically
    a config built by hand with the wrong field.)"""
    async with make_saver(tiers) as saver:
        saver.setup()
        before = _footprint(saver)
        for method, args, kwargs in _config_calls("not-a-uuid"):
            with pytest.raises(ConfigError, match="is not a checkpoint id"):
                await _call(saver, face, method, *args, **kwargs)
            assert _added(before, _footprint(saver)) == [], (method, kwargs)  # not even a lease


@pytest.mark.parametrize(
    "cid",
    [
        GOOD,  # what LangGraph writes today
        "1ef4f797-8335-6428-8001-8a1503f9b875",  # written by an older LangGraph
        str(uuid.uuid4()),  # what the conformance suite asks for
        "00000000-0000-0000-0000-000000000000",
    ],
    ids=["today", "older-langgraph", "uuid4", "nil"],  # two are made at import, another in each xdist worker
)
def test_every_id_langgraph_writes_is_accepted(cid: str, make_saver: Any) -> None:
    with make_saver("sqlite") as saver:
        config = saver.put(_cfg("t"), generate_checkpoint(checkpoint_id=cid), generate_metadata(), {})
        saver.put_writes(config, [("ch", 1)], "task")
        got = saver.get_tuple(_cfg("t", cid))
        assert got is not None and got.checkpoint["id"] == cid and got.pending_writes == [("task", "ch", 1)]
        assert [t.checkpoint["id"] for t in saver.list(_cfg("t"), before=_cfg("t", "f" * 8 + GOOD[8:]))] == [cid]


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", CONFIGS)
async def test_an_accepted_id_that_sorts_above_every_other_poisons_no_later_run(
    tiers: str, face: str, make_saver: Any
) -> None:
    """The greatest id there is is a valid UUID. Stored, deleted with its
    thread, it leaves a marker above every id LangGraph will ever write:
    before, that marker hid every later run of the thread (`get_state` read
    ``{}``); a checkpoint a tier holds is never hidden by a marker now."""
    top = "ffffffff-ffff-6fff-bfff-ffffffffffff"
    async with make_saver(tiers) as saver:
        if face == "sync":
            saver.put(_cfg("t"), generate_checkpoint(checkpoint_id=top), generate_metadata(), {})
            saver.delete_thread("t")
            state = _run_twice(saver, "t")
            history = list(loop_graph(2).compile(checkpointer=saver).get_state_history(_cfg("t")))
        else:
            await saver.aput(_cfg("t"), generate_checkpoint(checkpoint_id=top), generate_metadata(), {})
            await saver.adelete_thread("t")
            state = await _arun_twice(saver, "t")
            history = [s async for s in loop_graph(2).compile(checkpointer=saver).aget_state_history(_cfg("t"))]
    assert state.values["n"] == 2 and "again" in state.values["messages"]
    assert len(history) == 8  # two runs of four checkpoints each: none hidden


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", ["sqlite+postgres", "sqlite+redis+postgres"])
async def test_a_checkpoint_not_shipped_yet_under_the_greatest_marker_is_served_and_kept(
    tiers: str, face: str, make_saver: Any
) -> None:
    """Write-behind (``write="local"``): a checkpoint written after the
    deletion sits in the local journal until it is shipped. Under a marker
    above every id (the greatest UUID, deleted with its thread) it is a copy
    only the local cache holds: before, the read took it for a deleted one,
    hid it and dropped it from the cache. The journal still owes it, so it
    was written here after the deletion: it is served, and kept."""
    top = "ffffffff-ffff-6fff-bfff-ffffffffffff"
    async with make_saver(tiers, sqlite_name="a.sqlite") as a:
        a.put(_cfg("t"), generate_checkpoint(checkpoint_id=top), generate_metadata(), {})
        a.delete_thread("t")
    async with make_saver(tiers, sqlite_name="b.sqlite", write="local") as b:
        b.setup()
        b._runtime.replicator.stop()  # nothing shipped from here on
        checkpoint = generate_checkpoint(channel_values={"v": 1}, channel_versions={"v": 1})
        if face == "sync":
            config = b.put(_cfg("t"), checkpoint, generate_metadata(), {"v": 1})
            latest = b.get_tuple(_cfg("t"))
            by_id = b.get_tuple(config)
        else:
            config = await b.aput(_cfg("t"), checkpoint, generate_metadata(), {"v": 1})
            latest = await b.aget_tuple(_cfg("t"))
            by_id = await b.aget_tuple(config)
        held = _ids_in_every_tier(b, "t")
    assert latest is not None and latest.checkpoint["id"] == checkpoint["id"]
    assert by_id is not None and by_id.checkpoint["channel_values"] == {"v": 1}
    assert held["sqlite"] == {checkpoint["id"]}
