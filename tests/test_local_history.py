"""History pages under the kept lease come from the local tier alone.

After a run a saver keeps the thread's writer lease (``lease_linger``):
nobody else writes the thread meanwhile, so a page of history made only of
checkpoints this saver wrote under that lease is in its local cache, and
``get_state_history(limit=...)`` needs no round trip to Redis or Postgres.
These tests count the read calls reaching the shared tiers (the real tier
objects, wrapped on the instance) and compare every page with the one a
saver without a local copy reads across the shared tiers. Whenever the
local page cannot be trusted (it reaches past the lease, or one local record
is damaged, missing or replayed) the page is read across the tiers, and the
intact copies there are what is served.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import pytest
from langgraph.graph import StateGraph

from langgraph_durable import DurableSaver

from .conftest import SaverFactory
from .graphs import loop_graph
from .tamper import flip
from .test_local_reads import count_shared_reads

TIERS = "sqlite+redis+postgres"


def page(states: list[Any]) -> list[tuple[Any, ...]]:
    """What a history page shows: ids, parents, step, values, pending writes."""
    return [
        (
            s.config["configurable"]["checkpoint_id"],
            (s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            s.metadata.get("step"),
            s.values.get("n"),
            len(s.values.get("messages", [])),
            tuple(s.next),
            tuple(sorted((t.id, t.name) for t in s.tasks)),
        )
        for s in states
    ]


def history(graph: Any, thread: str, limit: int, before: Any = None) -> list[Any]:
    return list(graph.get_state_history({"configurable": {"thread_id": thread}}, limit=limit, before=before))


def shared_view(make_saver: SaverFactory, graph: StateGraph, thread: str, limit: int, before: Any = None) -> list[Any]:
    """The page as a replica with no local copy of the thread reads it."""
    with make_saver("redis+postgres") as other:
        return page(history(graph.compile(checkpointer=other), thread, limit, before))


def test_history_pages_of_a_runs_own_checkpoints_ask_no_shared_tier(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    builder = loop_graph(8)
    with make_saver(TIERS) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")
        calls = count_shared_reads(saver)
        first = history(graph, thread, 4)
        second = history(graph, thread, 4, before=first[-1].config)
        assert sum(calls.values()) == 0, calls
        # A page reaching past what the run wrote (10 checkpoints) asks the shared tiers.
        whole = history(graph, thread, 20)
        assert sum(calls.values()) > 0
    assert page(first) == shared_view(make_saver, builder, thread, 4)
    assert page(second) == shared_view(make_saver, builder, thread, 4, before=first[-1].config)
    assert [s[2] for s in page(first + second)] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert page(whole) == shared_view(make_saver, builder, thread, 20) and len(whole) == 10


async def test_the_async_face_reads_its_own_history_pages_locally_too(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    builder = loop_graph(6)
    config = {"configurable": {"thread_id": thread}}
    async with make_saver(TIERS) as saver:
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke({"messages": [], "n": 0}, config, durability="sync")
        calls = count_shared_reads(saver, "async")
        first = [s async for s in graph.aget_state_history(config, limit=5)]
        assert sum(calls.values()) == 0, calls
    assert page(first) == shared_view(make_saver, builder, thread, 5)
    assert [s[2] for s in page(first)] == [6, 5, 4, 3, 2]


def test_a_page_reaching_into_another_replicas_run_is_read_across_the_tiers(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    builder = loop_graph(6)
    with make_saver(TIERS, sqlite_name="b.sqlite", lease_linger=0) as b:
        builder.compile(checkpointer=b).invoke({"messages": [], "n": 0}, config, durability="sync")
        b_ids = {
            s.config["configurable"]["checkpoint_id"] for s in history(builder.compile(checkpointer=b), thread, 20)
        }
    more = loop_graph(9)
    with make_saver(TIERS, sqlite_name="a.sqlite") as a:
        graph = more.compile(checkpointer=a)
        graph.invoke({"messages": []}, config, durability="sync")  # three more steps, on another replica
        calls = count_shared_reads(a)
        short = history(graph, thread, 3)
        assert sum(calls.values()) == 0, calls
        long = history(graph, thread, 6)  # a's three, then b's: not a's alone
        assert sum(calls.values()) > 0
    assert page(short) == shared_view(make_saver, more, thread, 3)
    assert page(long) == shared_view(make_saver, more, thread, 6)
    ids = [s.config["configurable"]["checkpoint_id"] for s in long]
    mine = len([i for i in ids if i not in b_ids])
    assert 3 < mine < 6 and not set(ids[:mine]) & b_ids and set(ids[mine:]) <= b_ids  # a's, then b's


def spoil_local_checkpoint(path: str, thread: str, checkpoint_id: str, how: str) -> None:
    """One local record of the page: damaged (a bit flipped), missing (its
    row deleted), or replayed (an older checkpoint's record in its place)."""
    with sqlite3.connect(path) as conn:
        where = "thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?"
        (record,) = conn.execute(
            f"SELECT record FROM lgd_checkpoints WHERE {where}", (thread, checkpoint_id)
        ).fetchone()
        if how == "damaged":
            conn.execute(
                f"UPDATE lgd_checkpoints SET record = ? WHERE {where}",
                (flip(bytes(record), len(record) // 2, 0x04), thread, checkpoint_id),
            )
        elif how == "missing":
            conn.execute(f"DELETE FROM lgd_checkpoints WHERE {where}", (thread, checkpoint_id))
        else:
            (older,) = conn.execute(
                "SELECT record FROM lgd_checkpoints WHERE thread_id = ? AND checkpoint_id < ? "
                "ORDER BY checkpoint_id LIMIT 1",
                (thread, checkpoint_id),
            ).fetchone()
            conn.execute(f"UPDATE lgd_checkpoints SET record = ? WHERE {where}", (older, thread, checkpoint_id))


@pytest.mark.parametrize("how", ["damaged", "missing", "replayed"])
def test_a_spoiled_local_record_in_the_page_gives_way_to_the_intact_copies(make_saver: SaverFactory, how: str) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    builder = loop_graph(7)
    with make_saver(TIERS) as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config, durability="sync")
        expected = page(history(graph, thread, 5))  # read locally, before anything is spoiled
        spoil_local_checkpoint(str(saver.sqlite_path), thread, expected[2][0], how)
        calls = count_shared_reads(saver)
        served = history(graph, thread, 5)
        assert sum(calls.values()) > 0  # the local page was not trusted
        assert page(served) == expected
        latest = graph.get_state(config)
        assert latest.values["n"] == 7 and len(latest.values["messages"]) == 7
        # The page was served from the intact copies; the spoiled one is found and replaced.
        bad = [(b.tier, b.kind, b.key) for b in saver.verify(thread).bad]
        spoiled = [] if how == "missing" else [("sqlite", "checkpoint", f"checkpoint {expected[2][0]}")]
        assert bad == spoiled
        saver.repair(thread)
        assert saver.verify(thread).bad == []
        assert page(history(graph, thread, 5)) == expected
    assert expected == shared_view(make_saver, builder, thread, 5)


def test_a_page_is_read_across_the_tiers_once_the_lease_is_given_back(make_saver: SaverFactory) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    builder = loop_graph(5)
    saver: DurableSaver
    with make_saver(TIERS, lease_linger=0) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")
        calls = count_shared_reads(saver)
        served = history(graph, thread, 3)
        assert sum(calls.values()) > 0
    assert page(served) == shared_view(make_saver, builder, thread, 3)
