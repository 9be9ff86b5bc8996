"""The retention decisions of prune / delete_for_runs, without services."""

from __future__ import annotations

from collections.abc import Mapping

from langgraph_durable.retention import (
    BlobKey,
    Node,
    ReplayPlanner,
    Walk,
    blobs_of,
    delta_channels,
    older_than,
)


def chain(versions: list[dict[str, str]], delta: frozenset[str] = frozenset({"a"})) -> dict[str, Node | None]:
    """c00 <- c01 <- ...: checkpoint i reads channel versions `versions[i]`."""
    return {f"c{i:02}": Node(f"c{i:02}", f"c{i - 1:02}" if i else None, v, delta) for i, v in enumerate(versions)}


def run(planner: ReplayPlanner, start: str, stored: Mapping[BlobKey, bool]) -> tuple[Walk, int]:
    """Drive a walk as the chain does; blobs not in `stored` hold no value."""
    rounds = 0
    while (walk := planner.walk(start)).needs:
        rounds += 1
        planner.learn({key: stored.get(key, False) for key in walk.needs})
    return walk, rounds


def test_walks_back_to_the_nearest_snapshot() -> None:
    nodes = chain([{"a": f"{i}"} for i in range(10)])
    walk, rounds = run(ReplayPlanner(nodes), "c09", {("a", "3"): True, ("a", "6"): False})
    assert walk.checkpoints == ["c09", "c08", "c07", "c06", "c05", "c04", "c03"]
    assert not walk.broken
    assert rounds == 1  # the look-ahead asked for the whole stretch at once


def test_a_stored_value_at_the_start_needs_nothing_older() -> None:
    nodes = chain([{"a": f"{i}"} for i in range(5)])
    walk, _ = run(ReplayPlanner(nodes), "c04", {("a", "4"): True})
    assert walk.checkpoints == ["c04"]


def test_without_delta_channels_only_the_start_is_kept() -> None:
    nodes = chain([{"a": f"{i}"} for i in range(5)], delta=frozenset())
    planner = ReplayPlanner(nodes)
    assert planner.channels == frozenset()
    assert planner.walk("c04") == Walk(["c04"])


def test_channels_seeded_at_different_ancestors() -> None:
    """`b` is stored at c05, `a` at c03: the walk reaches c03, and c03 (kept,
    listed) must rebuild `b` in turn, which is stored at c01."""
    nodes = chain([{"a": f"a{i}", "b": f"b{i}"} for i in range(8)], delta=frozenset({"a", "b"}))
    stored = {("a", "a3"): True, ("b", "b5"): True, ("b", "b1"): True, ("a", "a1"): True}
    walk, _ = run(ReplayPlanner(nodes), "c07", stored)
    assert walk.checkpoints == ["c07", "c06", "c05", "c04", "c03", "c02", "c01"]


def test_a_channel_not_written_yet_keeps_the_walk_going() -> None:
    versions: list[dict[str, str]] = [{"a": "0"}, {}, {}, {"a": "3"}]
    walk, _ = run(ReplayPlanner(chain(versions)), "c03", {("a", "0"): True})
    assert walk.checkpoints == ["c03", "c02", "c01", "c00"]


def test_same_version_is_asked_once() -> None:
    nodes = chain([{"a": "1"}] * 6)
    planner = ReplayPlanner(nodes)
    walk = planner.walk("c05")
    assert walk.needs == {("a", "1")}
    planner.learn({("a", "1"): False})
    assert planner.walk("c05").checkpoints == ["c05", "c04", "c03", "c02", "c01", "c00"]


def test_missing_parent_ends_the_walk_as_it_ends_langgraphs() -> None:
    nodes = chain([{"a": f"{i}"} for i in range(6)])
    del nodes["c02"]
    walk, _ = run(ReplayPlanner(nodes), "c05", {})
    assert walk.checkpoints == ["c05", "c04", "c03"]
    assert not walk.broken


def test_unreadable_ancestor_breaks_the_walk() -> None:
    nodes = chain([{"a": f"{i}"} for i in range(6)])
    nodes["c02"] = None
    walk, _ = run(ReplayPlanner(nodes), "c05", {("a", "0"): True})
    assert walk.checkpoints == ["c05", "c04", "c03", "c02"]
    assert walk.broken
    assert older_than(nodes, walk.checkpoints[-1]) == {"c00", "c01"}


def test_later_walks_stop_where_an_earlier_one_went() -> None:
    nodes = chain([{"a": f"{i}"} for i in range(10)])
    planner = ReplayPlanner(nodes)
    stored = {("a", "2"): True}
    first, _ = run(planner, "c09", stored)
    assert first.checkpoints[-1] == "c02"
    second, _ = run(planner, "c06", stored)
    assert second.checkpoints == ["c06"]  # c05..c02 are already covered


def test_node_and_blob_bookkeeping() -> None:
    node = Node.of(
        "c1",
        "",
        {"channel_versions": {"a": 3, "n": "00002.5"}},
        {"counters_since_delta_snapshot": {"a": [1, 1]}},
    )
    assert node == Node("c1", None, {"a": "3", "n": "00002.5"}, frozenset({"a"}))
    assert Node.of("c0", None, {"channel_versions": {}}, {}).delta_channels == frozenset()
    nodes: dict[str, Node | None] = {"c1": node, "c0": None}
    assert delta_channels(nodes.values()) == frozenset({"a"})
    assert blobs_of(nodes, ["c1", "c0"]) == {("a", "3"), ("n", "00002.5")}
