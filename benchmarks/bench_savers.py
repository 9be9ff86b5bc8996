#!/usr/bin/env python
"""Side-by-side benchmark of LangGraph checkpoint savers on one graph workload.

Savers (each measured through both ``graph.invoke`` and ``graph.ainvoke``):

* stock ``InMemorySaver``
* stock ``SqliteSaver`` (sync) / ``AsyncSqliteSaver`` (async), a file in a temp dir
* stock ``PostgresSaver`` (sync) / ``AsyncPostgresSaver`` (async)
* ``DurableSaver`` as sqlite, sqlite+redis, sqlite+postgres, redis+postgres,
  sqlite+redis+postgres and postgres
* a write-mode section: ``DurableSaver`` as sqlite+redis+postgres and
  sqlite+postgres with each of ``write="shared"``, ``"all"`` and ``"local"``
  (write-behind), with what ``lag()`` owed after the measured loops and how
  long ``drain()`` took to ship it

Workload: a compiled ``StateGraph`` whose ``messages`` channel
(``Annotated[list, operator.add]``) grows by one ~200-byte message per
super-step, looping ``--steps`` super-steps, run once on each of ``--threads``
fresh thread ids. Measured per (saver, sync|async):

* invoke: wall time of one ``invoke``/``ainvoke`` (median over the threads)
* put: duration of one ``put``/``aput`` call, i.e. time per checkpoint (median)
* writes: duration of one ``put_writes``/``aput_writes`` call (median)
* get_tuple: latency of ``get_tuple``/``aget_tuple`` on a thread's latest checkpoint (median)
* list10: latency of materialising ``list``/``alist(config, limit=10)`` (median)
* peak mem: tracemalloc peak of Python allocations while running the workload
  on fresh threads (a separate pass: tracemalloc slows everything, so it is
  never on while timing)

All timings use ``time.perf_counter``. Nothing here is asserted: results are
reported, and functional checks (message counts, re-open read-back) are
reported as problems, never raised.

Servers: Postgres from LANGGRAPH_DURABLE_TEST_POSTGRES_URL and Redis from
LANGGRAPH_DURABLE_TEST_REDIS_URL (loopback only). Every run creates fresh
``lgd_bench_<run id>_<config>`` databases and ``lgd_bench_<run id>_...`` Redis
key prefixes, and removes them at the end, even on error or Ctrl-C.

    .venv/bin/python benchmarks/bench_savers.py --quick
    .venv/bin/python benchmarks/bench_savers.py --write    # RESULTS_SAVERS.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import datetime as dt
import functools
import gc
import operator
import os
import statistics
import sys
import time
import traceback
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from _env import (
    REDIS_URL,
    Resources,
    exit_on_sigterm,
    git_state,
    run_lines,  # benchmarks/ is on sys.path when run as a script
)
from typing_extensions import TypedDict

HERE = Path(__file__).resolve().parent
NAME = "lgd_bench"  # prefix of every database, Redis key and temp dir a run creates
PACKAGES = [
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langgraph-durable",
    "psycopg",
    "redis",
    "aiosqlite",
    "ormsgpack",
]

MODES = ("sync", "async")


# -- configurations -----------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    key: str  # short slug, used in db names / key prefixes / thread ids
    kind: str  # "memory" | "stock_sqlite" | "stock_postgres" | "durable"
    tiers: tuple[str, ...] = ()
    stock: str | None = None  # key of the stock config to compare against
    write: str | None = None  # DurableSaver(write=...); None = not passed (the default, "shared")

    def label(self, mode: str) -> str:
        if self.kind == "memory":
            return "InMemorySaver"
        if self.kind == "stock_sqlite":
            return "SqliteSaver" if mode == "sync" else "AsyncSqliteSaver"
        if self.kind == "stock_postgres":
            return "PostgresSaver" if mode == "sync" else "AsyncPostgresSaver"
        return "Durable " + "+".join(self.tiers) + (f" write={self.write}" if self.write else "")

    @property
    def shared_tiers(self) -> tuple[str, ...]:
        return tuple(t for t in self.tiers if t != "sqlite")

    @property
    def needs(self) -> set[str]:
        if self.kind == "stock_postgres":
            return {"postgres"}
        return set(self.tiers) & {"redis", "postgres"}


CONFIGS: list[Config] = [
    Config("mem", "memory"),
    Config("sqlite_stock", "stock_sqlite"),
    Config("pg_stock", "stock_postgres"),
    Config("d_s", "durable", ("sqlite",), stock="sqlite_stock"),
    Config("d_sr", "durable", ("sqlite", "redis"), stock="sqlite_stock"),
    Config("d_sp", "durable", ("sqlite", "postgres"), stock="pg_stock"),
    Config("d_rp", "durable", ("redis", "postgres"), stock="pg_stock"),
    Config("d_srp", "durable", ("sqlite", "redis", "postgres"), stock="pg_stock"),
    Config("d_p", "durable", ("postgres",), stock="pg_stock"),
]
# The write-mode section: the same tiers with write= passed explicitly, run
# back to back after the configurations above. "shared" is the default, so
# "w_srp_shared" measures the same saver as "d_srp" a little later in the run.
WRITE_MODES = ("shared", "all", "local")
WRITE_TIERS = {"srp": ("sqlite", "redis", "postgres"), "sp": ("sqlite", "postgres")}
WRITE_CONFIGS: list[Config] = [
    Config(f"w_{short}_{w}", "durable", tiers, stock="pg_stock", write=w)
    for short, tiers in WRITE_TIERS.items()
    for w in WRITE_MODES
]
ALL_CONFIGS = CONFIGS + WRITE_CONFIGS
CONFIG_BY_KEY = {c.key: c for c in ALL_CONFIGS}
# Longest drain() the write-mode rows wait for after a measured loop; what is
# still owed then is reported.
DRAIN_TIMEOUT_S = 60.0


# -- results --------------------------------------------------------------------------


@dataclass
class Backlog:
    """What the shared tiers were owed after a measured loop, and the drain that shipped it."""

    written: int  # put/put_writes calls in the loop: an upper bound on the journal entries it made
    records: int  # lag() before drain: entries owed
    seconds: float  # lag() before drain: age of the oldest owed entry
    by_tier: dict[str, int]
    drain_s: float  # wall time of drain(DRAIN_TIMEOUT_S)
    left: int  # lag().records after the drain (0 = caught up)
    loop_s: float  # wall time of the loop itself


@dataclass
class Result:
    config: Config
    mode: str
    invoke_s: list[float] = field(default_factory=list)
    put_s: list[float] = field(default_factory=list)
    writes_s: list[float] = field(default_factory=list)
    get_s: list[float] = field(default_factory=list)
    list_s: list[float] = field(default_factory=list)
    iso_put_s: list[float] = field(default_factory=list)
    iso_writes_s: list[float] = field(default_factory=list)
    captured: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list, repr=False)
    capture_tid: str | None = None
    peak_bytes: int | None = None
    puts_per_invoke: float | None = None
    problems: list[str] = field(default_factory=list)
    after_invoke: Backlog | None = None  # write-mode rows only
    after_replay: Backlog | None = None
    error: str | None = None  # full traceback if the session crashed
    skipped: str | None = None
    elapsed_s: float = 0.0

    @property
    def label(self) -> str:
        return self.config.label(self.mode)


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def p90(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return xs[0] if xs else None
    return statistics.quantiles(xs, n=10, method="inclusive")[-1]


# -- the graph ------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list, operator.add]
    step: int


def make_message(step: int, size: int) -> dict[str, Any]:
    head = f"step {step:04d}: "
    body = (head + "lorem ipsum dolor sit amet consectetur adipiscing elit " * ((size // 50) + 1))[:size]
    return {"role": "assistant", "step": step, "content": body}


def expected_messages(steps: int, size: int) -> list[dict[str, Any]]:
    return [{"role": "user", "step": -1, "content": "start"}] + [make_message(i, size) for i in range(steps)]


def build_graph(steps: int, size: int, *, is_async: bool, checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def route(state: State) -> str:
        return "work" if state["step"] < steps else END

    if is_async:

        async def work(state: State) -> dict[str, Any]:
            return {"messages": [make_message(state["step"], size)], "step": state["step"] + 1}

    else:

        def work(state: State) -> dict[str, Any]:  # type: ignore[misc]
            return {"messages": [make_message(state["step"], size)], "step": state["step"] + 1}

    g = StateGraph(State)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", route, ["work", END])
    return g.compile(checkpointer=checkpointer)


def graph_input() -> dict[str, Any]:
    return {"messages": [{"role": "user", "step": -1, "content": "start"}], "step": 0}


def thread_config(thread_id: str, steps: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}, "recursion_limit": steps + 10}


# -- instrumentation --------------------------------------------------------------------


def instrument(saver: Any, mode: str, sink: Result) -> Callable[[], None]:
    """Time put/put_writes (sync) or aput/aput_writes (async) on this instance.

    Only the face used by the mode is wrapped: InMemorySaver.aput calls
    self.put, and wrapping both would count it twice. functools.wraps keeps
    the signature, which LangGraph inspects for ``task_path``.
    Returns a function that resets the collected samples.
    """
    timing = {"on": True}

    def capture(kind: str, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        # keep the exact calls LangGraph made for one thread, to replay them in isolation
        if sink.capture_tid is not None and a and a[0].get("configurable", {}).get("thread_id") == sink.capture_tid:
            sink.captured.append((kind, copy.deepcopy(a), copy.deepcopy(kw)))

    def wrap_sync(fn: Callable[..., Any], bucket: list[float]) -> Callable[..., Any]:
        kind = "put" if bucket is sink.put_s else "writes"

        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            capture(kind, a, kw)
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                if timing["on"]:
                    bucket.append(time.perf_counter() - t0)

        return timed

    def wrap_async(fn: Callable[..., Any], bucket: list[float]) -> Callable[..., Any]:
        kind = "put" if bucket is sink.put_s else "writes"

        @functools.wraps(fn)
        async def timed(*a: Any, **kw: Any) -> Any:
            capture(kind, a, kw)
            t0 = time.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                if timing["on"]:
                    bucket.append(time.perf_counter() - t0)

        return timed

    if mode == "sync":
        saver.put = wrap_sync(saver.put, sink.put_s)
        saver.put_writes = wrap_sync(saver.put_writes, sink.writes_s)
    else:
        saver.aput = wrap_async(saver.aput, sink.put_s)
        saver.aput_writes = wrap_async(saver.aput_writes, sink.writes_s)

    def reset() -> None:
        sink.put_s.clear()
        sink.writes_s.clear()

    return reset


# -- saver factories ---------------------------------------------------------------------


@dataclass
class Storage:
    """Where one (config, mode) keeps its data; reused to re-open the saver."""

    sqlite_path: str | None = None
    postgres_url: str | None = None
    redis_prefix: str | None = None


def allocate_storage(config: Config, mode: str, res: Resources, pg_cache: dict[str, str]) -> Storage:
    st = Storage()
    if config.kind == "stock_sqlite" or "sqlite" in config.tiers:
        st.sqlite_path = str(res.tmp_path / f"{config.key}_{mode}.sqlite")
    if "postgres" in config.needs:
        # one fresh database per configuration; sync and async phases use
        # different thread ids in it, as two processes of one app would
        if config.key not in pg_cache:
            pg_cache[config.key] = res.new_database(config.key)
        st.postgres_url = pg_cache[config.key]
    if "redis" in config.needs:
        st.redis_prefix = res.new_prefix(f"{config.key}_{mode}")
    return st


def durable_kwargs(config: Config, st: Storage) -> dict[str, Any]:
    from langgraph_durable import Tiers

    kw: dict[str, Any] = {"sqlite": st.sqlite_path if "sqlite" in config.tiers else None}
    if "redis" in config.tiers:
        kw["redis"] = REDIS_URL
        kw["tiers"] = Tiers(redis_key_prefix=st.redis_prefix)
    if "postgres" in config.tiers:
        kw["postgres"] = st.postgres_url
    if config.write is not None:
        kw["write"] = config.write
    return kw


def shared_only(config: Config, tier: str) -> Config:
    """A DurableSaver config reading one shared tier alone (no local file):
    what survives if the container and its disk vanish."""
    return Config(config.key, "durable", (tier,))


def need(value: str | None) -> str:
    if value is None:
        raise RuntimeError("storage was not allocated for this configuration")
    return value


@contextlib.contextmanager
def open_sync(config: Config, st: Storage, shared_memory: dict[str, Any]) -> Iterator[Any]:
    if config.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        # re-opening an in-memory saver can only mean "the same object"
        saver = shared_memory.setdefault("sync", InMemorySaver())
        yield saver
    elif config.kind == "stock_sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(need(st.sqlite_path)) as saver:
            saver.setup()
            yield saver
    elif config.kind == "stock_postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(need(st.postgres_url)) as saver:
            saver.setup()
            yield saver
    else:
        from langgraph_durable import DurableSaver

        saver = DurableSaver(**durable_kwargs(config, st))
        try:
            saver.setup()
            yield saver
        finally:
            saver.close()


@contextlib.asynccontextmanager
async def open_async(config: Config, st: Storage, shared_memory: dict[str, Any]) -> AsyncIterator[Any]:
    if config.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        saver = shared_memory.setdefault("async", InMemorySaver())
        yield saver
    elif config.kind == "stock_sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(need(st.sqlite_path)) as saver:
            await saver.setup()
            yield saver
    elif config.kind == "stock_postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(need(st.postgres_url)) as saver:
            await saver.setup()
            yield saver
    else:
        from langgraph_durable import DurableSaver

        saver = DurableSaver(**durable_kwargs(config, st))
        try:
            await saver.asetup()
            yield saver
        finally:
            await saver.aclose()


# -- checks (reported, never raised) ---------------------------------------------------------


def check_tuple(tup: Any, params: Params, what: str) -> list[str]:
    want = expected_messages(params.steps, params.msg_bytes)
    if tup is None:
        return [f"{what}: get_tuple returned None"]
    got = tup.checkpoint.get("channel_values", {}).get("messages")
    issues = []
    if got != want:
        n = len(got) if isinstance(got, list) else type(got).__name__
        issues.append(f"{what}: latest checkpoint has {n} messages (want {len(want)}) or different content")
    step = (tup.metadata or {}).get("step")
    if step != params.steps:
        issues.append(f"{what}: latest checkpoint metadata step={step!r} (want {params.steps})")
    return issues


def check_list(items: list[Any], params: Params, what: str) -> list[str]:
    want = min(10, params.steps + 2)
    issues = []
    if len(items) != want:
        issues.append(f"{what}: list(limit=10) returned {len(items)} tuples (want {want})")
    ids = [t.config["configurable"]["checkpoint_id"] for t in items]
    if ids != sorted(ids, reverse=True):
        issues.append(f"{what}: list(limit=10) is not newest-first")
    return issues


def check_output(out: Any, params: Params, what: str) -> list[str]:
    want = expected_messages(params.steps, params.msg_bytes)
    if not isinstance(out, dict) or out.get("messages") != want:
        n = len(out.get("messages", [])) if isinstance(out, dict) else type(out).__name__
        return [f"{what}: invoke returned {n} messages (want {len(want)}) or different content"]
    return []


# -- isolated put replay -----------------------------------------------------------------------


def replay_run(tid: str) -> tuple[Any, dict[str, Any]]:
    """A run of its own for one replay thread, as Pregel starts one: a fresh
    Runtime in the config of a first get_tuple (DurableSaver takes the
    thread's writer lease there, and fences the run's writes with it)."""
    from langgraph.runtime import Runtime

    def stream_writer(_: Any) -> None:  # one per run: the saver watches it to see the run end
        return None

    runtime = Runtime(stream_writer=stream_writer)
    return runtime, {"configurable": {"thread_id": tid, "checkpoint_ns": "", "__pregel_runtime": runtime}}


def retarget(
    kind: str, a: tuple[Any, ...], kw: dict[str, Any], tid: str, runtime: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    a, kw = copy.deepcopy(a), copy.deepcopy(kw)
    configurable = a[0]["configurable"]
    configurable["thread_id"] = tid
    if "__pregel_runtime" in configurable:  # the captured run is over; the replay is a run of its own
        configurable["__pregel_runtime"] = runtime
    return a, kw


def replay_sync(saver: Any, res: Result, params: Params, tag: str) -> None:
    """Re-issue the captured put/put_writes calls of one graph thread into fresh
    threads, one call at a time: the put cost without the graph running
    concurrently (under durability=async LangGraph overlaps puts with the next step)."""
    put, writes = saver.put.__wrapped__, saver.put_writes.__wrapped__
    for r in range(params.replays):
        tid = f"{tag}-replay-{r}"
        runtime, start = replay_run(tid)
        saver.get_tuple(start)
        for kind, a, kw in res.captured:
            a, kw = retarget(kind, a, kw, tid, runtime)
            fn = put if kind == "put" else writes
            t0 = time.perf_counter()
            fn(*a, **kw)
            (res.iso_put_s if kind == "put" else res.iso_writes_s).append(time.perf_counter() - t0)


async def replay_async(saver: Any, res: Result, params: Params, tag: str) -> None:
    put, writes = saver.aput.__wrapped__, saver.aput_writes.__wrapped__
    for r in range(params.replays):
        tid = f"{tag}-replay-{r}"
        runtime, start = replay_run(tid)
        await saver.aget_tuple(start)
        for kind, a, kw in res.captured:
            a, kw = retarget(kind, a, kw, tid, runtime)
            fn = put if kind == "put" else writes
            t0 = time.perf_counter()
            await fn(*a, **kw)
            (res.iso_put_s if kind == "put" else res.iso_writes_s).append(time.perf_counter() - t0)


# -- one (config, mode) session -----------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    steps: int
    threads: int
    msg_bytes: int
    warmup: int
    reads: int
    mem_threads: int
    durability: str
    replays: int


def add_problems(res: Result, issues: list[str]) -> None:
    for issue in issues:
        if issue not in res.problems and len(res.problems) < 20:
            res.problems.append(issue)


def backlog_problems(left: Any, what: str) -> list[str]:
    if left.records:
        return [f"{what}: drain({DRAIN_TIMEOUT_S:.0f}) left {left.records} record(s) owed {left.by_tier}"]
    return []


def settle_sync(
    saver: Any,
    config: Config,
    st: Storage,
    params: Params,
    res: Result,
    tid: str,
    written: int,
    work_s: float,
    what: str,
) -> Backlog:
    """Write-mode rows, after a measured loop: what lag() owes, the drain
    that ships it, and a read of the loop's last thread from each shared
    tier alone (no local file), which is what survives losing the disk."""
    from langgraph_durable import DurableSaver

    before = saver.lag()
    t0 = time.perf_counter()
    left = saver.drain(DRAIN_TIMEOUT_S)
    drain_s = time.perf_counter() - t0
    add_problems(res, backlog_problems(left, what))
    c = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    for tier in config.shared_tiers:
        with DurableSaver(**durable_kwargs(shared_only(config, tier), st)) as alone:
            add_problems(res, check_tuple(alone.get_tuple(c), params, f"{tier} alone after drain ({what})"))
    return Backlog(written, before.records, before.seconds, dict(before.by_tier), drain_s, left.records, work_s)


async def settle_async(
    saver: Any,
    config: Config,
    st: Storage,
    params: Params,
    res: Result,
    tid: str,
    written: int,
    work_s: float,
    what: str,
) -> Backlog:
    from langgraph_durable import DurableSaver

    before = await saver.alag()
    t0 = time.perf_counter()
    left = await saver.adrain(DRAIN_TIMEOUT_S)
    drain_s = time.perf_counter() - t0
    add_problems(res, backlog_problems(left, what))
    c = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    for tier in config.shared_tiers:
        async with DurableSaver(**durable_kwargs(shared_only(config, tier), st)) as alone:
            add_problems(res, check_tuple(await alone.aget_tuple(c), params, f"{tier} alone after drain ({what})"))
    return Backlog(written, before.records, before.seconds, dict(before.by_tier), drain_s, left.records, work_s)


def run_sync(config: Config, st: Storage, params: Params, res: Result, shared_memory: dict[str, Any]) -> None:
    tag = f"{config.key}-sync"
    with open_sync(config, st, shared_memory) as saver:
        reset = instrument(saver, "sync", res)
        graph = build_graph(params.steps, params.msg_bytes, is_async=False, checkpointer=saver)

        def invoke(tid: str) -> Any:
            return graph.invoke(graph_input(), thread_config(tid, params.steps), durability=params.durability)

        for i in range(params.warmup):
            add_problems(res, check_output(invoke(f"{tag}-warm-{i}"), params, "warm-up invoke"))
        if config.write is not None:
            # untimed: the loop starts owing nothing (and the replicator's sync face is set up)
            add_problems(res, backlog_problems(saver.drain(DRAIN_TIMEOUT_S), "warm-up"))
        reset()
        gc.collect()
        tids = [f"{tag}-{i}" for i in range(params.threads)]
        res.capture_tid = tids[0]
        for tid in tids:
            t0 = time.perf_counter()
            out = invoke(tid)
            res.invoke_s.append(time.perf_counter() - t0)
            add_problems(res, check_output(out, params, "invoke"))
        res.puts_per_invoke = len(res.put_s) / len(tids)
        res.capture_tid = None
        if config.write is not None:
            written = len(res.put_s) + len(res.writes_s)
            res.after_invoke = settle_sync(
                saver, config, st, params, res, tids[-1], written, sum(res.invoke_s), "invoke loop"
            )
        replay_sync(saver, res, params, tag)
        if config.write is not None:
            res.after_replay = settle_sync(
                saver,
                config,
                st,
                params,
                res,
                f"{tag}-replay-{params.replays - 1}",
                len(res.captured) * params.replays,
                sum(res.iso_put_s) + sum(res.iso_writes_s),
                "put replay",
            )
        last = {"configurable": {"thread_id": f"{tag}-replay-{params.replays - 1}", "checkpoint_ns": ""}}
        add_problems(res, check_tuple(saver.get_tuple(last), params, "get_tuple after put replay"))

        cfgs = [{"configurable": {"thread_id": t, "checkpoint_ns": ""}} for t in tids]
        for c in cfgs[:2]:  # warm the read path, and check what it returns
            add_problems(res, check_tuple(saver.get_tuple(c), params, "get_tuple"))
            add_problems(res, check_list(list(saver.list(c, limit=10)), params, "list"))
        for i in range(params.reads):
            c = cfgs[i % len(cfgs)]
            t0 = time.perf_counter()
            saver.get_tuple(c)
            res.get_s.append(time.perf_counter() - t0)
        for i in range(params.reads):
            c = cfgs[i % len(cfgs)]
            t0 = time.perf_counter()
            list(saver.list(c, limit=10))
            res.list_s.append(time.perf_counter() - t0)

        # memory pass: fresh threads, tracemalloc on; its put samples are discarded
        n_put, n_w = len(res.put_s), len(res.writes_s)
        gc.collect()
        tracemalloc.start()
        try:
            for i in range(params.mem_threads):
                invoke(f"{tag}-mem-{i}")
            res.peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del res.put_s[n_put:], res.writes_s[n_w:]

    # read back through a newly opened saver on the same storage
    with open_sync(config, st, shared_memory) as again:
        c = {"configurable": {"thread_id": tids[-1], "checkpoint_ns": ""}}
        add_problems(res, check_tuple(again.get_tuple(c), params, "re-opened saver get_tuple"))


async def run_async(config: Config, st: Storage, params: Params, res: Result, shared_memory: dict[str, Any]) -> None:
    tag = f"{config.key}-async"
    async with open_async(config, st, shared_memory) as saver:
        reset = instrument(saver, "async", res)
        graph = build_graph(params.steps, params.msg_bytes, is_async=True, checkpointer=saver)

        async def invoke(tid: str) -> Any:
            return await graph.ainvoke(graph_input(), thread_config(tid, params.steps), durability=params.durability)

        for i in range(params.warmup):
            add_problems(res, check_output(await invoke(f"{tag}-warm-{i}"), params, "warm-up ainvoke"))
        if config.write is not None:
            add_problems(res, backlog_problems(await saver.adrain(DRAIN_TIMEOUT_S), "warm-up"))
        reset()
        gc.collect()
        tids = [f"{tag}-{i}" for i in range(params.threads)]
        res.capture_tid = tids[0]
        for tid in tids:
            t0 = time.perf_counter()
            out = await invoke(tid)
            res.invoke_s.append(time.perf_counter() - t0)
            add_problems(res, check_output(out, params, "ainvoke"))
        res.puts_per_invoke = len(res.put_s) / len(tids)
        res.capture_tid = None
        if config.write is not None:
            written = len(res.put_s) + len(res.writes_s)
            res.after_invoke = await settle_async(
                saver, config, st, params, res, tids[-1], written, sum(res.invoke_s), "invoke loop"
            )
        await replay_async(saver, res, params, tag)
        if config.write is not None:
            res.after_replay = await settle_async(
                saver,
                config,
                st,
                params,
                res,
                f"{tag}-replay-{params.replays - 1}",
                len(res.captured) * params.replays,
                sum(res.iso_put_s) + sum(res.iso_writes_s),
                "put replay",
            )
        last = {"configurable": {"thread_id": f"{tag}-replay-{params.replays - 1}", "checkpoint_ns": ""}}
        add_problems(res, check_tuple(await saver.aget_tuple(last), params, "aget_tuple after put replay"))

        cfgs = [{"configurable": {"thread_id": t, "checkpoint_ns": ""}} for t in tids]
        for c in cfgs[:2]:
            add_problems(res, check_tuple(await saver.aget_tuple(c), params, "aget_tuple"))
            add_problems(res, check_list([t async for t in saver.alist(c, limit=10)], params, "alist"))
        for i in range(params.reads):
            c = cfgs[i % len(cfgs)]
            t0 = time.perf_counter()
            await saver.aget_tuple(c)
            res.get_s.append(time.perf_counter() - t0)
        for i in range(params.reads):
            c = cfgs[i % len(cfgs)]
            t0 = time.perf_counter()
            [t async for t in saver.alist(c, limit=10)]
            res.list_s.append(time.perf_counter() - t0)

        n_put, n_w = len(res.put_s), len(res.writes_s)
        gc.collect()
        tracemalloc.start()
        try:
            for i in range(params.mem_threads):
                await invoke(f"{tag}-mem-{i}")
            res.peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del res.put_s[n_put:], res.writes_s[n_w:]

    async with open_async(config, st, shared_memory) as again:
        c = {"configurable": {"thread_id": tids[-1], "checkpoint_ns": ""}}
        add_problems(res, check_tuple(await again.aget_tuple(c), params, "re-opened saver aget_tuple"))


def run_one(config: Config, mode: str, params: Params, res_env: Resources, pg_cache: dict[str, str]) -> Result:
    res = Result(config, mode)
    why = res_env.unavailable(config.needs)
    if why:
        res.skipped = why
        return res
    t0 = time.perf_counter()
    shared_memory: dict[str, Any] = {}
    try:
        st = allocate_storage(config, mode, res_env, pg_cache)
        if mode == "sync":
            run_sync(config, st, params, res, shared_memory)
        else:
            asyncio.run(run_async(config, st, params, res, shared_memory))
    except Exception:
        res.error = traceback.format_exc()
    finally:
        res.elapsed_s = time.perf_counter() - t0
    return res


# -- report -------------------------------------------------------------------------------------


METRICS: list[tuple[str, str, Callable[[Result], float | None], float, str]] = [
    # column, unit, value (seconds or bytes), scale, number format
    ("invoke", "ms", lambda r: median(r.invoke_s), 1e3, "{:.2f}"),
    ("put", "ms", lambda r: median(r.iso_put_s), 1e3, "{:.3f}"),
    ("put_writes", "ms", lambda r: median(r.iso_writes_s), 1e3, "{:.3f}"),
    ("put in graph", "ms", lambda r: median(r.put_s), 1e3, "{:.3f}"),
    ("get_tuple", "ms", lambda r: median(r.get_s), 1e3, "{:.3f}"),
    ("list10", "ms", lambda r: median(r.list_s), 1e3, "{:.3f}"),
    ("peak mem", "KiB", lambda r: float(r.peak_bytes) if r.peak_bytes is not None else None, 1 / 1024, "{:.0f}"),
]


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def status(r: Result) -> str:
    if r.skipped:
        return "skipped"
    if r.error:
        return "ERROR"
    if r.problems:
        return f"{len(r.problems)} problem(s)"
    return "ok"


def render(results: list[Result], params: Params) -> str:
    by = {(r.config.key, r.mode): r for r in results}
    lines: list[str] = []

    lines.append("### Absolute figures (median)")
    lines.append("")
    head = ["saver", "mode"] + [f"{m[0]} ({m[1]})" for m in METRICS] + ["puts/invoke", "check"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---", "---"] + ["---:"] * (len(METRICS) + 1) + ["---"]) + "|")
    for mode in MODES:
        for c in CONFIGS:
            r = by.get((c.key, mode))
            if r is None:
                continue
            cells = [r.label, mode]
            for _, _, get, scale, fmt in METRICS:
                v = None if (r.skipped or r.error) else get(r)
                cells.append("-" if v is None else fmt.format(v * scale))
            cells.append("-" if r.puts_per_invoke is None else f"{r.puts_per_invoke:.1f}")
            cells.append(status(r))
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    def ratio_table(title: str, ref_of: Callable[[Result], Result | None], ref_col: bool) -> None:
        lines.append(title)
        lines.append("")
        head = ["saver", "mode"] + (["vs"] if ref_col else []) + [m[0] for m in METRICS]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---", "---"] + (["---"] if ref_col else []) + ["---:"] * len(METRICS)) + "|")
        for mode in MODES:
            for c in CONFIGS:
                r = by.get((c.key, mode))
                if r is None:
                    continue
                ref = ref_of(r)
                if ref is None:
                    continue
                cells = [r.label, mode] + ([ref.label] if ref_col else [])
                ok = not (r.skipped or r.error or ref.skipped or ref.error)
                for _, _, get, _, _ in METRICS:
                    cells.append(fmt_ratio(get(r), get(ref)) if ok else "-")
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")

    ratio_table(
        "### Ratio to InMemorySaver, same mode (lower is faster / smaller; 1.00x = same)",
        lambda r: by.get(("mem", r.mode)) if r.config.key != "mem" else None,
        ref_col=False,
    )
    ratio_table(
        "### Ratio to the matching stock saver, same mode and same run",
        lambda r: by.get((r.config.stock, r.mode)) if r.config.stock else None,
        ref_col=True,
    )
    if any(r.config.write is not None for r in results):
        lines.extend(render_write_modes(by))
    return "\n".join(lines)


def per_unit(r: Result | None, loop: str) -> tuple[float | None, int]:
    """Mean seconds per invoke (invoke loop) or per put/put_writes call (put replay), and the unit count."""
    if r is None or r.skipped or r.error:
        return None, 0
    if loop == "invoke loop":
        n = len(r.invoke_s)
        return (sum(r.invoke_s) / n if n else None), n
    n = len(r.iso_put_s) + len(r.iso_writes_s)
    return ((sum(r.iso_put_s) + sum(r.iso_writes_s)) / n if n else None), n


def render_write_modes(by: dict[tuple[str, str], Result]) -> list[str]:
    """The write-mode section: its own tables, so the rows above keep their shape."""
    lines = [
        "## Write modes (`write=`)",
        "",
        "`DurableSaver` with `write=` passed explicitly, run after every row above. `shared` is the default, so "
        "`Durable sqlite+redis+postgres write=shared` is the same saver as `Durable sqlite+redis+postgres` above, "
        "measured later in the run: the gap between those two rows is this run's noise. With `write=local` a `put` "
        "returns once the local journal committed (fsynced) and a background thread ships to the shared tiers, so "
        "the last table shows what `lag()` owed after each measured loop and how long `drain()` took to ship it.",
        "",
    ]
    modes = [m for m in MODES if any((c.key, m) in by for c in WRITE_CONFIGS)]

    def ok(r: Result | None) -> bool:
        return r is not None and not (r.skipped or r.error)

    lines.append("### Write modes: absolute figures (median)")
    lines.append("")
    head = ["saver", "mode"] + [f"{m[0]} ({m[1]})" for m in METRICS] + ["puts/invoke", "check"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---", "---"] + ["---:"] * (len(METRICS) + 1) + ["---"]) + "|")
    for mode in modes:
        for key in ["pg_stock", "d_srp"] + [c.key for c in WRITE_CONFIGS]:
            r = by.get((key, mode))
            if r is None:
                continue
            cells = [r.label + (" (row above)" if key in ("pg_stock", "d_srp") else ""), mode]
            for _, _, get, scale, fmt in METRICS:
                v = get(r) if ok(r) else None
                cells.append("-" if v is None else fmt.format(v * scale))
            cells.append("-" if r.puts_per_invoke is None else f"{r.puts_per_invoke:.1f}")
            cells.append(status(r))
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    lines.append("### Write modes: ratio to PostgresSaver / AsyncPostgresSaver, same mode and same run")
    lines.append("")
    lines.append("| saver | mode | vs | " + " | ".join(m[0] for m in METRICS) + " |")
    lines.append("|" + "|".join(["---", "---", "---"] + ["---:"] * len(METRICS)) + "|")
    for mode in modes:
        ref = by.get(("pg_stock", mode))
        for c in WRITE_CONFIGS:
            r = by.get((c.key, mode))
            if r is None or ref is None:
                continue
            good = ok(r) and ok(ref)
            cells = [r.label, mode, ref.label] + [fmt_ratio(g(r), g(ref)) if good else "-" for _, _, g, _, _ in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    lines.append("### Write modes: ratio to write=shared on the same tiers, same mode and same run")
    lines.append("")
    lines.append("| saver | mode | " + " | ".join(m[0] for m in METRICS) + " |")
    lines.append("|" + "|".join(["---", "---"] + ["---:"] * len(METRICS)) + "|")
    for mode in modes:
        for c in WRITE_CONFIGS:
            if c.write == "shared":
                continue
            r = by.get((c.key, mode))
            ref = by.get((c.key.rsplit("_", 1)[0] + "_shared", mode))
            if r is None or ref is None:
                continue
            good = ok(r) and ok(ref)
            cells = [r.label + " / write=shared", mode]
            cells += [fmt_ratio(g(r), g(ref)) if good else "-" for _, _, g, _, _ in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    lines.append("### Write modes: what `lag()` owed after each measured loop, and the `drain()` that shipped it")
    lines.append("")
    lines.append(
        "`calls`: `put`/`put_writes` calls in the loop (each is at most one journal entry). `owed`: "
        "`lag().records` just before the drain (entries not yet in every shared tier), with `lag().seconds`, the "
        "age of the oldest. `drain`: wall time of "
        f"`drain({DRAIN_TIMEOUT_S:.0f})` / `adrain({DRAIN_TIMEOUT_S:.0f})`. `left`: still owed after it. "
        "`per unit`: mean wall time per invoke (invoke loop) or per call (put replay) without, then with, the "
        "drain's time spread over the loop; the last column divides the latter by the stock Postgres saver's "
        "mean for the same unit (its put and put_writes never owe anything)."
    )
    lines.append("")
    head = [
        "saver", "mode", "loop", "calls", "owed", "owed by tier", "oldest owed (s)", "drain (ms)", "left",
        "per unit (ms)", "per unit incl. drain (ms)", "incl. drain vs stock Postgres",
    ]  # fmt: skip
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---", "---", "---"] + ["---:"] * 2 + ["---"] + ["---:"] * 6) + "|")
    for mode in modes:
        ref = by.get(("pg_stock", mode))
        for c in WRITE_CONFIGS:
            r = by.get((c.key, mode))
            if r is None:
                continue
            for loop, b in (("invoke loop", r.after_invoke), ("put replay", r.after_replay)):
                if b is None:
                    lines.append(f"| {r.label} | {mode} | {loop} | - | - | - | - | - | - | - | - | - |")
                    continue
                unit, n = per_unit(r, loop)
                with_drain = (b.loop_s + b.drain_s) / n if n else None
                ref_unit, _ = per_unit(ref, loop)
                by_tier = ", ".join(f"{k} {v}" for k, v in b.by_tier.items()) or "-"
                cells = [
                    r.label, mode, loop, str(b.written), str(b.records), by_tier, f"{b.seconds:.3f}",
                    f"{b.drain_s * 1e3:.1f}", str(b.left),
                    "-" if unit is None else f"{unit * 1e3:.3f}",
                    "-" if with_drain is None else f"{with_drain * 1e3:.3f}",
                    fmt_ratio(with_drain, ref_unit),
                ]  # fmt: skip
                lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def problems_text(results: list[Result], cleanup_notes: list[str]) -> str:
    out: list[str] = []
    for r in results:
        if r.skipped:
            out.append(f"- **{r.label} ({r.mode})** skipped: {r.skipped}")
        for p in r.problems:
            out.append(f"- **{r.label} ({r.mode})** check failed: {p}")
        if r.error:
            out.append(f"- **{r.label} ({r.mode})** raised:\n\n```\n{r.error.rstrip()}\n```")
    for n in cleanup_notes:
        out.append(f"- cleanup: {n}")
    return "\n".join(out)


def header(
    args: argparse.Namespace,
    params: Params,
    res_env: Resources,
    started: dt.datetime,
    wall: float,
    code_state: str,
    load: tuple[float, float],
) -> str:
    servers = ", ".join(f"{k} {v}" for k, v in res_env.server_versions.items()) or "none reachable"
    return "\n".join(
        [
            "# Checkpoint saver benchmark results",
            "",
            *run_lines(
                "bench_savers.py",
                quick=args.quick,
                started=started,
                wall=wall,
                load=load,
                code=code_state,
                packages=PACKAGES,
            ),
            f"- Servers (loopback): {servers}",
            f"- Workload: {params.steps} super-steps per invoke, one ~{params.msg_bytes}-byte message appended "
            f"per step to `messages: Annotated[list, operator.add]`; {params.threads} timed invokes (one fresh "
            f"thread each) after {params.warmup} warm-up; {params.reads} `get_tuple` and {params.reads} "
            f"`list(limit=10)` calls on latest checkpoints; `put`/`put_writes` = the calls LangGraph made for "
            f"one thread, replayed one at a time into {params.replays} fresh threads (`put in graph` = the same "
            f"calls timed inside the running graph, where they overlap the next step); "
            f"peak memory from a separate tracemalloc pass over "
            f"{params.mem_threads} invokes; durability=`{params.durability}`.",
            "- Write-mode rows: each measured loop (the timed invokes, then the put replay) starts owing "
            f"nothing (an untimed `drain` after the warm-up) and ends with `lag()` and a timed "
            f"`drain({DRAIN_TIMEOUT_S:.0f})`, outside the invoke/put figures.",
            "- Figures are medians; they are measurements, not pass/fail thresholds. "
            "See benchmarks/README.md for how to read them.",
        ]
    )


# -- main -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="small run (a few seconds per saver) to check everything works")
    p.add_argument("--steps", type=int, help="super-steps per invoke (default 10)")
    p.add_argument(
        "--threads", type=int, help="timed invokes per saver and mode, each on a fresh thread (default 40; quick 5)"
    )
    p.add_argument("--msg-bytes", type=int, default=200, help="size of each appended message (default 200)")
    p.add_argument("--reads", type=int, help="get_tuple / list calls per saver and mode (default 300; quick 30)")
    p.add_argument("--mem-threads", type=int, help="invokes in the tracemalloc pass (default 5; quick 2)")
    p.add_argument(
        "--replays", type=int, help="fresh threads the captured puts are replayed into (default 15; quick 3)"
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed invokes before timing (default 2)")
    p.add_argument(
        "--durability",
        choices=["async", "sync", "exit"],
        default="async",
        help="LangGraph durability mode passed to invoke (default async, LangGraph's default)",
    )
    p.add_argument(
        "--only",
        help="comma-separated config keys to run (InMemorySaver always runs): " + ",".join(c.key for c in ALL_CONFIGS),
    )
    p.add_argument("--modes", default="sync,async", help="sync, async or sync,async (default)")
    p.add_argument(
        "--output",
        default=str(HERE / "RESULTS_SAVERS.md"),
        help="markdown file to overwrite (default benchmarks/RESULTS_SAVERS.md)",
    )
    p.add_argument("--write", action="store_true", help="also overwrite the results file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    q = args.quick
    params = Params(
        steps=args.steps or 10,
        threads=args.threads or (5 if q else 40),
        msg_bytes=args.msg_bytes,
        warmup=args.warmup,
        reads=args.reads or (30 if q else 300),
        mem_threads=args.mem_threads or (2 if q else 5),
        durability=args.durability,
        replays=args.replays or (3 if q else 15),
    )
    modes = [m for m in MODES if m in args.modes.split(",")]
    configs = ALL_CONFIGS
    if args.only:
        keep = {"mem", *args.only.split(",")}
        unknown = keep - set(CONFIG_BY_KEY)
        if unknown:
            print(f"unknown config key(s): {sorted(unknown)}", file=sys.stderr)
            return 2
        configs = [c for c in ALL_CONFIGS if c.key in keep]

    exit_on_sigterm()  # so the finally below still drops databases and keys

    started = dt.datetime.now(dt.UTC)
    load_start = os.getloadavg()[0]
    code_state = git_state(HERE.parent)
    t_run = time.perf_counter()
    run_id = uuid.uuid4().hex[:10]
    res_env = Resources(NAME, run_id)
    results: list[Result] = []
    cleanup_notes: list[str] = []
    try:
        res_env.probe()
        print(
            f"run {run_id}: {len(configs)} savers x {len(modes)} modes, "
            f"{params.threads} invokes x {params.steps} steps each",
            flush=True,
        )
        for why in filter(None, (res_env.postgres_down, res_env.redis_down)):
            print(f"  note: {why}; configurations needing it are skipped", flush=True)
        pg_cache: dict[str, str] = {}
        for mode in modes:
            for c in configs:
                r = run_one(c, mode, params, res_env, pg_cache)
                results.append(r)
                inv = median(r.invoke_s)
                msg = f"{inv * 1e3:8.2f} ms/invoke" if inv is not None else " " * 17
                print(f"  {mode:5s} {r.label:44s} {msg}  {status(r):12s} ({r.elapsed_s:.1f} s)", flush=True)
    finally:
        cleanup_notes = res_env.cleanup()
    wall = time.perf_counter() - t_run

    table = render(results, params)
    probs = problems_text(results, cleanup_notes)
    print()
    print(table)
    if probs:
        print("### Problems\n")
        print(probs)
    if args.write:
        load = (load_start, os.getloadavg()[0])
        doc = header(args, params, res_env, started, wall, code_state, load) + "\n\n" + table
        doc += "\n### Problems\n\n" + (probs or "None: every check passed and cleanup succeeded.") + "\n"
        Path(args.output).write_text(doc)
        print(f"\nwrote {args.output}")
    print(f"total {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
