"""The archive tier (``archive="s3://BUCKET/PREFIX"``): what it stores, what it costs, in one run.

Every saver here is a `DurableSaver` on all three tiers (SQLite, Redis,
Postgres) with its default options, plus the archive on an S3-compatible
object store: moto's server, which this script starts on a free loopback
port (``python -m moto.server``) and stops at the end. The workload is
`bench_growth`'s growing-list graph: each super-step appends one 420-byte
string to ``messages``, ``durability="sync"``.

1. Cost: `--cost-threads` threads each run `--runs` times, `--steps`
   super-steps a run, with ``drain_archive()`` after every run (a replica
   pass per run, as a busy thread meets one every ``archive_lag / 2``
   seconds). After each pass: the objects and bytes under each thread's
   segments prefix, next to the bytes the same thread takes in Postgres
   (``octet_length`` of its rows' bytea / text / jsonb values in the
   ``lgd_*`` tables) and the time of the pass. Then ``archive_idle`` moves
   them out of the hot tiers and the same is measured again. The same
   threads shipped in one pass (at ``archive_idle``) are the reference.
2. Bringing an archived thread back: threads of 10 and 100 checkpoints,
   half archived (``archive_idle``), half left hot; then a new saver on the
   same storage reads them in turn: the first ``graph.get_state`` of an
   archived thread (which brings it back) against the first of a hot one
   of the same size, p50 and max, and their ratio paired thread by thread.
   Sync face (``get_state``) and async face (``aget_state``).
3. The replica's cost on the step path: ms per super-step of a 50-step run
   on a fresh thread, without an archive, with one (default
   ``archive_lag=60``, a pass every 30 s) and with ``archive_lag=2`` (a
   pass every second, so passes overlap the steps), every configuration
   once per round in a rotating order; the ratio is the median over
   rounds of (row / no archive in the same round), as in `bench_paired.py`.
4. ``restore()``: `--restore-threads` threads shipped over
   `--restore-runs` passes; then Postgres' database is dropped and created
   empty, the Redis prefix flushed and the SQLite file replaced by a new
   one, and a fresh saver rebuilds the hot tiers from the archive (sync
   ``restore``, then again on the full tiers, then ``arestore`` after the
   tiers are lost once more). Every thread is read back and checked.
5. The replica's cost per pass: what one pass (``drain_archive()``) asks
   of the object store, counted by a wrapper on the saver's real store
   object: `--pass-threads` threads written in turn (one run of one
   super-step each, then a pass), and one thread that gets a 600 KB value
   of random text (what zlib cannot shrink) each run, a pass after each,
   over `--passes` passes: GETs, bytes read, listings and PUTs per pass.
   ``--pass-cost-only`` runs this part alone (it runs on older versions of
   the library too, for a before/after).

moto is a Python server on loopback that keeps objects in memory: its
latencies are not a real S3's (tens of ms a request over the network), so
the object store's share of these times is smaller here than in production.

Prints the tables; ``--write`` also overwrites ``benchmarks/RESULTS_ARCHIVE.md``.
Loopback servers only; everything a run creates (databases, Redis keys,
temp files, the moto process) is removed at the end, also on error, Ctrl-C
or SIGTERM.

    .venv/bin/python benchmarks/bench_archive.py --quick   # about 25 s, to check that it works
    .venv/bin/python benchmarks/bench_archive.py --write   # about 2 min on 2 cores
    .venv/bin/python benchmarks/bench_archive.py --pass-cost-only   # part 5 alone
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import socket
import statistics
import subprocess
import sys
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _env import REDIS_URL, Resources, exit_on_sigterm, git_state, run_lines  # benchmarks/ is on sys.path
from bench_growth import PACKAGES as GROWTH_PACKAGES
from bench_growth import State, check_values, first_input, make_message, postgres_bytes, run_config, thread_of

from langgraph_durable import Archive, DurableSaver
from langgraph_durable import Tiers as SaverTiers
from langgraph_durable.archive.segments import THREADS, marker_key, segments_prefix
from langgraph_durable.archive.store import ArchiveStore

HERE = Path(__file__).resolve().parent
NAME = "lgd_abench"  # prefix of every database, Redis key and temp dir a run creates
SIZE = 420  # bytes of each appended message
STEP_RUN = 50  # part 3: super-steps per run
SIZES = (8, 98)  # part 2: super-steps of a thread's one run: 10 and 100 checkpoints
PACKAGES = [p for p in GROWTH_PACKAGES if p != "matplotlib"] + ["obstore", "moto"]
HOT_TABLES = ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_ledger")
MOTO_NOTE = (
    "The object store is moto's S3 server: a Python process on loopback that keeps objects in memory, "
    "on the same 2 cores as everything else. Its latencies are not those of a real S3 (a request there "
    "takes tens of milliseconds over the network, and more for the first byte of a large object), so "
    "the object store's share of the archive times below is smaller than it would be in production; "
    "the byte and object counts do not depend on it."
)


# -- the object store ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Moto:
    """moto's S3 server on a free loopback port, the AWS_* variables of this
    process pointing at it, and one bucket of the run's own."""

    def __init__(self, run_id: str) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = f"lgd-abench-{run_id}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import moto.server  # noqa: F401  (the test extra installs it)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"moto's S3 server on port {self.port} did not start") from None
                time.sleep(0.05)
        os.environ.update(
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
            AWS_ENDPOINT_URL=self.endpoint,
        )
        for var in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
            os.environ.pop(var, None)
        # moto takes unsigned requests: the bucket is one HTTP PUT.
        urllib.request.urlopen(
            urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT"), timeout=10
        ).close()

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def objects(store: ArchiveStore, prefix: str) -> tuple[int, int]:
    """How many objects `store` holds under `prefix`, and their bytes."""
    keys = store.keys(prefix)
    return len(keys), sum(len(store.get(k) or b"") for k in keys)


def thread_objects(store: ArchiveStore, thread_id: str) -> tuple[int, int, int]:
    """The thread's segments and their bytes, and its ``archived`` marker's bytes (0: none)."""
    count, size = objects(store, segments_prefix(thread_id))
    return count, size, len(store.get(marker_key(thread_id)) or b"")


# -- the hot tiers -------------------------------------------------------------------------------------


@dataclass
class Tiers:
    """One saver's storage: a SQLite file, a Redis prefix, a Postgres database; and its archive URL."""

    sqlite: str
    prefix: str
    postgres: str
    archive: str | None
    database: str

    def saver(self, **options: Any) -> DurableSaver:
        """A saver on this storage; `options` may hold the archive's own
        (``lag``, ``key_fingerprint``), given to its `Archive`."""
        archive: str | Archive | None = self.archive
        given = {k: options.pop(k) for k in ("lag", "key_fingerprint") if k in options}
        if self.archive is not None and given:
            archive = Archive(self.archive, **given)
        return DurableSaver(
            sqlite=self.sqlite,
            redis=REDIS_URL,
            postgres=self.postgres,
            archive=archive,
            **options,
            tiers=SaverTiers(redis_key_prefix=self.prefix),
        )


def allocate(res: Resources, moto: Moto, tag: str, *, archive: bool = True) -> Tiers:
    url = res.new_database(tag)
    return Tiers(
        sqlite=str(res.tmp_path / f"{tag}.sqlite"),
        prefix=res.new_prefix(tag),
        postgres=url,
        archive=moto.url(tag) if archive else None,
        database=f"{res.name}_{res.run_id}_{tag}",
    )


def lose_hot_tiers(res: Resources, tiers: Tiers, new_sqlite: str) -> None:
    """Postgres' database dropped and created empty, the Redis prefix flushed, a new SQLite file."""
    import psycopg
    import redis as redis_lib

    with psycopg.connect(res.postgres_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'DROP DATABASE "{tiers.database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{tiers.database}"')
    client = redis_lib.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        keys = list(client.scan_iter(match=f"{tiers.prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()
    tiers.sqlite = new_sqlite


def pg_thread(url: str, thread_ids: list[str]) -> dict[str, tuple[int, int, int]]:
    """Per thread: (checkpoints, rows, payload bytes) in Postgres' ``lgd_*`` record tables; payload is the
    ``octet_length`` of every bytea / text / jsonb value of the thread's rows (as `bench_growth` counts)."""
    import psycopg

    out: dict[str, tuple[int, int, int]] = {}
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as c:
        cols = c.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = ANY(%s) ORDER BY table_name, ordinal_position",
            (list(HOT_TABLES),),
        ).fetchall()
        exprs: dict[str, list[str]] = {}
        for table, col, typ in cols:
            if typ in ("bytea", "text", "character varying"):
                exprs.setdefault(table, []).append(f'coalesce(octet_length("{col}"), 0)')
            elif typ in ("json", "jsonb"):
                exprs.setdefault(table, []).append(f'coalesce(octet_length("{col}"::text), 0)')
        for tid in thread_ids:
            checkpoints = rows = payload = 0
            for table, parts in exprs.items():
                n, size = c.execute(
                    f"SELECT count(*), coalesce(sum({' + '.join(parts)}), 0) FROM {table} WHERE thread_id = %s",
                    (tid,),
                ).fetchone()  # type: ignore[misc]
                rows += int(n)
                payload += int(size)
                if table == "lgd_checkpoints":
                    checkpoints = int(n)
            out[tid] = (checkpoints, rows, payload)
    return out


# -- the graph -----------------------------------------------------------------------------------------


def runs_graph(steps: int, *, is_async: bool, checkpointer: Any) -> Any:
    """START -> work ... until ``n`` is a multiple of `steps`: each run (``first_input()``, then
    ``{"messages": []}``) adds `steps` super-steps to the thread, each appending one message."""
    from langgraph.graph import END, START, StateGraph

    def route(state: State) -> str:
        return "work" if state["n"] % steps else END

    if is_async:

        async def work(state: State) -> dict[str, Any]:
            return {"messages": [make_message(state["n"], SIZE)], "n": state["n"] + 1}

    else:

        def work(state: State) -> dict[str, Any]:  # type: ignore[misc]
            return {"messages": [make_message(state["n"], SIZE)], "n": state["n"] + 1}

    g = StateGraph(State)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", route, ["work", END])
    return g.compile(checkpointer=checkpointer)


def run_input(run_no: int) -> dict[str, Any]:
    return first_input() if run_no == 0 else {"messages": []}


# -- formatting ----------------------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    v = seconds * 1000
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:,.0f}"


def num(x: float) -> str:
    return f"{x:,.0f}"


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def paired(mine: list[float], ref: list[float]) -> float | None:
    """Median over rounds (or threads) of mine / ref, pair by pair."""
    ratios = [a / b for a, b in zip(mine, ref) if b > 0]
    return statistics.median(ratios) if ratios else None


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


# -- 1. cost -------------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """Per-thread averages at one point."""

    checkpoints: float
    pg_rows: float
    pg_payload: float
    objects: float
    archive_bytes: float
    marker_bytes: float = 0.0


def snapshot(store: ArchiveStore, url: str, tids: list[str]) -> Snapshot:
    pg = pg_thread(url, tids)
    objs = [thread_objects(store, t) for t in tids]
    return Snapshot(
        checkpoints=mean([pg[t][0] for t in tids]),
        pg_rows=mean([pg[t][1] for t in tids]),
        pg_payload=mean([pg[t][2] for t in tids]),
        objects=mean([o[0] + (1 if o[2] else 0) for o in objs]),
        archive_bytes=mean([o[1] + o[2] for o in objs]),
        marker_bytes=mean([o[2] for o in objs]),
    )


def part_cost(res: Resources, moto: Moto, args: argparse.Namespace, problems: list[str]) -> list[str]:
    runs, steps, n_threads = args.runs, args.steps, args.cost_threads
    series: list[tuple[int, Snapshot, float]] = []  # (run, snapshot, drain seconds)
    finals: list[tuple[str, str, Snapshot, float, float]] = []  # (variant, when, snapshot, pg relation/thread, s)
    idle_ms: dict[str, float] = {}
    for variant, options in (("every", {}), ("once", {"lag": 86400.0})):
        tiers = allocate(res, moto, f"cost_{variant}")
        assert tiers.archive is not None
        store = ArchiveStore(tiers.archive)
        tids = [f"cost-{variant}-{i}" for i in range(n_threads)]
        saver = tiers.saver(**options)
        try:
            saver.setup()
            _, relation0 = postgres_bytes(tiers.postgres)
            graph = runs_graph(steps, is_async=False, checkpointer=saver)
            for r in range(runs):
                for tid in tids:
                    out = graph.invoke(run_input(r), run_config(tid, steps), durability="sync")
                    problems += check_values(out, (r + 1) * steps, SIZE, f"cost {variant} {tid} run {r + 1}")
                if variant == "every":
                    t0 = time.perf_counter()
                    left = saver.drain_archive(60)
                    took = time.perf_counter() - t0
                    if left is None or not left.caught_up:
                        problems.append(f"cost: drain_archive after run {r + 1} left {left}")
                    series.append((r + 1, snapshot(store, tiers.postgres, tids), took))
            before = snapshot(store, tiers.postgres, tids)
            _, relation1 = postgres_bytes(tiers.postgres)
            t0 = time.perf_counter()
            report = saver.archive_idle(0.0, thread_ids=tids)
            took = time.perf_counter() - t0
            idle_ms[variant] = took / n_threads
            if sorted(report.archived) != sorted(tids):
                problems.append(f"cost {variant}: archive_idle archived {report.archived}, not {tids}: {report}")
            after = snapshot(store, tiers.postgres, tids)
            _, relation2 = postgres_bytes(tiers.postgres)
            label = "a pass after every run" if variant == "every" else "one pass, at `archive_idle`"
            finals.append((label, "before `archive_idle`", before, (relation1 - relation0) / n_threads, 0.0))
            finals.append((label, "after `archive_idle`", after, (relation2 - relation0) / n_threads, took))
            # A read brings one back, whole.
            state = graph.get_state(thread_of(tids[0]))
            problems += check_values(state.values, runs * steps, SIZE, f"cost {variant}: {tids[0]} brought back")
            if saver.archive_restores != 1:
                problems.append(f"cost {variant}: archive_restores {saver.archive_restores}, expected 1")
        finally:
            saver.close()

    checkpoints = finals[0][2].checkpoints
    lines = [
        f"### Per thread, after each run of {steps} super-steps and a replica pass (`drain_archive()`)",
        "",
        f"{n_threads} threads, averages per thread. *objects*: segments under the thread's prefix "
        f"(`segments_prefix`); a ship that finds 16 compacts them into one. *Postgres payload*: "
        f"`octet_length` of the thread's bytea/text/jsonb values in {', '.join(HOT_TABLES)}. "
        f"*pass*: `drain_archive()` shipping all {n_threads} threads.",
        "",
        "| after run | checkpoints | Postgres rows | Postgres payload (B) | archive objects | archive bytes "
        "| archive B/checkpoint | archive / Postgres | pass (ms) | ms per thread shipped |",
        "|---:|" + "---:|" * 9,
    ]
    for r, s, took in series:
        lines.append(
            f"| {r} | {num(s.checkpoints)} | {num(s.pg_rows)} | {num(s.pg_payload)} | {s.objects:.1f} "
            f"| {num(s.archive_bytes)} | {num(s.archive_bytes / max(s.checkpoints, 1))} "
            f"| {ratio(s.archive_bytes / s.pg_payload if s.pg_payload else None)} | {ms(took)} "
            f"| {ms(took / n_threads)} |"
        )
    lines += [
        "",
        f"### Per thread, before and after `archive_idle` ({runs} runs of {steps} super-steps, "
        f"{num(checkpoints)} checkpoints)",
        "",
        "*objects* and *archive bytes* count the segments and the `archived` marker. *Postgres relation*: "
        "the growth of `pg_total_relation_size` over the `lgd_*` tables since setup, per thread (no VACUUM: "
        "deleted rows keep their pages until autovacuum). *archive / Postgres* compares the archive's bytes "
        "with the Postgres payload the thread had before it was archived. *archive_idle*: its time per thread.",
        "",
        "| shipped | when | Postgres rows | Postgres payload (B) | Postgres relation (B) | archive objects "
        "| archive bytes | archive B/checkpoint | archive / Postgres | archive_idle (ms/thread) |",
        "|---|---|" + "---:|" * 8,
    ]
    for label, when, s, relation, took in finals:
        pg_before = next(f[2].pg_payload for f in finals if f[0] == label)
        lines.append(
            f"| {label} | {when} | {num(s.pg_rows)} | {num(s.pg_payload)} | {num(relation)} | {s.objects:.1f} "
            f"| {num(s.archive_bytes)} | {num(s.archive_bytes / max(checkpoints, 1))} "
            f"| {ratio(s.archive_bytes / pg_before if pg_before else None)} "
            f"| {ms(took / n_threads) if took else '-'} |"
        )
    lines.append("")
    return lines


# -- 2. bringing an archived thread back ------------------------------------------------------------


@dataclass
class Reads:
    back: list[float]  # first read of an archived thread (brings it back)
    hot: list[float]  # first read of a hot thread of the same size
    again: list[float]  # second read of the brought-back thread
    checkpoints: int
    history_ok: bool
    idle_s: float  # archive_idle, per thread


def bring_ids(face: str, steps: int, count: int) -> tuple[list[str], list[str]]:
    return (
        [f"{face}-hot{steps}-{i}" for i in range(count + 1)],
        [f"{face}-arc{steps}-{i}" for i in range(count + 1)],
    )


def part_bring_back_sync(res: Resources, moto: Moto, count: int, problems: list[str]) -> dict[int, Reads]:
    tiers = allocate(res, moto, "bring_sync")
    idle: dict[int, float] = {}
    saver = tiers.saver()
    try:
        saver.setup()
        for steps in SIZES:
            graph = runs_graph(steps, is_async=False, checkpointer=saver)
            hot, arc = bring_ids("s", steps, count)
            for h, a in zip(hot, arc):
                for tid in (h, a):
                    graph.invoke(first_input(), run_config(tid, steps), durability="sync")
        saver.drain_archive(60)
        for steps in SIZES:
            _, arc = bring_ids("s", steps, count)
            t0 = time.perf_counter()
            report = saver.archive_idle(0.0, thread_ids=arc)
            idle[steps] = (time.perf_counter() - t0) / len(arc)
            if sorted(report.archived) != sorted(arc):
                problems.append(f"bring-back sync: archive_idle archived {report.archived}: {report}")
    finally:
        saver.close()
    out: dict[int, Reads] = {}
    saver = tiers.saver()  # a later process, on the same storage
    try:
        saver.setup()
        for steps in SIZES:
            graph = runs_graph(steps, is_async=False, checkpointer=saver)
            hot, arc = bring_ids("s", steps, count)
            reads = Reads([], [], [], 0, False, idle[steps])
            for i, (h, a) in enumerate(zip(hot, arc)):
                times: dict[str, float] = {}
                for what, tid in (("back", a), ("hot", h)) if i % 2 else (("hot", h), ("back", a)):
                    t0 = time.perf_counter()
                    state = graph.get_state(thread_of(tid))
                    times[what] = time.perf_counter() - t0
                    problems += check_values(state.values, steps, SIZE, f"bring-back sync {what} {tid}")
                t0 = time.perf_counter()
                state = graph.get_state(thread_of(a))
                times["again"] = time.perf_counter() - t0
                problems += check_values(state.values, steps, SIZE, f"bring-back sync second read {a}")
                if i:  # thread 0 warms up
                    reads.back.append(times["back"])
                    reads.hot.append(times["hot"])
                    reads.again.append(times["again"])
            hist_hot = list(graph.get_state_history(thread_of(hot[-1])))
            hist_back = list(graph.get_state_history(thread_of(arc[-1])))
            reads.checkpoints = len(hist_hot)
            reads.history_ok = [s.values for s in hist_hot] == [s.values for s in hist_back]
            if not reads.history_ok:
                problems.append(f"bring-back sync: the history of {arc[-1]} differs from {hot[-1]}'s")
            out[steps] = reads
        if saver.archive_restores != len(SIZES) * (count + 1):
            problems.append(f"bring-back sync: archive_restores {saver.archive_restores}")
        if saver.archived_threads():
            problems.append(f"bring-back sync: still archived: {saver.archived_threads()}")
    finally:
        saver.close()
    return out


async def part_bring_back_async(res: Resources, moto: Moto, count: int, problems: list[str]) -> dict[int, Reads]:
    tiers = allocate(res, moto, "bring_async")
    idle: dict[int, float] = {}
    saver = tiers.saver()
    try:
        await saver.asetup()
        for steps in SIZES:
            graph = runs_graph(steps, is_async=True, checkpointer=saver)
            hot, arc = bring_ids("a", steps, count)
            for h, a in zip(hot, arc):
                for tid in (h, a):
                    await graph.ainvoke(first_input(), run_config(tid, steps), durability="sync")
        await saver.adrain_archive(60)
        for steps in SIZES:
            _, arc = bring_ids("a", steps, count)
            t0 = time.perf_counter()
            report = await saver.aarchive_idle(0.0, thread_ids=arc)
            idle[steps] = (time.perf_counter() - t0) / len(arc)
            if sorted(report.archived) != sorted(arc):
                problems.append(f"bring-back async: aarchive_idle archived {report.archived}: {report}")
    finally:
        await saver.aclose()
    out: dict[int, Reads] = {}
    saver = tiers.saver()
    try:
        await saver.asetup()
        for steps in SIZES:
            graph = runs_graph(steps, is_async=True, checkpointer=saver)
            hot, arc = bring_ids("a", steps, count)
            reads = Reads([], [], [], 0, False, idle[steps])
            for i, (h, a) in enumerate(zip(hot, arc)):
                times: dict[str, float] = {}
                for what, tid in (("back", a), ("hot", h)) if i % 2 else (("hot", h), ("back", a)):
                    t0 = time.perf_counter()
                    state = await graph.aget_state(thread_of(tid))
                    times[what] = time.perf_counter() - t0
                    problems += check_values(state.values, steps, SIZE, f"bring-back async {what} {tid}")
                t0 = time.perf_counter()
                state = await graph.aget_state(thread_of(a))
                times["again"] = time.perf_counter() - t0
                problems += check_values(state.values, steps, SIZE, f"bring-back async second read {a}")
                if i:
                    reads.back.append(times["back"])
                    reads.hot.append(times["hot"])
                    reads.again.append(times["again"])
            hist_hot = [s async for s in graph.aget_state_history(thread_of(hot[-1]))]
            hist_back = [s async for s in graph.aget_state_history(thread_of(arc[-1]))]
            reads.checkpoints = len(hist_hot)
            reads.history_ok = [s.values for s in hist_hot] == [s.values for s in hist_back]
            if not reads.history_ok:
                problems.append(f"bring-back async: the history of {arc[-1]} differs from {hot[-1]}'s")
            out[steps] = reads
        if saver.archive_restores != len(SIZES) * (count + 1):
            problems.append(f"bring-back async: archive_restores {saver.archive_restores}")
        if await saver.aarchived_threads():
            problems.append("bring-back async: threads still archived after their reads")
    finally:
        await saver.aclose()
    return out


def bring_back_table(faces: dict[str, dict[int, Reads]], count: int) -> list[str]:
    lines = [
        f"{count} threads per size and face, each read once archived and once hot (after one untimed pair), in "
        "a new saver on the same storage (a later process: nothing of them in its memory). *archived*: the "
        "first read of an archived thread, which copies it back into the three tiers; *hot*: the first read "
        "of a thread of the same size that never left them; *ratio*: the median over threads of archived / "
        "hot, pair by pair; *again*: the brought-back thread's second read. The new saver's archive replica "
        "starts with its first bring-back (which notes the thread) and rescans the store in the background "
        "meanwhile, as it would in production.",
        "",
        "| face | checkpoints | archived p50 (ms) | archived max | hot p50 (ms) | hot max | ratio p50 "
        "| again p50 (ms) | archive_idle (ms/thread) |",
        "|---|" + "---:|" * 8,
    ]
    for face, sizes in faces.items():
        for r in sizes.values():
            lines.append(
                f"| {face} | {r.checkpoints} | {ms(statistics.median(r.back))} | {ms(max(r.back))} "
                f"| {ms(statistics.median(r.hot))} | {ms(max(r.hot))} | {ratio(paired(r.back, r.hot))} "
                f"| {ms(statistics.median(r.again))} | {ms(r.idle_s)} |"
            )
    lines.append("")
    return lines


# -- 3. the step path ------------------------------------------------------------------------------------

STEP_ROWS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("none", "no archive", None),
    ("archive", "archive (default `Archive(lag=60)`)", {}),
    ("lag2", "archive, `Archive(lag=2)`", {"lag": 2.0}),
]
STEP_REFERENCE = "none"


def order(keys: list[str], round_no: int) -> list[str]:
    shift = round_no % len(keys)
    return keys[shift:] + keys[:shift]


def step_tiers(res: Resources, moto: Moto, face: str) -> dict[str, tuple[Tiers, dict[str, Any]]]:
    return {
        key: (allocate(res, moto, f"step_{face}_{key}", archive=options is not None), options or {})
        for key, _, options in STEP_ROWS
    }


def shipped_so_far(saver: DurableSaver) -> int:
    """The segments the saver's archive replica has written since it started."""
    lag = saver.lag().archive
    return lag.segments if lag is not None else 0


def step_check(tiers: Tiers, rounds: int, what: str, problems: list[str]) -> None:
    if tiers.archive is None:
        return
    folders = ArchiveStore(tiers.archive).folders(f"{THREADS}/")
    if len(folders) != rounds + 1:
        problems.append(f"step path {what}: {len(folders)} threads in the archive after the drain, not {rounds + 1}")


def part_steps_sync(res: Resources, moto: Moto, rounds: int, problems: list[str]) -> tuple[dict, dict]:
    setup = step_tiers(res, moto, "sync")
    savers = {k: t.saver(**o) for k, (t, o) in setup.items()}
    per_step: dict[str, list[float]] = {k: [] for k in savers}
    shipped: dict[str, int] = {}
    try:
        for s in savers.values():
            s.setup()
        graphs = {k: runs_graph(STEP_RUN, is_async=False, checkpointer=s) for k, s in savers.items()}
        for r in range(rounds + 1):  # round 0 warms up
            for key in order(list(graphs), r):
                tid = f"steps-s{r}"
                t0 = time.perf_counter()
                out = graphs[key].invoke(first_input(), run_config(tid, STEP_RUN), durability="sync")
                took = time.perf_counter() - t0
                problems += check_values(out, STEP_RUN, SIZE, f"step path sync {key} round {r}")
                if r:
                    per_step[key].append(took * 1000 / STEP_RUN)
        for key, s in savers.items():
            shipped[key] = shipped_so_far(s)
            if setup[key][0].archive is not None:
                left = s.drain_archive(60)
                if left is None or not left.caught_up:
                    problems.append(f"step path sync {key}: drain_archive left {left}")
                step_check(setup[key][0], rounds, f"sync {key}", problems)
    finally:
        for s in savers.values():
            s.close()
    return per_step, shipped


async def part_steps_async(res: Resources, moto: Moto, rounds: int, problems: list[str]) -> tuple[dict, dict]:
    setup = step_tiers(res, moto, "async")
    savers = {k: t.saver(**o) for k, (t, o) in setup.items()}
    per_step: dict[str, list[float]] = {k: [] for k in savers}
    shipped: dict[str, int] = {}
    try:
        for s in savers.values():
            await s.asetup()
        graphs = {k: runs_graph(STEP_RUN, is_async=True, checkpointer=s) for k, s in savers.items()}
        for r in range(rounds + 1):
            for key in order(list(graphs), r):
                tid = f"steps-a{r}"
                t0 = time.perf_counter()
                out = await graphs[key].ainvoke(first_input(), run_config(tid, STEP_RUN), durability="sync")
                took = time.perf_counter() - t0
                problems += check_values(out, STEP_RUN, SIZE, f"step path async {key} round {r}")
                if r:
                    per_step[key].append(took * 1000 / STEP_RUN)
        for key, s in savers.items():
            shipped[key] = shipped_so_far(s)
            if setup[key][0].archive is not None:
                left = await s.adrain_archive(60)
                if left is None or not left.caught_up:
                    problems.append(f"step path async {key}: adrain_archive left {left}")
                step_check(setup[key][0], rounds, f"async {key}", problems)
    finally:
        for s in savers.values():
            await s.aclose()
    return per_step, shipped


def steps_table(faces: dict[str, tuple[dict[str, list[float]], dict[str, int]]], rounds: int) -> list[str]:
    labels = {k: label for k, label, _ in STEP_ROWS}
    lines = [
        f"One {STEP_RUN}-super-step run on a fresh thread per configuration and round, {rounds} timed rounds "
        "after one untimed, the order rotated each round. *vs no archive*: the median over rounds of the "
        "row's ms/step over the no-archive row's in the same round. *segments shipped*: what the replica's "
        "background passes stored while the rounds ran (each thread's remainder was then drained, untimed, "
        "and checked to be in the archive).",
        "",
        "| face | configuration | ms/step p50 | ms/step min | ms/step max | vs no archive | segments shipped |",
        "|---|---|" + "---:|" * 5,
    ]
    for face, (per_step, shipped) in faces.items():
        for key, xs in per_step.items():
            seg = str(shipped.get(key, 0)) if key != STEP_REFERENCE else "-"
            lines.append(
                f"| {face} | {labels[key]} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} "
                f"| {ratio(paired(xs, per_step[STEP_REFERENCE]))} | {seg} |"
            )
    lines.append("")
    return lines


# -- 4. restore ------------------------------------------------------------------------------------------


def part_restore(res: Resources, moto: Moto, args: argparse.Namespace, problems: list[str]) -> list[str]:
    steps, runs, n_threads = args.steps, args.restore_runs, args.restore_threads
    tiers = allocate(res, moto, "restore")
    assert tiers.archive is not None
    tids = [f"restore-{i}" for i in range(n_threads)]
    saver = tiers.saver()
    try:
        saver.setup()
        graph = runs_graph(steps, is_async=False, checkpointer=saver)
        for r in range(runs):
            for tid in tids:
                graph.invoke(run_input(r), run_config(tid, steps), durability="sync")
            saver.drain_archive(60)
        records = sum(rows for _, rows, _ in pg_thread(tiers.postgres, tids).values())
        # What the operator keeps with their secrets: a restore onto empty tiers needs it.
        trusted = {"key_fingerprint": saver.health().store_key_fingerprint}
    finally:
        saver.close()
    seg_objects, seg_bytes = objects(ArchiveStore(tiers.archive), f"{THREADS}/")
    want = runs * steps

    def check_all(saver: DurableSaver, what: str) -> None:
        g = runs_graph(steps, is_async=False, checkpointer=saver)
        for tid in tids:
            problems.extend(check_values(g.get_state(thread_of(tid)).values, want, SIZE, f"{what}: {tid}"))

    rows: list[tuple[str, int, int, float]] = []  # (what, threads, records, seconds)

    def row(what: str, report: Any, took: float) -> None:
        rows.append((what, report.threads, report.records, took))
        if report.bad_segments or report.threads != n_threads:
            problems.append(f"{what}: {report}")

    lose_hot_tiers(res, tiers, str(res.tmp_path / "restore_2.sqlite"))
    saver = tiers.saver(**trusted)
    try:
        saver.setup()
        t0 = time.perf_counter()
        report = saver.restore()
        row("`restore()` into empty tiers (sync)", report, time.perf_counter() - t0)
        check_all(saver, "after restore()")
        t0 = time.perf_counter()
        report = saver.restore()
        row("`restore()` again, on the tiers it just filled", report, time.perf_counter() - t0)
    finally:
        saver.close()

    lose_hot_tiers(res, tiers, str(res.tmp_path / "restore_3.sqlite"))

    async def arestore() -> tuple[Any, float]:
        s = tiers.saver(**trusted)
        try:
            await s.asetup()
            t0 = time.perf_counter()
            rep = await s.arestore()
            return rep, time.perf_counter() - t0
        finally:
            await s.aclose()

    report, took = asyncio.run(arestore())
    row("`arestore()` into empty tiers (async)", report, took)
    saver = tiers.saver()
    try:
        saver.setup()
        check_all(saver, "after arestore()")
    finally:
        saver.close()

    lines = [
        f"{n_threads} threads, each {runs} runs of {steps} super-steps with a replica pass after each "
        f"({num(records)} records in Postgres before the loss; the archive held {seg_objects} segments, "
        f"{seg_bytes / 1e6:.1f} MB). Then Postgres' database was dropped and created empty, the Redis prefix "
        "flushed and a new SQLite file given, and a fresh saver (setup untimed) rebuilt the hot tiers. "
        "Every thread's latest state was read back and checked after each rebuild.",
        "",
        "| restore | threads | records | total (s) | ms/thread | µs/record |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for what, threads, recs, took in rows:
        lines.append(
            f"| {what} | {threads} | {num(recs)} | {took:.2f} | {ms(took / max(threads, 1))} "
            f"| {took * 1e6 / max(recs, 1):.0f} |"
        )
    lines.append("")
    return lines


# -- main ----------------------------------------------------------------------------------------------------


# -- 5. the replica's cost per pass ----------------------------------------------------------------


class CountingStore:
    """The saver's real store object, each call to the object store counted."""

    def __init__(self, inner: ArchiveStore) -> None:
        self.inner = inner
        self.gets = self.got = self.lists = self.puts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str) -> bytes | None:
        data = self.inner.get(key)
        self.gets += 1
        self.got += len(data or b"")
        return data

    def keys(self, prefix: str) -> list[str]:
        self.lists += 1
        return self.inner.keys(prefix)

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        self.inner.put(key, data)

    def counts(self) -> tuple[int, int, int, int]:
        return self.gets, self.got, self.lists, self.puts


@dataclass
class PassCost:
    gets: int
    got: int
    lists: int
    puts: int
    seconds: float


def one_pass(saver: DurableSaver, store: CountingStore, what: str, problems: list[str]) -> PassCost:
    # The saver makes its archiver with its tier chain (at its first use): count on the one it ships with.
    archiver = saver._archiver()
    if archiver.store is not store:
        store.inner = archiver.store
        archiver.store = store  # type: ignore[assignment]
    before = store.counts()
    t0 = time.perf_counter()
    left = saver.drain_archive(120)
    took = time.perf_counter() - t0
    if left is None or not left.caught_up:
        problems.append(f"pass cost {what}: drain_archive left {left}")
    after = store.counts()
    gets, got, lists, puts = (a - b for a, b in zip(after, before, strict=True))
    return PassCost(gets, got, lists, puts, took)


def part_pass_cost(res: Resources, moto: Moto, args: argparse.Namespace, problems: list[str]) -> list[str]:
    import base64

    n_threads, passes = args.pass_threads, args.passes
    rows: dict[str, list[PassCost]] = {}
    archive_bytes: dict[str, list[int]] = {}
    for what in ("round-robin", "large"):
        tiers = allocate(res, moto, f"pass_{what.replace('-', '_')}")
        assert tiers.archive is not None
        # No background pass: each pass is the benchmark's own.
        saver = tiers.saver(lag=86400.0)
        try:
            saver.setup()
            store = CountingStore(saver._archiver().store)
            graph = runs_graph(1, is_async=False, checkpointer=saver)
            tids = [f"pass-{i}" for i in range(n_threads)] if what == "round-robin" else ["pass-large"]
            for p in range(passes):
                for tid in tids:
                    if what == "round-robin":
                        value = run_input(p)
                    else:
                        text = base64.b64encode(os.urandom(450 * 1024)).decode()
                        value = {**run_input(p), "messages": [text]}
                    graph.invoke(value, run_config(tid, 1), durability="sync")
                rows.setdefault(what, []).append(one_pass(saver, store, what, problems))
                if what == "large":
                    archive_bytes.setdefault(what, []).append(objects(store.inner, segments_prefix(tids[0]))[1])
        finally:
            saver.close()
    lines = [
        f"### Round-robin: {n_threads} threads written in turn, a pass after each round",
        "",
        "Each thread gets one run of one super-step, then `drain_archive()` ships all of them. *GETs* and "
        "*bytes read*: what the pass read back from the object store; *listings*: one per thread shipped; "
        "*PUTs*: one segment per thread.",
        "",
        "| pass | GETs | bytes read | listings | PUTs | pass (ms) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for i, c in enumerate(rows.get("round-robin", []), 1):
        lines.append(f"| {i} | {c.gets} | {num(c.got)} | {c.lists} | {c.puts} | {ms(c.seconds)} |")
    lines += [
        "",
        "### One thread growing by a 600 KB value a run, a pass after each run",
        "",
        "*archive bytes*: the thread's segments after the pass (each run's value is random text: "
        "zlib cannot shrink it).",
        "",
        "| pass | GETs | bytes read | archive bytes | PUTs | pass (ms) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for i, (c, size) in enumerate(zip(rows.get("large", []), archive_bytes.get("large", []), strict=True), 1):
        lines.append(f"| {i} | {c.gets} | {num(c.got)} | {num(size)} | {c.puts} | {ms(c.seconds)} |")
    lines.append("")
    return lines


def guarded(problems: list[str], what: str, fn: Callable[[], list[str]]) -> list[str]:
    """Run one part; an exception is a problem of that part, and the next part runs."""
    t0 = time.perf_counter()
    try:
        lines = fn()
    except Exception:
        problems.append(f"{what} raised:\n\n```\n{traceback.format_exc().rstrip()}\n```")
        return [f"({what} did not finish: see Problems)", ""]
    print(f"[{what}: {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every part small: a check that it works")
    parser.add_argument("--runs", type=int, help="part 1: runs per thread (default 20; quick 4)")
    parser.add_argument("--steps", type=int, help="parts 1 and 4: super-steps per run (default 10; quick 5)")
    parser.add_argument("--cost-threads", type=int, help="part 1: threads (default 5; quick 2)")
    parser.add_argument("--threads", type=int, help="part 2: timed threads per size and face (default 10; quick 2)")
    parser.add_argument("--rounds", type=int, help="part 3: timed rounds per face (default 30; quick 2)")
    parser.add_argument("--restore-threads", type=int, help="part 4: threads (default 20; quick 3)")
    parser.add_argument("--restore-runs", type=int, help="part 4: runs per thread (default 5; quick 2)")
    parser.add_argument("--pass-threads", type=int, help="part 5: round-robin threads (default 80; quick 12)")
    parser.add_argument("--passes", type=int, help="part 5: passes (default 8; quick 3)")
    parser.add_argument("--pass-cost-only", action="store_true", help="part 5 alone (prints it; no --write)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_ARCHIVE.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    args = parser.parse_args(argv)
    defaults = {"runs": (20, 4), "steps": (10, 5), "cost_threads": (5, 2), "threads": (10, 2), "rounds": (30, 2)}
    defaults |= {"restore_threads": (20, 3), "restore_runs": (5, 2), "pass_threads": (80, 12), "passes": (8, 3)}
    for key, (full, quick) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    exit_on_sigterm()
    started = dt.datetime.now(dt.UTC)
    load_start = os.getloadavg()[0]
    code = git_state(HERE.parent)
    t_run = time.perf_counter()
    run_id = uuid.uuid4().hex[:10]
    res = Resources(NAME, run_id)
    moto = Moto(run_id)
    problems: list[str] = []
    body: list[str] = []
    try:
        if not res.probe():
            problems += res.down
        elif args.pass_cost_only:
            moto.start()
            body += ["## 5. The replica's cost per pass", ""]
            body += guarded(problems, "pass cost", lambda: part_pass_cost(res, moto, args, problems))
        else:
            moto.start()
            body += [f"> {MOTO_NOTE}", "", "## 1. What the archive stores per thread", ""]
            body += guarded(problems, "cost", lambda: part_cost(res, moto, args, problems))
            body += ["## 2. The first read of an archived thread, against a hot one", ""]

            def both_faces(sync: Any, asynchronous: Any, table: Any, n: int, names: tuple[str, str]) -> Any:
                """A part run on the sync face, then the async one, as one table."""
                return lambda: table(
                    {
                        names[0]: sync(res, moto, n, problems),
                        names[1]: asyncio.run(asynchronous(res, moto, n, problems)),
                    },
                    n,
                )

            body += guarded(
                problems,
                "bring-back",
                both_faces(
                    part_bring_back_sync,
                    part_bring_back_async,
                    bring_back_table,
                    args.threads,
                    ("sync (`get_state`)", "async (`aget_state`)"),
                ),
            )
            body += ["## 3. The replica's cost on the step path, paired", ""]
            body += guarded(
                problems,
                "step path",
                both_faces(part_steps_sync, part_steps_async, steps_table, args.rounds, ("sync", "async")),
            )
            body += ["## 4. `restore()` of the whole store after the hot tiers are lost", ""]
            body += guarded(problems, "restore", lambda: part_restore(res, moto, args, problems))
            body += ["## 5. The replica's cost per pass", ""]
            body += guarded(problems, "pass cost", lambda: part_pass_cost(res, moto, args, problems))
    finally:
        moto.stop()
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    wall = time.perf_counter() - t_run
    text = "\n".join(body) + "\n## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None.") + "\n"
    print(text)
    if args.write and not args.pass_cost_only:
        head = run_lines(
            "bench_archive.py",
            quick=args.quick,
            started=started,
            wall=wall,
            load=(load_start, os.getloadavg()[0]),
            code=code,
            packages=PACKAGES,
        )
        servers = ", ".join(f"{k} {v}" for k, v in res.server_versions.items()) or "; ".join(res.down)
        intro = [
            "# The archive tier: storage, bring-back, step path, restore",
            "",
            *head,
            f"- Servers (loopback): {servers}; the object store: moto's S3 server (`python -m moto.server`, "
            "in memory), started by the script",
            f"- Every saver: `DurableSaver` on SQLite + Redis + Postgres with its default options, "
            f'`archive="s3://BUCKET/PREFIX"` (default `Archive(lag=60)`) unless a row says otherwise. '
            f"Workload: `bench_growth.py`'s growing-list graph (one {SIZE}-byte message per super-step, "
            '`durability="sync"`). See `benchmarks/README.md` for what each part measures.',
            f"- {MOTO_NOTE}",
            "",
        ]
        Path(args.output).write_text("\n".join(intro) + "\n" + text)
        print(f"wrote {args.output}")
    print(f"total {wall:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
