#!/usr/bin/env python
"""Many replicas, one Redis, one Postgres: throughput, step latency and correctness under load.

Runs the load driver of ``tests/load.py``: ``--workers`` processes, each with
its own ``DurableSaver`` and its own SQLite file, all on one Redis key prefix
and one Postgres database; ``--threads`` LangGraph threads of ``--runs`` runs
of ``--steps`` super-steps each (a compiled loop graph appending one
``--message-bytes`` message per step, ``durability="sync"``). Each process runs
``--concurrency`` runs at once. Like a load balancer, the parent sends each
run of a thread to another process than the previous run, and only once the
previous run reported back. Then it reads everything back through fresh
savers: the shared tiers together, each shared tier alone and each worker's
file as a replica: every thread's latest state, every acknowledged checkpoint
(lost?), and one chain per thread (forks?).

Modes (``--modes``): ``shared`` (the default write mode), ``local``
(write-behind; each worker also ``drain()``s, one replicator pass, before it
hands a thread back), ``local-nodrain`` (write-behind handed on as soon as the
run returns: a run's end ships the thread's records before it gives the lease
back), ``all``.

Then storage over rounds of runs on the same threads (``--rounds`` rounds of
``--round-runs`` runs per thread on ``--storage-threads`` threads, write
``shared``), once without retention and once with
``apply_retention(RetentionPolicy(keep_last=--keep-last))`` on the shared
tiers after each round: bytes of the ``lgd_*`` tables in Postgres
(``pg_total_relation_size``, before and after a plain ``VACUUM`` of them,
which makes deleted rows' space reusable as autovacuum would), Redis
``MEMORY USAGE`` summed over the prefix's keys, and the workers' SQLite files.

Timings are never pass/fail; a failed check is listed under "Problems".
Loopback servers only; every database, Redis prefix and temp dir the run
creates is named ``lgd_lbench_<run id>...`` and removed at the end, even on
error, Ctrl-C or SIGTERM.

    .venv/bin/python benchmarks/bench_load.py --quick
    .venv/bin/python benchmarks/bench_load.py --write    # RESULTS_LOAD.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from _env import (
    REDIS_URL,
    Resources,
    exit_on_sigterm,
    git_state,
    run_lines,  # benchmarks/ is on sys.path when run as a script
)

from langgraph_durable import Leases, Memory, Tiers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.load, also in the worker processes (spawn passes sys.path on)

from tests.load import LoadResult, run_load, worker_file  # noqa: E402

NAME = "lgd_lbench"  # prefix of every database, Redis key and temp dir a run creates
MODES = {  # name -> (write=, hand-off drain)
    "shared": ("shared", True),
    "all": ("all", True),
    "local": ("local", True),
    "local-nodrain": ("local", False),
}
PACKAGES = ["langgraph", "langgraph-checkpoint", "langgraph-durable", "psycopg", "psycopg-pool", "redis"]


# -- storage -----------------------------------------------------------------------------------


@dataclass
class Usage:
    pg_bytes: int = 0
    pg_bytes_vacuumed: int = 0
    pg_checkpoints: int = 0  # rows of lgd_checkpoints
    pg_blobs: int = 0
    pg_writes: int = 0
    redis_bytes: int = 0
    redis_keys: int = 0
    sqlite_bytes: int = 0


@dataclass
class Round:
    index: int
    runs_so_far: int
    check: str  # "ok" or what failed
    usage: Usage
    retention_s: float = 0.0
    deleted: int = 0  # checkpoints the sweep deleted
    kept: int = 0


@dataclass
class Series:
    retention: bool
    rounds: list[Round] = field(default_factory=list)


def pg_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND c.relname LIKE 'lgd\\_%' AND n.nspname = current_schema()"
        ).fetchone()
    return int(row[0]) if row else 0


def measure(url: str, prefix: str, files: list[Path], vacuum: bool) -> Usage:
    import psycopg
    import redis as redis_lib

    usage = Usage(pg_bytes=pg_bytes(url))
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        for table in ("lgd_checkpoints", "lgd_blobs", "lgd_writes"):
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            setattr(usage, "pg_" + table.removeprefix("lgd_"), int(row[0]) if row else 0)
        if vacuum:
            conn.execute("VACUUM lgd_checkpoints, lgd_blobs, lgd_writes")
    usage.pg_bytes_vacuumed = pg_bytes(url) if vacuum else usage.pg_bytes
    client = redis_lib.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        usage.redis_keys = len(keys)
        for i in range(0, len(keys), 500):
            pipe = client.pipeline(transaction=False)
            for k in keys[i : i + 500]:
                pipe.memory_usage(k, samples=0)
            usage.redis_bytes += sum(int(n or 0) for n in pipe.execute())
    finally:
        client.close()
    usage.sqlite_bytes = sum(
        p.stat().st_size for f in files for p in (f, Path(f"{f}-wal"), Path(f"{f}-shm")) if p.exists()
    )
    return usage


def storage_series(args: argparse.Namespace, res: Resources, retention: bool, problems: list[str]) -> Series:
    from langgraph_durable import DurableSaver, RetentionPolicy

    tag = "keep" if retention else "all"
    url, prefix = res.new_database(f"store_{tag}"), res.new_prefix(f"store_{tag}")
    workdir = res.tmp_path / f"store_{tag}"
    files = [worker_file(workdir, "store", w) for w in range(args.workers)]
    series = Series(retention)
    bounded = retention and args.local_max_bytes > 0
    for r in range(args.rounds):
        result = run_load(
            args.workers,
            args.storage_threads,
            args.round_runs,
            args.steps,
            REDIS_URL,
            prefix,
            url,
            workdir,
            write="shared",
            seed=args.seed,
            face=args.face,
            concurrency=args.concurrency,
            first_run=r * args.round_runs,
            thread_prefix="store",
            message_bytes=args.message_bytes,
            saver_options={"memory": Memory(local_max_bytes=args.local_max_bytes)} if bounded else None,
            check_files=not bounded,  # a bounded cache evicts what its saver wrote
        )
        label = f"storage {'with' if retention else 'without'} retention, round {r + 1}"
        check = "ok" if result.ok else _failed(result)
        if not result.ok:
            problems.append(f"{label}: {check}; " + " | ".join(result.problems[:3] + result.error_samples[:3]))
        rnd = Round(r + 1, (r + 1) * args.round_runs, check, Usage())
        if retention:
            t0 = time.perf_counter()
            with DurableSaver(
                sqlite=None, redis=REDIS_URL, postgres=url, tiers=Tiers(redis_key_prefix=prefix)
            ) as saver:
                report = saver.apply_retention(RetentionPolicy(keep_last=args.keep_last))
            rnd.retention_s = time.perf_counter() - t0
            rnd.deleted, rnd.kept = report.checkpoints_deleted, report.checkpoints_kept
        rnd.usage = measure(url, prefix, files, vacuum=not args.no_vacuum)
        series.rounds.append(rnd)
        u = rnd.usage
        print(
            f"  {label}: {check}; postgres {u.pg_bytes / 1024:.0f} KiB ({u.pg_checkpoints} checkpoints), "
            f"redis {u.redis_bytes / 1024:.0f} KiB ({u.redis_keys} keys), sqlite {u.sqlite_bytes / 1024:.0f} KiB"
            + (f"; retention {rnd.retention_s:.2f} s, deleted {rnd.deleted}" if retention else ""),
            flush=True,
        )
    return series


def _failed(result: LoadResult) -> str:
    bad = []
    if result.errors:
        bad.append(f"{result.errors} run errors")
    for what, d in (
        ("wrong states", result.wrong_states),
        ("lost", result.lost),
        ("forks", result.forks),
        ("unlinked", result.unlinked),
        ("corruption events", result.corrupt),
    ):
        n = sum(d.values())
        if n:
            bad.append(f"{what} {n}")
    if result.runs != result.threads * result.runs_per_thread:
        bad.append(f"{result.runs} of {result.threads * result.runs_per_thread} runs reported")
    return ", ".join(bad) or "failed"


# -- rendering ---------------------------------------------------------------------------------


def kib(n: int) -> str:
    return f"{n / 1024:,.0f}"


def load_tables(results: dict[str, LoadResult]) -> str:
    if not results:
        return "No load run finished.\n"
    out = [
        "| mode | runs | node steps | checkpoints | wall s | steps/s | checkpoints/s | step p50 ms | step p99 ms "
        "| 1st checkpoint, handed over, p50 / p99 ms | 1st checkpoint, new thread, p50 / p99 ms "
        "| run p50 / p99 ms | hand-off drain p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, r in results.items():
        drain = f"{r.drain_p50_ms:.0f} / {r.drain_p99_ms:.0f}" if r.write == "local" and r.handoff_drain else "-"
        out.append(
            f"| {mode} | {r.runs} | {r.steps} | {r.checkpoints} | {r.wall_s:.1f} | {r.steps_per_s:.0f} | "
            f"{r.checkpoints_per_s:.0f} | {r.step_p50_ms:.2f} | {r.step_p99_ms:.2f} | "
            f"{r.first_p50_ms:.1f} / {r.first_p99_ms:.1f} | {r.first_new_p50_ms:.1f} / {r.first_new_p99_ms:.1f} | "
            f"{r.run_p50_ms:.0f} / {r.run_p99_ms:.0f} | {drain} |"
        )
    out += [
        "",
        "### Correctness",
        "",
        "Views: `shared` = a fresh saver on Redis and Postgres; `redis`, `postgres` = each alone; "
        "`wN replica` = worker N's SQLite file with both shared tiers (latest state only); `wN file` = the raw "
        "rows of worker N's file (the checkpoints its own saver acknowledged). `wrong states`: threads whose "
        "latest state is not the expected one, summed over the views; `lost`: acknowledged checkpoints a view "
        "lacks; `forks`: second children of a checkpoint; `unlinked`: checkpoints whose parent is not stored "
        "(a second root); `corruption events`: records the checking savers found missing or damaged in every "
        "tier (`on_corruption`); `forks`, `unlinked` summed over the shared, redis and postgres views.",
        "",
        "| mode | run errors | wrong states | lost (shared / redis / postgres / workers' files) | forks "
        "| unlinked | corruption events | refused at shipping | owed at close | saver warnings | check |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for mode, r in results.items():
        files = sum(v for k, v in r.lost.items() if k.endswith(" file"))
        lost = " / ".join(str(r.lost.get(v, "-")) for v in ("shared", "redis", "postgres")) + f" / {files}"
        out.append(
            f"| {mode} | {r.errors} | {sum(r.wrong_states.values())} (of {r.threads} threads x "
            f"{len(r.wrong_states)} views) | {lost} | {sum(r.forks.values())} | {sum(r.unlinked.values())} | "
            f"{sum(r.corrupt.values())} | {r.refused} | "
            f"{sum(w.owed_at_close for w in r.per_worker)} | {sum(w.warnings for w in r.per_worker)} | "
            f"{'ok' if r.ok else _failed(r)} |"
        )
    out += [
        "",
        "### Per worker",
        "",
        "| mode | worker | runs | node steps | checkpoints | hand-off drains, total s | SQLite file KiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, r in results.items():
        for w in r.per_worker:
            out.append(
                f"| {mode} | w{w.worker} | {w.runs} | {w.steps} | {w.checkpoints} | {w.drain_ms / 1000:.1f} | "
                f"{kib(w.sqlite_bytes)} |"
            )
    return "\n".join(out) + "\n"


def storage_tables(series: list[Series], args: argparse.Namespace) -> str:
    if not series:
        return "Not measured.\n"
    out = []
    for s in series:
        title = "Without retention"
        if s.retention:
            title = f"With `apply_retention(RetentionPolicy(keep_last={args.keep_last}))` after each round"
            if args.local_max_bytes > 0:
                title += f", workers with `local_max_bytes={args.local_max_bytes}`"
        out += [f"#### {title}", ""]
        head = (
            "| round | runs per thread so far | check | Postgres KiB | after VACUUM | checkpoints | blobs | writes "
            "| Redis KiB | Redis keys | workers' SQLite KiB |"
        )
        sep = "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        if s.retention:
            head += " retention s | checkpoints deleted |"
            sep += "---:|---:|"
        out += [head, sep]
        for r in s.rounds:
            u = r.usage
            line = (
                f"| {r.index} | {r.runs_so_far} | {r.check} | {kib(u.pg_bytes)} | {kib(u.pg_bytes_vacuumed)} | "
                f"{u.pg_checkpoints} | {u.pg_blobs} | {u.pg_writes} | {kib(u.redis_bytes)} | {u.redis_keys} | "
                f"{kib(u.sqlite_bytes)} |"
            )
            if s.retention:
                line += f" {r.retention_s:.2f} | {r.deleted} |"
            out.append(line)
        out.append("")
    if len(series) == 2 and series[0].rounds and series[1].rounds:
        (a0, a1), (b0, b1) = (series[0].rounds[0], series[0].rounds[-1]), (series[1].rounds[0], series[1].rounds[-1])

        def growth(first: int, last: int) -> str:
            return f"{last / first:.2f}x" if first else "-"

        out.append(
            f"From round 1 to round {a1.index}: without retention Postgres {growth(a0.usage.pg_bytes, a1.usage.pg_bytes)}"
            f", Redis {growth(a0.usage.redis_bytes, a1.usage.redis_bytes)}; with retention Postgres "
            f"{growth(b0.usage.pg_bytes, b1.usage.pg_bytes)} (after VACUUM "
            f"{growth(b0.usage.pg_bytes_vacuumed, b1.usage.pg_bytes_vacuumed)}), Redis "
            f"{growth(b0.usage.redis_bytes, b1.usage.redis_bytes)}; workers' SQLite files "
            f"{growth(a0.usage.sqlite_bytes, a1.usage.sqlite_bytes)} without, "
            f"{growth(b0.usage.sqlite_bytes, b1.usage.sqlite_bytes)} with. The sweep runs on the shared tiers "
            "only; what bounds a worker's file is `local_max_bytes` (when set). A thread's latest state still "
            f"grows by {args.round_runs * args.steps} messages a round (that is the workload), so a store that "
            "keeps the newest checkpoints grows by that much and no more."
        )
    return "\n".join(out) + "\n"


def header(args: argparse.Namespace, res: Resources, started: dt.datetime, wall: float, code: str, load: float) -> str:
    servers = ", ".join(f"{k} {v}" for k, v in res.server_versions.items()) or "none reachable"
    return "\n".join(
        [
            "# Load benchmark results: several replicas, one Redis, one Postgres",
            "",
            *run_lines(
                "bench_load.py",
                quick=args.quick,
                started=started,
                wall=wall,
                load=(load, os.getloadavg()[0]),
                code=code,
                packages=PACKAGES,
            ),
            f"- Servers (loopback, shared with whatever else runs on the machine): {servers}",
            f"- Load: {args.workers} worker processes (multiprocessing spawn), each with its own `DurableSaver` "
            f"(sqlite+redis+postgres, defaults except `write=`) and SQLite file, {args.concurrency} runs at once per "
            f"process ({args.face} face: {'threads' if args.face == 'sync' else 'asyncio tasks'}); {args.threads} "
            f"threads x {args.runs} runs x {args.steps} super-steps; consecutive runs of a thread go to different "
            f"processes (round robin with a per-thread offset and shift, seed {args.seed}), run k+1 only after run k "
            "reported back.",
            f"- Workload: a compiled `StateGraph` looping one node that appends one ~{args.message_bytes + 40}-byte "
            "message (naming thread, run, step and process) to `messages: Annotated[list, operator.add]` per "
            'super-step, `durability="sync"`; run k of a thread is invoked with `{"goal": (k+1)*steps}`, so each '
            "run writes steps + 2 checkpoints (input, start, one per step).",
        ]
    )


HOW_TO_READ = """\
## How to read this

- **steps/s**: node super-steps of all runs divided by the wall time from the first run sent to the last
  reported back (process start-up and the checks are outside it). **checkpoints/s** counts every
  acknowledged `put` (steps + 2 per run).
- **step p50 / p99**: time between two consecutive acknowledged checkpoints of one run (`put` returned),
  over every run: one super-step, its checkpoint write and whatever else the process was doing.
  **1st checkpoint**: from `invoke` to the run's first acknowledged checkpoint (the writer lease, the
  read of the latest checkpoint, the input checkpoint), for runs 2.. of a thread (handed over from
  another process, whose local file does not hold the thread's latest values) and for run 1 (a new
  thread: nothing to read). **run**: the whole `invoke`.
- **hand-off drain** (`write="local"`): the worker's `drain()` (one replicator pass, which ships
  everything owed when it started, for every thread of that process) after a run and before it reports
  the run done, so that the next process sees the run. It is not inside `run`, but it is inside the wall
  time, so it costs throughput.
- `local-nodrain` hands the thread on as soon as the run returns, with no drain: the run's lease is kept
  until the replicator has shipped the thread's owed records, and the next process waits for it
  (`on_busy="wait"`), so it sees the whole run.
  Its figures are what write-behind costs when nothing else is done for a hand-off.
- Everything runs on one 2-core machine with the servers: the workers, Redis and Postgres share the
  CPUs, so these figures are about contention as much as about the saver. Expect ±20-30% between runs.
"""


def problems_text(problems: list[str], results: dict[str, LoadResult], notes: list[str]) -> str:
    lines = [f"- {p}" for p in problems]
    for mode, r in results.items():
        if r.ok:
            continue
        lines.append(f"- {mode}: {_failed(r)}")
        lines += [f"  - {p}" for p in (r.error_samples[:5] + r.problems[:10])]
    for mode, r in results.items():
        for w in r.per_worker:
            if w.warnings:
                lines.append(
                    f"- {mode} w{w.worker}: {w.warnings} saver warning(s), first: " + " | ".join(w.first_warnings[:2])
                )
    lines += [f"- cleanup: {n}" for n in notes]
    return "\n".join(lines)


def scrub(text: str, res: Resources) -> str:
    """No absolute path of this machine in the results file (tracebacks name files)."""
    swaps = {
        str(res.tmp_path): "<tmp>",
        str(ROOT): "<repo>",
        sys.prefix: "<venv>",
        sys.base_prefix: "<python>",
        tempfile.gettempdir(): "<tmp>",
        str(Path.home()): "<home>",
    }
    for old in sorted((k for k in swaps if k and k != "/"), key=len, reverse=True):
        text = text.replace(old, swaps[old])
    return text


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a short run (about a minute) to check that everything works")
    p.add_argument("--workers", type=int, help="worker processes (default 4; quick 2)")
    p.add_argument("--threads", type=int, help="LangGraph threads (default 200; quick 12)")
    p.add_argument("--runs", type=int, help="runs per thread (default 5; quick 2)")
    p.add_argument("--steps", type=int, help="super-steps per run (default 10; quick 5)")
    p.add_argument("--concurrency", type=int, default=4, help="runs at once per worker process (default 4)")
    p.add_argument("--face", choices=("sync", "async"), default="sync", help="invoke (threads) or ainvoke (tasks)")
    p.add_argument("--modes", default="shared,local,local-nodrain", help=f"comma-separated: {', '.join(MODES)}")
    p.add_argument("--seed", type=int, default=0, help="seed of the assignment of runs to processes")
    p.add_argument("--message-bytes", type=int, default=100, help="padding of each message (default 100)")
    p.add_argument("--rounds", type=int, help="storage: rounds of runs (default 6; quick 3)")
    p.add_argument("--round-runs", type=int, default=2, help="storage: runs per thread per round (default 2)")
    p.add_argument("--storage-threads", type=int, help="storage: threads (default 50; quick 6)")
    p.add_argument("--keep-last", type=int, default=5, help="storage: RetentionPolicy(keep_last=) (default 5)")
    p.add_argument(
        "--local-max-bytes",
        type=int,
        default=4 << 20,
        help="storage: DurableSaver(local_max_bytes=) of the workers in the series with retention (default 4 MiB; "
        "0: unbounded)",
    )
    p.add_argument("--no-vacuum", action="store_true", help="storage: no VACUUM of the lgd_* tables after a round")
    p.add_argument("--no-storage", action="store_true", help="leave the storage measurement out")
    p.add_argument("--output", default=str(HERE / "RESULTS_LOAD.md"), help="markdown file to overwrite")
    p.add_argument("--write", action="store_true", help="also overwrite the results file")
    args = p.parse_args(argv)
    q = args.quick
    args.workers = args.workers or (2 if q else 4)
    args.threads = args.threads or (12 if q else 200)
    args.runs = args.runs or (2 if q else 5)
    args.steps = args.steps or (5 if q else 10)
    args.rounds = args.rounds or (3 if q else 6)
    args.storage_threads = args.storage_threads or (6 if q else 50)
    args.mode_list = [m for m in args.modes.split(",") if m]
    unknown = set(args.mode_list) - set(MODES)
    if unknown:
        p.error(f"unknown mode(s) {sorted(unknown)}; choose from {', '.join(MODES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_sigterm()  # so the finally below still drops databases and keys
    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()[0]
    code = git_state(ROOT)
    t_run = time.perf_counter()
    run_id = uuid.uuid4().hex[:10]
    res = Resources(NAME, run_id)
    results: dict[str, LoadResult] = {}
    series: list[Series] = []
    problems: list[str] = []
    notes: list[str] = []
    try:
        if not res.probe():
            for why in res.down:
                print(f"cannot run: {why}", file=sys.stderr)
            return 3
        print(f"run {run_id}: {args.workers} workers, {args.threads} threads x {args.runs} runs x {args.steps} steps")
        for mode in args.mode_list:
            write, drain = MODES[mode]
            tag = mode.replace("-", "_")
            try:
                result = run_load(
                    args.workers,
                    args.threads,
                    args.runs,
                    args.steps,
                    REDIS_URL,
                    res.new_prefix(tag),
                    res.new_database(tag),
                    res.tmp_path / tag,
                    write=write,
                    seed=args.seed,
                    face=args.face,
                    concurrency=args.concurrency,
                    handoff_drain=drain,
                    message_bytes=args.message_bytes,
                    # Write-behind keeps a run's lease until it has shipped:
                    # a process handed the thread at once waits for it.
                    saver_options={"leases": Leases(on_busy="wait")} if write == "local" and not drain else None,
                )
            except Exception:
                problems.append(f"{mode}: the load did not finish:\n\n```\n{traceback.format_exc()}```")
                print(problems[-1], flush=True)
                continue
            results[mode] = result
            print(f"== {mode} (checks took {result.check_s:.1f} s)\n{result.summary()}\n", flush=True)
        if not args.no_storage:
            for retention in (False, True):
                try:
                    series.append(storage_series(args, res, retention, problems))
                except Exception:
                    problems.append(
                        f"storage (retention {retention}): did not finish:\n\n```\n{traceback.format_exc()}```"
                    )
                    print(problems[-1], flush=True)
    finally:
        notes = res.cleanup()
    wall = time.perf_counter() - t_run

    body = "\n".join(
        [
            "## Throughput and latency",
            "",
            load_tables(results),
            "## Storage over rounds, with and without retention",
            "",
            f"{args.storage_threads} threads, {args.round_runs} runs of {args.steps} steps per thread per round, "
            f"write `shared`, the same {args.workers} worker processes' layout (started anew each round). After each "
            "round: the retention sweep (second table only) on a saver opened on the shared tiers, then the sizes. "
            "`Postgres KiB`: `pg_total_relation_size` summed over the `lgd_*` tables; `after VACUUM`: the same "
            "after a plain `VACUUM` of lgd_checkpoints, lgd_blobs and lgd_writes"
            + (" (not run: --no-vacuum)" if args.no_vacuum else "")
            + " (a plain VACUUM returns no space to the OS; it makes deleted rows' space reusable, so the size "
            "stops growing when the deletes keep up); `checkpoints` / `blobs` / `writes`: live rows. `Redis "
            "KiB`: `MEMORY USAGE key SAMPLES 0` summed over the prefix's keys. `check`: the round's load checks "
            "(latest state, acknowledged checkpoints, one chain), as in the first section, before the sweep.",
            "",
            storage_tables(series, args),
        ]
    )
    probs = problems_text(problems, results, notes)
    print()
    print(body)
    print("## Problems\n")
    print(probs or "None.")
    if args.write:
        doc = header(args, res, started, wall, code, load) + "\n\n" + HOW_TO_READ + "\n" + body
        doc += "\n## Problems\n\n" + (probs or "None: every check passed and cleanup succeeded.") + "\n"
        Path(args.output).write_text(scrub(doc, res))
        print(f"\nwrote {args.output}")
    print(f"total {wall:.1f} s")
    ok = all(r.ok for r in results.values()) and not problems
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
