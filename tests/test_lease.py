"""One writer per thread: writer leases with fencing tokens (lease.py).

Real tiers and real processes; the decisions in lease.py are also tested on
their own, with made-up clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis as redis_lib
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph

from langgraph_durable import ConfigError, DurableError, DurableSaver, LeaseLost, ThreadBusy, reject
from langgraph_durable.engine.leases.book import LeaseBook
from langgraph_durable.metrics import TierStats
from langgraph_durable.model.lease import (
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEASE_WAIT_S,
    KEPT_WINDOW_S,
    BusyWait,
    Fence,
    Lease,
    ProcessId,
    Verdict,
    decide,
    holder_gone,
    lease_lost,
    new_holder,
    parse_holder,
    process_started,
    renew_every,
    this_process,
    thread_busy,
)
from langgraph_durable.validation import RUNTIME_KEY
from tests import lease_worker
from tests.conftest import REDIS_URL, unavailable
from tests.flat_options import durable_options
from tests.graphs import LoopState, subgraph_graph
from tests.waiting import await_until

SPAWN = multiprocessing.get_context("spawn")


# -- lease.py: the decisions, no servers ------------------------------------------------


def test_decide_takes_a_new_released_own_or_expired_lease_with_a_new_token() -> None:
    me, other = "h:1:me", "h:2:other"
    assert decide(None, me, 100.0) == Verdict(True, 1, "new")
    assert decide(Lease("t", "", 4, 0.0), me, 100.0) == Verdict(True, 5, "released")
    assert decide(Lease("t", me, 4, 200.0), me, 100.0) == Verdict(True, 5, "ours")
    assert decide(Lease("t", other, 4, 100.0), me, 100.0) == Verdict(True, 5, "expired")
    assert decide(Lease("t", other, 4, 100.5), me, 100.0) == Verdict(False, 4, "busy")
    assert decide(Lease("t", other, 4, 100.5), me, 100.0, holder_gone=True) == Verdict(True, 5, "holder gone")


def test_busy_wait_backs_off_wakes_at_expiry_and_gives_up_at_the_limit() -> None:
    wait = BusyWait(limit=2.0, started=10.0, first=0.1, most=0.4)
    assert [wait.next_delay(10.0, 60.0) for _ in range(4)] == [0.1, 0.2, 0.4, 0.4]
    assert wait.next_delay(10.0, 0.05) == pytest.approx(0.15)  # expires sooner: look right after
    assert wait.next_delay(11.9, 60.0) == pytest.approx(0.1)  # never past the limit
    assert wait.next_delay(12.0, 60.0) is None


def test_holder_identity_and_known_dead_holders() -> None:
    holder = new_holder()
    me = parse_holder(holder)
    assert me == this_process() and me.pid == os.getpid() and me.place and me.start
    assert holder.startswith(f"{me.host}:{me.place}:{me.pid}:{me.start}:")
    assert parse_holder("not a holder") is None
    assert parse_holder("h:4242:abcd") == ProcessId("h", "", 4242, "")  # written before places were

    def gone(other: ProcessId, live: dict[int, str]) -> bool:
        text = f"{other.host}:{other.place or '-'}:{other.pid}:{other.start or '-'}:abcd"
        return holder_gone(text, me=me, started=live.get)

    here = ProcessId(me.host, me.place, 4242, "777")
    assert gone(here, {}), "no process has its pid here: dead for sure"
    assert gone(here, {4242: "778"}), "its pid belongs to a process started later: dead for sure"
    assert not gone(here, {4242: "777"}), "alive"
    assert not gone(here, {4242: ""}), "its start time cannot be read: unsure, alive"
    assert not gone(ProcessId(me.host, me.place, 4242, ""), {4242: "9"}), "no start time recorded: unsure"
    # Same host name, another PID namespace or machine boot (host-network
    # containers): its pid means nothing here, dead or not.
    assert not gone(ProcessId(me.host, "0123456789ab", 4242, "777"), {})
    assert not gone(ProcessId(me.host, "", 4242, "777"), {})
    assert not holder_gone("h:4242:abcd", me=me, started={}.get)  # an old holder: waited for
    assert not gone(ProcessId("elsewhere", me.place, 4242, "777"), {})
    assert not holder_gone(holder, me=me, started={}.get)  # this process
    assert gone(ProcessId(me.host, me.place, me.pid, "1"), {}), "this pid's previous owner"
    assert process_started(os.getpid()) == me.start
    assert process_started(_a_dead_pid()) is None


def _a_dead_pid() -> int:
    proc = SPAWN.Process(target=int)
    proc.start()
    proc.join(60)
    assert proc.pid is not None
    return proc.pid


class _Runtime:
    """Like LangGraph's Runtime: no weakref, a RunControl shared with its
    subgraphs, and a stream writer made per run."""

    __slots__ = ("control", "stream_writer")

    def __init__(self, control: object | None = None, writer: Any = None) -> None:
        self.control = control if control is not None else object()
        self.stream_writer = writer if writer is not None else (lambda chunk: None)


def test_lease_book_tells_runs_apart_by_their_runtime() -> None:
    book = LeaseBook(ttl=5.0)
    run = _Runtime()
    lease = Lease("t", book.holder, 7, 100.0)
    book.begin(run, lease)
    fence = Fence("t", book.holder, 7, 5.0)
    assert book.fence_for("t", {RUNTIME_KEY: run}) == (fence, True)
    # a subgraph of the run: another Runtime sharing the run's control
    assert book.fence_for("t", {RUNTIME_KEY: _Runtime(run.control), "checkpoint_ns": "sub:1"}) == (fence, True)
    # a plain call (update_state, saver.put) uses the saver's lease
    assert book.fence_for("t", {}) == (fence, False)
    assert book.fence_for("other thread", {}) == (None, False)
    # an older run of the same saver is fenced out by the newer one
    with pytest.raises(LeaseLost, match="newer run"):
        book.fence_for("t", {RUNTIME_KEY: _Runtime()})
    with pytest.raises(LeaseLost, match="newer run"):
        book.fence_for("t", {RUNTIME_KEY: _Runtime(), "checkpoint_ns": "sub:1"})
    # released while the run was going
    assert book.drop("t", token=8) is None and book.drop("t") == lease
    with pytest.raises(LeaseLost, match="released"):
        book.fence_for("t", {RUNTIME_KEY: run})


def test_a_lease_kept_for_a_write_behind_hand_off_is_given_back_once_and_forgotten_after_its_ttl() -> None:
    book = LeaseBook(ttl=10)
    lease = Lease("t", book.holder, 3, 100.0, tier="postgres")
    book.hand_off_later(lease, 0.0)
    assert book.handoffs(5.0) == [lease]
    assert not book.handed(Lease("t", book.holder, 2, 100.0, tier="postgres"))  # an older run's token
    assert book.handoffs(9.9) == [lease]
    assert book.handoffs(10.0) == []  # expired in its tier by now: nobody waits for it any more
    book.hand_off_later(lease, 20.0)
    assert book.handed(lease)
    assert not book.handed(lease)  # given back once
    assert book.handoffs(21.0) == []


def test_lease_book_ends_a_run_when_its_stream_writer_is_freed_and_keeps_nothing_alive() -> None:
    book = LeaseBook()
    ended: list[Lease] = []
    run, sub = _Runtime(), None
    writer = weakref.ref(run.stream_writer)
    first = Lease("t", book.holder, 1, 0.0)
    book.begin(run, first, ended.append)
    # a subgraph's end (its own stream writer freed) ends nothing
    sub = _Runtime(run.control)
    assert book.fence_for("t", {RUNTIME_KEY: sub, "checkpoint_ns": "sub:1"})[1]
    del sub
    assert ended == [] and book.held("t") == first
    # the book holds neither the Runtime nor its writer: the run's end frees both
    del run
    assert writer() is None
    assert ended == [first] and book.held("t") is None
    # a run that ended after a newer run took the thread ends nothing
    old, new = _Runtime(), _Runtime()
    book.begin(old, Lease("t", book.holder, 2, 0.0), ended.append)
    book.begin(new, Lease("t", book.holder, 3, 0.0), ended.append)
    del old
    assert ended == [first] and book.held("t") == Lease("t", book.holder, 3, 0.0)
    del new
    assert ended == [first, Lease("t", book.holder, 3, 0.0)]
    # release_thread / close: forgotten, so its end releases nothing more
    run = _Runtime()
    book.begin(run, Lease("t", book.holder, 4, 0.0), ended.append)
    assert book.drop("t") is not None
    del run
    assert len(ended) == 2


def test_lease_book_keeps_a_run_it_cannot_watch_until_the_ttl() -> None:
    class Writer:
        __slots__ = ()  # no weakref

        def __call__(self, chunk: Any) -> None: ...

    book = LeaseBook()
    run = _Runtime(writer=Writer())
    book.begin(run, Lease("t", book.holder, 1, 0.0), lambda lease: pytest.fail("no end can be seen"))
    assert book.fence_for("t", {RUNTIME_KEY: run})[1]
    with pytest.raises(LeaseLost, match="newer run"):
        book.fence_for("t", {RUNTIME_KEY: _Runtime(run.control, Writer())})


def test_lease_book_forgets_the_least_recently_used_threads() -> None:
    book = LeaseBook(max_threads=2)
    runs = [_Runtime() for _ in range(3)]
    for name, run in zip("ab", runs, strict=False):
        assert book.begin(run, Lease(name, book.holder, 1, 0.0)) == []
    book.fence_for("a", {})  # a is used again
    assert book.begin(runs[2], Lease("c", book.holder, 1, 0.0)) == [Lease("b", book.holder, 1, 0.0)]
    assert book.held("b") is None and book.held("a") is not None


def test_lease_options_are_checked() -> None:
    for bad in ({"lease_ttl": 0}, {"lease_ttl": "5"}, {"on_busy": "queue"}, {"lease_wait": -1}):
        with pytest.raises(ConfigError):
            DurableSaver(sqlite=":memory:", **durable_options(bad))
    assert DEFAULT_LEASE_WAIT_S >= 2 * DEFAULT_LEASE_TTL_S


def test_errors_say_who_holds_the_thread_and_what_to_do() -> None:
    busy = thread_busy("t1", Lease("t1", "host:12:ab", 3, 112.5), 100.0, waited=None)
    assert isinstance(busy, DurableError)
    assert busy.holder == "host:12:ab" and busy.expires_in == 12.5 and busy.token == 3
    for part in ("t1", "host:12:ab", "12.5 s", "on_busy='wait'", "release_thread('t1')", "Nothing was written"):
        assert part in str(busy)
    lost = lease_lost(Fence("t1", "me", 3, 30.0), Lease("t1", "host:99:cd", 4, 0.0), "postgres")
    assert isinstance(lost, DurableError) and lost.holder == "host:99:cd" and lost.token == 3
    for part in ("t1", "host:99:cd", "not stored in the postgres tier", "graph.invoke(None, config)"):
        assert part in str(lost)


# -- two real processes on one thread -------------------------------------------------


def _saver_kwargs(request: pytest.FixtureRequest, tmp_path: Path, tiers: str, name: str) -> dict[str, Any]:
    """Keyword arguments for a DurableSaver in another process; the same
    shared tiers as `make_saver`, a SQLite file of its own unless `tiers` is
    SQLite alone (then the file is what the processes share)."""
    parts = tiers.split("+")
    kwargs: dict[str, Any] = {"sqlite": None}
    if "sqlite" in parts:
        kwargs["sqlite"] = str(tmp_path / ("shared.sqlite" if parts == ["sqlite"] else f"{name}.sqlite"))
    if "redis" in parts:
        kwargs["redis"] = REDIS_URL
        kwargs["redis_key_prefix"] = request.getfixturevalue("redis_prefix")
    if "postgres" in parts:
        kwargs["postgres"] = request.getfixturevalue("postgres_url")
    return kwargs


def _history_is_one_line(saver: DurableSaver, thread_id: str) -> list[Any]:
    """Every checkpoint's parent is the one written just before it."""
    history = sorted(saver.list({"configurable": {"thread_id": thread_id}}), key=lambda t: t.checkpoint["id"])
    assert history[0].parent_config is None
    for parent, child in itertools.pairwise(history):
        assert child.parent_config is not None
        assert child.parent_config["configurable"]["checkpoint_id"] == parent.checkpoint["id"], "the history forked"
    return history


def _collect(results: Any, n: int, procs: list[Any]) -> list[Any]:
    out = [results.get(timeout=120) for _ in range(n)]
    for p in procs:
        p.join(60)  # a liveness bound: the worker reported, so it ends
        assert not p.is_alive(), f"worker {p.pid} did not exit after reporting"
    return out


@pytest.mark.parametrize("tiers", ["sqlite", "redis+postgres", "sqlite+redis+postgres"])
def test_two_processes_increment_one_thread_without_losing_a_run(
    request: pytest.FixtureRequest, tmp_path: Path, make_saver: Any, tiers: str
) -> None:
    runs, thread_id = 20, f"counter-{uuid.uuid4().hex[:8]}"
    start, results = SPAWN.Event(), SPAWN.Queue()
    procs = []
    for tag in ("A", "B"):
        kwargs = _saver_kwargs(request, tmp_path, tiers, tag) | {"on_busy": "wait", "lease_ttl": 2.0, "lease_wait": 60}
        procs.append(SPAWN.Process(target=lease_worker.increments, args=(kwargs, thread_id, tag, runs, start, results)))
    for p in procs:
        p.start()
    start.set()
    outcomes = _collect(results, 2, procs)
    assert sorted(outcomes) == [("ok", "A"), ("ok", "B")], outcomes
    check = make_saver(tiers, sqlite_name="check.sqlite") if tiers != "sqlite" else None
    with check or DurableSaver(sqlite=str(tmp_path / "shared.sqlite")) as saver:
        state = saver.get_tuple({"configurable": {"thread_id": thread_id}}).checkpoint["channel_values"]
        assert state["count"] == 2 * runs
        assert sorted(state["hits"]) == sorted(f"{t}-{i}" for t in "AB" for i in range(runs))
        _history_is_one_line(saver, thread_id)


@pytest.mark.parametrize("tiers", ["sqlite", "redis+postgres"])
def test_a_second_process_gets_thread_busy_and_writes_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, make_saver: Any, tiers: str
) -> None:
    thread_id = f"busy-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    entered, proceed, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    kwargs = _saver_kwargs(request, tmp_path, tiers, "holder")
    holder = SPAWN.Process(target=lease_worker.hold, args=(kwargs, thread_id, entered, proceed, results))
    holder.start()
    try:
        assert entered.wait(60), "the holder never started its run"
        mine = _saver_kwargs(request, tmp_path, tiers, "loser")
        stats = TierStats()
        with DurableSaver(**durable_options(mine), metrics=stats) as loser:  # default on_busy="raise"
            graph = lease_worker.counter().compile(checkpointer=loser)
            with pytest.raises(ThreadBusy) as busy:
                graph.invoke({"hits": ["loser"]}, config)
            # Refused at once: it looked at the lease a few times within the
            # hand-off grace (polls doubling from 1 ms: about 11 in 1 s),
            # never waited for it (lease_wait: polls every 0.5 s for a minute).
            looks = stats.tier("postgres" if "postgres" in tiers else "sqlite", ["read_lease"]).calls
            assert 1 <= looks <= 16, looks
            assert "pass leases=Leases(on_busy='wait') to wait for it" in str(busy.value)
            assert busy.value.thread_id == thread_id and busy.value.expires_in > 0
            assert f":{holder.pid}:" in busy.value.holder
            with pytest.raises(ThreadBusy):  # update_state is refused too
                graph.update_state(config, {"hits": ["loser update"]})
    finally:
        proceed.set()
    assert _collect(results, 1, [holder])[0][0] == "ok"
    with DurableSaver(**durable_options(_saver_kwargs(request, tmp_path, tiers, "check"))) as check:
        history = _history_is_one_line(check, thread_id)
        assert check.get_tuple(config).checkpoint["channel_values"] == {"count": 1, "hits": ["holder"]}
        assert not any("loser" in repr(t.checkpoint) + repr(t.pending_writes) for t in history)


def test_a_killed_holder_on_this_host_is_taken_over_at_once(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A crashed worker restarted on the same machine must not wait out the TTL."""
    thread_id = "crashed"
    entered, proceed, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    kwargs = _saver_kwargs(request, tmp_path, "sqlite", "holder") | {"lease_ttl": 300.0}
    holder = SPAWN.Process(target=lease_worker.hold, args=(kwargs, thread_id, entered, proceed, results))
    holder.start()
    assert entered.wait(60)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(60)  # a liveness bound: a SIGKILLed process ends
    assert not holder.is_alive()
    with DurableSaver(sqlite=kwargs["sqlite"]) as resumer:
        out = (
            lease_worker.counter()
            .compile(checkpointer=resumer)
            .invoke(None, {"configurable": {"thread_id": thread_id}})
        )
        assert out == {"count": 1, "hits": ["holder"]}


HOLDER_PID = 5000  # in its own PID namespace; the contender's has no such process


def _in_new_pid_namespace(pid: int, *argv: str) -> subprocess.Popen[bytes]:
    """`argv` as process `pid` of a PID namespace (and /proc) of its own, as
    in a container that shares the host's network and host name
    (``hostNetwork: true``, ``docker --network host``)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        unavailable("unshare (util-linux) is not installed")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        unavailable(f"this machine does not let the tests make PID namespaces: {probe.stderr.decode().strip()}")
    # The shell is pid 1; the next process it starts gets ns_last_pid + 1.
    script = f'echo {pid - 1} > /proc/sys/kernel/ns_last_pid && "$@"; exit $?'
    return subprocess.Popen(
        [unshare, "--pid", "--fork", "--mount-proc", "sh", "-c", script, "sh", *argv], cwd=Path(__file__).parent.parent
    )


@pytest.mark.parametrize(("tiers", "face"), [("sqlite", "sync"), ("redis+postgres", "async")])
def test_a_live_holder_in_another_pid_namespace_on_this_host_is_not_taken_for_dead(
    request: pytest.FixtureRequest, tmp_path: Path, tiers: str, face: str
) -> None:
    """Two containers on one host name: the holder's pid does not exist in
    the contender's PID namespace, yet the holder is alive. The contender
    must get ThreadBusy and the holder's run must end well."""
    import json

    thread_id = f"ns-{uuid.uuid4().hex[:8]}"
    kwargs = json.dumps(_saver_kwargs(request, tmp_path, tiers, "holder") | {"lease_ttl": 300.0})
    program = [sys.executable, "-m", "tests.lease_worker"]
    holder = _in_new_pid_namespace(HOLDER_PID, *program, "hold", kwargs, thread_id, str(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "entered").exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never started its run"
            time.sleep(0.01)
        contender_kwargs = json.dumps(_saver_kwargs(request, tmp_path, tiers, "contender"))
        contender = _in_new_pid_namespace(2, *program, f"contend-{face}", contender_kwargs, thread_id, str(tmp_path))
        assert contender.wait(120) == 0
        outcome = json.loads((tmp_path / f"contend-{face}.json").read_text())
        assert outcome[:2] == ["error", "ThreadBusy"], outcome
        assert outcome[-1] == 2 and f":{HOLDER_PID}:" in outcome[2], "pids as planned"
    finally:
        (tmp_path / "proceed").touch()
        assert holder.wait(120) == 0
    held = json.loads((tmp_path / "hold.json").read_text())
    assert held == ["ok", {"count": 1, "hits": ["holder"]}, HOLDER_PID], held


# -- takeover after expiry: the stale holder's write is fenced out -------------------------


@pytest.mark.parametrize("tiers", ["sqlite", "redis", "postgres", "sqlite+redis+postgres"])
@pytest.mark.parametrize("durability", ["async", "sync"])
def test_a_holder_that_stalls_past_the_ttl_loses_the_thread_and_its_write(
    make_saver: Any, tiers: str, durability: str, caplog: pytest.LogCaptureFixture
) -> None:
    thread_id = f"stall-{durability}"
    config = {"configurable": {"thread_id": thread_id}}
    # Replicas: their own SQLite files, unless SQLite alone is what they share.
    own = (lambda name: "shared.sqlite") if tiers == "sqlite" else (lambda name: f"{name}.sqlite")
    a = make_saver(tiers, sqlite_name=own("a"), lease_ttl=0.5)
    b = make_saver(tiers, sqlite_name=own("b"), lease_ttl=5.0, on_busy="wait", lease_wait=20)
    with a, b:
        with lease_worker.stalled_run(a, config, durability=durability) as errors:
            with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
                out = lease_worker.counter().compile(checkpointer=b).invoke({"hits": ["B"]}, config)
            # B took A's lease over because it had expired (A holds it while it stalls).
            took_over = [r.getMessage() for r in caplog.records if "took over the writer lease" in r.getMessage()]
            assert len(took_over) == 1 and f"thread {thread_id!r}" in took_over[0], took_over
            assert f"from {a._runtime.leases.holder} (expired;" in took_over[0], took_over
        assert len(errors) == 1 and isinstance(errors[0], LeaseLost), errors
        assert out == {"count": 1, "hits": ["A", "B"]}
        # Nothing A wrote after the takeover is in the authoritative tier
        # (latest, list and pending writes are all answered by it).
        history = _history_is_one_line(b, thread_id)
        assert not [
            (t.checkpoint, t.pending_writes)
            for t in history
            if "stale A" in repr(t.checkpoint) + repr(t.pending_writes)
        ]
        assert b.get_tuple(config).checkpoint["channel_values"] == {"count": 1, "hits": ["A", "B"]}
        # A can run the thread again once B lets go.
        b.release_thread(thread_id)
        assert lease_worker.counter().compile(checkpointer=a).invoke(None, config)["count"] == 1


# -- the holder itself: time travel, update_state, subgraphs, release ------------------------


@pytest.mark.parametrize("tiers", ["sqlite", "redis", "postgres", "sqlite+redis+postgres"])
def test_time_travel_and_update_state_still_work_for_the_holder(make_saver: Any, tiers: str) -> None:
    config = {"configurable": {"thread_id": "travel"}}
    with make_saver(tiers) as saver:
        graph = lease_worker.counter().compile(checkpointer=saver)
        for i in range(3):
            graph.invoke({"hits": [f"run {i}"]}, config)
        old = next(s for s in graph.get_state_history(config) if s.values.get("count") == 1 and not s.next)
        # replay from an older checkpoint: a fork, run by the lease holder
        assert graph.invoke({"hits": ["fork"]}, old.config)["count"] == 2
        updated = graph.update_state(old.config, {"count": 10})
        assert graph.invoke({"hits": ["after update"]}, updated)["count"] == 11
        assert graph.get_state(config).values["count"] == 11
        # subgraph writes belong to their root run
        sub = subgraph_graph().compile(checkpointer=saver)
        sub_config = {"configurable": {"thread_id": "travel-sub"}}
        assert sub.invoke({"messages": [], "n": 0}, sub_config)["n"] == 2


async def test_the_async_face_holds_fences_and_releases(make_saver: Any) -> None:
    config = {"configurable": {"thread_id": "async"}}
    entered, proceed = asyncio.Event(), asyncio.Event()

    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await proceed.wait()
        return {"count": state.get("count", 0) + 1}

    async with (
        make_saver("sqlite+redis", sqlite_name="a.sqlite") as a,
        make_saver("sqlite+redis", sqlite_name="b.sqlite") as b,
    ):
        ga, gb = lease_worker.counter().compile(checkpointer=a), lease_worker.counter().compile(checkpointer=b)
        assert (await ga.ainvoke({"hits": ["a"]}, config))["count"] == 1
        # a's run ended and gave the thread back: b runs it at once ...
        assert (await gb.ainvoke({"hits": ["b"]}, config))["count"] == 2
        # ... but not while a run of a is going
        run = asyncio.ensure_future(lease_worker.counter(slow).compile(checkpointer=a).ainvoke({"hits": ["a"]}, config))
        await asyncio.wait_for(entered.wait(), 30)
        with pytest.raises(ThreadBusy):
            await gb.ainvoke({"hits": ["b"]}, config)
        with pytest.raises(ThreadBusy):
            await gb.aupdate_state(config, {"count": 5})
        proceed.set()
        assert (await run)["count"] == 3
        # update_state outside a run takes the lease for its one write
        await ga.aupdate_state(config, {"count": 20})
        assert (await gb.ainvoke({"hits": ["b"]}, config))["count"] == 21
        # arelease_thread gives a lease back at once (here: of a run still going)
        entered.clear()
        proceed.clear()
        run = asyncio.ensure_future(lease_worker.counter(slow).compile(checkpointer=a).ainvoke({"hits": ["a"]}, config))
        await asyncio.wait_for(entered.wait(), 30)
        await a.arelease_thread("async")
        assert (await gb.ainvoke({"hits": ["b"]}, config))["count"] == 22
        proceed.set()
        with pytest.raises(LeaseLost):
            await run


# -- a run gives its lease back when it ends ---------------------------------------------


def _lease_record(saver: DurableSaver, thread_id: str) -> tuple[str, int] | None:
    with sqlite3.connect(saver.sqlite_path) as conn:
        # A released lease keeps its holder and token, with expiry 0: shown as holder "".
        return conn.execute(
            "SELECT CASE WHEN expires_at = 0 THEN '' ELSE holder END, token FROM lgd_leases WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()


def _writer_spy(writers: list[Any]) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        writers.append(weakref.ref(get_config()["configurable"][RUNTIME_KEY].stream_writer))
        return {"count": state.get("count", 0) + 1}

    return node


def test_langgraph_frees_a_runs_stream_writer_when_its_sync_run_ends(make_saver: Any) -> None:
    """Pins the run-end signal: LangGraph tells a checkpointer nothing when a
    run ends, but frees the run's stream writer (made per run, kept in its
    Runtime) as soon as ``invoke`` returns, without waiting for the garbage
    collector. If this fails after a LangGraph upgrade, leases outlive runs
    again (another replica gets ThreadBusy until lease_ttl): find another
    sign of the end of a run."""
    writers: list[Any] = []
    with make_saver("sqlite") as saver:
        graph = lease_worker.counter(_writer_spy(writers)).compile(checkpointer=saver)
        graph.invoke({"hits": ["x"]}, {"configurable": {"thread_id": "pin"}})
        assert len(writers) == 1
        assert writers[0]() is None, "LangGraph kept the run's stream_writer alive after invoke returned"
        # ... and the saver keeps nothing of the run: the lease is given back
        assert saver._runtime.leases.held("pin") is None
        assert _lease_record(saver, "pin") == ("", 1)


async def test_langgraph_frees_a_runs_stream_writer_when_its_async_run_ends(make_saver: Any) -> None:
    """The same for ``ainvoke`` (see the sync test); the release itself is a
    task on the event loop, done right after."""
    writers: list[Any] = []
    async with make_saver("sqlite") as saver:
        graph = lease_worker.counter(_writer_spy(writers)).compile(checkpointer=saver)
        await graph.ainvoke({"hits": ["x"]}, {"configurable": {"thread_id": "pin"}})
        assert len(writers) == 1
        assert writers[0]() is None, "LangGraph kept the run's stream_writer alive after ainvoke returned"
        assert saver._runtime.leases.held("pin") is None
        await await_until(lambda: _lease_record(saver, "pin") == ("", 1), "the run's lease was not given back")


def test_a_subgraph_ending_does_not_release_its_root_runs_lease(make_saver: Any) -> None:
    seen: dict[str, Any] = {}

    def inner(state: dict[str, Any]) -> dict[str, Any]:
        seen["sub writer"] = weakref.ref(get_config()["configurable"][RUNTIME_KEY].stream_writer)
        return {"messages": ["inner"], "n": state.get("n", 0) + 1}

    def after(state: dict[str, Any]) -> dict[str, Any]:
        gc.collect()  # whatever of the subgraph's run is garbage is gone
        seen["sub writer gone"] = seen["sub writer"]() is None
        seen["record"] = _lease_record(saver, "sub")
        seen["held"] = saver._runtime.leases.held("sub")
        return {"messages": ["after"]}

    sub = StateGraph(LoopState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    root = StateGraph(LoopState)
    root.add_node("child", sub.compile())
    root.add_node("after", after)
    root.add_edge(START, "child")
    root.add_edge("child", "after")
    root.add_edge("after", END)
    with make_saver("sqlite") as saver, make_saver("sqlite") as other:
        root.compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "sub"}})
        assert seen["sub writer gone"]  # the subgraph's run ended (it has a stream writer of its own) ...
        assert seen["held"] is not None and seen["record"] == (saver._runtime.leases.holder, seen["held"].token)
        # ... and the root run's end gave the thread back
        assert _lease_record(saver, "sub") == ("", seen["held"].token)
        assert root.compile(checkpointer=other).invoke(None, {"configurable": {"thread_id": "sub"}})["n"] == 1


def test_a_run_ended_by_an_error_or_a_custom_stream_is_released_by_the_garbage_collector(make_saver: Any) -> None:
    """Some runs leave their stream writer in a reference cycle (an error's
    traceback; ``stream_mode="custom"``): their end is seen at the next
    garbage collection, and the release is then sent from a worker thread
    (the collector may have interrupted code holding a tier's lock)."""
    config = {"configurable": {"thread_id": "cycles"}}

    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("node failed")

    # A's lease lasts far longer than B waits: only its release lets B run.
    with make_saver("sqlite", lease_ttl=3600) as a, make_saver("sqlite", on_busy="wait", lease_wait=60) as b:
        gb = lease_worker.counter().compile(checkpointer=b)
        for run in (
            lambda: list(
                lease_worker.counter().compile(checkpointer=a).stream({"hits": ["a"]}, config, stream_mode="custom")
            ),
            lambda: lease_worker.counter(fail).compile(checkpointer=a).invoke({"hits": ["a"]}, config),
        ):
            with contextlib.suppress(ValueError):
                run()
            gc.collect()
            # ThreadBusy after a minute (a liveness bound), unless A's run gave its lease back.
            gb.invoke({"hits": ["b"]}, config)


# -- two processes handing a thread to each other between runs -----------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", ["sqlite", "redis+postgres"])
def test_processes_hand_a_thread_to_each_other_between_runs(
    request: pytest.FixtureRequest, tmp_path: Path, make_saver: Any, tiers: str, face: str
) -> None:
    """Replicas behind a load balancer: each run of the thread may land on
    another process, right after the previous run ended. With the default
    on_busy="raise" and lease_ttl, no run is refused and none waits."""
    rounds, thread_id = 6, f"handoff-{face}-{uuid.uuid4().hex[:8]}"
    turns, results = [SPAWN.Event() for _ in range(rounds)], SPAWN.Queue()
    procs = [
        SPAWN.Process(
            target=lease_worker.alternate,
            args=(_saver_kwargs(request, tmp_path, tiers, tag), thread_id, tag, face, turns, mine, results),
        )
        for mine, tag in enumerate("AB")
    ]
    for p in procs:
        p.start()
    turns[0].set()
    outcomes = _collect(results, 2, procs)
    assert [o[0] for o in outcomes] == ["ok", "ok"], [o[2] if o[0] == "error" else o for o in outcomes]
    # Nobody waited for a lease to expire: each run found the thread given
    # back (with on_busy="raise", a lease still held would have been refused).
    took_over = [t for o in outcomes for t in o[1]]
    assert len(took_over) == rounds and not any(took_over), took_over
    with DurableSaver(**durable_options(_saver_kwargs(request, tmp_path, tiers, "check"))) as check:
        state = check.get_tuple({"configurable": {"thread_id": thread_id}}).checkpoint["channel_values"]
        assert state["count"] == rounds
        assert state["hits"] == [f"{'AB'[i % 2]}-{i}" for i in range(rounds)]
        _history_is_one_line(check, thread_id)


def test_close_releases_and_a_failed_start_keeps_nothing(make_saver: Any) -> None:
    config = {"configurable": {"thread_id": "closing"}}
    b = make_saver("sqlite+postgres", sqlite_name="b.sqlite")
    with make_saver("sqlite+postgres", sqlite_name="a.sqlite") as a:
        lease_worker.counter().compile(checkpointer=a).invoke({"hits": ["a"]}, config)
    with b:
        assert lease_worker.counter().compile(checkpointer=b).invoke({"hits": ["b"]}, config)["count"] == 2

    def refuse(ctx: Any) -> Any:
        return reject("not today")

    with (
        make_saver("sqlite+postgres", sqlite_name="c.sqlite", validators=[refuse]) as c,
        make_saver("sqlite+postgres", sqlite_name="d.sqlite") as d,
    ):
        with pytest.raises(DurableError, match="not today"):
            lease_worker.counter().compile(checkpointer=c).invoke(None, config)
        # the rejected run gave the lease back
        assert lease_worker.counter().compile(checkpointer=d).invoke({"hits": ["d"]}, config)["count"] == 3


def test_direct_saver_calls_take_a_lease_for_one_write(make_saver: Any) -> None:
    """Calls without a run (the conformance suite, update_state, scripts) keep
    working and leave the thread free."""
    with make_saver("sqlite") as a, make_saver("sqlite") as b:
        config = {"configurable": {"thread_id": "direct", "checkpoint_ns": ""}}
        stored = a.put(config, empty_checkpoint(), {"step": -1}, {})
        a.put_writes(stored, [("ch", 1)], "task")
        stored = b.put(stored, empty_checkpoint(), {"step": 0}, {})  # not busy: a let go
        assert len(list(b.list(config))) == 2


@pytest.mark.parametrize(
    ("tiers", "where"),
    [("sqlite", "sqlite"), ("sqlite+redis", "redis"), ("redis+postgres", "postgres")],
)
def test_the_lease_lives_in_the_most_authoritative_tier(make_saver: Any, tiers: str, where: str) -> None:
    def lease_records(saver: DurableSaver) -> dict[str, Any]:
        """Each tier's lease record of thread w: (holder, seconds left on the server's clock)."""
        found: dict[str, Any] = {}
        if "sqlite" in tiers:
            with sqlite3.connect(saver.sqlite_path) as conn:
                row = conn.execute("SELECT holder, expires_at FROM lgd_leases WHERE thread_id = 'w'").fetchone()
                found["sqlite"] = row and (row[0], row[1] - time.time())
        if "redis" in tiers:
            client = redis_lib.Redis.from_url(REDIS_URL)
            record = client.hmget(f"{saver.redis_key_prefix}:{{w}}:lease", ["holder", "expires_at"])
            sec, usec = client.time()
            found["redis"] = None if record[0] is None else (record[0].decode(), float(record[1]) - (sec + usec / 1e6))
            client.close()
        if "postgres" in tiers:
            with psycopg.connect(saver.postgres_url) as conn:
                found["postgres"] = conn.execute(
                    "SELECT holder, expires_at - extract(epoch FROM clock_timestamp()) FROM lgd_leases "
                    "WHERE thread_id = 'w'"
                ).fetchone()
        return {tier: record for tier, record in found.items() if record is not None}

    during: dict[str, Any] = {}

    def look(state: dict[str, Any]) -> dict[str, Any]:
        during.update(lease_records(saver))
        return {"count": 1}

    with make_saver(tiers, lease_ttl=3600.0) as saver:
        lease_worker.counter(look).compile(checkpointer=saver).invoke(
            {"hits": ["x"]}, {"configurable": {"thread_id": "w"}}
        )
        # while the run went on: held, for the TTL (not the default 30 s), on
        # the server's clock; the 10 minutes of slack are for a loaded machine
        assert list(during) == [where]
        holder, left = during[where]
        assert holder == saver._runtime.leases.holder and 3000.0 < left <= 3600.0, left
        # after it: given back, or, where a local cache fronts a shared tier,
        # kept (``lease_linger``) for a short window the listener renews
        after = lease_records(saver)
        released = after[where][1] < -1e8  # expires_at 0: given back (the holder is kept)
        # Kept: expiring within the kept window, not the TTL. The listener
        # renews it every KEPT_RENEW_S; on a loaded machine a renewal may be
        # late enough for that expiry to have just passed, which is still not
        # a release.
        kept = -1e8 < after[where][1] <= KEPT_WINDOW_S
        assert list(after) == [where] and after[where][0] == holder and (kept if tiers == "sqlite+redis" else released)
        saver.release_thread("w")
        assert lease_records(saver)[where][1] < -1e8


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres"])
@pytest.mark.parametrize("face", ["sync", "async"])
async def test_renew_leases_renews_only_this_holders_unreleased_leases_with_their_tokens(
    make_saver: Any, kind: str, face: str
) -> None:
    """The listener's bulk renewal of kept leases, on each tier and face:
    a lease is renewed only if it still carries the holder and the token
    asked for and was not given back; the rest are left as they are."""
    async with make_saver(kind, lease_ttl=3600.0) as saver:
        if face == "sync":
            tier = saver._sync_chain().tier_named(kind)
            call: Any = lambda name, *args: asyncio.to_thread(getattr(tier, name), *args)  # noqa: E731
            await asyncio.to_thread(saver.setup)
        else:
            tier = saver._async_chain().tier_named(kind)
            call = lambda name, *args: getattr(tier, name)(*args)  # noqa: E731
            await saver.asetup()
        me, other = "h:1:me", "h:2:other"
        taken = {t: await call("swap_lease", t, None, me if t != "theirs" else other, 3, 1.0)
                 for t in ("mine", "stale", "released", "theirs")}  # fmt: skip
        await call("release_lease", "released", me, 3)
        renewed = await call(
            "renew_leases", me, [("mine", 3), ("stale", 2), ("released", 3), ("theirs", 3), ("none", 1)], 600.0
        )
        assert renewed == {"mine"}
        after = {t: (await call("read_lease", t))[0] for t in taken}
        now = (await call("read_lease", "mine"))[1]
        assert after["mine"].expires_at - now > 500.0  # renewed: 600 s from the tier's now
        assert after["stale"].expires_at == taken["stale"].expires_at  # another token: untouched
        assert after["released"].expires_at == 0.0
        assert after["theirs"].holder == other and after["theirs"].expires_at == taken["theirs"].expires_at
        assert await call("renew_leases", me, [], 600.0) == set()


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_sqlite_fenced_write_renews_the_lease_only_once_it_was_renewed_a_while_ago(
    tmp_path: Path, face: str
) -> None:
    """As in Postgres, a fenced write renews its lease only when the lease
    was last renewed `renew_every` ago (read from the lease's expiry, so
    whichever process renewed it): a run's writes a moment apart leave the
    lease's page out of their commit. The fence is checked all the same: a
    released lease, another token or another holder refuses the write, and
    nothing of it is stored."""
    from langgraph_durable.model.records import WriteRow
    from langgraph_durable.tiers.sqlite.tier import AsyncSqliteTier, SqliteTier

    path = str(tmp_path / "leases.sqlite")
    raw = SqliteTier(path)
    tier: Any = raw if face == "sync" else AsyncSqliteTier(raw)

    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(tier, name)(*args, **kwargs)
        return await result if face == "async" else result

    def expiry() -> float:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return float(conn.execute("SELECT expires_at FROM lgd_leases WHERE thread_id = 't'").fetchone()[0])

    def age_lease(seconds: float) -> None:
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE lgd_leases SET expires_at = expires_at - ? WHERE thread_id = 't'", (seconds,))

    def rows(cid: str) -> list[WriteRow]:
        return [WriteRow("t", "", cid, "task", 0, "ch", "", b"record")]

    def stored() -> set[str]:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return {r[0] for r in conn.execute("SELECT checkpoint_id FROM lgd_writes")}

    ttl = 30.0
    await call("setup")
    await call("swap_lease", "t", None, "h:1:me", 3, ttl)
    fence = Fence("t", "h:1:me", 3, ttl, "sqlite")
    taken = expiry()
    await call("write_writes", rows("c1"), False, fence=fence)
    assert expiry() == taken  # renewed a moment ago: only read
    age_lease(renew_every(ttl) + 0.5)
    before = time.time()
    await call("write_writes", rows("c2"), False, fence=fence)
    assert expiry() >= before + ttl - 0.5  # renewed for the whole TTL again
    for refused in (Fence("t", "h:1:me", 2, ttl, "sqlite"), Fence("t", "h:2:other", 3, ttl, "sqlite")):
        with pytest.raises(LeaseLost):
            await call("write_writes", rows("refused"), False, fence=refused)
    await call("release_lease", "t", "h:1:me", 3)
    with pytest.raises(LeaseLost):
        await call("write_writes", rows("released"), False, fence=fence)
    assert stored() == {"c1", "c2"}
    await call("close")
