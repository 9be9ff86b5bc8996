"""Retention policies (`RetentionPolicy`, `apply_retention`, background
sweeps) on real tiers. Each test would fail if a sweep removed a record a
kept checkpoint needs: it resumes, reads back or time-travels afterwards and
compares with a reference that was never swept."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_durable import ConfigError, LedgerEntry, RetentionPolicy
from langgraph_durable.retention import Node, age

from .graphs import interrupt_graph, loop_graph
from .test_delta import RUNS, _cfg, delta_graph
from .waiting import wait_until

DAY = 86400.0


# -- the policy alone -------------------------------------------------------------------


def _nodes(count: int, *, start: float, every: float) -> dict[str, Node | None]:
    def ts(i: int) -> str:
        return datetime.fromtimestamp(start + i * every, tz=UTC).isoformat()

    return {f"c{i:02}": Node(f"c{i:02}", f"c{i - 1:02}" if i else None, {}, frozenset(), ts(i)) for i in range(count)}


def test_policy_keeps_the_newest_and_the_young_and_what_it_cannot_judge() -> None:
    nodes = _nodes(10, start=0.0, every=DAY)  # c09 is the newest, written on day 9
    now = 10 * DAY
    assert RetentionPolicy(keep_last=3).chosen(nodes, now) == {"c07", "c08", "c09"}
    assert RetentionPolicy(keep_for=2.5 * DAY).chosen(nodes, now) == {"c08", "c09"}
    assert RetentionPolicy(keep_last=1, keep_for=3.5 * DAY).chosen(nodes, now) == {"c07", "c08", "c09"}
    assert RetentionPolicy(keep_last=1).chosen(nodes, now, waiting={"c02"}) == {"c02", "c09"}
    assert RetentionPolicy(keep_last=1).chosen({**nodes, "c03": None}, now) == {"c03", "c09"}
    assert RetentionPolicy(delete_idle_after=DAY).chosen(nodes, now) == set(nodes)  # no keep rule: all
    assert RetentionPolicy(delete_idle_after=DAY).idle(nodes["c09"].ts, now)  # type: ignore[union-attr]
    assert not RetentionPolicy(delete_idle_after=2 * DAY).idle(nodes["c09"].ts, now)  # type: ignore[union-attr]
    assert age("not a time", now) == 0.0  # unknown age: counts as new, kept


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"keep_last": 0}, {"keep_last": 2.5}, {"keep_for": -1}, {"delete_idle_after": 0}, {"keep_for": "7d"}],
)
def test_a_bad_policy_is_a_config_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RetentionPolicy(**kwargs)


# -- on real tiers ----------------------------------------------------------------------


def _ids(saver: Any, thread: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": thread}})]


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_keep_last_keeps_what_time_travel_to_a_kept_checkpoint_needs(tiers: str, make_saver: Any) -> None:
    with make_saver(tiers) as saver:
        graph = loop_graph(12).compile(checkpointer=saver)
        ref = loop_graph(12).compile(checkpointer=InMemorySaver())
        cfg = {"configurable": {"thread_id": "t"}}
        for g in (graph, ref):
            g.invoke({"messages": [], "n": 0}, cfg)
        before = _ids(saver, "t")
        dry = saver.apply_retention(RetentionPolicy(keep_last=4), dry_run=True)
        assert (dry.threads, dry.checkpoints_deleted, dry.checkpoints_kept) == (1, len(before) - 4, 4)
        assert _ids(saver, "t") == before  # a dry run deletes nothing
        report = saver.apply_retention(RetentionPolicy(keep_last=4))
        assert report.checkpoints_deleted == len(before) - 4 and not report.dry_run
        assert _ids(saver, "t") == before[:4]
        assert graph.get_state(cfg).values == ref.get_state(cfg).values
        # Time travel to the oldest kept checkpoint: its values (lists stored
        # as pieces included) and a replay from it are whole.
        oldest = list(graph.get_state_history(cfg))[-1]
        ref_oldest = next(s for s in ref.get_state_history(cfg) if s.metadata["step"] == oldest.metadata["step"])
        assert oldest.values == ref_oldest.values
        assert graph.invoke(None, oldest.config) == ref.invoke(None, ref_oldest.config)
        after = _ids(saver, "t")
        assert after[-4:] == before[:4]  # the replay forked from the kept ones
    if tiers != "sqlite":
        with make_saver(tiers, sqlite_name="other.sqlite") as replica:  # another replica sees the same
            assert _ids(replica, "t") == after


def test_long_lists_stored_as_pieces_survive_keep_last_one(make_saver: Any) -> None:
    """Lists stored as pieces name older records; keeping only the newest
    checkpoint must keep the records its lists are rebuilt from."""
    with make_saver("sqlite+postgres", list_snapshot_every=8) as saver:
        graph = loop_graph(40).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "long"}}
        graph.invoke({"messages": [], "n": 0}, cfg)
        before = graph.get_state(cfg).values
        saver.apply_retention(RetentionPolicy(keep_last=1))
        assert len(_ids(saver, "long")) == 1
        assert graph.get_state(cfg).values == before
        assert len(before["messages"]) == 40
        graph.invoke({"messages": ["more"], "n": 30}, cfg)  # the thread carries on from it
        assert graph.get_state(cfg).values["messages"][:40] == before["messages"]
    with make_saver("postgres") as far:  # and the far tier alone reads it whole
        assert far.get_tuple(cfg) is not None
        assert far.get_tuple(cfg).checkpoint["channel_values"]["messages"][:40] == before["messages"]  # type: ignore[union-attr]


def test_delta_channel_ancestors_survive_a_sweep(make_saver: Any) -> None:
    with make_saver("sqlite+redis") as saver:
        graph = delta_graph().compile(checkpointer=saver)
        ref = delta_graph().compile(checkpointer=InMemorySaver())
        for inputs in RUNS:
            for g in (graph, ref):
                g.invoke(inputs, _cfg("d"))
            saver.apply_retention(RetentionPolicy(keep_last=2))
            assert graph.get_state(_cfg("d")).values == ref.get_state(_cfg("d")).values
        assert len(_ids(saver, "d")) < 50


def test_a_thread_waiting_at_an_interrupt_resumes_after_a_sweep(make_saver: Any) -> None:
    with make_saver("sqlite+postgres") as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        ref = interrupt_graph().compile(checkpointer=InMemorySaver())
        cfg = {"configurable": {"thread_id": "ask"}}
        for g in (graph, ref):
            g.invoke({"messages": [], "n": 0}, cfg)
        long_ago = time.time() + 365 * DAY
        report = saver.apply_retention(RetentionPolicy(keep_last=1, delete_idle_after=DAY), now=long_ago)
        assert report.threads_deleted == 0  # waiting for a human is not idle
        assert graph.get_state(cfg).next == ref.get_state(cfg).next
        assert graph.invoke(Command(resume="yes"), cfg) == ref.invoke(Command(resume="yes"), cfg)


async def test_idle_threads_go_and_threads_with_unconfirmed_actions_stay(make_saver: Any) -> None:
    async with make_saver("sqlite+redis+postgres") as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        for thread in ("idle", "busy", "acting"):
            await graph.ainvoke({"messages": [], "n": 0}, {"configurable": {"thread_id": thread}})
        await saver.arecord_action("acting", LedgerEntry(key="send-email", state="intent", idempotent=False))
        policy = RetentionPolicy(delete_idle_after=DAY)
        later = time.time() + 2 * DAY
        report = await saver.aapply_retention(policy, thread_ids=["idle", "acting"], now=later)
        assert (report.threads, report.threads_deleted, report.left_alone) == (2, 1, ["acting"])
        assert [t async for t in saver.alist({"configurable": {"thread_id": "idle"}})] == []
        assert await saver.aget_tuple({"configurable": {"thread_id": "acting"}}) is not None
        assert await saver.aget_tuple({"configurable": {"thread_id": "busy"}}) is not None  # not asked about
        report = await saver.aapply_retention(policy, now=time.time())  # nothing is idle yet
        assert report.threads == 2 and report.threads_deleted == 0
    async with make_saver("sqlite+redis+postgres", sqlite_name="replica.sqlite") as replica:
        assert await replica.aget_tuple({"configurable": {"thread_id": "idle"}}) is None


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_keep_for_uses_the_checkpoint_time(tiers: str, make_saver: Any) -> None:
    """keep_for keeps the checkpoints written (their own "ts") less than that
    long before the sweep's clock. The clock is given (now=), so nothing
    sleeps and a slow machine changes nothing."""
    cfg = {"configurable": {"thread_id": "t"}}
    with make_saver(tiers) as saver:
        graph = loop_graph(5).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg)
        first = _ids(saver, "t")
        graph.invoke({"messages": ["again"], "n": 0}, cfg)
        everything = _ids(saver, "t")
        second = everything[: len(everything) - len(first)]
        assert second and everything[len(second) :] == first
        written = {
            t.config["configurable"]["checkpoint_id"]: datetime.fromisoformat(t.checkpoint["ts"]).timestamp()
            for t in saver.list(cfg)
        }
        assert max(written[c] for c in first) < min(written[c] for c in second)
        # Written before `between`: the first run's checkpoints; after it: the second's.
        between = (max(written[c] for c in first) + min(written[c] for c in second)) / 2
        policy = RetentionPolicy(keep_for=DAY)
        # Half a day after the oldest was written, every checkpoint is young.
        early = saver.apply_retention(policy, now=min(written.values()) + DAY / 2)
        assert early.checkpoints_deleted == 0 and _ids(saver, "t") == everything
        # A day after `between`: the first run's are older than a day, the second's not.
        dry = saver.apply_retention(policy, dry_run=True, now=between + DAY)
        assert dry.checkpoints_deleted == len(first) and _ids(saver, "t") == everything
        report = saver.apply_retention(policy, now=between + DAY)
        assert report.checkpoints_deleted == len(first) and report.checkpoints_kept == len(second)
        assert _ids(saver, "t") == second  # the newest ones
        # Two days after the newest was written, only the newest is kept (always).
        late = saver.apply_retention(policy, now=max(written.values()) + 2 * DAY)
        assert late.checkpoints_deleted == len(second) - 1
        assert _ids(saver, "t") == everything[:1]
    if tiers != "sqlite":
        with make_saver(tiers, sqlite_name="other.sqlite") as replica:  # another replica sees the same
            assert _ids(replica, "t") == everything[:1]


def test_a_background_sweep_keeps_storage_flat(make_saver: Any) -> None:
    policy = RetentionPolicy(keep_last=3, every=0.1, rate=None)
    with make_saver("sqlite", retention=policy) as saver:
        graph = loop_graph(5).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "t"}}
        for _ in range(4):
            graph.invoke({"messages": [], "n": 0}, cfg)
            wait_until(lambda: len(_ids(saver, "t")) <= 3, "the background sweep did not run")
            assert len(_ids(saver, "t")) == 3
        sweeper = saver._runtime.sweeper
        assert sweeper is not None and sweeper.sweeps >= 4
    assert sweeper._thread is not None and not sweeper._thread.is_alive()  # close stopped it


def test_retention_needs_a_policy(make_saver: Any) -> None:
    with make_saver("sqlite") as saver, pytest.raises(ConfigError, match="no retention policy"):
        saver.apply_retention()
    # A background sweep is the policy's (every=), so it cannot be asked for without one.
    with pytest.raises(ConfigError, match="every= must be a number of seconds above 0"):
        RetentionPolicy(keep_last=1, every=0)
