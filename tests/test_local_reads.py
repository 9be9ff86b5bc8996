"""Reads under the writer lease come from the local tier alone.

While a saver's run holds a thread's lease nobody else can write the thread,
so what the saver wrote last (and its local tier took) is the thread's
latest state: reading it needs no round trip to Redis or Postgres. These
tests watch the shared tiers' read calls (counting them on the real tier
objects) and check what is served against what was written; the fast path
must give way to the usual read whenever it cannot be trusted (the lease is
gone, the local copy is damaged or behind).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import StateGraph

from langgraph_durable import DurableSaver

from .conftest import SaverFactory
from .graphs import looping
from .tamper import flip

READS = ("head", "read_checkpoint", "read_blobs", "read_writes", "list_checkpoints", "list_page")


def count_shared_reads(saver: DurableSaver, face: str = "sync") -> Counter[str]:
    """Count the read calls that reach the shared tiers (the real tier
    objects, wrapped on the instance: the calls still go to the servers)."""
    calls: Counter[str] = Counter()
    chain: Any = saver._sync_chain() if face == "sync" else saver._async_chain()
    for tier in chain.raw_shared:
        for name in READS:
            original = getattr(tier, name)
            if face == "sync":

                def counted(*a: Any, _f: Any = original, _n: str = f"{tier.name}.{name}", **k: Any) -> Any:
                    calls[_n] += 1
                    return _f(*a, **k)
            else:

                async def counted(*a: Any, _f: Any = original, _n: str = f"{tier.name}.{name}", **k: Any) -> Any:
                    calls[_n] += 1
                    return await _f(*a, **k)

            setattr(tier, name, counted)
    return calls


def damage_newest_local_value(path: str | Path, thread: str, channel: str) -> tuple[str, bytes]:
    """Flip a bit in the local SQLite copy of `channel`'s newest value; its
    version and intact record."""
    with sqlite3.connect(path) as conn:
        version, record = conn.execute(
            "SELECT version, record FROM lgd_blobs WHERE thread_id = ? AND channel = ? ORDER BY version DESC LIMIT 1",
            (thread, channel),
        ).fetchone()
        conn.execute(
            "UPDATE lgd_blobs SET record = ? WHERE thread_id = ? AND channel = ? AND version = ?",
            (flip(bytes(record), len(record) - 1, 0x01), thread, channel, version),
        )
    return version, bytes(record)


def reading_graph(saver: DurableSaver, thread: str, seen: list[Any], calls: Counter[str], steps: int) -> StateGraph:
    """Each step reads the thread's latest checkpoint through the saver, as
    app code (or a tool) running inside the graph would."""

    def step(state: dict[str, Any]) -> dict[str, Any]:
        before = sum(calls.values())
        tup = saver.get_tuple({"configurable": {"thread_id": thread}})
        seen.append((state["n"], tup.checkpoint["channel_values"] if tup else None, sum(calls.values()) - before))
        return {"messages": [f"m{state['n']}"], "n": state["n"] + 1}

    return looping(step, steps)


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "sqlite+postgres", "sqlite+redis"])
def test_a_run_reads_its_own_latest_state_without_asking_the_shared_tiers(make_saver: SaverFactory, tiers: str) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    # The lease given back when the run ends (not kept: see test_lease_linger.py).
    with make_saver(tiers, lease_linger=0) as saver:
        saver.setup()
        calls = count_shared_reads(saver)
        seen: list[Any] = []
        graph = reading_graph(saver, thread, seen, calls, 6).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")
        assert len(seen) == 6
        for n, values, shared_reads in seen:
            # The newest checkpoint is the one this step started from.
            assert values is not None and values["n"] == n and len(values["messages"]) == n
            assert shared_reads == 0
        # Once the run has ended (its lease given back), reads ask every tier again.
        before = sum(calls.values())
        assert saver.get_tuple({"configurable": {"thread_id": thread}}) is not None
        assert sum(calls.values()) > before


async def test_the_async_face_reads_its_own_latest_state_locally_too(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    async with make_saver("sqlite+redis+postgres") as saver:
        await saver.asetup()
        calls = count_shared_reads(saver, "async")
        seen: list[Any] = []

        async def step(state: dict[str, Any]) -> dict[str, Any]:
            before = sum(calls.values())
            tup = await saver.aget_tuple({"configurable": {"thread_id": thread}})
            seen.append(
                (state["n"], tup.checkpoint["channel_values"]["n"] if tup else None, sum(calls.values()) - before)
            )
            return {"messages": ["m"], "n": state["n"] + 1}

        g = looping(step, 4)
        config = {"configurable": {"thread_id": thread}}
        await g.compile(checkpointer=saver).ainvoke({"messages": [], "n": 0}, config, durability="sync")
        assert [(n, latest, reads) for n, latest, reads in seen] == [(n, n, 0) for n in range(4)]


def test_after_the_run_another_replicas_newer_checkpoint_is_served(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    seen: list[Any] = []
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a:
        a.setup()
        reading_graph(a, thread, seen, Counter(), 3).compile(checkpointer=a).invoke({"messages": [], "n": 0}, config)
        with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            reading_graph(b, thread, [], Counter(), 5).compile(checkpointer=b).invoke({"messages": [], "n": 3}, config)
            newest = b.get_tuple(config)
        tup = a.get_tuple(config)
        assert tup is not None and newest is not None
        assert tup.checkpoint["id"] == newest.checkpoint["id"] and tup.checkpoint["channel_values"]["n"] == 5


def test_a_damaged_local_copy_under_the_lease_is_read_around_and_repaired(make_saver: SaverFactory) -> None:
    """A step damages the local copy of the newest channel value, then reads:
    the fast path sees the bad copy, gives way, and the usual read serves the
    intact copy from a shared tier, reports the bad one and repairs it."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    events: list[Any] = []
    with make_saver("sqlite+redis+postgres", on_corruption=events.append) as saver:
        saver.setup()
        path = saver.sqlite_path or ""
        served: list[Any] = []

        def step(state: dict[str, Any]) -> dict[str, Any]:
            if state["n"] == 2:
                damage_newest_local_value(path, thread, "n")
                tup = saver.get_tuple({"configurable": {"thread_id": thread}})
                served.append(tup.checkpoint["channel_values"]["n"] if tup else None)
            return {"messages": ["m"], "n": state["n"] + 1}

        g = looping(step, 4)
        config = {"configurable": {"thread_id": thread}}
        out = g.compile(checkpointer=saver).invoke({"messages": [], "n": 0}, config, durability="sync")
        assert saver.verify(thread).bad == []  # the damaged local copy was replaced
    assert served == [2]
    assert out == {"messages": ["m"] * 4, "n": 4}
    assert [(e.tier, e.kind) for e in events] == [("sqlite", "blob")]
    assert events[0].served_instead.startswith("intact copy from")


def test_own_heads_are_trusted_only_under_the_same_lease_and_while_it_is_fresh() -> None:
    from langgraph_durable.model.own_heads import OwnHeads

    own = OwnHeads(max_age=15.0)
    assert own.current("t", "", 7, now=0.0) is None
    own.put("t", "", 7, "c1", now=0.0)
    own.writes("t", "", 7, "c1", {("task", 0)}, now=10.0)
    own.writes("t", "", 7, "c0", {("old", 0)}, now=11.0)  # an older checkpoint's writes: not the head's
    assert own.current("t", "", 7, now=20.0) == ("c1", frozenset({("task", 0)}))
    assert own.current("t", "", 8, now=20.0) is None  # another lease (a new run, or a takeover)
    assert own.current("t", "", None, now=20.0) is None  # no lease held
    assert own.current("t", "", 7, now=26.0) is None  # too long since the lease was last renewed
    own.writes("t", "", 8, "c1", {("x", 1)}, now=26.0)  # under another token: ignored
    assert own.current("t", "", 7, now=26.0) is None
    own.put("t", "child", 7, "k1", now=30.0)
    own.forget("t")
    assert own.current("t", "child", 7, now=30.0) is None
