"""One memory budget (`memory_budget=`) bounds every memo a saver keeps per
thread: after serving many more threads than fit, each memo holds no more
than its share (by its own estimate, not RSS), the newest threads are the
ones remembered, and every thread, forgotten or not, still reads back and
resumes exactly as it was written."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import ConfigError, DurableSaver, Memory
from langgraph_durable.engine.leases.book import LeaseBook
from langgraph_durable.model.carried import SeenVersions
from langgraph_durable.model.deltas import DeltaMemo, Last, Remember
from langgraph_durable.model.lease import Lease
from langgraph_durable.model.memory_budget import DEFAULT_MEMORY_BUDGET, MIN_MEMORY_BUDGET, SHARES, MemoryBudget
from langgraph_durable.model.own_heads import OwnHeads

from .graphs import loop_graph
from .waiting import await_until

# --- the memos alone, no services ------------------------------------------------------


def test_the_shares_add_up_to_the_budget_and_bad_budgets_are_refused() -> None:
    assert sum(SHARES.values()) == pytest.approx(1.0)
    budget = MemoryBudget.of()
    parts = [budget.read_cache, budget.deltas, budget.outbox, budget.own_heads, budget.seen, budget.kept_leases]
    assert budget.total == DEFAULT_MEMORY_BUDGET and sum(parts) <= DEFAULT_MEMORY_BUDGET
    assert MemoryBudget.of(8 * 1024 * 1024, read_cache=0).read_cache == 0
    for bad in (0, MIN_MEMORY_BUDGET - 1, 1.5e9, "64MB", True, None):
        with pytest.raises(ConfigError, match=r"Memory\(budget=\) must be a whole number of bytes"):
            DurableSaver(sqlite=":memory:", memory=Memory(budget=bad))


def test_own_heads_stay_within_their_bytes_and_forget_the_least_recently_written() -> None:
    own = OwnHeads(max_age=15.0, max_bytes=20_000)
    for i in range(1000):
        for step in range(6):  # a 5-step run: six checkpoints, each with a write
            own.writes(f"thread-{i}", "", 1, f"c{step}", {(f"task-{step}", 0)}, now=float(i))
            own.put(f"thread-{i}", "", 1, f"c{step}", now=float(i))
    usage = own.usage()
    assert 0 < usage["heads_bytes"] <= 20_000 and usage["early_bytes"] <= 20_000 // 8
    assert 1 < usage["heads"] < 1000
    assert own.current("thread-999", "", 1, now=999.0) == ("c5", frozenset({("task-5", 0)}))
    assert own.current("thread-0", "", 1, now=0.0) is None  # forgotten: the reader asks the tiers
    # Forgetting by hand counts the bytes out again.
    own.forget(None)
    assert own.usage() == {"heads": 0, "heads_bytes": 0, "early": 0, "early_bytes": 0}


def test_own_heads_count_writes_kept_aside_for_a_put_still_to_come() -> None:
    own = OwnHeads(max_age=15.0, max_bytes=8_000)
    for i in range(1000):  # writes whose checkpoint's put never comes
        own.writes(f"thread-{i}", "", 1, f"c{i}", {("task", 0), ("task", 1)}, now=0.0)
    usage = own.usage()
    assert 0 < usage["early_bytes"] <= 1_000 and usage["early"] < 1000


def test_seen_versions_stay_within_their_bytes() -> None:
    seen = SeenVersions(max_bytes=10_000)
    for i in range(1000):
        seen.note(f"thread-{i}", "", "c1", {"messages": f"{i:032}.0.5", "n": f"{i:032}.0.6"})
    assert 0 < seen.size <= 10_000 and 1 < seen.entries < 1000
    assert seen.get("thread-999", "", "c1") == {"messages": f"{999:032}.0.5", "n": f"{999:032}.0.6"}
    assert seen.get("thread-0", "", "c1") is None
    seen.forget()
    assert seen.size == 0


def test_the_delta_memo_counts_ids_and_overheads_not_only_element_bytes() -> None:
    memo = DeltaMemo(max_bytes=50_000)
    for i in range(1000):  # tiny lists: their element bytes alone would never reach the bound
        memo.remember(Remember(f"thread-{i}", "", "c1", {"messages": Last("v1", b"x", 1, ("v1",))}))
    assert 0 < memo.size <= 50_000 and 1 < memo.entries < 1000
    assert memo.base_for("thread-999", "", "c1") and memo.base_for("thread-0", "", "c1") == {}
    memo.remember(Remember("huge", "", "c1", {"messages": Last("v1", b"x" * 60_000, 1, ("v1",))}))
    assert memo.base_for("huge", "", "c1") == {} and memo.size <= 50_000  # larger than the bound: not kept


def test_kept_leases_and_hand_offs_stay_within_their_bytes() -> None:
    book = LeaseBook(linger=10.0, max_kept_bytes=20_000)
    for i in range(1000):
        lease = Lease(f"thread-{i}", book.holder, 1, 100.0, tier="postgres")
        assert book.keep(lease, until=50.0)
        book.hand_off_later(lease, now=0.0)
    usage = book.usage()
    assert 0 < usage["kept_bytes"] <= 10_000 and 1 < usage["kept"] < 1000
    assert 0 < usage["handoff_bytes"] <= 10_000 and 1 < usage["handoffs"] < 1000
    assert book.kept("thread-999", now=1.0) is not None and book.kept("thread-0", now=1.0) is None
    assert len(book.handoffs(now=1.0)) == usage["handoffs"]
    book.drop_all()
    assert book.usage()["kept_bytes"] == 0


# --- a saver on every tier, through both faces -----------------------------------------

BUDGET = MIN_MEMORY_BUDGET  # 1 MiB: a few dozen threads fill the smaller shares
THREADS = 120


def _within(saver: DurableSaver) -> dict[str, int]:
    """Each memo's estimated bytes, checked against its share of the budget."""
    budget = MemoryBudget.of(BUDGET)
    own = saver._runtime.own.usage()
    kept = saver._runtime.leases.usage()
    assert saver._runtime.deltas is not None and saver._runtime.read_cache is not None
    held = {
        "deltas": saver._runtime.deltas.size,
        "seen": saver._runtime.seen.size,
        "own_heads": own["heads_bytes"],
        "read_cache": saver._runtime.read_cache.size,
        "kept_leases": kept["kept_bytes"] + kept["handoff_bytes"],
    }
    for name, size in held.items():
        assert size <= getattr(budget, name), (name, size, getattr(budget, name))
    assert own["early_bytes"] <= budget.own_heads // 8
    assert kept["runs"] == 0  # every run ended and gave its lease back
    return held


async def _runs_ended(saver: DurableSaver) -> None:
    """Every run has ended for the saver: an async run's end is seen by a
    task right after `ainvoke` returns, not before."""
    await await_until(lambda: saver._runtime.leases.usage()["runs"] == 0, "every run's end")


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_saver_serving_many_threads_stays_within_its_budget_and_reads_every_thread_right(
    make_saver: Any, face: str
) -> None:
    graph_of = loop_graph(5, message_bytes=200)
    ref = graph_of.compile(checkpointer=InMemorySaver())
    async with make_saver("sqlite+redis+postgres", memory_budget=BUDGET) as saver:
        graph = graph_of.compile(checkpointer=saver)

        async def run(thread: str, values: Any) -> Any:
            cfg = {"configurable": {"thread_id": thread}}
            ref.invoke(values, cfg)
            if face == "sync":
                return graph.invoke(values, cfg)
            return await graph.ainvoke(values, cfg)

        async def state(thread: str) -> Any:
            cfg = {"configurable": {"thread_id": thread}}
            if face == "sync":
                return graph.get_state(cfg).values
            return (await graph.aget_state(cfg)).values

        for i in range(THREADS):
            await run(f"t{i}", {"messages": [], "n": 0})
        await _runs_ended(saver)
        held = _within(saver)
        # More threads than fit were served: the memos forgot the oldest.
        assert saver._runtime.own.usage()["heads"] < THREADS and saver._runtime.seen.entries < 6 * THREADS
        # The memos the tiers use are the saver's budgeted ones (both faces share them).
        assert held["deltas"] > 0 and held["seen"] > 0 and held["own_heads"] > 0
        assert saver._runtime.deltas.entries < THREADS
        assert saver._runtime.deltas.base_for("t0", "", None) == {}
        # Every thread reads back as written, forgotten or not ...
        for i in (0, 1, THREADS // 2, THREADS - 1):
            cfg = {"configurable": {"thread_id": f"t{i}"}}
            assert await state(f"t{i}") == ref.get_state(cfg).values
        # ... and a forgotten thread resumes where it was, its lists whole.
        out = await run("t0", {"messages": ["more"], "n": 0})
        assert out == ref.get_state({"configurable": {"thread_id": "t0"}}).values
        assert len(out["messages"]) == 11 and out["n"] == 5
        await _runs_ended(saver)
        _within(saver)
