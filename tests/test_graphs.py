"""Real compiled graphs on DurableSaver give exactly what InMemorySaver gives:
every tier configuration, sync and async, every durability mode."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from .conftest import CONFIGS
from .graphs import arun_scenarios, run_scenarios

DURABILITIES = ["sync", "async", "exit"]


def _compare(expected: dict[str, Any], actual: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key] == expected[key], f"{key} differs from InMemorySaver"


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("tiers", CONFIGS)
def test_graphs_sync(make_saver: Any, tiers: str, durability: str) -> None:
    expected = run_scenarios(InMemorySaver(), durability)
    assert expected["loop.history"], "the reference run left no history"
    with make_saver(tiers) as saver:
        actual = run_scenarios(saver, durability)
    _compare(expected, actual)


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("tiers", CONFIGS)
async def test_graphs_async(make_saver: Any, tiers: str, durability: str) -> None:
    expected = await arun_scenarios(InMemorySaver(), durability)
    async with make_saver(tiers) as saver:
        actual = await arun_scenarios(saver, durability)
    _compare(expected, actual)


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
async def test_one_object_serves_both_faces(make_saver: Any, tiers: str) -> None:
    """A thread started with invoke continues with ainvoke on the same saver."""
    from .graphs import loop_graph

    async with make_saver(tiers) as saver:
        g = loop_graph(3).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "both"}}
        first = g.invoke({"messages": [], "n": 0}, cfg)
        second = await g.ainvoke({"messages": ["again"], "n": 0}, cfg)
        assert len(second["messages"]) == len(first["messages"]) + 1 + 3
        assert [s.metadata["step"] async for s in g.aget_state_history(cfg)] == [
            s.metadata["step"] for s in g.get_state_history(cfg)
        ]
