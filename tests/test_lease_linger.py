"""``lease_linger``: a run's lease kept a while after the run ends.

While a saver keeps a thread's lease nobody else can write the thread, so
what the saver wrote last (and its local tier took) is still the thread's
latest state: ``get_state`` after a run reads the local cache alone. These
tests count the read calls that reach the shared tiers (real tier objects,
see `test_local_reads.count_shared_reads`), check what is served against what
was written, and that the kept lease gives way when it must: another replica
waits for it (or is told the thread is busy), then its newer state is what
this saver serves; ``release_thread``, ``close``, ``update_state`` and a
damaged local copy all end the local fast path.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_durable import ConfigError, DurableSaver, Leases, RetentionPolicy
from langgraph_durable.engine.leases.book import LeaseBook
from langgraph_durable.model.lease import KEPT_WINDOW_S, LEASE_HANDOFF_GRACE_S, Lease, wait_out
from langgraph_durable.model.own_heads import OwnHeads
from tests.flat_options import durable_options

from .conftest import REDIS_URL, SaverFactory
from .graphs import looping
from .tamper import flip
from .test_delta import RUNS as DELTA_RUNS
from .test_delta import _history, _values, delta_graph, extend
from .test_local_reads import count_shared_reads, damage_newest_local_value
from .test_outages import _redis_ids, _sqlite_ids
from .test_read_cache import get, traced
from .waiting import await_until, wait_until


def counting_graph(steps: int) -> Any:
    return looping(lambda s: {"messages": [f"m{s['n']}"], "n": s["n"] + 1}, steps)


def config_of(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "sqlite+postgres", "sqlite+redis"])
def test_after_a_run_its_kept_lease_serves_the_latest_state_from_the_local_cache(
    make_saver: SaverFactory, tiers: str
) -> None:
    thread = new_thread()
    with make_saver(tiers, lease_linger=30.0) as saver:
        listening(saver)
        calls = count_shared_reads(saver)
        graph = counting_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config_of(thread), durability="sync")
        newest = saver.get_tuple(config_of(thread))  # counted below: the first read is local too
        calls.clear()
        for _ in range(3):
            snap = graph.get_state(config_of(thread))
            assert snap.values == {"messages": ["m0", "m1", "m2"], "n": 3}
            assert snap.config["configurable"]["checkpoint_id"] == newest.config["configurable"]["checkpoint_id"]
        assert sum(calls.values()) == 0
        # Given back: reads ask the shared tiers again.
        saver.release_thread(thread)
        assert graph.get_state(config_of(thread)).values["n"] == 3
        assert sum(calls.values()) > 0


def test_without_lease_linger_a_read_after_the_run_asks_the_shared_tiers(make_saver: SaverFactory) -> None:
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", lease_linger=0) as saver:
        saver.setup()
        calls = count_shared_reads(saver)
        graph = counting_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config_of(thread), durability="sync")
        calls.clear()
        assert graph.get_state(config_of(thread)).values["n"] == 2
        assert sum(calls.values()) > 0


async def test_the_async_face_keeps_the_lease_and_reads_locally(make_saver: SaverFactory) -> None:
    thread = new_thread()
    async with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        await alistening(saver)
        calls = count_shared_reads(saver, "async")
        graph = counting_graph(3).compile(checkpointer=saver)
        await graph.ainvoke({"messages": [], "n": 0}, config_of(thread), durability="sync")
        # The async face gives a run's lease back (or keeps it) in a task
        # scheduled when the run ends.
        await wait_until_kept(saver, thread)
        calls.clear()
        snap = await graph.aget_state(config_of(thread))
        assert snap.values == {"messages": ["m0", "m1", "m2"], "n": 3}
        assert sum(calls.values()) == 0


async def test_a_read_right_after_ainvoke_waits_for_the_lease_to_be_kept_and_reads_locally(
    make_saver: SaverFactory,
) -> None:
    """The plain ``await graph.ainvoke(...); await graph.aget_state(...)``
    with the default options: the read lets the handling of the run's end
    finish (the lease kept), and asks no shared tier for the state."""
    async with make_saver("sqlite+redis+postgres") as saver:
        await alistening(saver)
        calls = count_shared_reads(saver, "async")
        graph = counting_graph(3).compile(checkpointer=saver)
        for i in range(3):
            thread = new_thread()
            await graph.ainvoke({"messages": [], "n": 0}, config_of(thread))
            calls.clear()
            snap = await graph.aget_state(config_of(thread))
            assert snap.values == {"messages": ["m0", "m1", "m2"], "n": 3}
            assert sum(calls.values()) == 0, (i, calls)
            assert saver._runtime.leases.kept(thread, time.monotonic()) is not None


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "sqlite+redis"])
async def test_another_replica_is_handed_a_kept_lease_at_once_and_its_state_is_then_served(
    make_saver: SaverFactory, tiers: str, face: str
) -> None:
    """B finds the thread's lease kept by A for 30 s, asks A for it on the
    lease's tier (Postgres NOTIFY, or Redis PUBLISH without Postgres), and
    runs at once with the default on_busy="raise"; A then serves B's state."""
    thread = new_thread()
    async with make_saver(tiers, sqlite_name="a.sqlite", lease_linger=30.0) as a:
        await kept_run(a, face, thread, 3)
        # B does not wait: with on_busy="raise" it looks again for the
        # hand-off grace only, then raises ThreadBusy (A keeps it for 30 s).
        async with make_saver(tiers, sqlite_name="b.sqlite") as b:
            graph = counting_graph(5).compile(checkpointer=b)
            if face == "sync":
                out = graph.invoke({"messages": [], "n": 0}, config_of(thread))
            else:
                out = await graph.ainvoke({"messages": [], "n": 0}, config_of(thread))
            newest = await get(b, face, thread)
        assert out["n"] == 5 and newest is not None
        assert a._runtime.hand_offs is not None and a._runtime.hand_offs.hand_offs == 1
        assert a._runtime.leases.kept(thread, time.monotonic()) is None
        tup = await get(a, face, thread)
        assert tup is not None and tup.checkpoint["id"] == newest.checkpoint["id"]
        assert tup.checkpoint["channel_values"]["n"] == 5


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "sqlite+redis"])
async def test_a_run_whose_end_its_busy_loop_has_not_handled_yet_is_handed_off_when_asked(
    make_saver: SaverFactory, tiers: str
) -> None:
    """Under load the runs' event loop handles a run's end (keep its lease or
    give it back, after shipping what Redis is owed) a while after ``ainvoke``
    returned. Another replica that asks for the lease meanwhile gets it from
    A's hand-off listener at once, with the run shipped to every shared tier,
    and runs with the default on_busy="raise" instead of ``ThreadBusy``."""
    thread = new_thread()
    async with make_saver(tiers, sqlite_name="a.sqlite") as a:
        await alistening(a)
        await (
            counting_graph(3)
            .compile(checkpointer=a)
            .ainvoke({"messages": [], "n": 0}, config_of(thread), durability="sync")
        )
        assert a._runtime.leases.held(thread) is None  # the run has ended...
        assert a._runtime.leases.kept(thread, time.monotonic()) is None  # ...and the loop has not handled its end
        # B runs on this very thread, holding A's loop: A's end of run cannot happen meanwhile.
        with make_saver(tiers, sqlite_name="b.sqlite") as b:
            out = counting_graph(5).compile(checkpointer=b).invoke({"messages": [], "n": 3}, config_of(thread))
            newest = b.get_tuple(config_of(thread))
        assert out["n"] == 5 and len(out["messages"]) == 5  # A's three steps, then B's two
        assert newest is not None and a._runtime.hand_offs is not None and a._runtime.hand_offs.hand_offs == 1
        await asyncio.sleep(0.05)  # the loop now gets to the run's end: nothing left to do
        await a._runtime._alease_keeper.settle(thread) if a._runtime._alease_keeper is not None else None
        assert a._runtime.leases.kept(thread, time.monotonic()) is None
        tup = await a.aget_tuple(config_of(thread))
        assert tup is not None and tup.checkpoint["id"] == newest.checkpoint["id"]
        # What A gave back was shipped to Redis first: every checkpoint A wrote is there.
        assert _sqlite_ids(Path(str(a.sqlite_path)), thread) <= _redis_ids(REDIS_URL, a.redis_key_prefix, thread)


# A maintenance call on another replica: its name and arguments, given the
# kept thread and the run it came from.
MAINTENANCE: dict[str, Any] = {
    "delete_thread": lambda thread, run_id: ((thread,), {}),
    "delete_for_runs": lambda thread, run_id: (([run_id],), {}),
    "prune": lambda thread, run_id: (([thread],), {"strategy": "delete"}),
    # Retention that finds the thread idle (an hour from now) and deletes it whole.
    "apply_retention": lambda thread, run_id: (
        (RetentionPolicy(delete_idle_after=60.0),),
        {"thread_ids": [thread], "now": time.time() + 3600},
    ),
}


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("call", sorted(MAINTENANCE))
async def test_a_maintenance_call_on_another_replica_asks_for_a_kept_lease_first(
    make_saver: SaverFactory, call: str, face: str
) -> None:
    """B deletes a thread A keeps (``delete_thread``; ``delete_for_runs`` of
    the run it came from; ``prune(strategy="delete")``; a retention policy
    that finds it idle): A is asked to give the lease back first, so A's next
    read is not served from its cache."""
    thread = new_thread()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        await kept_run(a, face, thread, 2, run_id)
        assert await get(a, face, thread) is not None
        args, kwargs = MAINTENANCE[call](thread, run_id)
        async with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            if face == "sync":
                getattr(b, call)(*args, **kwargs)
            else:
                await getattr(b, "a" + call)(*args, **kwargs)
        assert await get(a, face, thread) is None
        assert a._runtime.hand_offs is not None and a._runtime.hand_offs.hand_offs == 1


def test_copy_thread_into_a_kept_thread_asks_for_its_lease_first(make_saver: SaverFactory) -> None:
    thread, source = new_thread(), new_thread()
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        listening(a)
        counting_graph(2).compile(checkpointer=a).invoke({"messages": [], "n": 0}, config_of(thread))
        with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            counting_graph(5).compile(checkpointer=b).invoke({"messages": [], "n": 0}, config_of(source))
            b.copy_thread(source, thread)
            copied = b.get_tuple(config_of(thread))
        tup = a.get_tuple(config_of(thread))
        assert copied is not None and tup is not None
        assert tup.checkpoint["id"] == copied.checkpoint["id"] and tup.checkpoint["channel_values"]["n"] == 5


def test_a_holder_that_does_not_hear_is_waited_out_and_its_cache_trusted_no_longer(
    make_saver: SaverFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Safety does not rest on the hand-off: with A's listener stopped (a
    request is not heard, the kept lease is renewed no more, as when A is
    killed), B waits for the kept lease to expire, even with the default
    ``on_busy="raise"``; A stopped trusting its cache before that and serves
    B's state."""
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        listening(a)
        counting_graph(3).compile(checkpointer=a).invoke({"messages": [], "n": 0}, config_of(thread))
        assert a._runtime.hand_offs is not None
        a._runtime.hand_offs.stop()  # kept leases stay kept, trusted for their window; requests go unheard
        assert a._runtime.leases.kept(thread, time.monotonic()) is not None
        with (
            make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b,
            caplog.at_level(logging.WARNING, logger="langgraph_durable"),
        ):
            out = counting_graph(5).compile(checkpointer=b).invoke({"messages": [], "n": 0}, config_of(thread))
            newest = b.get_tuple(config_of(thread))
        assert out["n"] == 5 and newest is not None
        # B could only take the thread once A's kept lease had expired.
        assert_taken_over_expired(caplog, thread, a)
        assert a._runtime.hand_offs.hand_offs == 0
        # A's trust in its cache ended before the lease expired: it serves B's state.
        tup = a.get_tuple(config_of(thread))
        assert tup is not None and tup.checkpoint["id"] == newest.checkpoint["id"]
        assert tup.checkpoint["channel_values"]["n"] == 5


def test_a_listener_that_loses_its_connection_gives_kept_leases_back_then_listens_again(
    make_saver: SaverFactory,
) -> None:
    """A replica that could ask for a kept lease but would not be heard must
    not wait for it: when the listening connection is lost, the kept leases
    are trusted no more and given back, and none is kept until the listener
    hears its channel again."""
    thread = new_thread()
    with make_saver("sqlite+postgres", lease_linger=30.0) as a:
        listening(a)
        graph = counting_graph(2).compile(checkpointer=a)
        graph.invoke({"messages": [], "n": 0}, config_of(thread))
        assert a._runtime.leases.kept(thread, time.monotonic()) is not None
        with psycopg.connect(a.postgres_url or "", autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'lgd-hand-off' AND datname = current_database()"
            ).fetchall()
            assert len(killed) == 1
            wait_until(
                lambda: a._runtime.leases.kept(thread, time.monotonic()) is None, "the kept lease was still trusted"
            )
            wait_until(
                lambda: (
                    admin.execute("SELECT expires_at FROM lgd_leases WHERE thread_id = %s", (thread,)).fetchone()
                    == (0,)
                ),
                "the kept lease was not given back in its tier",
            )
        wait_until(a._runtime.leases.may_keep, "the listener did not listen again")
        graph.invoke({"messages": [], "n": 0}, config_of(thread))
        assert a._runtime.leases.kept(thread, time.monotonic()) is not None


async def test_the_async_face_keeps_hands_over_and_gives_back_as_the_sync_one(
    make_saver: SaverFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The async face, step by step: another replica whose request is not
    heard waits out the kept lease and its newer state is then served; a
    rerun on the same saver does not wait; aupdate_state, arelease_thread and
    adelete_thread end the keeping; aclose gives kept leases back."""
    thread = new_thread()
    config = config_of(thread)
    async with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        await alistening(a)
        await counting_graph(3).compile(checkpointer=a).ainvoke({"messages": [], "n": 0}, config)
        await wait_until_kept(a, thread)
        assert a._runtime.hand_offs is not None
        await asyncio.to_thread(a._runtime.hand_offs.stop)
        async with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
                out = await counting_graph(5).compile(checkpointer=b).ainvoke({"messages": [], "n": 0}, config)
            assert_taken_over_expired(caplog, thread, a)  # not before A's kept lease expired
            assert a._runtime.hand_offs.hand_offs == 0
            newest = await b.aget_tuple(config)
        assert out["n"] == 5 and newest is not None
        tup = await a.aget_tuple(config)  # A's trust ended before its lease did
        assert tup is not None and tup.checkpoint["id"] == newest.checkpoint["id"]

    async with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        await alistening(a)
        graph = counting_graph(2).compile(checkpointer=a)
        calls = count_shared_reads(a, "async")
        await graph.ainvoke({"messages": [], "n": 0}, config)
        await wait_until_kept(a, thread)
        # Its own kept lease: no wait (with on_busy="raise", a wait for a
        # lease kept 30 s would end in ThreadBusy), and nothing to hand off.
        await graph.ainvoke({"messages": [], "n": 0}, config)
        await wait_until_kept(a, thread)
        assert a._runtime.hand_offs is not None and a._runtime.hand_offs.hand_offs == 0
        calls.clear()
        assert (await graph.aget_state(config)).values["n"] == 2
        assert sum(calls.values()) == 0
        await graph.aupdate_state(config, {"messages": ["edited"], "n": 7})
        assert a._runtime.leases.kept(thread, time.monotonic()) is None
        assert (await graph.aget_state(config)).values["n"] == 7
        await graph.ainvoke({"messages": [], "n": 0}, config)
        await wait_until_kept(a, thread)
        await a.arelease_thread(thread)
        assert a._runtime.leases.kept(thread, time.monotonic()) is None
        calls.clear()
        assert (await graph.aget_state(config)).values["n"] == 2
        assert sum(calls.values()) > 0  # given back: every tier is asked again
        await graph.ainvoke({"messages": [], "n": 0}, config)
        await wait_until_kept(a, thread)
        await a.adelete_thread(thread)
        assert await a.aget_tuple(config) is None
        await graph.ainvoke({"messages": [], "n": 0}, config)
        await wait_until_kept(a, thread)
    async with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:  # aclose gave it back
        assert (await counting_graph(3).compile(checkpointer=b).ainvoke({"messages": [], "n": 0}, config))["n"] == 3


def test_the_same_saver_runs_the_thread_again_at_once(make_saver: SaverFactory) -> None:
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        listening(saver)
        counting_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, config_of(thread))
        graph = counting_graph(4).compile(checkpointer=saver)
        # Never waited for its own lease: on_busy="raise" would have raised
        # ThreadBusy (it is kept 30 s); nor asked itself to hand it off.
        assert graph.invoke({"messages": [], "n": 0}, config_of(thread))["n"] == 4
        assert saver._runtime.hand_offs is not None and saver._runtime.hand_offs.hand_offs == 0
        calls = count_shared_reads(saver)
        assert graph.get_state(config_of(thread)).values == {"messages": ["m0", "m1", "m0", "m1", "m2", "m3"], "n": 4}
        assert sum(calls.values()) == 0


def test_update_state_under_a_kept_lease_is_what_is_read_next(make_saver: SaverFactory) -> None:
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        listening(saver)
        graph = counting_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config_of(thread))
        graph.update_state(config_of(thread), {"messages": ["edited"], "n": 7})
        assert graph.get_state(config_of(thread)).values == {"messages": ["m0", "m1", "edited"], "n": 7}
        # update_state took a lease of its own and gave it back: nothing is kept.
        assert saver._runtime.leases.kept(thread, time.monotonic()) is None
        with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            tup = b.get_tuple(config_of(thread))
            assert tup is not None and tup.checkpoint["channel_values"]["n"] == 7


def test_close_gives_kept_leases_back(make_saver: SaverFactory) -> None:
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        listening(a)
        counting_graph(2).compile(checkpointer=a).invoke({"messages": [], "n": 0}, config_of(thread))
        assert a._runtime.leases.kept(thread, time.monotonic()) is not None
    with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:  # on_busy="raise"
        assert counting_graph(3).compile(checkpointer=b).invoke({"messages": [], "n": 0}, config_of(thread))["n"] == 3


def test_delete_thread_under_a_kept_lease_is_seen_at_once(make_saver: SaverFactory) -> None:
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        listening(saver)
        graph = counting_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config_of(thread))
        saver.delete_thread(thread)
        assert saver.get_tuple(config_of(thread)) is None
        assert graph.get_state(config_of(thread)).values == {}


def test_a_damaged_local_copy_under_a_kept_lease_is_read_around_and_repaired(make_saver: SaverFactory) -> None:
    """The local fast path finds the newest value's local copy damaged, gives
    way, and the usual read serves the intact copy from a shared tier,
    reports the bad one and repairs it."""
    thread = new_thread()
    events: list[Any] = []
    with make_saver("sqlite+redis+postgres", lease_linger=30.0, on_corruption=events.append) as saver:
        listening(saver)
        graph = counting_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config_of(thread), durability="sync")
        damage_newest_local_value(saver.sqlite_path or "", thread, "n")
        assert graph.get_state(config_of(thread)).values == {"messages": ["m0", "m1", "m2"], "n": 3}
        assert saver.verify(thread).bad == []
    assert [(e.tier, e.kind) for e in events] == [("sqlite", "blob")]
    assert events[0].served_instead.startswith("intact copy from")


async def kept_run(saver: DurableSaver, face: str, thread: str, steps: int, run_id: str | None = None) -> None:
    """A run of the counting graph (with `run_id` in its metadata, if given)
    whose lease is then kept (once `setup` has heard the hand-off channel)."""
    graph = counting_graph(steps).compile(checkpointer=saver)
    config: Any = {**config_of(thread), **({"metadata": {"run_id": run_id}} if run_id else {})}
    if face == "sync":
        listening(saver)
        graph.invoke({"messages": [], "n": 0}, config, durability="sync")
    else:
        await alistening(saver)
        await graph.ainvoke({"messages": [], "n": 0}, config, durability="sync")
    await wait_until_kept(saver, thread)


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_read_again_under_a_kept_lease_runs_one_statement_and_serves_the_same(
    make_saver: SaverFactory, face: str
) -> None:
    """What the local fast path read is kept while the file is unchanged
    (`read_cache.py`): the next read asks only for the file's version, and
    none of the shared tiers."""
    thread = new_thread()
    async with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        await alistening(saver)
        await kept_run(saver, face, thread, 3)
        first = await get(saver, face, thread)
        calls = count_shared_reads(saver, face)
        with traced(saver) as statements:
            again = await get(saver, face, thread)
        assert again == first and again is not first
        assert first is not None and first.checkpoint["channel_values"]["n"] == 3
        assert statements == ["PRAGMA data_version"]
        assert sum(calls.values()) == 0


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_local_value_damaged_after_a_kept_read_is_met_by_the_next_read(
    make_saver: SaverFactory, face: str
) -> None:
    """Damage committed to the file after a read was kept: the next read is a
    real one, serves the intact copy from a shared tier, and reports it."""
    thread = new_thread()
    events: list[Any] = []
    async with make_saver("sqlite+redis+postgres", lease_linger=30.0, on_corruption=events.append) as saver:
        await alistening(saver)
        await kept_run(saver, face, thread, 3)
        kept = await get(saver, face, thread)
        damage_newest_local_value(saver.sqlite_path or "", thread, "n")
        served = await get(saver, face, thread)
        assert served == kept
        assert served is not None and served.checkpoint["channel_values"] == {"messages": ["m0", "m1", "m2"], "n": 3}
    assert [(e.tier, e.kind) for e in events] == [("sqlite", "blob")]


def test_write_behind_keeps_the_lease_once_the_run_has_shipped(make_saver: SaverFactory) -> None:
    thread = new_thread()
    with make_saver("sqlite+redis+postgres", write="local", lease_linger=30.0) as saver:
        listening(saver)
        graph = counting_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, config_of(thread))
        assert saver.drain(60).caught_up
        # the replicator hands off after shipping
        wait_until(lambda: saver._runtime.leases.kept(thread, time.monotonic()), "the shipped run's lease was not kept")
        calls = count_shared_reads(saver)
        assert graph.get_state(config_of(thread)).values["n"] == 3
        assert sum(calls.values()) == 0


@pytest.mark.parametrize("bad", [-1, "5", True, float("inf"), float("nan")])
def test_lease_linger_must_be_a_number_of_seconds(tmp_path: Any, bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"Leases\(linger=\) must be a number of seconds"):
        DurableSaver(sqlite=str(tmp_path / "x.sqlite"), leases=Leases(linger=bad))


def test_from_env_takes_lease_linger(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGGRAPH_DURABLE_SQLITE", str(tmp_path / "x.sqlite"))
    monkeypatch.setenv("LANGGRAPH_DURABLE_LEASE_LINGER", "2.5")
    with DurableSaver.from_env() as saver:
        assert saver._runtime.leases.linger == 2.5
    monkeypatch.setenv("LANGGRAPH_DURABLE_LEASE_LINGER", "soon")
    with pytest.raises(ConfigError, match="LANGGRAPH_DURABLE_LEASE_LINGER must be a number of seconds"):
        DurableSaver.from_env()


# -- the decisions, without servers ---------------------------------------------------


def test_a_kept_lease_is_trusted_until_its_deadline_and_ends_with_a_new_run_or_a_drop() -> None:
    book = LeaseBook(linger=10.0)
    lease = Lease("t", book.holder, 4, 100.0, tier="postgres")
    book.keep(lease, until=9.0)
    assert book.kept("t", now=8.9) == (lease, 9.0)
    assert book.kept("t", now=9.0) is None  # past its deadline: forgotten
    assert book.kept("t", now=1.0) is None
    book.keep(lease, until=9.0)
    assert book.unkeep("t") == lease and book.kept("t", now=1.0) is None
    book.keep(lease, until=9.0)
    assert book.drop("t") == lease and book.kept("t", now=1.0) is None
    book.keep(lease, until=9.0)
    newer = Lease("t", book.holder, 5, 130.0, tier="postgres")
    book.begin(object(), newer)  # a new run of the thread on this saver
    assert book.kept("t", now=1.0) is None
    book.drop("t", newer.token)
    other = Lease("u", book.holder, 1, 100.0, tier="postgres")
    book.keep(other, until=9.0)
    assert book.drop_all() == [other] and book.kept("u", now=1.0) is None


def test_kept_leases_are_renewed_trusted_anew_and_handed_back_when_their_linger_ends() -> None:
    book = LeaseBook(linger=10.0)
    a = Lease("a", book.holder, 4, 100.0, tier="postgres")
    b = Lease("b", book.holder, 2, 100.0, tier="postgres")
    book.keep(a, until=1.35, keep_until=10.0)
    book.keep(b, until=1.35, keep_until=3.0)
    assert book.renewals(now=1.0) == ([a, b], [])
    book.renewed([a, b], {"a", "b"}, until=2.35)
    assert book.kept("a", now=2.0) == (a, 2.35) and book.kept("b", now=2.0) == (b, 2.35)
    # A renewal the tier refused (taken over, or given back): forgotten.
    book.renewed([a, b], {"a"}, until=2.85)
    assert book.kept("a", now=2.5) == (a, 2.85) and book.kept("b", now=2.5) is None
    # A renewal answered late never shortens the trust; a lease kept anew meanwhile is left alone.
    book.renewed([a], {"a"}, until=2.5)
    assert book.kept("a", now=2.6) == (a, 2.85)
    newer = Lease("a", book.holder, 5, 100.0, tier="postgres")
    book.keep(newer, until=4.0, keep_until=10.0)
    book.renewed([a], set(), until=2.9)
    assert book.kept("a", now=3.0) == (newer, 4.0)
    # Its linger over: handed back for the caller to give back, and forgotten.
    assert book.renewals(now=10.0) == ([], [newer])
    assert book.kept("a", now=3.0) is None


def test_on_busy_raise_waits_out_a_lease_that_expires_within_a_kept_window() -> None:
    assert wait_out(remaining=KEPT_WINDOW_S, waited=0.0)
    assert wait_out(remaining=0.0, waited=KEPT_WINDOW_S)
    assert not wait_out(remaining=KEPT_WINDOW_S + 0.01, waited=0.0)  # a run's lease (its TTL): ThreadBusy
    assert not wait_out(remaining=1.0, waited=KEPT_WINDOW_S + LEASE_HANDOFF_GRACE_S + 0.01)  # bounded
    assert not wait_out(remaining=-1.0, waited=0.0)  # expired already: taken, not waited for


def test_a_saver_keeps_at_most_max_threads_leases_trusting_the_newest() -> None:
    book = LeaseBook(linger=10.0, max_threads=2)
    leases = [Lease(f"t{i}", book.holder, 1, 100.0, tier="postgres") for i in range(3)]
    for lease in leases:
        book.keep(lease, until=9.0)
    assert book.kept("t0", now=1.0) is None  # the oldest, forgotten
    assert [book.kept(f"t{i}", now=1.0) for i in (1, 2)] == [(leases[1], 9.0), (leases[2], 9.0)]


def test_own_heads_under_a_kept_lease_are_trusted_until_its_deadline_not_for_max_age() -> None:
    own = OwnHeads(max_age=15.0)
    own.put("t", "", 7, "c1", now=0.0)
    assert own.current("t", "", 7, now=40.0) is None  # a run's lease: too long since its last write
    assert own.current("t", "", 7, now=40.0, until=50.0) == ("c1", frozenset())
    assert own.current("t", "", 7, now=50.0, until=50.0) is None
    assert own.current("t", "", 8, now=40.0, until=50.0) is None  # another token


def test_a_forked_child_trusts_none_of_its_parents_kept_leases() -> None:
    book = LeaseBook(linger=10.0)
    lease = Lease("t", book.holder, 4, 100.0, tier="postgres")
    book.keep(lease, until=time.monotonic() + 60)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it holds no lease of its parent's, kept or running
        ok = book.kept("t", time.monotonic()) is None and book.held("t") is None
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert book.kept("t", time.monotonic()) is not None  # the parent still does


def test_own_heads_remember_the_writes_of_each_checkpoint_written_under_the_lease() -> None:
    own = OwnHeads(max_age=15.0)
    own.writes("t", "", 7, "c0", {("a", 0)}, now=0.0)  # a checkpoint this saver did not put: not its own
    own.put("t", "", 7, "c1", now=0.0)
    own.writes("t", "", 7, "c1", {("a", 0), ("a", 1)}, now=0.0)
    own.writes("t", "", 7, "c2", {("c", 0)}, now=0.0)  # before c2's put is recorded (LangGraph overlaps them)
    own.writes("t", "", 8, "c2", {("x", 0)}, now=0.0)  # under another token: never this lease's
    own.put("t", "", 7, "c2", now=0.0)
    own.writes("t", "", 7, "c1", {("b", 0)}, now=0.0)  # a late write of an older one of its own
    assert own.mine("t", "", 7, now=1.0) == {
        "c1": frozenset({("a", 0), ("a", 1), ("b", 0)}),
        "c2": frozenset({("c", 0)}),
    }
    assert own.current("t", "", 7, now=1.0) == ("c2", frozenset({("c", 0)}))
    assert own.mine("t", "", 8, now=1.0) is None
    own.forget("t")
    own.put("t", "", 7, "c0", now=0.0)  # (ids never repeat; here: the kept-aside write went with forget)
    assert own.mine("t", "", 7, now=1.0) == {"c0": frozenset()}


# -- DeltaChannel threads: the walk over ancestors, from the local cache ------------------


class WideDeltaState(TypedDict, total=False):
    """One snapshot every 100 versions (LangGraph's default): the walk from
    the head goes back to the thread's first checkpoints."""

    items: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=100)]
    n: int
    limit: int


def wide_delta_graph() -> StateGraph:
    g = StateGraph(WideDeltaState)
    g.add_node("step", lambda s: {"items": [f"item {s['n']}"], "n": s["n"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < s["limit"] else END)
    return g


async def _run_both(graph: Any, ref: Any, inputs: Any, cfg: dict[str, Any], use_async: bool) -> None:
    if use_async:
        await graph.ainvoke(inputs, cfg)
        await wait_until_kept(graph.checkpointer, cfg["configurable"]["thread_id"])
    else:
        graph.invoke(inputs, cfg)
    ref.invoke(inputs, cfg)


def listening(saver: DurableSaver) -> None:
    """`setup`, then wait until the hand-off listener hears its channel: a
    run's lease is kept only from then on (setup waits a few seconds at
    most, which a loaded machine can outlast)."""
    saver.setup()
    wait_until(saver._runtime.leases.may_keep, "the hand-off listener did not hear its channel")


async def alistening(saver: DurableSaver) -> None:
    """`listening` on the async face."""
    await saver.asetup()
    await await_until(saver._runtime.leases.may_keep, "the hand-off listener did not hear its channel")


async def wait_until_kept(saver: DurableSaver, thread: str) -> None:
    """The async face keeps an ended run's lease from a task scheduled when it ends."""
    await await_until(
        lambda: saver._runtime.leases.kept(thread, time.monotonic()), "the ended run's lease was not kept"
    )


def assert_taken_over_expired(caplog: pytest.LogCaptureFixture, thread: str, a: DurableSaver) -> None:
    """The thread's lease was taken from `a` because it had expired (logged
    by the taker), not handed off nor given back."""
    took_over = [r.getMessage() for r in caplog.records if "took over the writer lease" in r.getMessage()]
    assert len(took_over) == 1 and f"thread {thread!r}" in took_over[0], took_over
    assert f"from {a._runtime.leases.holder} (expired;" in took_over[0], took_over


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_delta_channel_thread_is_rebuilt_from_the_local_cache_under_a_kept_lease(
    make_saver: SaverFactory, use_async: bool
) -> None:
    thread = new_thread()
    cfg = _delta_cfg(thread)
    ref = delta_graph().compile(checkpointer=InMemorySaver())
    async with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        await alistening(saver)
        graph = delta_graph().compile(checkpointer=saver)
        await _run_both(graph, ref, DELTA_RUNS[0], cfg, use_async)
        calls = count_shared_reads(saver, "async" if use_async else "sync")
        values = await _values(graph, cfg, use_async)
        assert sum(calls.values()) == 0
        assert values == ref.get_state(cfg).values and len(values["items"]) == 24
        # Time travel to every checkpoint (the history itself is a list: every tier).
        history = await _history(graph, cfg, use_async)
        assert history == [(s.metadata["step"], s.values) for s in ref.get_state_history(cfg)]


def _delta_cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 200}


def test_the_walk_past_what_this_saver_wrote_asks_every_tier(make_saver: SaverFactory) -> None:
    """Replica A wrote the thread's first 30 checkpoints, B the next 20 and
    keeps its lease. B's walk back to the seed (A's first checkpoint) reads
    its own ancestors locally and A's through the tiers: B's local cache
    never had A's pending writes, and must not be trusted for them."""
    thread = new_thread()
    cfg = _delta_cfg(thread)
    ref = wide_delta_graph().compile(checkpointer=InMemorySaver())
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a:
        listening(a)
        wide_delta_graph().compile(checkpointer=a).invoke({"items": [], "n": 0, "limit": 30}, cfg)
        ref.invoke({"items": [], "n": 0, "limit": 30}, cfg)
        a_checkpoints = list(a.list(cfg))
    with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite", lease_linger=30.0) as b:
        graph = wide_delta_graph().compile(checkpointer=b)
        graph.invoke({"limit": 50}, cfg)
        ref.invoke({"limit": 50}, cfg)
        a_ids = [t.checkpoint["id"] for t in a_checkpoints]
        # B's cache holds A's checkpoints (a read by id copies what it lacks)
        # but, as a cache may, not their pending writes.
        for cid in a_ids:
            assert b.get_tuple({"configurable": {"thread_id": thread, "checkpoint_id": cid}}) is not None
        with sqlite3.connect(b.sqlite_path or "") as conn:
            marks = ",".join("?" * len(a_ids))
            held = conn.execute(f"SELECT count(*) FROM lgd_checkpoints WHERE checkpoint_id IN ({marks})", a_ids)
            assert held.fetchone()[0] == len(a_ids)
            gone = conn.execute(f"DELETE FROM lgd_writes WHERE checkpoint_id IN ({marks})", a_ids).rowcount
            assert gone > 0
        calls = count_shared_reads(b)
        values = graph.get_state(cfg).values
        assert values == ref.get_state(cfg).values and len(values["items"]) == 50
        assert calls["postgres.list_page"] > 0  # A's ancestors


def test_a_damaged_local_ancestor_write_under_a_kept_lease_is_read_around_and_repaired(
    make_saver: SaverFactory,
) -> None:
    thread = new_thread()
    cfg = _delta_cfg(thread)
    events: list[Any] = []
    ref = wide_delta_graph().compile(checkpointer=InMemorySaver())
    with make_saver("sqlite+redis+postgres", lease_linger=30.0, on_corruption=events.append) as saver:
        listening(saver)
        graph = wide_delta_graph().compile(checkpointer=saver)
        graph.invoke({"items": [], "n": 0, "limit": 12}, cfg)
        ref.invoke({"items": [], "n": 0, "limit": 12}, cfg)
        with sqlite3.connect(saver.sqlite_path or "") as conn:
            cid, task_id, idx, record = conn.execute(
                "SELECT checkpoint_id, task_id, idx, record FROM lgd_writes WHERE thread_id = ? AND channel = 'items' "
                "ORDER BY checkpoint_id LIMIT 1 OFFSET 5",
                (thread,),
            ).fetchone()
            conn.execute(
                "UPDATE lgd_writes SET record = ? WHERE thread_id = ? AND checkpoint_id = ? AND task_id = ? AND idx = ?",
                (flip(bytes(record), len(record) - 1, 0x01), thread, cid, task_id, idx),
            )
        assert graph.get_state(cfg).values == ref.get_state(cfg).values
        assert saver.verify(thread).bad == []  # the local copy was replaced
    assert [(e.tier, e.kind) for e in events] == [("sqlite", "write")]
    assert events[0].served_instead.startswith("intact copy from")


def test_a_pending_write_lost_in_the_local_cache_alone_under_a_kept_lease_is_served(
    make_saver: SaverFactory,
) -> None:
    """An ancestor's pending write (the DeltaChannel's items) deleted from
    the local file only: the local cache does not hold what this saver wrote
    under its lease any more, so the walk asks every tier for it."""
    thread = new_thread()
    cfg = _delta_cfg(thread)
    ref = wide_delta_graph().compile(checkpointer=InMemorySaver())
    ref.invoke({"items": [], "n": 0, "limit": 20}, cfg)
    with make_saver("sqlite+redis+postgres", lease_linger=30.0) as saver:
        listening(saver)
        graph = wide_delta_graph().compile(checkpointer=saver)
        graph.invoke({"items": [], "n": 0, "limit": 20}, cfg, durability="sync")
        calls = count_shared_reads(saver)
        assert graph.get_state(cfg).values == ref.get_state(cfg).values
        assert sum(calls.values()) == 0  # read locally while nothing is lost
        with sqlite3.connect(saver.sqlite_path or "") as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT checkpoint_id FROM lgd_writes WHERE thread_id = ? AND channel = 'items' "
                    "ORDER BY checkpoint_id DESC",
                    (thread,),
                )
            ]
            gone = conn.execute(
                "DELETE FROM lgd_writes WHERE thread_id = ? AND checkpoint_id = ? AND channel = 'items'",
                (thread, ids[5]),
            ).rowcount
            assert gone == 1
        values = graph.get_state(cfg).values
        assert values == ref.get_state(cfg).values and len(values["items"]) == 20
        assert calls["postgres.list_page"] > 0


def test_a_lease_taken_during_an_outage_is_not_kept(make_saver: SaverFactory, postgres_proxy: tuple[Any, str]) -> None:
    """A runs while Postgres is cut off from it, so its lease is in Redis.
    Once Postgres is back, replica B takes the thread's lease there, where
    it never sees A's: had A kept its Redis lease, it would serve its own
    older state. A gives it back instead, and reads every tier."""
    proxy, proxied = postgres_proxy
    thread = new_thread()
    cfg = {"configurable": {"thread_id": thread}}
    counting = looping(lambda s: {"messages": [f"m{s['n']}"], "n": s["n"] + 1}, 3)
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite", postgres=proxied, lease_linger=30.0) as a:
        listening(a)
        proxy.cut()
        assert counting.compile(checkpointer=a).invoke({"messages": [], "n": 0}, cfg)["n"] == 3
        assert a._runtime.leases.kept(thread, time.monotonic()) is None
        proxy.restore()
        with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            five = looping(lambda s: {"messages": [f"m{s['n']}"], "n": s["n"] + 1}, 5)
            assert five.compile(checkpointer=b).invoke({"messages": [], "n": 0}, cfg)["n"] == 5
            newest = b.get_tuple(cfg)
        assert newest is not None
        served = a.get_tuple(cfg)
        assert served is not None and served.checkpoint["id"] == newest.checkpoint["id"]


# -- the kept lease is renewed while its replica lives, and lapses soon after it dies ----


def test_a_kept_lease_is_renewed_while_its_saver_lives_and_given_back_when_the_linger_ends(
    make_saver: SaverFactory,
) -> None:
    """The tier's expiry of a kept lease is a short window, renewed by the
    listener: the lease stays kept (and trusted) past that window for as long
    as ``lease_linger`` says, then the listener gives it back."""
    thread = new_thread()
    with make_saver("sqlite+postgres", lease_linger=3 * KEPT_WINDOW_S) as saver:
        listening(saver)
        counting_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, config_of(thread))

        def expiry() -> float:
            with psycopg.connect(saver.postgres_url or "") as conn:
                row = conn.execute("SELECT expires_at FROM lgd_leases WHERE thread_id = %s", (thread,)).fetchone()
            assert row is not None
            return float(row[0])

        def expiry_left() -> float:
            with psycopg.connect(saver.postgres_url or "") as conn:
                row = conn.execute(
                    "SELECT expires_at - extract(epoch FROM clock_timestamp()) FROM lgd_leases WHERE thread_id = %s",
                    (thread,),
                ).fetchone()
            assert row is not None
            return float(row[0])

        first = expiry()
        assert 0.0 < expiry_left() <= KEPT_WINDOW_S
        # Renewed past its first window, never more than a window ahead, and trusted.
        wait_until(lambda: expiry() > first + KEPT_WINDOW_S, "the kept lease was not renewed")
        assert 0.0 < expiry_left() <= KEPT_WINDOW_S
        assert saver._runtime.leases.kept(thread, time.monotonic()) is not None
        # Once the linger has ended: given back (expiry 0), and trusted no more.
        wait_until(lambda: expiry_left() < -1e8, "the kept lease was not given back when its linger ended")
        assert saver._runtime.leases.kept(thread, time.monotonic()) is None


def test_a_replica_killed_while_it_keeps_a_lease_is_taken_over_once_the_window_lapses(
    request: pytest.FixtureRequest, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Replica A (another machine, as far as leases tell) runs a thread and
    keeps its lease (the default), then is SIGKILLed: nobody hears B's
    request. B, with the default ``on_busy="raise"``, waits out the kept
    lease's window and runs the thread, with A's run in it and one history."""
    import multiprocessing
    import signal

    from tests import lease_worker
    from tests.test_lease import _history_is_one_line, _saver_kwargs

    spawn = multiprocessing.get_context("spawn")
    thread = new_thread()
    ran, results = spawn.Event(), spawn.Queue()
    a_kwargs = _saver_kwargs(request, tmp_path, "sqlite+redis+postgres", "a")
    a = spawn.Process(target=lease_worker.keep_and_die, args=(a_kwargs, thread, "another-host", ran, results))
    a.start()
    try:
        assert ran.wait(120), results.get(timeout=1) if not results.empty() else "A did not run"
        status, out, holder = results.get(timeout=10)
        assert status == "ok" and out["count"] == 1, out
        assert holder.startswith("another-host:")
    finally:
        os.kill(a.pid, signal.SIGKILL)
        a.join(60)  # a liveness bound: a SIGKILLed process ends
    b_kwargs = _saver_kwargs(request, tmp_path, "sqlite+redis+postgres", "b")
    with DurableSaver(**durable_options(b_kwargs)) as b, caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        # Kept by A when it died: B does not get ThreadBusy, it waits the window out.
        out = lease_worker.counter().compile(checkpointer=b).invoke({"hits": ["b"]}, config_of(thread))
        assert out == {"count": 2, "hits": ["kept", "b"]}
        took_over = [r.getMessage() for r in caplog.records if "took over the writer lease" in r.getMessage()]
        assert len(took_over) == 1 and f"from {holder} (expired;" in took_over[0], took_over
        _history_is_one_line(b, thread)


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "sqlite+postgres", "sqlite+redis"])
def test_a_thread_stopped_at_an_interrupt_is_handed_to_the_replica_that_answers_it(
    make_saver: SaverFactory, tiers: str
) -> None:
    """The run that stopped at the interrupt is seen to end only when the
    garbage collector frees its stream writer (its exception keeps a
    reference cycle). Another replica's request for the thread runs the
    collector in the holder, which then hands the lease over at once."""
    from langgraph.types import Command

    from .versioned_app import cfg, graph_v1

    a = make_saver(tiers, sqlite_name="a.sqlite")
    # b waits (asking again as it does) for less than the lease's TTL of 30 s:
    # only a hand-off lets it in before the lease would expire.
    b = make_saver(tiers, sqlite_name="b.sqlite", leases=Leases(on_busy="wait", wait=20.0))
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()  # a collector that has not come round yet
    try:
        with a, b:
            listening(a)
            out = graph_v1().compile(checkpointer=a).invoke({"topic": "cats"}, cfg("hitl"))
            assert out["__interrupt__"]
            started = time.monotonic()
            answered = graph_v1().compile(checkpointer=b).invoke(Command(resume="yes"), cfg("hitl"))
            assert answered["log"] == ["draft:cats", "ask1:yes", "summarize:cats"]
            assert time.monotonic() - started < 20.0  # handed over, not waited out
    finally:
        if collecting:
            gc.enable()
