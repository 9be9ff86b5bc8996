"""Many concurrent runs across several processes, against AsyncPostgresSaver in the same processes.

The shape of the load test (`bench_load.py`): `--processes` worker processes
(replicas) share one Redis key prefix and one Postgres database, each with
its own SQLite file; together they run `--runs` runs at once, `--runs` /
`--processes` per process, each an `ainvoke` of `--steps` super-steps
(`bench_growth`'s growing-list graph, ``durability="sync"``) on a thread of
its own. Then the second run of every thread goes to *another* process
(as a load balancer sends a conversation's next turn anywhere), `--steps`
super-steps more. Each phase starts when every process is ready (a barrier)
and ends when the last run returns; steps per second = runs x steps / that
wall time.

Savers, each in the same processes' shape, taking turns round by round
(`--rounds`, the order rotated each round): the stock `AsyncPostgresSaver`
on a psycopg pool of 10 per process; `DurableSaver` on SQLite + Redis +
Postgres with its default options; and the same with ``write="local"``
and ``on_busy="wait"`` (under write-behind a thread goes to another process
once its records have shipped, which its next run waits for).
Every run's result is checked, and after each round every thread's latest
state is read back through a fresh saver on the shared storage. A second
run refused with `ThreadBusy` (the default ``on_busy="raise"``: the first
process had not given the thread's lease back within the hand-off grace) is
counted in its column, not retried, and its thread read back with its first
run alone.

Prints the table; `--write` also overwrites `RESULTS_PROCESSES.md`.
Loopback servers only; everything a run creates is removed at the end.

    .venv/bin/python benchmarks/bench_processes.py --quick            # about 30 s
    .venv/bin/python benchmarks/bench_processes.py --write            # about 3 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import multiprocessing
import os
import queue
import statistics
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from _env import exit_on_sigterm, git_state, run_lines  # benchmarks/ is on sys.path when run as a script
from bench_growth import (
    CONFIG_BY_KEY,
    PACKAGES,
    Config,
    Resources,
    Storage,
    build_graph,
    check_values,
    first_input,
    more_input,
    open_async,
    open_sync,
    run_config,
    thread_of,
)
from bench_paired import paired, ratio

HERE = Path(__file__).resolve().parent
SIZE = 420
ROWS = ["pg_stock", "d_srp", "d_srp_local_wait"]
REFERENCE = "pg_stock"
# With write-behind a run's lease goes to another process only once the run's
# records have shipped: the next run, sent there at once, waits for that.
CONFIGS = {
    **CONFIG_BY_KEY,
    "d_srp_local_wait": Config(
        "d_srp_local_wait", "durable", ("sqlite", "redis", "postgres"), write="local", on_busy="wait"
    ),
}
SPAWN = multiprocessing.get_context("spawn")
READY_TIMEOUT_S = 120.0
PHASE_TIMEOUT_S = 600.0


def tid(round_no: int, key: str, index: int) -> str:
    return f"p{round_no}-{key}-{index}"


def worker(index: int, spec: dict[str, Any], barrier: Any, out: Any) -> None:
    """One replica: open the saver, then at each phase's barrier run this
    process's share of the runs at once; report (start, end, problems)."""
    try:
        out.put((index, asyncio.run(_work(index, spec, barrier))))
    except BaseException:
        barrier.abort()
        out.put((index, {"error": traceback.format_exc()}))


async def _work(index: int, spec: dict[str, Any], barrier: Any) -> dict[str, Any]:
    config: Config = CONFIGS[spec["key"]]
    st = Storage(**spec["storage"])
    if st.sqlite_path:
        st.sqlite_path = f"{st.sqlite_path}.w{index}"
    steps, processes, per = spec["steps"], spec["processes"], spec["per_process"]
    phases: list[tuple[float, float]] = []
    problems: list[str] = []
    busy: list[str] = []  # second runs refused with ThreadBusy (on_busy="raise": the previous holder's lease)
    async with open_async(config, st) as saver:
        graphs = [build_graph(steps * k, SIZE, is_async=True, checkpointer=saver) for k in (1, 2)]
        warm = await graphs[0].ainvoke(first_input(), run_config(f"warm-{spec['run']}-{spec['round']}-{index}", steps))
        problems += check_values(warm, steps, SIZE, "warm-up run")
        for phase in (0, 1):
            # Phase 0: this process's own threads; phase 1: the previous process's, one run further.
            owner = index if phase == 0 else (index - 1) % processes
            threads = [tid(spec["round"], spec["key"], owner * per + i) for i in range(per)]
            inp = first_input() if phase == 0 else more_input()
            await asyncio.to_thread(barrier.wait, READY_TIMEOUT_S)
            start = time.time()
            outs = await asyncio.gather(
                *(graphs[phase].ainvoke(inp, run_config(t, steps * (phase + 1)), durability="sync") for t in threads),
                return_exceptions=True,
            )
            phases.append((start, time.time()))
            for t, o in zip(threads, outs):
                if isinstance(o, BaseException) and type(o).__name__ == "ThreadBusy":
                    busy.append(t)
                elif isinstance(o, BaseException):
                    problems.append(f"{t} run {phase + 1}: {type(o).__name__}: {o}")
                else:
                    problems += check_values(o, steps * (phase + 1), SIZE, f"{t} run {phase + 1}")
    return {"phases": phases, "problems": problems[:20], "busy": busy}


def run_round(key: str, round_no: int, st: Storage, args: argparse.Namespace, run: str) -> dict[str, Any]:
    """One saver's two phases; the wall time of each, and the problems."""
    per = args.runs // args.processes
    spec = {
        "key": key,
        "storage": vars(st),
        "steps": args.steps,
        "processes": args.processes,
        "per_process": per,
        "round": round_no,
        "run": run,
    }
    barrier = SPAWN.Barrier(args.processes)
    out = SPAWN.Queue()
    procs = [SPAWN.Process(target=worker, args=(i, spec, barrier, out), daemon=True) for i in range(args.processes)]
    for p in procs:
        p.start()
    reports: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    deadline = time.monotonic() + READY_TIMEOUT_S + 2 * PHASE_TIMEOUT_S
    try:
        while len(reports) < len(procs):
            try:
                i, report = out.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                problems.append(f"{key} round {round_no}: workers did not report in time")
                break
            reports[i] = report
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    walls: list[float] = []
    busy = {t for r in reports.values() for t in r.get("busy", [])}
    for i, report in sorted(reports.items()):
        if "error" in report:
            problems.append(f"{key} round {round_no} worker {i}:\n\n```\n{report['error'].rstrip()}\n```")
        problems += [f"{key} round {round_no} worker {i}: {p}" for p in report.get("problems", [])]
    if len(reports) == len(procs) and all("phases" in r for r in reports.values()):
        for phase in (0, 1):
            start = min(r["phases"][phase][0] for r in reports.values())
            end = max(r["phases"][phase][1] for r in reports.values())
            walls.append(end - start)
        problems += read_back(key, round_no, st, per * args.processes, args.steps, busy)
    return {"walls": walls, "problems": problems, "busy": len(busy)}


def read_back(key: str, round_no: int, st: Storage, threads: int, steps: int, busy: set[str]) -> list[str]:
    """Every thread's latest state through a fresh saver on the shared storage
    (the first run alone for the `busy` threads, whose second run was refused)."""
    config = CONFIGS[key]
    if config.kind == "durable":  # a replica with no local copy: what the shared tiers hold
        config = Config(config.key, "durable", ("redis", "postgres"))
    problems: list[str] = []
    with open_sync(config, st) as saver:
        for i in range(threads):
            thread = tid(round_no, key, i)
            tup = saver.get_tuple(thread_of(thread))
            values = tup.checkpoint.get("channel_values") if tup else None
            runs = 1 if thread in busy else 2
            problems += check_values(values, runs * steps, SIZE, f"{key} round {round_no} read-back of thread {i}")
            if len(problems) > 20:
                break
    return problems


def table(walls: dict[str, list[list[float]]], busy: dict[str, int], runs: int, steps: int) -> list[str]:
    lines = [
        "| saver | phase | wall p50 (s) | steps/s | vs AsyncPostgresSaver (time) | runs refused (ThreadBusy), all rounds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for phase, name in ((0, "first runs, new threads"), (1, "second runs, on another process")):
        ref = [w[phase] for w in walls[REFERENCE]]
        for key, rounds in walls.items():
            mine = [w[phase] for w in rounds]
            if not mine:
                continue
            wall = statistics.median(mine)
            refused = busy.get(key, 0) if phase == 1 else 0
            lines.append(
                f"| {CONFIGS[key].label('async')} | {name} | {wall:.2f} | {runs * steps / wall:,.0f} "
                f"| {ratio(paired(mine, ref))} | {refused} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 processes, 40 runs, 1 round: a check that it works")
    parser.add_argument("--processes", type=int, help="worker processes (default 4; quick 2)")
    parser.add_argument("--runs", type=int, help="runs at once across the processes (default 500; quick 40)")
    parser.add_argument("--steps", type=int, default=10, help="super-steps per run (default 10)")
    parser.add_argument("--rounds", type=int, help="rounds, every saver once per round (default 3; quick 1)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_PROCESSES.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    args = parser.parse_args(argv)
    args.processes = args.processes or (2 if args.quick else 4)
    args.runs = args.runs or (40 if args.quick else 500)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.runs % args.processes:
        parser.error("--runs must be a multiple of --processes")
    exit_on_sigterm()
    started = dt.datetime.now(dt.UTC)
    load_start = os.getloadavg()[0]
    code = git_state(HERE.parent)
    t_run = time.perf_counter()
    run = uuid.uuid4().hex[:10]
    res = Resources(run)
    problems: list[str] = []
    body: list[str] = []
    walls: dict[str, list[list[float]]] = {k: [] for k in ROWS}
    busy: dict[str, int] = {k: 0 for k in ROWS}
    try:
        if not res.probe():
            problems += res.down
        else:
            stores = {}
            for k in ROWS:
                st = Storage(postgres_url=res.new_database(f"proc_{k}"))
                if "sqlite" in CONFIGS[k].tiers:
                    st.sqlite_path = str(res.tmp_path / f"{k}.sqlite")
                if "redis" in CONFIGS[k].tiers:
                    st.redis_prefix = res.new_prefix(f"proc_{k}")
                stores[k] = st
            for k in ROWS:
                # Once, before the replicas start, as a deployment migrates: the stock saver's
                # setup() races when processes call it at once (DurableSaver's takes a lock).
                with open_sync(CONFIGS[k], stores[k]):
                    pass
            for r in range(args.rounds):
                shift = r % len(ROWS)
                for key in ROWS[shift:] + ROWS[:shift]:
                    done = run_round(key, r, stores[key], args, run)
                    problems += done["problems"]
                    busy[key] += done.get("busy", 0)
                    if len(done["walls"]) == 2:
                        walls[key].append(done["walls"])
                    print(f"round {r + 1}/{args.rounds} {key}: {done['walls']}", file=sys.stderr, flush=True)
            if all(walls[k] for k in ROWS):
                body += [
                    f"## {args.runs} concurrent runs across {args.processes} processes",
                    "",
                    *table(walls, busy, args.runs, args.steps),
                    "",
                ]
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    wall = time.perf_counter() - t_run
    text = "\n".join(body) + "\n## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None.") + "\n"
    print(text)
    if args.body:
        Path(args.body).write_text(text)
    if args.write:
        head = run_lines(
            "bench_processes.py",
            quick=args.quick,
            started=started,
            wall=wall,
            load=(load_start, os.getloadavg()[0]),
            code=code,
            packages=PACKAGES,
        )
        intro = [
            f"# {args.runs} concurrent runs across {args.processes} processes",
            "",
            *head,
            f"- Servers (loopback): {', '.join(f'{k} {v}' for k, v in res.server_versions.items())}",
            f"- Workload: {args.processes} processes, {args.runs // args.processes} `ainvoke` runs at once in "
            f"each, {args.steps} super-steps per run (`bench_growth.py`'s graph, {SIZE}-byte messages, "
            '`durability="sync"`), each on a thread of its own; then every thread\'s second run, '
            f"{args.steps} super-steps more, on another process. {args.rounds} rounds, every saver once per "
            "round, the order rotated each round. A phase is timed from the barrier that starts every "
            "process to its last run's return.",
            "- `vs AsyncPostgresSaver`: the median over rounds of the saver's wall time divided by "
            "AsyncPostgresSaver's in the same round (below 1 is faster). AsyncPostgresSaver runs on a "
            "psycopg pool of 10 per process; DurableSaver opens its own (10 per process).",
            "",
        ]
        Path(args.output).write_text("\n".join(intro) + "\n" + text)
        print(f"wrote {args.output}")
    print(f"total {wall:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
