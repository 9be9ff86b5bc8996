"""The sync face overlaps a run's write to the lease's tier with the local
write after it (`concurrency.Lead`): the local transaction runs while the
lease's tier answers and commits only once it took the write.

What must not change: a write the lease refuses reaches no tier, the local
file included; a slow or failing lease tier neither loses a write nor
holds the local file; the local tier's breaker and metrics count only what
the local tier did.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from langgraph_durable import LeaseLost, TierUnavailable
from langgraph_durable.engine import chain, concurrency
from langgraph_durable.engine.concurrency import Abandoned, Lead
from langgraph_durable.metrics import TierCall
from langgraph_durable.model import breaker
from tests import lease_worker


@pytest.fixture
def leads(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often a local write waited for its lead, and how often it gave up
    (the real `Lead.before_commit`, counted). Every write that may have a
    lead gets one: the hand-off to a worker is taken to cost nothing
    (`breaker.overlap_pays`), and a lead may wait up to 5 s (a test's
    `_wait_for_leads` sets less), so that a slow moment of the machine does
    not make a write go without one."""
    seen = {"waited": 0, "abandoned": 0}
    real = Lead.before_commit
    monkeypatch.setattr(breaker, "THREAD_HOP_S", 0.0)
    monkeypatch.setattr(breaker, "LEAD_HOP_S", 0.0)
    _wait_for_leads(monkeypatch, 5.0)

    def before_commit(self: Lead) -> None:
        seen["waited"] += 1
        try:
            real(self)
        except Abandoned:
            seen["abandoned"] += 1
            raise

    monkeypatch.setattr(concurrency.Lead, "before_commit", before_commit)
    yield seen


def _wait_for_leads(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """`LEAD_WAIT_S`, as the chain (whether to start a lead) and a lead (how
    long to wait at the commit) read it."""
    monkeypatch.setattr(concurrency, "LEAD_WAIT_S", seconds)
    monkeypatch.setattr(chain, "LEAD_WAIT_S", seconds)


def _local_rows(path: str, like: str) -> int:
    """Checkpoints and pending writes in a local file whose records hold `like`."""
    with sqlite3.connect(path) as conn:
        return sum(
            conn.execute(f"SELECT count(*) FROM {table} WHERE instr(record, ?) > 0", (like.encode(),)).fetchone()[0]
            for table in ("lgd_checkpoints", "lgd_writes", "lgd_blobs")
        )


# -- the pieces ----------------------------------------------------------------------------


def test_a_lead_lets_the_commit_through_only_once_its_write_succeeded(monkeypatch: pytest.MonkeyPatch) -> None:
    _wait_for_leads(monkeypatch, 0.05)
    done = Lead(lambda: "taken")
    done.result()
    done.before_commit()  # returns: the local write may commit
    assert done.result() == "taken"
    assert concurrency.take_waited() >= 0.0 and concurrency.take_waited() == 0.0  # taken once

    def refuse() -> None:
        raise LeaseLost("a newer run holds the thread", thread_id="t")

    refused = Lead(refuse)
    with pytest.raises(LeaseLost):
        refused.result()
    with pytest.raises(Abandoned):
        refused.before_commit()

    gate = threading.Event()
    slow = Lead(lambda: gate.wait(30) and "late")
    started = time.monotonic()
    with pytest.raises(Abandoned, match="not answered"):
        slow.before_commit()
    assert time.monotonic() - started < 10  # gave up instead of waiting for the tier
    assert concurrency.take_waited() >= 0.04
    gate.set()
    assert slow.result() == "late"


# -- a refused write ------------------------------------------------------------------------


@pytest.mark.parametrize("tiers", ["sqlite+postgres", "sqlite+redis", "sqlite+redis+postgres"])
def test_a_write_the_lease_refuses_reaches_not_even_the_local_file(
    make_saver: Any, tiers: str, leads: dict[str, int]
) -> None:
    """Replica A's run stalls past its lease; B takes the thread over. A's
    late writes are refused by the lease's tier while A's local transaction
    is open: A's own file keeps none of them."""
    config = {"configurable": {"thread_id": "late-writer"}}
    a = make_saver(tiers, sqlite_name="a.sqlite", lease_ttl=0.5)
    b = make_saver(tiers, sqlite_name="b.sqlite", lease_ttl=5.0, on_busy="wait", lease_wait=20)
    with a, b:
        with lease_worker.stalled_run(a, config) as errors:
            assert lease_worker.counter().compile(checkpointer=b).invoke({"hits": ["B"]}, config)["count"] == 1
            waited_before = leads["waited"]
        assert len(errors) == 1 and isinstance(errors[0], LeaseLost), errors
        # A's late write went through the overlap, and was given up at its commit.
        assert leads["waited"] > waited_before and leads["abandoned"] >= 1
        assert _local_rows(a.sqlite_path, "stale A") == 0
        assert _local_rows(b.sqlite_path, "B") > 0  # what the probe finds when it is there
        assert b.get_tuple(config).checkpoint["channel_values"] == {"count": 1, "hits": ["A", "B"]}
        assert "stale A" not in repr([(t.checkpoint, t.pending_writes) for t in a.list(config)])


# -- a slow lease tier ----------------------------------------------------------------------


def test_a_slow_lease_tier_takes_every_write_and_the_local_file_follows_it(
    make_saver: Any, postgres_proxy: tuple[Any, str], leads: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Postgres (the lease's tier) answers far slower than a local write may
    wait: the local transaction rolls back, the write is retried after the
    lease's tier took it, and nothing is lost. The local tier is not blamed:
    no error or outage in its metrics, its breaker closed."""
    proxy, url = postgres_proxy
    events: list[Any] = []
    steps = 4
    _wait_for_leads(monkeypatch, 0.02)

    def step(state: dict[str, Any]) -> dict[str, Any]:
        count = state.get("count", 0) + 1
        if count == 2:
            proxy.delay = 0.05  # from the next write on, a round trip takes longer than a lead waits
        return {"count": count, "hits": [f"hit {count}"]}

    graph_cls = lease_worker.counter(step)
    config = {"configurable": {"thread_id": "slow-lead"}}
    with make_saver("sqlite+postgres", postgres=url, metrics=events.append) as saver:
        graph = graph_cls.compile(checkpointer=saver)
        for _ in range(steps):
            graph.invoke({"hits": []}, config)
        assert leads["waited"] >= 1 and leads["abandoned"] >= 1
        proxy.delay = 0.0
        values = graph.get_state(config).values
        assert values["count"] == steps and values["hits"] == [f"hit {i}" for i in range(1, steps + 1)]
        # Every checkpoint is in both tiers.
        with sqlite3.connect(saver.sqlite_path) as conn:
            local_ids = {r[0] for r in conn.execute("SELECT checkpoint_id FROM lgd_checkpoints")}
        listed = {t.config["configurable"]["checkpoint_id"] for t in saver.list(config)}
        assert local_ids == listed and len(listed) >= steps * 2
        assert _local_rows(saver.sqlite_path, f"hit {steps}") > 0  # what the probe finds when it is there
        local_calls = [e for e in events if isinstance(e, TierCall) and e.tier == "sqlite"]
        assert local_calls and {e.outcome for e in local_calls} <= {"ok", "miss"}
        health = saver.health()
        assert health.local_write_failures == 0
        assert {t.name: t.breaker.state for t in health.tiers}["sqlite"] == "closed", health


def _keys(query: Any) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """The checkpoints and the pending writes a tier holds, by key."""
    return (
        set(query("SELECT thread_id, checkpoint_ns, checkpoint_id FROM lgd_checkpoints")),
        set(query("SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx FROM lgd_writes")),
    )


def test_a_lease_tier_cut_mid_run_leaves_the_local_file_nothing_it_does_not_hold(
    make_saver: Any, postgres_url: str, postgres_proxy: tuple[Any, str], leads: dict[str, int]
) -> None:
    """Postgres (the only shared tier, the lease's) hangs while a run writes,
    with the local transaction open and waiting for it, then is cut: the run
    fails (no shared tier took its writes), and every checkpoint and pending
    write the local file holds is one Postgres holds too."""
    proxy, url = postgres_proxy
    config = {"configurable": {"thread_id": "cut-lead"}}

    def step(state: dict[str, Any]) -> dict[str, Any]:
        count = state.get("count", 0) + 1
        if count == 2:
            # The writes after this node reach the proxy and go no further;
            # the connections drop half a second later (before a lead gives up).
            proxy.stall()
            threading.Timer(0.5, proxy.cut).start()
        return {"count": count, "hits": [f"cut {count}"]}

    with make_saver("sqlite+postgres", postgres=url, call_timeout=2.0) as saver:
        graph = lease_worker.counter(step).compile(checkpointer=saver)
        graph.invoke({"hits": []}, config)
        waited = leads["waited"]
        with pytest.raises((TierUnavailable, LeaseLost)):
            graph.invoke({"hits": []}, config)
        assert leads["waited"] > waited and leads["abandoned"] >= 1  # a write was under way when the tier went
        with sqlite3.connect(saver.sqlite_path) as conn:
            local = _keys(lambda q: conn.execute(q).fetchall())
    with psycopg.connect(postgres_url) as pg:
        shared = _keys(lambda q: [tuple(r) for r in pg.execute(q).fetchall()])
    assert local[0] and local[1]  # the first run is there
    assert local[0] <= shared[0] and local[1] <= shared[1]


def test_no_lead_where_it_would_cost_more_than_it_saves(
    make_saver: Any, leads: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both writes answer in less than a lead costs: they go one after the
    other, as the async face always writes them."""
    monkeypatch.setattr(breaker, "LEAD_HOP_S", 10.0)
    config = {"configurable": {"thread_id": "no-lead"}}
    with make_saver("sqlite+postgres") as saver:
        graph = lease_worker.counter().compile(checkpointer=saver)
        for _ in range(3):
            graph.invoke({"hits": ["x"]}, config)
        assert graph.get_state(config).values["count"] == 3
    assert leads["waited"] == 0
