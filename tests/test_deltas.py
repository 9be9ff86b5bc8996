"""Growing lists stored as pieces (`langgraph_durable.model.deltas`).

Pure tests of the decisions first, then real compiled graphs on real tiers:
every state a thread went through reads back exactly as LangGraph's stock
InMemorySaver holds it, while the bytes stored shrink; a piece damaged in
one tier is served from another, damaged everywhere makes its checkpoint
(and only the ones built on it) fall back to the newest intact ancestor;
prune, copy_thread and a restart keep every piece a surviving checkpoint
needs.
"""

from __future__ import annotations

import operator
import sqlite3
import uuid
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_durable import DurableSaver, Memory
from langgraph_durable.model.deltas import (
    DELTA_TAG,
    DeltaMemo,
    Last,
    Piece,
    Remember,
    _entry_size,
    array_header,
    plan,
    rebuild,
)
from langgraph_durable.model.records import BadRecord, BlobRow

from .conftest import CONFIGS, REDIS_URL, SaverFactory
from .graphs import loop_graph
from .tamper import BLOB, Rec, flip, open_stores

# --- the decisions, without services ------------------------------------------------


def packed(items: list[Any]) -> bytes:
    return ormsgpack.packb(items)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 65535, 65536, 70000])
def test_array_header_reads_every_msgpack_array_size(n: int) -> None:
    payload = packed(list(range(n)))
    assert array_header(payload) == (n, 1 if n < 16 else 3 if n < 65536 else 5)


def test_array_header_refuses_what_is_not_a_list() -> None:
    assert array_header(packed({"a": 1})) is None
    assert array_header(packed("text")) is None
    assert array_header(b"") is None


def test_a_list_that_extends_the_last_one_becomes_a_piece_and_rebuilds_byte_for_byte() -> None:
    first = packed([1, 2])
    piece, last = plan(None, "v1", "msgpack", first, every=4)
    assert piece is None and last == Last("v1", first[1:], 2, ("v1",))
    second = packed([1, 2, "three"])
    piece, last2 = plan(last, "v2", "msgpack", second, every=4)
    assert piece == Piece(("v1",), 3, second[1:][len(first[1:]) :])
    assert last2 is not None and last2.chain == ("v1", "v2")
    assert rebuild(first, [piece]) == second
    # Crossing 16 elements changes the header: still the same list.
    items = list(range(20))
    piece3, _ = plan(last2, "v3", "msgpack", packed([1, 2, "three", *items]), every=4)
    assert piece3 is not None
    assert ormsgpack.unpackb(rebuild(first, [piece, piece3])) == [1, 2, "three", *items]


def test_anything_but_a_pure_extension_is_stored_whole() -> None:
    _, last = plan(None, "v1", "msgpack", packed([{"a": 1}, "b"]), every=4)
    changed = plan(last, "v2", "msgpack", packed([{"a": 2}, "b", "c"]), every=4)  # element changed in place
    shorter = plan(last, "v2", "msgpack", packed([{"a": 1}]), every=4)
    other_type = plan(last, "v2", "msgpack", packed({"a": 1}), every=4)
    pickled = plan(last, "v2", "pickle", b"whatever", every=4)
    assert changed[0] is None and changed[1] is not None and changed[1].chain == ("v2",)
    assert shorter[0] is None
    assert other_type == (None, None) and pickled == (None, None)


def test_a_whole_copy_comes_every_n_versions() -> None:
    last = None
    kinds = []
    for i in range(1, 10):
        piece, last = plan(last, f"v{i}", "msgpack", packed(list(range(i))), every=3)
        kinds.append("piece" if piece else "whole")
    assert kinds == ["whole", "piece", "piece", "whole", "piece", "piece", "whole", "piece", "piece"]


def test_rebuild_refuses_pieces_that_do_not_continue_each_other() -> None:
    a = Piece(("v1",), 3, packed([3])[1:])
    stray = Piece(("v0", "v9"), 4, packed([4])[1:])
    with pytest.raises(BadRecord):
        rebuild(packed([1, 2]), [a, stray])
    with pytest.raises(BadRecord):
        rebuild(packed({"not": "a list"}), [a])
    with pytest.raises(BadRecord):  # a count that goes backwards
        rebuild(packed([1, 2, 3, 4]), [Piece(("v1",), 2, b"")])


def test_the_memo_bases_pieces_only_on_the_parent_it_stored_and_stays_bounded() -> None:
    first = Remember("t", "", "c1", {"m": Last("v1", b"x" * 60, 1, ("v1",))})
    memo = DeltaMemo(max_bytes=_entry_size(first) * 3 // 2, every=4)  # room for one entry
    memo.remember(first)
    assert memo.base_for("t", "", "c1")
    assert memo.base_for("t", "", "c0") == {} and memo.base_for("t", "", None) == {}
    memo.remember(Remember("u", "", "c1", {"m": Last("v1", b"y" * 60, 1, ("v1",))}))
    assert memo.base_for("t", "", "c1") == {}  # the least recently stored went
    memo.forget("u")
    assert memo.base_for("u", "", "c1") == {}


# --- real graphs on real tiers -------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    log: Annotated[list[dict[str, Any]], operator.add]
    n: int


def chat_graph(steps: int, *, edit_at: int | None = None) -> StateGraph:
    """add_messages and operator.add lists growing every step; at `edit_at`
    the first message is replaced (same id), so that step's list is no
    extension of the previous one."""

    def step(state: Chat) -> dict[str, Any]:
        n = state.get("n", 0)
        update: dict[str, Any] = {
            "messages": [AIMessage(content=f"answer {n}: " + "y" * 200, id=f"a{n}")],
            "log": [{"step": n, "note": "z" * 100}],
            "n": n + 1,
        }
        if n == edit_at:
            first = state["messages"][0]
            update["messages"].append(HumanMessage(content="edited: " + str(first.content), id=first.id))
        return update

    g = StateGraph(Chat)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return g


def run_both(saver: Any, builder: StateGraph, thread: str, steps: int) -> tuple[Any, Any]:
    config = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    ours = builder.compile(checkpointer=saver)
    ref = builder.compile(checkpointer=InMemorySaver())
    start = {"messages": [HumanMessage(content="hello", id="h0")], "log": [], "n": 0}
    ours.invoke(start, config)
    ref.invoke(start, config)
    return ours, ref


def histories(graph: Any, thread: str) -> list[tuple[Any, Any]]:
    return [(s.values, s.next) for s in graph.get_state_history({"configurable": {"thread_id": thread}})]


def blob_bytes(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT coalesce(sum(length(record)), 0) FROM lgd_blobs").fetchone()[0])


@pytest.mark.parametrize("tiers", CONFIGS)
def test_every_state_of_a_growing_thread_reads_back_as_the_stock_saver_holds_it(
    make_saver: SaverFactory, tiers: str
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with make_saver(tiers, list_snapshot_every=4) as saver:
        saver.setup()
        ours, ref = run_both(saver, chat_graph(14, edit_at=6), thread, 14)
        assert histories(ours, thread) == histories(ref, thread)
        pieces = stored_kinds(saver, thread)
        assert pieces["messages"]["piece"] and pieces["log"]["piece"]
    # A new saver (a restart) reads the same, and goes on writing.
    with make_saver(tiers, list_snapshot_every=4) as again:
        graph = chat_graph(18).compile(checkpointer=again)
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 30}
        graph.invoke(None, config)
        chat_graph(18).compile(checkpointer=ref.checkpointer).invoke(None, config)
        assert histories(graph, thread) == histories(ref, thread)


def stored_kinds(saver: DurableSaver, thread: str) -> dict[str, dict[str, int]]:
    """Per channel, how many of the nearest tier's blobs are pieces / whole."""
    stores = open_stores(saver, REDIS_URL)
    store = stores[0]
    try:
        counts: dict[str, dict[str, int]] = {}
        tup = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert tup is not None
        for state in saver.list({"configurable": {"thread_id": thread}}):
            for channel, version in state.checkpoint["channel_versions"].items():
                held = store.get(thread, Rec(BLOB, "", (channel, str(version))))
                if held is None or held.envelope is None:
                    continue
                kind = "piece" if is_piece(saver, thread, channel, str(version), held.envelope) else "whole"
                counts.setdefault(channel, {"piece": 0, "whole": 0})[kind] += 1
        return counts
    finally:
        for each in stores:
            each.close()


def is_piece(saver: DurableSaver, thread: str, channel: str, version: str, envelope: bytes) -> bool:
    row = BlobRow(thread, "", channel, version, envelope)
    return saver._codec.open_blob(row, decode=False)[0] == DELTA_TAG


def test_growing_lists_take_a_fraction_of_the_bytes_and_a_bounded_number_of_records(make_saver: SaverFactory) -> None:
    thread = "t-bytes"
    with make_saver("sqlite", sqlite_name="whole.sqlite", list_snapshot_every=1) as whole:
        run_both(whole, loop_graph(100, message_bytes=400), thread, 100)
        full = blob_bytes(whole.sqlite_path or "")
    with make_saver("sqlite", sqlite_name="pieces.sqlite") as saver:
        ours, ref = run_both(saver, loop_graph(100, message_bytes=400), thread, 100)
        assert histories(ours, thread) == histories(ref, thread)
        stored = blob_bytes(saver.sqlite_path or "")
        piece = latest_piece(saver, thread)
    assert len(piece.base) < 16  # a read touches at most 16 records
    assert stored < 0.2 * full, (stored, full)


def test_a_piece_damaged_in_one_tier_is_served_from_another_and_repaired(make_saver: SaverFactory) -> None:
    thread = "t-one-tier"
    with make_saver("sqlite+redis+postgres", list_snapshot_every=32) as saver:
        saver.setup()
        ours, ref = run_both(saver, loop_graph(10), thread, 10)
        expected = histories(ref, thread)
        base = latest_piece(saver, thread).base
        stores = open_stores(saver, REDIS_URL)
        try:
            for store in stores:  # each tier in turn; the others stay intact
                rec = Rec(BLOB, "", ("messages", base[1]))
                original = store.get(thread, rec)
                assert original is not None
                store.put_raw(thread, rec, flip(original.raw, len(original.raw) - 3, 0x40), original)
                assert histories(ours, thread) == expected
                if store is not stores[0]:  # reads never reach it (the local copy is intact): repair does
                    assert [c.tier for c in saver.repair(thread).restored] == [saver.tier_names[stores.index(store)]]
                assert store.get(thread, rec) == original
        finally:
            for store in stores:
                store.close()


def latest_piece(saver: DurableSaver, thread: str) -> Piece:
    tup = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert tup is not None
    version = str(tup.checkpoint["channel_versions"]["messages"])
    stores = open_stores(saver, REDIS_URL)
    try:
        held = stores[0].get(thread, Rec(BLOB, "", ("messages", version)))
    finally:
        for store in stores:
            store.close()
    assert held is not None and held.envelope is not None
    piece = saver._codec.decode_blob(BlobRow(thread, "", "messages", version, held.envelope))
    assert isinstance(piece, Piece) and len(piece.base) >= 3, piece
    return piece


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_a_piece_damaged_everywhere_falls_back_to_the_newest_checkpoint_not_built_on_it(
    make_saver: SaverFactory, tiers: str
) -> None:
    thread = "t-everywhere"
    with make_saver(tiers, list_snapshot_every=32) as saver:
        saver.setup()
        _, ref = run_both(saver, loop_graph(10), thread, 10)
        base = latest_piece(saver, thread).base
        damaged = base[2]
        config = {"configurable": {"thread_id": thread}}
        latest_id = saver.get_tuple(config).checkpoint["id"]  # type: ignore[union-attr]
        # The newest checkpoint whose messages are not built on the damaged piece.
        survivor = next(
            t for t in saver.list(config) if str(t.checkpoint["channel_versions"].get("messages")) in base[:2]
        )
        stores = open_stores(saver, REDIS_URL)
        try:
            for store in stores:
                rec = Rec(BLOB, "", ("messages", damaged))
                original = store.get(thread, rec)
                assert original is not None
                store.put_raw(thread, rec, flip(original.raw, len(original.raw) - 3, 0x40), original)
        finally:
            for store in stores:
                store.close()
        # The saver that wrote the newest list rebuilds it from what it
        # remembers storing: the damaged piece is not needed for it.
        newest = saver.get_tuple(config)
        assert newest is not None and newest.checkpoint["id"] == latest_id
        assert newest.checkpoint["channel_values"]["messages"] == ref.get_state(config).values["messages"]
    # Any other saver (another replica, a restart) rebuilds from the records.
    with make_saver(tiers, list_snapshot_every=32) as other:
        tup = other.get_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == survivor.checkpoint["id"]
        assert tup.checkpoint["channel_values"] == survivor.checkpoint["channel_values"]
        # Exactly what the stock saver holds for that step.
        same = next(s for s in ref.get_state_history(config) if s.metadata["step"] == tup.metadata["step"])
        held = ref.checkpointer.get_tuple(same.config)
        assert tup.checkpoint["channel_values"] == held.checkpoint["channel_values"]
        assert [w[1:] for w in tup.pending_writes or []] == [w[1:] for w in held.pending_writes or []]


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_prune_and_copy_keep_what_the_kept_lists_are_rebuilt_from(make_saver: SaverFactory, tiers: str) -> None:
    thread = "t-prune"
    with make_saver(tiers, list_snapshot_every=8) as saver:
        saver.setup()
        ours, ref = run_both(saver, loop_graph(12), thread, 12)
        config = {"configurable": {"thread_id": thread}}
        latest = ours.get_state(config).values
        saver.copy_thread(thread, "t-copy")
        saver.prune([thread])
        assert len(list(saver.list(config))) == 1
        assert ours.get_state(config).values == latest
        assert ours.get_state({"configurable": {"thread_id": "t-copy"}}).values == latest
        # The pruned thread goes on, its next lists based on what was kept.
        more = loop_graph(15).compile(checkpointer=saver)
        more.invoke(None, {**config, "recursion_limit": 30})
        loop_graph(15).compile(checkpointer=ref.checkpointer).invoke(None, {**config, "recursion_limit": 30})
        assert more.get_state(config).values == ref.get_state(config).values


def test_whole_copies_only_when_asked(make_saver: SaverFactory) -> None:
    with make_saver("sqlite", list_snapshot_every=1) as saver:
        run_both(saver, loop_graph(6), "t-whole", 6)
        assert stored_kinds(saver, "t-whole")["messages"]["piece"] == 0


@pytest.mark.parametrize("bad", [-1, 2.5, True, "16"])
def test_a_bad_snapshot_cadence_is_a_config_error(bad: Any) -> None:
    from langgraph_durable import ConfigError

    with pytest.raises(ConfigError, match=r"Memory\(list_snapshot_every=\)"):
        DurableSaver(sqlite=":memory:", memory=Memory(list_snapshot_every=bad))


def test_write_behind_ships_the_pieces_with_what_they_are_rebuilt_from(make_saver: SaverFactory) -> None:
    thread = "t-behind"
    # One key of the user's for every saver: a tier opened alone below cannot
    # reach the store's own key, which Postgres keeps.
    key = "k" * 32
    with make_saver("sqlite+redis+postgres", write="local", list_snapshot_every=4, signing_key=key) as saver:
        saver.setup()
        _, ref = run_both(saver, chat_graph(10), thread, 10)
        saver.drain(30)
        assert saver.lag().records == 0
    for tiers in ("redis", "postgres"):  # each shared tier alone has every piece
        with make_saver(tiers, signing_key=key) as alone:
            graph = chat_graph(10).compile(checkpointer=alone)
            assert histories(graph, thread) == histories(ref, thread)
