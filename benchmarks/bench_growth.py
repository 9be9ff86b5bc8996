#!/usr/bin/env python
"""How LangGraph checkpoint savers behave as a thread grows, side by side in one run.

Savers:

* stock ``InMemorySaver``
* stock ``SqliteSaver`` (sync) / ``AsyncSqliteSaver`` (async), a file in a temp dir
* stock ``PostgresSaver`` / ``AsyncPostgresSaver`` on a psycopg pool
  (``ConnectionPool`` / ``AsyncConnectionPool``, at most 10 connections,
  ``autocommit=True, prepare_threshold=0, row_factory=dict_row``)
* ``DurableSaver`` as sqlite, sqlite+redis+postgres (default write mode),
  sqlite+redis+postgres with ``write="local"``, and postgres
* for the bytes measurement only: ``DurableSaver`` sqlite and
  sqlite+redis+postgres with ``Memory(list_snapshot_every=1)`` (every value stored
  whole, as the stock savers store it), if the keyword exists

Workload: a compiled ``StateGraph`` whose ``messages`` channel
(``Annotated[list, operator.add]``) grows by one ~420-byte string per
super-step, plus an int ``n``; it loops until ``n`` reaches its bound. Every
invoke passes ``durability="sync"``. Measured:

1. ms per super-step of a 50-step and a 500-step invoke / ainvoke
2. ``graph.get_state`` latency (p50, p99) on a thread's latest checkpoint
3. ``list(saver.list(config, limit=10))`` on a thread of 100 and of 10,000
   checkpoints (written with ``saver.put`` in a loop)
4. 50 concurrent ``ainvoke`` runs of 10 steps on distinct threads: wall time
5. resume after restart: a fresh process opens the saver on existing storage
   and runs one more super-step of an existing 50-step thread
6. bytes stored after 25, 50, 100 and 200 steps of one thread, per tier

Nothing is asserted: each measurement checks what it reads and reports a
failed check under "Problems". Loopback servers only; every run creates fresh
``lgd_gbench_<run id>_<config>`` databases and ``lgd_gbench_<run id>_...``
Redis key prefixes and removes them at the end, even on error, Ctrl-C or
SIGTERM.

    .venv/bin/python benchmarks/bench_growth.py --quick
    .venv/bin/python benchmarks/bench_growth.py --write    # RESULTS_GROWTH.md and charts/
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import functools
import gc
import importlib
import importlib.util
import inspect
import json
import operator
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from _env import (
    REDIS_URL,
    exit_on_sigterm,
    git_state,
    is_loopback,
    run_lines,  # benchmarks/ is on sys.path when run as a script
)
from _env import Resources as SharedResources
from typing_extensions import TypedDict

HERE = Path(__file__).resolve().parent
NAME = "lgd_gbench"  # prefix of every database, Redis key and temp dir a run creates
POOL_SIZE = 10  # the stock Postgres savers' pool; DurableSaver's postgres_pool_size default is also 10
MODES = ("sync", "async")
SRP = ("sqlite", "redis", "postgres")
RESUME_CHILD = "_resume"  # hidden sub-command: the fresh process of the resume measurement
PACKAGES = [
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langgraph-durable",
    "psycopg",
    "psycopg-pool",
    "redis",
    "aiosqlite",
    "ormsgpack",
    "matplotlib",
]


# -- configurations -------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    key: str  # short slug: database names, key prefixes, thread ids
    kind: str  # "memory" | "stock_sqlite" | "stock_postgres" | "durable"
    tiers: tuple[str, ...] = ()
    stock: str | None = None  # key of the matching stock saver
    write: str | None = None  # DurableSaver(write=...); None = not passed (the default, "shared")
    local_fsync: bool | None = None  # Tiers(local_fsync=...); None = not passed
    history: bool = False  # in the 10,000-checkpoint list measurement
    whole: bool = False  # Memory(list_snapshot_every=1); the bytes measurement only
    linger: float | None = None  # Leases(linger=...); None = not passed (the default: kept 30 s)
    read_cache: int | None = None  # Memory(read_cache_bytes=...); None = not passed (the default)
    on_busy: str | None = None  # Leases(on_busy=...); None = not passed (the default, "raise")
    # stock_postgres: opened with from_conn_string (one connection, as most apps
    # build it) instead of on a psycopg pool of POOL_SIZE
    conn: bool = False

    def label(self, mode: str = "sync") -> str:
        if self.kind == "memory":
            return "InMemorySaver"
        if self.kind == "stock_sqlite":
            return "AsyncSqliteSaver" if mode == "async" else "SqliteSaver"
        if self.kind == "stock_postgres":
            name = "AsyncPostgresSaver" if mode == "async" else "PostgresSaver"
            return name + (" (from_conn_string)" if self.conn else "")
        out = "Durable " + "+".join(self.tiers)
        if self.write:
            out += f" write={self.write}"
        if self.local_fsync is not None:
            out += f" Tiers(local_fsync={self.local_fsync})"
        if self.whole:
            out += " Memory(list_snapshot_every=1)"
        if self.linger is not None:
            out += f" Leases(linger={self.linger:g})"
        if self.read_cache is not None:
            out += f" Memory(read_cache_bytes={self.read_cache})"
        if self.on_busy is not None:
            out += f" Leases(on_busy={self.on_busy})"
        return out

    @property
    def short(self) -> str:
        """One name for both faces (charts)."""
        return {"stock_sqlite": "(Async)SqliteSaver", "stock_postgres": "(Async)PostgresSaver"}.get(
            self.kind, self.label()
        )

    @property
    def needs(self) -> set[str]:
        if self.kind == "stock_postgres":
            return {"postgres"}
        return set(self.tiers) & {"redis", "postgres"}

    @property
    def uses_sqlite(self) -> bool:
        return self.kind == "stock_sqlite" or "sqlite" in self.tiers


CONFIGS: list[Config] = [
    Config("mem", "memory", history=True),
    Config("sqlite_stock", "stock_sqlite", history=True),
    Config("pg_stock", "stock_postgres", history=True),
    Config("d_s", "durable", ("sqlite",), stock="sqlite_stock", history=True),
    Config("d_s_nocache", "durable", ("sqlite",), stock="sqlite_stock", history=True, read_cache=0),
    Config("d_srp", "durable", SRP, stock="pg_stock", history=True),
    Config("d_srp_local", "durable", SRP, stock="pg_stock", write="local"),
    Config("d_srp_local_nofsync", "durable", SRP, stock="pg_stock", write="local", local_fsync=False),
    Config("d_srp_given", "durable", SRP, stock="pg_stock", linger=0.0),
    Config("d_p", "durable", ("postgres",), stock="pg_stock"),
]
# Reference rows of the bytes measurement: every list value stored whole.
WHOLE_CONFIGS: list[Config] = [
    Config("d_s_whole", "durable", ("sqlite",), stock="sqlite_stock", whole=True),
    Config("d_srp_whole", "durable", SRP, stock="pg_stock", whole=True),
]
ALL_CONFIGS = CONFIGS + WHOLE_CONFIGS
CONFIG_BY_KEY = {c.key: c for c in ALL_CONFIGS}
PARTS = ("history", "resume", "concurrency", "bytes")  # ms/step and get_state always run


def has_snapshot_keyword() -> bool:
    import langgraph_durable
    from langgraph_durable import DurableSaver

    # A flat keyword in older versions; a field of Memory since the option groups.
    memory = getattr(langgraph_durable, "Memory", None)
    fields = getattr(memory, "__dataclass_fields__", {})
    return "list_snapshot_every" in inspect.signature(DurableSaver).parameters or "list_snapshot_every" in fields


# -- parameters and results ------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    short_steps: int  # measurement 1: the short run, and the threads resumed in 5
    long_steps: int  # measurement 1: the long run, and the thread read by get_state in 2
    threads: int  # short runs per saver and mode
    reads: int  # get_state calls per thread
    history_small: int
    history_big: int
    list_reads: int  # list(limit=10) calls per thread (fewer if list_budget_s runs out)
    list_budget_s: float
    concurrent: int  # ainvoke runs gathered at once
    conc_steps: int
    rounds: int  # timed gathers
    resume_repeats: int
    marks: tuple[int, ...]  # bytes measured after these many steps
    msg_bytes: int


@dataclass
class Row:
    config: Config
    mode: str
    short_s: list[float] = field(default_factory=list)  # wall time per short invoke
    long_s: list[float] = field(default_factory=list)
    short_tids: list[str] = field(default_factory=list)
    get_s: dict[int, list[float]] = field(default_factory=dict)  # thread's steps -> get_state latencies
    build_s: dict[int, float] = field(default_factory=dict)  # checkpoints -> seconds of the put loop
    list_s: dict[int, list[float]] = field(default_factory=dict)  # checkpoints -> list(limit=10) latencies
    list_any_ns_s: dict[int, list[float]] = field(default_factory=dict)  # the same, without checkpoint_ns
    conc_s: list[float] = field(default_factory=list)  # wall time per gather
    conc_failed: int = 0
    drain_ms: dict[str, float] = field(default_factory=dict)  # write="local": drain() after a timed block
    resume: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # variant -> child results
    bytes_at: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)  # (tier, measure) -> mark -> bytes
    vacuumed: int | None = None  # SQLite file size after VACUUM INTO, at the last mark
    problems: list[tuple[str, str]] = field(default_factory=list)  # (part, text)
    skipped: str | None = None
    elapsed_s: float = 0.0

    @property
    def label(self) -> str:
        return self.config.label(self.mode)

    def problem(self, part: str, text: str) -> None:
        if (part, text) not in self.problems and len(self.problems) < 40:
            self.problems.append((part, text))

    def count(self, part: str) -> int:
        return sum(1 for p, _ in self.problems if p == part)


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def p99(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return xs[0] if xs else None
    return statistics.quantiles(xs, n=100, method="inclusive")[98]


# -- the graph ----------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list, operator.add]
    n: int


ALPHABET = "abcdefghijklmnopqrstuvwxyz"


@functools.cache
def make_message(i: int, size: int) -> str:
    """The string super-step ``i`` appends: seeded pseudo-random words, so
    Postgres TOAST and the like cannot compress them to nothing."""
    rng = random.Random(i)
    words = [f"step {i:05d}:"]
    length = len(words[0])
    while length < size:
        w = "".join(rng.choices(ALPHABET, k=rng.randint(2, 9)))
        words.append(w)
        length += len(w) + 1
    return " ".join(words)[:size]


def expected_messages(steps: int, size: int) -> list[str]:
    return [make_message(i, size) for i in range(steps)]


def build_graph(
    bound: int,
    size: int,
    *,
    is_async: bool,
    checkpointer: Any,
    message: Callable[[int, int], Any] = make_message,
    state: Any = State,
) -> Any:
    """START -> work -> work ... while n < bound; each work step appends one
    message, ``message(step, size)`` (by default a string; `bench_paired.py`
    appends dicts, with its own `state` schema)."""
    from langgraph.graph import END, START, StateGraph

    def route(values: State) -> str:
        return "work" if values["n"] < bound else END

    if is_async:

        async def work(values: State) -> dict[str, Any]:
            return {"messages": [message(values["n"], size)], "n": values["n"] + 1}

    else:

        def work(values: State) -> dict[str, Any]:  # type: ignore[misc]
            return {"messages": [message(values["n"], size)], "n": values["n"] + 1}

    g: Any = StateGraph(state)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", route, ["work", END])
    return g.compile(checkpointer=checkpointer)


def first_input() -> dict[str, Any]:
    return {"messages": [], "n": 0}


def more_input() -> dict[str, Any]:
    """Input that continues an existing thread: START triggers one more work step."""
    return {"messages": []}


def run_config(tid: str, steps: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": tid, "checkpoint_ns": ""}, "recursion_limit": steps + 10}


def thread_of(tid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}


def check_values(values: Any, steps: int, size: int, what: str) -> list[str]:
    if not isinstance(values, dict):
        return [f"{what}: got {type(values).__name__}, not a state dict"]
    issues = []
    got = values.get("messages")
    if got != expected_messages(steps, size):
        n = len(got) if isinstance(got, list) else type(got).__name__
        issues.append(f"{what}: {n} messages (want {steps}) or different content")
    if values.get("n") != steps:
        issues.append(f"{what}: n={values.get('n')!r} (want {steps})")
    return issues


# -- environment: databases, prefixes, temp files -------------------------------------------


class Resources(SharedResources):
    """The shared resource manager, plus whether langgraph-checkpoint-redis could run on this Redis."""

    def __init__(self, run_id: str) -> None:
        super().__init__(NAME, run_id)
        self.redis_saver_note = ""

    def redis_probed(self, client: Any) -> None:
        self.redis_saver_note = redis_saver_note(client, self.server_versions["redis"])

    def probe(self) -> bool:
        ok = super().probe()
        if not self.redis_saver_note:
            self.redis_saver_note = f"langgraph-checkpoint-redis: not measured ({self.redis_down})."
        return ok


def redis_saver_note(client: Any, version: str) -> str:
    """Whether langgraph-checkpoint-redis could run here: it needs RediSearch and RedisJSON."""
    answers = {}
    for name, cmd in (("RediSearch", ("FT._LIST",)), ("RedisJSON", ("JSON.TYPE", f"{NAME}_probe_no_such_key"))):
        try:
            client.execute_command(*cmd)
            answers[name] = True
        except Exception:
            answers[name] = False
    try:
        modules = client.execute_command("MODULE", "LIST")
    except Exception:
        modules = None
    installed = importlib.util.find_spec("langgraph.checkpoint.redis") is not None
    if all(answers.values()):
        state = "is installed" if installed else "is not installed in this environment"
        return (
            f"langgraph-checkpoint-redis: this Redis {version} has RediSearch and RedisJSON, but the package "
            f"{state} and this script does not measure it."
        )
    missing = " and ".join(k for k, v in answers.items() if not v)
    mods = "none" if not modules else str(len(modules))
    return (
        f"langgraph-checkpoint-redis is not in the tables: its RedisSaver needs the RediSearch and RedisJSON "
        f"modules (it indexes JSON documents with FT.CREATE / JSON.SET, through redisvl), and this Redis "
        f"{version} lacks {missing} (loaded modules: {mods}; FT._LIST / JSON.TYPE are unknown commands), "
        "so it was not installed."
    )


# -- saver factories ----------------------------------------------------------------------


@dataclass
class Storage:
    """Where one configuration keeps its data; reused to re-open the saver."""

    sqlite_path: str | None = None
    postgres_url: str | None = None
    redis_prefix: str | None = None


def allocate(config: Config, tag: str, res: Resources, pg: dict[str, str], pg_tag: str) -> Storage:
    st = Storage()
    if config.uses_sqlite:
        st.sqlite_path = str(res.tmp_path / f"{config.key}_{tag}.sqlite")
    if "postgres" in config.needs:
        if pg_tag not in pg:
            pg[pg_tag] = res.new_database(pg_tag)
        st.postgres_url = pg[pg_tag]
    if "redis" in config.needs:
        st.redis_prefix = res.new_prefix(f"{config.key}_{tag}")
    return st


def durable_kwargs(config: Config, st: Storage) -> dict[str, Any]:
    from langgraph_durable import Leases, Memory, Tiers

    kw: dict[str, Any] = {
        "sqlite": st.sqlite_path if "sqlite" in config.tiers else None,
        "redis": REDIS_URL if "redis" in config.tiers else None,
        "postgres": st.postgres_url if "postgres" in config.tiers else None,
    }
    if config.write is not None:
        kw["write"] = config.write
    kw["tiers"] = Tiers(
        redis_key_prefix=st.redis_prefix if "redis" in config.tiers else Tiers().redis_key_prefix,
        local_fsync=config.local_fsync,
    )
    memory: dict[str, Any] = {}
    if config.whole:
        memory["list_snapshot_every"] = 1
    if config.read_cache is not None:
        memory["read_cache_bytes"] = config.read_cache
    kw["memory"] = Memory(**memory)
    leases: dict[str, Any] = {}
    if config.linger is not None:
        leases["linger"] = config.linger
    if config.on_busy is not None:
        leases["on_busy"] = config.on_busy
    kw["leases"] = Leases(**leases)
    return kw


def pg_pool_kwargs() -> dict[str, Any]:
    from psycopg.rows import dict_row

    # as the langgraph-checkpoint-postgres docs open a pool for the saver
    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


def need(value: str | None) -> str:
    if value is None:
        raise RuntimeError("storage was not allocated for this configuration")
    return value


@contextlib.contextmanager
def open_sync(config: Config, st: Storage) -> Iterator[Any]:
    if config.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif config.kind == "stock_sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(need(st.sqlite_path)) as saver:
            saver.setup()
            yield saver
    elif config.kind == "stock_postgres" and config.conn:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(need(st.postgres_url)) as saver:
            saver.setup()
            yield saver
    elif config.kind == "stock_postgres":
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(need(st.postgres_url), min_size=1, max_size=POOL_SIZE, kwargs=pg_pool_kwargs(), open=True)
        try:
            saver = PostgresSaver(pool)  # type: ignore[arg-type]
            saver.setup()
            yield saver
        finally:
            pool.close()
    else:
        from langgraph_durable import DurableSaver

        saver = DurableSaver(**durable_kwargs(config, st))
        try:
            saver.setup()
            yield saver
        finally:
            saver.close()


@contextlib.asynccontextmanager
async def open_async(config: Config, st: Storage) -> AsyncIterator[Any]:
    if config.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif config.kind == "stock_sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(need(st.sqlite_path)) as saver:
            await saver.setup()
            yield saver
    elif config.kind == "stock_postgres" and config.conn:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(need(st.postgres_url)) as saver:
            await saver.setup()
            yield saver
    elif config.kind == "stock_postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            need(st.postgres_url), min_size=1, max_size=POOL_SIZE, kwargs=pg_pool_kwargs(), open=False
        )
        await pool.open()
        try:
            saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
            await saver.setup()
            yield saver
        finally:
            await pool.close()
    else:
        from langgraph_durable import DurableSaver

        saver = DurableSaver(**durable_kwargs(config, st))
        try:
            await saver.asetup()
            yield saver
        finally:
            await saver.aclose()


def guard(row: Row, part: str) -> contextlib.AbstractContextManager[None]:
    """Record an exception as a problem of ``part`` and carry on with the next part."""

    @contextlib.contextmanager
    def body() -> Iterator[None]:
        try:
            yield
        except Exception:
            row.problem(part, "raised:\n\n```\n" + traceback.format_exc().rstrip() + "\n```")

    return body()


# -- 1 + 2 + 3: the sync phase ------------------------------------------------------------------


DRAIN_TIMEOUT_S = 60.0


def settle(saver: Any, config: Config, row: Row, part: str, block: str | None) -> None:
    """write="local": ship what the shared tiers are owed, so the next timed block starts owing
    nothing (its replicator would otherwise compete with it). ``block`` names the timed block that
    made the backlog; its drain time is reported."""
    if config.write != "local":
        return
    t0 = time.perf_counter()
    left = saver.drain(DRAIN_TIMEOUT_S)
    if block:
        row.drain_ms[block] = (time.perf_counter() - t0) * 1e3
    if left.records:
        row.problem(part, f"drain({DRAIN_TIMEOUT_S:.0f}) after {block or 'warm-up'} left {left.records} record(s) owed")


async def asettle(saver: Any, config: Config, row: Row, part: str, block: str | None) -> None:
    if config.write != "local":
        return
    t0 = time.perf_counter()
    left = await saver.adrain(DRAIN_TIMEOUT_S)
    if block:
        row.drain_ms[block] = (time.perf_counter() - t0) * 1e3
    if left.records:
        row.problem(
            part, f"adrain({DRAIN_TIMEOUT_S:.0f}) after {block or 'warm-up'} left {left.records} record(s) owed"
        )


def invoke_timed(graph: Any, inp: dict[str, Any], tid: str, steps: int) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = graph.invoke(inp, run_config(tid, steps), durability="sync")
    return time.perf_counter() - t0, out


def measure_get_state(graph: Any, tid: str, steps: int, params: Params, row: Row) -> None:
    what = f"get_state on the {steps}-step thread"
    snap = graph.get_state(thread_of(tid))
    for issue in check_values(snap.values, steps, params.msg_bytes, what):
        row.problem("get_state", issue)
    if snap.next:
        row.problem("get_state", f"{what}: next={snap.next!r} (want (), the run had ended)")
    for _ in range(3):
        graph.get_state(thread_of(tid))
    samples: list[float] = []
    gc.collect()
    for _ in range(params.reads):
        t0 = time.perf_counter()
        snap = graph.get_state(thread_of(tid))
        samples.append(time.perf_counter() - t0)
    if len(snap.values.get("messages", ())) != steps:
        row.problem("get_state", f"{what}: the last call saw {len(snap.values.get('messages', ()))} messages")
    row.get_s[steps] = samples


def lease_run(tid: str) -> dict[str, Any]:
    """The config of one graph run, as Pregel starts one (a fresh Runtime): a
    DurableSaver takes the thread's writer lease at the first get_tuple and
    keeps it for the run's puts, instead of taking it for each direct put."""
    from langgraph.runtime import Runtime

    def stream_writer(_: Any) -> None:  # one per run: the saver watches it to see the run end
        return None

    return {
        "configurable": {
            "thread_id": tid,
            "checkpoint_ns": "",
            "__pregel_runtime": Runtime(stream_writer=stream_writer),
        }
    }


def build_history(saver: Any, config: Config, tid: str, count: int) -> tuple[float, str]:
    """``count`` chained checkpoints of a one-int state, written with saver.put."""
    from langgraph.checkpoint.base import empty_checkpoint

    cfg = lease_run(tid) if config.kind == "durable" else thread_of(tid)
    runtime_keys = {k: v for k, v in cfg["configurable"].items() if k.startswith("__")}
    if config.kind == "durable":
        saver.get_tuple(cfg)
    version = None
    last = ""
    t0 = time.perf_counter()
    for i in range(count):
        cp = empty_checkpoint()  # a new uuid6 id each time, so ids sort in write order
        version = saver.get_next_version(version, None)
        cp["channel_values"] = {"n": i}
        cp["channel_versions"] = {"n": version}
        new = saver.put(cfg, cp, {"source": "loop", "step": i, "parents": {}}, {"n": version})
        cfg = {"configurable": {**new["configurable"], **runtime_keys}}
        last = cp["id"]
    return time.perf_counter() - t0, last


def check_history(items: list[Any], count: int, last_id: str, what: str) -> list[str]:
    issues = []
    if len(items) != 10:
        issues.append(f"{what}: list(limit=10) returned {len(items)} tuples (want 10)")
    ids = [t.config["configurable"]["checkpoint_id"] for t in items]
    if ids != sorted(ids, reverse=True) or len(set(ids)) != len(ids):
        issues.append(f"{what}: list(limit=10) is not newest-first without repeats")
    if ids and ids[0] != last_id:
        issues.append(f"{what}: list(limit=10) starts at {ids[0]}, not the last checkpoint put ({last_id})")
    ns = [t.checkpoint.get("channel_values", {}).get("n") for t in items]
    want = list(range(count - 1, count - 1 - len(items), -1))
    if ns != want:
        issues.append(f"{what}: list(limit=10) values n={ns[:3]}... (want {want[:3]}...)")
    return issues


def measure_history(saver: Any, config: Config, params: Params, row: Row, tag: str) -> None:
    threads: dict[int, tuple[str, str]] = {}
    for count in (params.history_small, params.history_big):
        tid = f"{tag}-hist{count}"
        row.build_s[count], last = build_history(saver, config, tid, count)
        threads[count] = (tid, last)
    for count, (tid, last) in threads.items():
        # With checkpoint_ns="" (what get_state_history passes), and without
        # one (a thread's newest checkpoints across its namespaces).
        for config_of, out, how in (
            (thread_of, row.list_s, ""),
            (lambda t: {"configurable": {"thread_id": t}}, row.list_any_ns_s, ", without checkpoint_ns"),
        ):
            what = f"thread of {count} checkpoints{how}"
            for issue in check_history(list(saver.list(config_of(tid), limit=10)), count, last, what):
                row.problem("history", issue)
            samples: list[float] = []
            gc.collect()
            deadline = time.perf_counter() + params.list_budget_s
            for i in range(params.list_reads):
                t0 = time.perf_counter()
                list(saver.list(config_of(tid), limit=10))
                samples.append(time.perf_counter() - t0)
                if i >= 4 and time.perf_counter() > deadline:
                    break
            out[count] = samples


def phase_sync(config: Config, st: Storage, params: Params, row: Row, parts: set[str]) -> None:
    tag = f"{config.key}-sync"
    size = params.msg_bytes
    with open_sync(config, st) as saver:
        g_short = build_graph(params.short_steps, size, is_async=False, checkpointer=saver)
        g_long = build_graph(params.long_steps, size, is_async=False, checkpointer=saver)
        with guard(row, "steps"):
            _, out = invoke_timed(g_short, first_input(), f"{tag}-warm", params.short_steps)
            for issue in check_values(out, params.short_steps, size, "warm-up invoke"):
                row.problem("steps", issue)
            settle(saver, config, row, "steps", None)
            gc.collect()
            for i in range(params.threads):
                tid = f"{tag}-s{i}"
                wall, out = invoke_timed(g_short, first_input(), tid, params.short_steps)
                row.short_s.append(wall)
                row.short_tids.append(tid)
                for issue in check_values(out, params.short_steps, size, f"{params.short_steps}-step invoke"):
                    row.problem("steps", issue)
            settle(saver, config, row, "steps", "short")
            gc.collect()
            wall, out = invoke_timed(g_long, first_input(), f"{tag}-l0", params.long_steps)
            row.long_s.append(wall)
            for issue in check_values(out, params.long_steps, size, f"{params.long_steps}-step invoke"):
                row.problem("steps", issue)
            settle(saver, config, row, "steps", "long")
        with guard(row, "get_state"):
            if row.short_tids:
                measure_get_state(g_short, row.short_tids[0], params.short_steps, params, row)
            if row.long_s:
                measure_get_state(g_long, f"{tag}-l0", params.long_steps, params, row)
        if config.history and "history" in parts:
            with guard(row, "history"):
                measure_history(saver, config, params, row, tag)


# -- 4 + 1: the async phase ----------------------------------------------------------------------


async def ainvoke_timed(graph: Any, inp: dict[str, Any], tid: str, steps: int) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await graph.ainvoke(inp, run_config(tid, steps), durability="sync")
    return time.perf_counter() - t0, out


async def measure_concurrency(saver: Any, config: Config, params: Params, row: Row, tag: str) -> None:
    size, steps = params.msg_bytes, params.conc_steps
    graph = build_graph(steps, size, is_async=True, checkpointer=saver)

    async def one(tid: str) -> Any:
        return await graph.ainvoke(first_input(), run_config(tid, steps), durability="sync")

    warm = await asyncio.gather(*(one(f"{tag}-cw{i}") for i in range(5)), return_exceptions=True)
    for r in range(params.rounds + 1):  # round 0 is the warm-up above
        if r == 0:
            outs = warm
        else:
            await asettle(saver, config, row, "concurrency", None if r == 1 else f"round {r - 1}")
            gc.collect()
            t0 = time.perf_counter()
            outs = await asyncio.gather(
                *(one(f"{tag}-c{r}-{i}") for i in range(params.concurrent)), return_exceptions=True
            )
            row.conc_s.append(time.perf_counter() - t0)
        failed = [o for o in outs if isinstance(o, BaseException)]
        if r:
            row.conc_failed += len(failed)
        if failed:
            tb = "".join(traceback.format_exception(failed[0])).rstrip()
            row.problem(
                "concurrency",
                f"{'warm-up' if r == 0 else f'round {r}'}: {len(failed)} of {len(outs)} ainvoke raised; "
                f"the first:\n\n```\n{tb}\n```",
            )
        for o in outs:
            if not isinstance(o, BaseException):
                for issue in check_values(o, steps, size, f"concurrent {steps}-step ainvoke"):
                    row.problem("concurrency", issue)
        if r == params.rounds:
            await asettle(saver, config, row, "concurrency", f"round {r}")
        if r:  # read two of the round's threads back from the saver
            for tid in (f"{tag}-c{r}-0", f"{tag}-c{r}-{params.concurrent - 1}"):
                tup = await saver.aget_tuple(thread_of(tid))
                values = tup.checkpoint.get("channel_values") if tup else None
                for issue in check_values(values, steps, size, "aget_tuple read-back after the concurrent round"):
                    row.problem("concurrency", issue)


async def phase_async(config: Config, st: Storage, params: Params, row: Row, parts: set[str]) -> None:
    tag = f"{config.key}-async"
    size = params.msg_bytes
    async with open_async(config, st) as saver:
        g_short = build_graph(params.short_steps, size, is_async=True, checkpointer=saver)
        g_long = build_graph(params.long_steps, size, is_async=True, checkpointer=saver)
        with guard(row, "steps"):
            _, out = await ainvoke_timed(g_short, first_input(), f"{tag}-warm", params.short_steps)
            for issue in check_values(out, params.short_steps, size, "warm-up ainvoke"):
                row.problem("steps", issue)
            await asettle(saver, config, row, "steps", None)
            gc.collect()
            for i in range(params.threads):
                wall, out = await ainvoke_timed(g_short, first_input(), f"{tag}-s{i}", params.short_steps)
                row.short_s.append(wall)
                for issue in check_values(out, params.short_steps, size, f"{params.short_steps}-step ainvoke"):
                    row.problem("steps", issue)
            await asettle(saver, config, row, "steps", "short")
            gc.collect()
            wall, out = await ainvoke_timed(g_long, first_input(), f"{tag}-l0", params.long_steps)
            row.long_s.append(wall)
            for issue in check_values(out, params.long_steps, size, f"{params.long_steps}-step ainvoke"):
                row.problem("steps", issue)
            await asettle(saver, config, row, "steps", "long")
        if "concurrency" in parts:
            with guard(row, "concurrency"):
                await measure_concurrency(saver, config, params, row, tag)


# -- 5: resume after restart, in a fresh process -------------------------------------------------------


def resume_child(spec_json: str) -> int:
    """The fresh process: open a saver on existing storage and run one more super-step.

    Prints one ``RESULT {json}`` line. Times from the start of the saver's
    construction (imports are done before) to the end of the invoke."""
    spec = json.loads(spec_json)
    for url in (spec.get("postgres"), spec.get("redis")):
        if url and not is_loopback(url):
            print("refusing a non-loopback URL", file=sys.stderr)
            return 2
    config = CONFIG_BY_KEY[spec["config"]]
    st = Storage(spec.get("sqlite"), spec.get("postgres"), spec.get("prefix"))
    # the imports are done before the clock starts
    modules = {
        "stock_sqlite": ["langgraph.checkpoint.sqlite"],
        "stock_postgres": ["langgraph.checkpoint.postgres", "psycopg_pool"],
        "durable": ["langgraph_durable"],
    }.get(config.kind, [])
    for name in ["langgraph.graph", *modules]:
        importlib.import_module(name)
    bound, size, tid = spec["bound"], spec["msg_bytes"], spec["thread"]
    t0 = time.perf_counter()
    with open_sync(config, st) as saver:
        t_open = time.perf_counter()
        graph = build_graph(bound, size, is_async=False, checkpointer=saver)
        t_graph = time.perf_counter()
        out = graph.invoke(more_input(), run_config(tid, bound), durability="sync")
        t_end = time.perf_counter()
        issues = check_values(out, bound, size, "resumed invoke")
        t_close = time.perf_counter()
    t_closed = time.perf_counter()
    result = {
        "open_ms": (t_open - t0) * 1e3,
        "step_ms": (t_end - t_graph) * 1e3,
        "total_ms": (t_end - t0) * 1e3,
        "close_ms": (t_closed - t_close) * 1e3,
        "issues": issues,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def run_child(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), RESUME_CHILD, json.dumps(spec)]
    t0 = time.perf_counter()
    # subprocess.run kills the child if this process is interrupted
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=HERE)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return None, f"exit {proc.returncode}; stderr:\n\n```\n{proc.stderr.strip()[-3000:]}\n```"
    out = json.loads(lines[-1][len("RESULT ") :])
    out["process_ms"] = wall * 1e3
    return out, ""


def resume_variants(config: Config) -> list[str]:
    if config.kind == "memory":
        return []
    if config.kind == "durable" and "sqlite" in config.tiers and config.needs:
        return ["warm", "cold"]
    return ["reopen"]


def phase_resume(config: Config, st: Storage, params: Params, row: Row, sync_row: Row, res: Resources) -> None:
    tids = sync_row.short_tids
    if not tids:
        row.problem("resume", "no existing thread to resume (the sync phase wrote none)")
        return
    steps_now = dict.fromkeys(tids, params.short_steps)
    for variant in resume_variants(config):
        for i in range(params.resume_repeats):
            tid = tids[i % len(tids)]
            bound = steps_now[tid] + 1
            sqlite_path = st.sqlite_path
            if variant == "cold":  # a new empty SQLite file: the thread is only in Redis and Postgres
                sqlite_path = str(res.tmp_path / f"{config.key}_cold_{i}.sqlite")
            spec = {
                "config": config.key,
                "sqlite": sqlite_path,
                "postgres": st.postgres_url,
                "redis": REDIS_URL if st.redis_prefix else None,
                "prefix": st.redis_prefix,
                "thread": tid,
                "bound": bound,
                "msg_bytes": params.msg_bytes,
            }
            out, err = run_child(spec)
            if out is None:
                row.problem("resume", f"{variant}: the fresh process failed: {err}")
                continue
            for issue in out.get("issues", []):
                row.problem("resume", f"{variant}: {issue}")
            if not out.get("issues"):
                steps_now[tid] = bound
            row.resume.setdefault(variant, []).append(out)


# -- 6: bytes per step -------------------------------------------------------------------------------------


def sqlite_bytes(path: str) -> int:
    """Sum of the byte length of every BLOB and TEXT value in every table of the file."""
    con = sqlite3.connect(Path(path).as_uri() + "?mode=ro", uri=True)
    try:
        total = 0
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            if t.startswith("sqlite_"):
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            if not cols:
                continue
            expr = " + ".join(
                f"coalesce(sum(CASE WHEN typeof(\"{c}\") IN ('blob', 'text') "
                f'THEN length(CAST("{c}" AS BLOB)) ELSE 0 END), 0)'
                for c in cols
            )
            total += int(con.execute(f'SELECT {expr} FROM "{t}"').fetchone()[0])
        return total
    finally:
        con.close()


def sqlite_vacuumed_size(path: str, scratch: Path) -> int:
    """Size of a VACUUM INTO copy: the file without free pages or WAL."""
    target = scratch / (Path(path).stem + "_vacuumed.sqlite")
    target.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("VACUUM INTO ?", (str(target),))
    finally:
        con.close()
    size = target.stat().st_size
    target.unlink()
    return size


PG_TEXT_TYPES = ("bytea", "text", "character varying", "character", "json", "jsonb")


def postgres_bytes(url: str) -> tuple[int, int]:
    """(sum of octet_length of every bytea / text / json(b) value, sum of pg_total_relation_size) over the
    database's own tables."""
    import psycopg
    from psycopg import sql

    user_tables = (
        "FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p', 'm') AND ns.nspname NOT IN ('pg_catalog', 'information_schema') "
        "AND ns.nspname NOT LIKE 'pg_toast%'"
    )
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as c:
        cols = c.execute(
            "SELECT c.oid::regclass::text, a.attname, format_type(a.atttypid, NULL) "
            + user_tables.replace("WHERE", "JOIN pg_attribute a ON a.attrelid = c.oid WHERE")
            + " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, a.attnum"
        ).fetchall()
        by_table: dict[str, list[sql.Composable]] = {}
        for rel, col, typ in cols:
            if typ not in PG_TEXT_TYPES:
                continue
            ident = sql.Identifier(col)
            value = sql.SQL("{}::text").format(ident) if typ in ("json", "jsonb") else ident
            by_table.setdefault(rel, []).append(sql.SQL("coalesce(sum(octet_length({})), 0)").format(value))
        payload = 0
        for rel, exprs in by_table.items():
            q = sql.SQL("SELECT {} FROM {}").format(sql.SQL(" + ").join(exprs), sql.SQL(rel))
            payload += int(c.execute(q).fetchone()[0])  # type: ignore[index]
        row = c.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) " + user_tables).fetchone()
        relation = int(row[0]) if row else 0
    return payload, relation


def redis_bytes(prefix: str) -> int:
    """MEMORY USAGE (all elements sampled) summed over the keys under ``prefix:``."""
    import redis as redis_lib

    client = redis_lib.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.execute_command("MEMORY", "USAGE", k, "SAMPLES", "0")
        return sum(int(x or 0) for x in pipe.execute()) if keys else 0
    finally:
        client.close()


def memory_bytes(saver: Any) -> int:
    """Bytes of the serialized values an InMemorySaver holds (its storage, writes and blobs)."""

    def walk(x: Any) -> int:
        if isinstance(x, bytes | bytearray):
            return len(x)
        if isinstance(x, dict):
            return sum(walk(v) for v in x.values())
        if isinstance(x, list | tuple):
            return sum(walk(v) for v in x)
        return 0

    return walk(saver.storage) + walk(saver.writes) + walk(saver.blobs)


BYTE_MEASURES = {
    ("memory", "payload"): "serialized bytes held",
    ("sqlite", "payload"): "length of BLOB/TEXT values",
    ("postgres", "payload"): "octet_length of bytea/text/jsonb values",
    ("postgres", "relation"): "pg_total_relation_size",
    ("redis", "memory"): "MEMORY USAGE of its keys",
}


def tier_bytes(config: Config, st: Storage, saver: Any) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    if config.kind == "memory":
        out[("memory", "payload")] = memory_bytes(saver)
    if st.sqlite_path:
        out[("sqlite", "payload")] = sqlite_bytes(st.sqlite_path)
    if st.postgres_url:
        out[("postgres", "payload")], out[("postgres", "relation")] = postgres_bytes(st.postgres_url)
    if st.redis_prefix:
        out[("redis", "memory")] = redis_bytes(st.redis_prefix)
    return out


def phase_bytes(config: Config, st: Storage, params: Params, row: Row, res: Resources) -> None:
    size = params.msg_bytes
    tid = f"{config.key}-bytes"
    with open_sync(config, st) as saver:
        base = tier_bytes(config, st, saver)  # right after setup: the empty tables
        for i, mark in enumerate(params.marks):
            graph = build_graph(mark, size, is_async=False, checkpointer=saver)
            out = graph.invoke(first_input() if i == 0 else more_input(), run_config(tid, mark), durability="sync")
            for issue in check_values(out, mark, size, f"invoke up to step {mark}"):
                row.problem("bytes", issue)
            tup = saver.get_tuple(thread_of(tid))
            values = tup.checkpoint.get("channel_values") if tup else None
            for issue in check_values(values, mark, size, f"get_tuple read-back after step {mark}"):
                row.problem("bytes", issue)
            if config.write == "local":  # measure what the shared tiers hold once shipped
                left = saver.drain(60)
                if left.records:
                    row.problem("bytes", f"after step {mark}: drain(60) left {left.records} record(s) owed")
            now = tier_bytes(config, st, saver)
            for k, v in now.items():
                row.bytes_at.setdefault(k, {})[mark] = v - base.get(k, 0)
    if st.sqlite_path:
        row.vacuumed = sqlite_vacuumed_size(st.sqlite_path, res.tmp_path)


# -- running the configurations -----------------------------------------------------------------------------


def timed_phase(row: Row, part: str, fn: Callable[[], Any]) -> None:
    t0 = time.perf_counter()
    try:
        fn()
    except Exception:
        row.problem(part, "raised:\n\n```\n" + traceback.format_exc().rstrip() + "\n```")
    finally:
        row.elapsed_s += time.perf_counter() - t0


def fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 1:
        return f"{v:.3f}"
    if v < 100:
        return f"{v:.2f}"
    return f"{v:.0f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def per_step_ms(walls: list[float], steps: int) -> float | None:
    m = median(walls)
    return None if m is None else m / steps * 1e3


@dataclass
class Run:
    params: Params
    parts: set[str]
    configs: list[Config]
    rows: dict[tuple[str, str], Row] = field(default_factory=dict)  # (config key, mode or part) -> row
    notes: list[str] = field(default_factory=list)

    def row(self, config: Config, mode: str) -> Row:
        return self.rows.setdefault((config.key, mode), Row(config, mode))


def execute(run: Run, res: Resources) -> None:
    params = run.params
    pg: dict[str, str] = {}
    storages: dict[tuple[str, str], Storage] = {}

    def say(row: Row, what: str, figure: str) -> None:
        bad = len(row.problems)
        state = "skipped" if row.skipped else (f"{bad} problem(s)" if bad else "ok")
        print(f"  {what:12s} {row.label:46s} {figure:>22s}  {state} ({row.elapsed_s:.1f} s)", flush=True)

    main_configs = [c for c in run.configs if not c.whole]
    for config in main_configs:  # sync phase, then resume in fresh processes
        row = run.row(config, "sync")
        row.skipped = res.unavailable(config.needs)
        if row.skipped:
            say(row, "sync", "")
            continue
        st = storages[(config.key, "sync")] = allocate(config, "sync", res, pg, config.key)
        timed_phase(row, "steps", lambda c=config, s=st, r=row: phase_sync(c, s, params, r, run.parts))
        say(row, "sync", f"{fmt_ms(per_step_ms(row.long_s, params.long_steps))} ms/step @{params.long_steps}")
        if "resume" in run.parts and resume_variants(config):
            rrow = run.row(config, "resume")
            timed_phase(rrow, "resume", lambda c=config, s=st, r=rrow, sr=row: phase_resume(c, s, params, r, sr, res))
            tot = median([x["total_ms"] for v in rrow.resume.values() for x in v])
            say(rrow, "resume", f"{fmt_ms(tot)} ms open+step")
    for config in main_configs:  # async phase
        row = run.row(config, "async")
        row.skipped = res.unavailable(config.needs)
        if row.skipped:
            say(row, "async", "")
            continue
        st = storages[(config.key, "async")] = allocate(config, "async", res, pg, config.key)
        timed_phase(row, "steps", lambda c=config, s=st, r=row: asyncio.run(phase_async(c, s, params, r, run.parts)))
        conc = median(row.conc_s)
        say(row, "async", f"{conc:.2f} s x{params.concurrent} runs" if conc else "")
    if "bytes" in run.parts:
        # Keeping a lease or a read stores nothing more.
        for config in [c for c in run.configs if c.linger is None and c.read_cache is None]:
            row = run.row(config, "bytes")
            row.skipped = res.unavailable(config.needs)
            if config.whole and not has_snapshot_keyword():
                row.skipped = "DurableSaver has no list_snapshot_every keyword"
            if row.skipped:
                say(row, "bytes", "")
                continue
            st = allocate(config, "bytes", res, pg, f"{config.key}_bytes")
            timed_phase(row, "bytes", lambda c=config, s=st, r=row: phase_bytes(c, s, params, r, res))
            last = params.marks[-1]
            prim = [v.get(last) for k, v in row.bytes_at.items() if k[1] != "relation"]
            say(row, "bytes", f"{sum(x or 0 for x in prim) / 1024:.0f} KiB @{last}" if prim else "")


# -- report -----------------------------------------------------------------------------------------------


def md_table(head: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """``align``: one character per column, l or r."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return [*out, ""]


def status(row: Row | None, part: str) -> str:
    if row is None:
        return "-"
    if row.skipped:
        return "skipped"
    n = row.count(part)
    return f"{n} problem(s)" if n else "ok"


def render(run: Run) -> tuple[str, dict[str, Any]]:
    """The markdown tables, and the figures the charts draw."""
    p = run.params
    rows = run.rows
    lines: list[str] = []
    chart: dict[str, Any] = {}
    main_configs = [c for c in run.configs if not c.whole]

    def get(key: str, mode: str) -> Row | None:
        r = rows.get((key, mode))
        return None if r is None or r.skipped else r

    def stock_of(c: Config, mode: str) -> Row | None:
        return get(c.stock, mode) if c.stock else None

    # 1. ms per super-step
    lines += [f"## 1. Time per super-step ({p.short_steps}- and {p.long_steps}-step runs)", ""]
    lines += [
        f"Median wall time of one `invoke` / `ainvoke` divided by its super-steps: {p.threads} run(s) of "
        f"{p.short_steps} steps and 1 run of {p.long_steps} steps per row, each on a fresh thread, after one "
        f"untimed {p.short_steps}-step run. `{p.long_steps}÷{p.short_steps}` is how much a step costs at the end "
        "of the long run relative to the short one (1.00x: no growth).",
        "",
    ]
    t1: list[list[str]] = []
    chart["steps"] = []
    for mode in MODES:
        pg = get("pg_stock", mode)
        for c in main_configs:
            r = rows.get((c.key, mode))
            if r is None:
                continue
            s = per_step_ms(r.short_s, p.short_steps) if not r.skipped else None
            lg = per_step_ms(r.long_s, p.long_steps) if not r.skipped else None
            st = stock_of(c, mode)
            st_s = per_step_ms(st.short_s, p.short_steps) if st else None
            st_l = per_step_ms(st.long_s, p.long_steps) if st else None
            pg_s = per_step_ms(pg.short_s, p.short_steps) if pg else None
            pg_l = per_step_ms(pg.long_s, p.long_steps) if pg else None
            t1.append(
                [
                    r.label,
                    mode,
                    fmt_ms(s),
                    fmt_ms(lg),
                    fmt_ratio(lg, s),
                    (st.label if st else "-"),
                    fmt_ratio(s, st_s),
                    fmt_ratio(lg, st_l),
                    fmt_ratio(s, pg_s),
                    fmt_ratio(lg, pg_l),
                    status(r, "steps"),
                ]
            )
            chart["steps"].append((c.short, mode, s, lg))
    lines += md_table(
        [
            "saver",
            "mode",
            f"ms/step @{p.short_steps}",
            f"ms/step @{p.long_steps}",
            f"{p.long_steps}÷{p.short_steps}",
            "matching stock",
            f"vs stock @{p.short_steps}",
            f"vs stock @{p.long_steps}",
            f"vs PostgresSaver @{p.short_steps}",
            f"vs PostgresSaver @{p.long_steps}",
            "check",
        ],
        "llrrrlrrrrl",
        t1,
    )
    lines += drain_lines(run, [("short", f"the {p.short_steps}-step runs"), ("long", f"the {p.long_steps}-step run")])
    lines += ["![ms per super-step](CHART:steps)", ""]

    # 2. get_state
    lines += [f"## 2. `graph.get_state` on a thread's latest checkpoint (sync, {p.reads} calls)", ""]
    lines += [
        f"Latency of `graph.get_state(config)` on the last {p.short_steps}-step thread and on the "
        f"{p.long_steps}-step thread of section 1 (state of {p.short_steps} and {p.long_steps} messages). "
        "By default a DurableSaver with a local cache in front of a shared tier keeps each run's writer "
        "lease after the run ends (`lease_linger`, 30 s), so these reads come from its local SQLite cache "
        "with no round trip; the `Leases(linger=0)` row gives the lease back, and a read after the run asks "
        "every tier which checkpoint is newest. Durable sqlite keeps a read while "
        "nothing is committed to its file (`read_cache.py`), so the calls after the first are served from "
        "that: the `Memory(read_cache_bytes=0)` row reads the file every time, as the first read after a write does.",
        "",
    ]
    t2: list[list[str]] = []
    chart["get_state"] = []
    pg = get("pg_stock", "sync")

    def q(r: Row | None, steps: int, fn: Callable[[list[float]], float | None]) -> float | None:
        if r is None or steps not in r.get_s:
            return None
        v = fn(r.get_s[steps])
        return None if v is None else v * 1e3

    for c in main_configs:
        r = rows.get((c.key, "sync"))
        if r is None:
            continue
        good = None if r.skipped else r
        st = stock_of(c, "sync")
        vals = [q(good, p.short_steps, median), q(good, p.short_steps, p99)]
        vals += [q(good, p.long_steps, median), q(good, p.long_steps, p99)]
        t2.append(
            [r.label]
            + [fmt_ms(v) for v in vals]
            + [
                st.label if st else "-",
                fmt_ratio(vals[2], q(st, p.long_steps, median)),
                fmt_ratio(vals[3], q(st, p.long_steps, p99)),
                fmt_ratio(vals[2], q(pg, p.long_steps, median)),
                fmt_ratio(vals[3], q(pg, p.long_steps, p99)),
                status(r, "get_state"),
            ]
        )
        chart["get_state"].append((c.short, *vals))
    lines += md_table(
        [
            "saver",
            f"p50 @{p.short_steps} (ms)",
            f"p99 @{p.short_steps} (ms)",
            f"p50 @{p.long_steps} (ms)",
            f"p99 @{p.long_steps} (ms)",
            "matching stock",
            f"vs stock p50 @{p.long_steps}",
            f"vs stock p99 @{p.long_steps}",
            f"vs PostgresSaver p50 @{p.long_steps}",
            f"vs PostgresSaver p99 @{p.long_steps}",
            "check",
        ],
        "lrrrrlrrrrl",
        t2,
    )
    lines += ["![get_state p50 and p99](CHART:get_state)", ""]

    # 3. history
    if "history" in run.parts:
        small, big = p.history_small, p.history_big
        lines += [f"## 3. `list(saver.list(config, limit=10))` on threads of {small:,} and {big:,} checkpoints", ""]
        lines += [
            "What `get_state_history(config, limit=10)` reads. Each thread was written with `saver.put` in a "
            "loop (one-int state, chained parents); for `DurableSaver` the loop runs as one graph run would, "
            "holding the thread's writer lease. `build` is that loop's wall time. Median latency over up to "
            f"{p.list_reads} calls per thread (fewer if {p.list_budget_s:.0f} s ran out). `no ns`: the same "
            "call without `checkpoint_ns` in the config (`saver.list({'configurable': {'thread_id': t}}, "
            "limit=10)`), which asks for the newest checkpoints across the thread's namespaces. Durable "
            "sqlite serves the calls after the first from its read cache; `Memory(read_cache_bytes=0)` reads every time.",
            "",
        ]
        t3: list[list[str]] = []
        chart["history"] = []

        def lq(r: Row | None, n: int, any_ns: bool = False) -> float | None:
            samples = None if r is None else (r.list_any_ns_s if any_ns else r.list_s).get(n)
            m = median(samples) if samples else None
            return None if m is None else m * 1e3

        for c in main_configs:
            if not c.history:
                continue
            r = rows.get((c.key, "sync"))
            if r is None:
                continue
            good = None if r.skipped else r
            st = stock_of(c, "sync")
            a, b = lq(good, small), lq(good, big)
            na, nb = lq(good, small, True), lq(good, big, True)
            build = good.build_s.get(big) if good else None
            t3.append(
                [
                    r.label,
                    "-" if build is None else f"{build:.1f} s ({big / build:,.0f}/s)",
                    fmt_ms(a),
                    fmt_ms(b),
                    fmt_ratio(b, a),
                    st.label if st else "-",
                    fmt_ratio(a, lq(st, small)),
                    fmt_ratio(b, lq(st, big)),
                    fmt_ratio(a, lq(pg, small)),
                    fmt_ratio(b, lq(pg, big)),
                    fmt_ms(na),
                    fmt_ms(nb),
                    fmt_ratio(nb, na),
                    "-" if good is None else str(len(good.list_s.get(big, []))),
                    status(r, "history"),
                ]
            )
            chart["history"].append((c.short, a, b))
        lines += md_table(
            [
                "saver",
                f"build {big:,}",
                f"list10 @{small:,} (ms)",
                f"list10 @{big:,} (ms)",
                f"{big:,}÷{small:,}",
                "matching stock",
                f"vs stock @{small:,}",
                f"vs stock @{big:,}",
                f"vs PostgresSaver @{small:,}",
                f"vs PostgresSaver @{big:,}",
                f"no ns @{small:,} (ms)",
                f"no ns @{big:,} (ms)",
                f"no ns {big:,}÷{small:,}",
                f"calls @{big:,}",
                "check",
            ],
            "lrrrrlrrrrrrrrl",
            t3,
        )
        lines += ["![list(limit=10) on short and long histories](CHART:history)", ""]

    # 4. concurrency
    if "concurrency" in run.parts:
        lines += [f"## 4. {p.concurrent} concurrent `ainvoke` runs of {p.conc_steps} steps", ""]
        lines += [
            f"`asyncio.gather` of {p.concurrent} `ainvoke` calls on distinct fresh threads in one event loop; "
            f"median over {p.rounds} round(s) after a 5-run warm-up. `AsyncPostgresSaver` runs on a pool of "
            f"{POOL_SIZE} connections; `DurableSaver`'s Postgres pool also holds at most {POOL_SIZE}. "
            "`steps/s` counts work super-steps of all runs.",
            "",
        ]
        t4: list[list[str]] = []
        apg = get("pg_stock", "async")
        for c in main_configs:
            r = rows.get((c.key, "async"))
            if r is None:
                continue
            good = None if r.skipped else r
            st = stock_of(c, "async")
            w = median(good.conc_s) if good else None
            t4.append(
                [
                    r.label,
                    "-" if w is None else f"{w:.2f}",
                    "-" if not w else f"{p.concurrent * p.conc_steps / w:,.0f}",
                    st.label if st else "-",
                    fmt_ratio(w, median(st.conc_s) if st else None),
                    fmt_ratio(w, median(apg.conc_s) if apg else None),
                    "-" if good is None else str(good.conc_failed),
                    status(r, "concurrency"),
                ]
            )
        lines += md_table(
            [
                "saver",
                "wall (s)",
                "steps/s",
                "matching stock",
                "wall vs stock",
                "wall vs AsyncPostgresSaver",
                "failed runs",
                "check",
            ],
            "lrrlrrrl",
            t4,
        )
        lines += drain_lines(run, [(f"round {i}", f"round {i}") for i in range(1, p.rounds + 1)], modes=("async",))

    # 5. resume
    if "resume" in run.parts:
        lines += ["## 5. Resume after restart, in a fresh process", ""]
        lines += [
            "A new Python process (this script's hidden `_resume` sub-command) opens the saver on the storage "
            f"that section 1 wrote (sync face: construction and `setup()`), compiles the graph with its bound "
            f"raised by one, and invokes it on an existing {p.short_steps}-step thread; that runs exactly one "
            "new super-step. `open + step` runs from the start of the saver's construction (imports done "
            "before) to the end of that invoke; `process` is the whole subprocess as the parent saw it "
            "(interpreter start, imports, close). *warm*: the same SQLite file that wrote the thread. *cold*: "
            "a new empty SQLite file, so the thread is only in Redis and Postgres. *reopen*: the stock savers "
            "and single-store configurations opened again on their file or database. Medians over "
            f"{p.resume_repeats} process(es) per row.",
            "",
        ]
        t5: list[list[str]] = []

        def rq(r: Row | None, variant: str, k: str) -> float | None:
            if r is None or variant not in r.resume:
                return None
            return median([x[k] for x in r.resume[variant]])

        spg = get("pg_stock", "resume")
        for c in main_configs:
            r = rows.get((c.key, "resume"))
            if c.kind == "memory":
                t5.append(["InMemorySaver", "-"] + ["-"] * 8 + ["n/a: nothing survives a restart"])
                continue
            if r is None:
                continue
            good = None if r.skipped else r
            st = stock_of(c, "resume")
            for variant in resume_variants(c):
                tot = rq(good, variant, "total_ms")
                t5.append(
                    [
                        c.label(),
                        variant,
                        fmt_ms(rq(good, variant, "open_ms")),
                        fmt_ms(rq(good, variant, "step_ms")),
                        fmt_ms(tot),
                        fmt_ms(rq(good, variant, "process_ms")),
                        st.label if st else "-",
                        fmt_ratio(tot, rq(st, "reopen", "total_ms")),
                        fmt_ratio(tot, rq(spg, "reopen", "total_ms")),
                        "-" if good is None else str(len(good.resume.get(variant, []))),
                        "skipped" if r.skipped else status(r, "resume"),
                    ]
                )
        lines += md_table(
            [
                "saver",
                "storage",
                "open (ms)",
                "first step (ms)",
                "open + step (ms)",
                "process (ms)",
                "matching stock",
                "vs stock",
                "vs PostgresSaver",
                "processes",
                "check",
            ],
            "llrrrrlrrrl",
            t5,
        )

    # 6. bytes
    if "bytes" in run.parts:
        marks = p.marks
        last, mid = marks[-1], (marks[-2] if len(marks) > 1 else None)
        lines += [f"## 6. Bytes stored per tier after {', '.join(map(str, marks))} steps (one thread)", ""]
        lines += [
            f"One thread run up to each mark in turn (the bound raised and a new input each time, so "
            f"{len(marks)} input checkpoints join the {last} step checkpoints), sync face, every saver in a fresh "
            "file, database and key prefix. Figures are what the tier holds minus what it held right after "
            "`setup()`. SQLite: the byte length of every BLOB and TEXT value in every table of the file (not "
            f"the file size; the last column is the size of a `VACUUM INTO` copy after step {last}). Postgres: "
            "`octet_length` of every bytea / text / varchar / json(b) value (jsonb as text) in the saver's tables "
            "— the primary figure — and `pg_total_relation_size` (tables, indexes, TOAST) summed over them, "
            "which moves in whole pages. Redis: `MEMORY USAGE key SAMPLES 0` summed over the keys SCAN finds "
            "under the saver's prefix. InMemorySaver: the serialized bytes it holds. `write=local` is measured "
            "after `drain()`. Ratios divide the figure after step "
            f"{last} by SqliteSaver's SQLite figure, and by PostgresSaver's figure of the same kind.",
            "",
        ]
        t6: list[list[str]] = []
        chart["bytes"] = []
        sq = get("sqlite_stock", "bytes")
        sq_last = sq.bytes_at.get(("sqlite", "payload"), {}).get(last) if sq else None
        bpg = get("pg_stock", "bytes")
        for c in run.configs:
            r = rows.get((c.key, "bytes"))
            if r is None:
                continue
            if r.skipped:
                t6.append([c.label(), "-", "-"] + ["-"] * (len(marks) + 5) + [f"skipped: {r.skipped}"])
                continue
            for (tier, measure), series in r.bytes_at.items():
                b_last = series.get(last)
                b_mid = series.get(mid) if mid else None
                pg_ref = (
                    bpg.bytes_at.get(("postgres", measure if measure == "relation" else "payload"), {}) if bpg else {}
                )
                t6.append(
                    [
                        c.label(),
                        tier,
                        BYTE_MEASURES.get((tier, measure), measure),
                        *[("-" if series.get(m) is None else f"{series[m] / 1024:,.1f}") for m in marks],
                        "-" if b_last is None else f"{b_last / last:,.0f}",
                        "-" if b_last is None or b_mid is None else f"{(b_last - b_mid) / (last - mid):,.0f}",
                        fmt_ratio(b_last, sq_last),
                        fmt_ratio(b_last, pg_ref.get(last)),
                        "-" if r.vacuumed is None or tier != "sqlite" else f"{r.vacuumed / 1024:,.0f}",
                        status(r, "bytes"),
                    ]
                )
                if measure != "relation":
                    chart["bytes"].append((tier, c.label(), [(m, series.get(m)) for m in marks]))
        lines += md_table(
            ["saver", "tier", "measure"]
            + [f"KiB @{m}" for m in marks]
            + [
                f"bytes/step (avg to {last})",
                f"bytes/step ({mid}→{last})",
                f"vs SqliteSaver @{last}",
                f"vs PostgresSaver @{last}",
                "VACUUMed file (KiB)",
                "check",
            ],
            "lll" + "r" * len(marks) + "rrrrrl",
            t6,
        )
        lines += ["![bytes stored vs steps](CHART:bytes)", ""]
    return "\n".join(lines), chart


def scrub(text: str, res: Resources) -> str:
    """No absolute path of this machine in the results file (tracebacks name files)."""
    swaps = {
        str(res.tmp_path): "<tmp>",
        str(HERE.parent): "<repo>",
        sys.prefix: "<venv>",
        sys.base_prefix: "<python>",
        tempfile.gettempdir(): "<tmp>",
        str(Path.home()): "<home>",
    }
    for old in sorted((k for k in swaps if k and k != "/"), key=len, reverse=True):
        text = text.replace(old, swaps[old])
    return text


def drain_lines(run: Run, blocks: list[tuple[str, str]], modes: tuple[str, ...] = MODES) -> list[str]:
    """What the write="local" rows left to ship after their timed blocks (outside the figures above)."""
    out = []
    for c in run.configs:
        if c.write != "local":
            continue
        for mode in modes:
            r = run.rows.get((c.key, mode))
            got = [f"after {name} {r.drain_ms[k]:.0f} ms" for k, name in blocks if r and k in r.drain_ms]
            if got:
                out.append(f"- {r.label} ({mode}): `drain()`, untimed above, " + ", ".join(got) + ".")
    if out:
        out = [
            '`write="local"` rows: each timed block starts owing nothing (an untimed `drain()` before it); '
            "the shipping that a block deferred is the `drain()` after it:",
            "",
            *out,
            "",
        ]
    return out


def problems_text(run: Run, cleanup_notes: list[str]) -> str:
    out: list[str] = []
    for r in run.rows.values():
        what = r.mode if r.mode in MODES else r.mode + " measurement"
        if r.skipped:
            out.append(f"- **{r.label} ({what})** skipped: {r.skipped}")
        for part, text in r.problems:
            out.append(f"- **{r.label} ({what}, {part})**: {text}")
    out += [f"- {n}" for n in run.notes]
    out += [f"- cleanup: {n}" for n in cleanup_notes]
    return "\n".join(out)


# -- charts ------------------------------------------------------------------------------------------------


def draw_charts(chart: dict[str, Any], params: Params, out_dir: Path) -> dict[str, Path]:
    """PNG files for the figures; returns chart name -> path. Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    p = params

    def hbars(ax: Any, labels: list[str], series: list[tuple[str, list[float | None]]], unit: str) -> None:
        n = len(series)
        height = 0.8 / max(n, 1)
        ys = range(len(labels))
        for i, (name, vals) in enumerate(series):
            pos = [y - 0.4 + height * (i + 0.5) for y in ys]
            widths = [v or 0 for v in vals]
            bars = ax.barh(pos, widths, height=height, label=name)
            for b, v in zip(bars, vals):
                if v is not None:
                    ax.text(b.get_width(), b.get_y() + b.get_height() / 2, " " + fmt_ms(v), va="center", fontsize=7)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels, fontsize=8)
        if not ax.yaxis_inverted():  # first row at the top (axes that share y invert together)
            ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.18)
        ax.legend(fontsize=8, loc="best")

    def save(fig: Any, name: str) -> None:
        path = out_dir / f"growth_{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths[name] = path

    if chart.get("steps"):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        for ax, mode in zip(axes, MODES):
            data = [x for x in chart["steps"] if x[1] == mode]
            labels = [x[0] for x in data]
            hbars(
                ax,
                labels,
                [
                    (f"{p.short_steps}-step run", [x[2] for x in data]),
                    (f"{p.long_steps}-step run", [x[3] for x in data]),
                ],
                "ms per super-step (median)",
            )
            ax.set_title(f"{mode}: {'invoke' if mode == 'sync' else 'ainvoke'}, durability=sync")
        save(fig, "ms_per_step")
    if chart.get("get_state"):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        data = chart["get_state"]
        labels = [x[0] for x in data]
        for ax, (steps, off) in zip(axes, ((p.short_steps, 1), (p.long_steps, 3))):
            hbars(ax, labels, [("p50", [x[off] for x in data]), ("p99", [x[off + 1] for x in data])], "ms")
            ax.set_title(f"graph.get_state, {steps}-step thread (sync)")
        save(fig, "get_state")
    if chart.get("history"):
        fig, ax = plt.subplots(figsize=(8, 4))
        data = chart["history"]
        hbars(
            ax,
            [x[0] for x in data],
            [
                (f"{p.history_small:,} checkpoints", [x[1] for x in data]),
                (f"{p.history_big:,} checkpoints", [x[2] for x in data]),
            ],
            "ms per list(limit=10) (median)",
        )
        ax.set_title("list(saver.list(config, limit=10)) by thread length (sync)")
        save(fig, "history")
    if chart.get("bytes"):
        tiers = [t for t in ("sqlite", "postgres", "redis") if any(x[0] == t for x in chart["bytes"])]
        memory = [x for x in chart["bytes"] if x[0] == "memory"]
        fig, axes = plt.subplots(1, max(len(tiers), 1), figsize=(5.2 * max(len(tiers), 1), 5), squeeze=False)
        titles = {
            "sqlite": "SQLite: BLOB/TEXT bytes",
            "postgres": "Postgres: octet_length",
            "redis": "Redis: MEMORY USAGE",
        }
        for ax, tier in zip(axes[0], tiers):
            # lines that coincide stay visible through their styles and markers
            for i, (_, name, pts) in enumerate([x for x in chart["bytes"] if x[0] == tier] + memory):
                xs = [m for m, v in pts if v is not None]
                ys = [v / 2**20 for m, v in pts if v is not None]
                ref = name == "InMemorySaver"
                ax.plot(
                    xs,
                    ys,
                    ":" if ref else ("-", "--", "-.")[i % 3],
                    color="grey" if ref else None,
                    marker="o" if ref else "osv^D"[i % 5],
                    markersize=3 if ref else 5,
                    fillstyle="none",
                    label=f"{name} (serialized, in memory)" if ref else name,
                )
            ax.set_title(titles[tier], fontsize=10)
            ax.set_xlabel("super-steps on the thread")
            ax.set_ylabel("MiB stored (minus the empty tables)")
            ax.set_xticks(list(p.marks))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left")
        fig.suptitle("Bytes stored as one thread grows, per tier")
        save(fig, "bytes")
    return paths


# -- main -------------------------------------------------------------------------------------------------


def header(
    args: argparse.Namespace, run: Run, res: Resources, started: dt.datetime, wall: float, code: str, load: float
) -> str:
    p = run.params
    servers = ", ".join(f"{k} {v}" for k, v in res.server_versions.items()) or "none reachable"
    return "\n".join(
        [
            "# Growth benchmark results",
            "",
            *run_lines(
                "bench_growth.py",
                quick=args.quick,
                started=started,
                wall=wall,
                load=(load, os.getloadavg()[0]),
                code=code,
                packages=PACKAGES,
            ),
            f"- Servers (loopback): {servers}",
            f"- Plain-Redis saver: {res.redis_saver_note}",
            f"- Workload: `messages: Annotated[list, operator.add]` grows by one {p.msg_bytes}-byte string "
            "(seeded pseudo-random words) per super-step, plus an int `n`; the graph loops `work` until `n` "
            'reaches its bound; every invoke passes `durability="sync"`. Stock Postgres savers run on a '
            f"psycopg pool (at most {POOL_SIZE} connections, `autocommit=True, prepare_threshold=0, "
            "row_factory=dict_row`).",
            "- Every saver runs with its defaults unless the row says otherwise; each configuration has its own "
            "Postgres database, Redis key prefix and SQLite files.",
        ]
    )


HOW_TO_READ = """\
## How to read this

Each section measures one thing for every saver in the same process and run. The first
columns are absolute figures (medians unless the column says p99). `matching stock` names
the stock saver a `DurableSaver` row is compared with: `SqliteSaver` / `AsyncSqliteSaver`
for Durable sqlite, `PostgresSaver` / `AsyncPostgresSaver` for every configuration that
includes postgres. The `vs PostgresSaver` columns divide every row by the stock Postgres
saver of the same face. For times, `2.00x` means twice as slow; for bytes, twice as large;
below `1.00x` is faster or smaller. Growth shows in the `@long ÷ @short` ratios: a saver
whose cost per step does not depend on how long the thread is stays near `1.00x`. On this
2-core machine expect ±20-30% between runs, more for sub-millisecond figures; ratios from
the same run are steadier than the absolute numbers. A failed functional check is listed
under "Problems" and marked in the row's `check` column; nothing here is a pass/fail
threshold.
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a short run (under a minute) to check that everything works")
    p.add_argument("--long-steps", type=int, help="super-steps of the long run (default 500; quick 200)")
    p.add_argument("--threads", type=int, help="50-step runs per saver and face (default 5; quick 1)")
    p.add_argument("--reads", type=int, help="get_state calls per thread (default 300; quick 50)")
    p.add_argument("--history", type=int, help="checkpoints in the long history thread (default 10000; quick 1000)")
    p.add_argument("--list-reads", type=int, help="list(limit=10) calls per thread (default 200; quick 30)")
    p.add_argument("--concurrent", type=int, help="concurrent ainvoke runs (default 50; quick 20)")
    p.add_argument("--rounds", type=int, help="timed rounds of concurrent runs (default 3; quick 1)")
    p.add_argument("--resume-repeats", type=int, help="fresh processes per resume row (default 3; quick 1)")
    p.add_argument("--msg-bytes", type=int, default=420, help="size of each appended string (default 420)")
    p.add_argument(
        "--only",
        help="comma-separated configuration keys to run (InMemorySaver always runs): "
        + ",".join(c.key for c in ALL_CONFIGS),
    )
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: " + ",".join(PARTS))
    p.add_argument(
        "--output",
        default=str(HERE / "RESULTS_GROWTH.md"),
        help="markdown file to overwrite (default benchmarks/RESULTS_GROWTH.md)",
    )
    p.add_argument(
        "--charts-dir", default=str(HERE / "charts"), help="where the PNG charts go (default benchmarks/charts)"
    )
    p.add_argument("--write", action="store_true", help="also overwrite the results file and the charts")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == [RESUME_CHILD]:
        return resume_child(raw[1])
    args = parse_args(argv)
    q = args.quick
    params = Params(
        short_steps=50,
        long_steps=args.long_steps or (200 if q else 500),
        threads=args.threads or (1 if q else 5),
        reads=args.reads or (50 if q else 300),
        history_small=100,
        history_big=args.history or (1000 if q else 10_000),
        list_reads=args.list_reads or (30 if q else 200),
        list_budget_s=2.0 if q else 5.0,
        concurrent=args.concurrent or (20 if q else 50),
        conc_steps=10,
        rounds=args.rounds or (1 if q else 3),
        resume_repeats=args.resume_repeats or (1 if q else 3),
        marks=(25, 50, 100, 200),
        msg_bytes=args.msg_bytes,
    )
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(PARTS):
        print(f"unknown part(s) to skip: {sorted(skip - set(PARTS))}", file=sys.stderr)
        return 2
    configs = ALL_CONFIGS
    if args.only:
        keep = {"mem", *args.only.split(",")}
        unknown = keep - set(CONFIG_BY_KEY)
        if unknown:
            print(f"unknown config key(s): {sorted(unknown)}", file=sys.stderr)
            return 2
        configs = [c for c in ALL_CONFIGS if c.key in keep]
    run = Run(params, set(PARTS) - skip, configs)

    exit_on_sigterm()  # so the finally below still drops databases and keys

    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()[0]
    code = git_state(HERE.parent)
    t_run = time.perf_counter()
    run_id = uuid.uuid4().hex[:10]
    res = Resources(run_id)
    cleanup_notes: list[str] = []
    try:
        res.probe()
        print(f"run {run_id}: {len(configs)} configurations, parts: ms/step, get_state, {', '.join(sorted(run.parts))}")
        print(f"  {res.redis_saver_note}", flush=True)
        for why in filter(None, (res.postgres_down, res.redis_down)):
            print(f"  note: {why}; configurations needing it are skipped", flush=True)
        execute(run, res)
    finally:
        cleanup_notes = res.cleanup()
    wall = time.perf_counter() - t_run

    body, chart = render(run)
    chart_note = ""
    paths: dict[str, Path] = {}
    if args.write:
        try:
            paths = draw_charts(chart, params, Path(args.charts_dir))
        except ImportError:
            chart_note = "charts not drawn: matplotlib is not installed (`pip install -e '.[bench]'`)"
            run.notes.append(chart_note)
    out_dir = Path(args.output).resolve().parent
    for name in ("steps", "get_state", "history", "bytes"):
        key = {"steps": "ms_per_step"}.get(name, name)
        target = f"CHART:{name})"
        if key in paths:
            body = body.replace(target, os.path.relpath(paths[key], out_dir) + ")")
        else:
            body = "\n".join(ln for ln in body.splitlines() if target not in ln)
    probs = problems_text(run, cleanup_notes)
    print()
    print(body)
    print("## Problems\n")
    print(probs or "None.")
    if args.write:
        doc = header(args, run, res, started, wall, code, load) + "\n\n" + HOW_TO_READ + "\n" + body
        doc += "\n## Problems\n\n" + (probs or "None: every check passed and cleanup succeeded.") + "\n"
        Path(args.output).write_text(scrub(doc, res))
        print(f"\nwrote {args.output}" + "".join(f"\nwrote {p}" for p in paths.values()))
    print(f"total {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
