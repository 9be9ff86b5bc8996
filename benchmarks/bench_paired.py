"""The headline ratios, paired: every saver takes its turn in every round.

`bench_growth.py` measures one saver after the other. On a small shared
machine the speed drifts by 20-50% over minutes, so a ratio between two rows
measured a minute apart carries that drift. Here the savers take turns: in
each round every configuration runs one 50-step graph (`bench_growth`'s
growing-list graph, ``durability="sync"``) on a fresh thread and then reads
that thread's state (`graph.get_state`, `--reads` calls) and its newest
history page (`graph.get_state_history(limit=10)`, `--pages` calls), the
order rotating from round to round. A row's ratio to PostgresSaver is the median over rounds
of (its figure / PostgresSaver's figure in the same round): drift that hits a
whole round cancels out. The sync face runs first, then the async face
(`ainvoke`, `aget_state`, `aget_state_history`) in one event loop, and then
`--concurrent` runs of 10 super-steps gathered at once on fresh threads, the
savers again taking turns (`--conc-rounds` rounds). Every state read, page
and run result is checked.

Prints the tables; `--write` also overwrites `benchmarks/RESULTS_PAIRED.md`.
Loopback servers only; everything a run creates is removed at the end.

    .venv/bin/python benchmarks/bench_paired.py --rounds 3   # a quick look
    .venv/bin/python benchmarks/bench_paired.py --write      # about 3 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import statistics
import sys
import time
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
    allocate,
    build_graph,
    check_values,
    first_input,
    open_async,
    open_sync,
    run_config,
    thread_of,
)

HERE = Path(__file__).resolve().parent
STEPS = 50
SIZE = 420
# Keys of bench_growth's configurations (and EXTRA), in table order; the
# reference row (PostgresSaver) is the one every ratio divides by.
ROWS = [
    "mem",
    "sqlite_stock",
    "pg_stock",
    "d_s",
    "d_p",
    "d_sp",
    "d_srp",
    "d_srp_local",
    "d_srp_local_nofsync",
    "d_srp_given",
]
REFERENCE = "pg_stock"
PAGE = 10  # get_state_history(limit=PAGE)
CONC_STEPS = 10
# The concurrent runs: the stock async reference and the DurableSaver rows that differ in how a run writes.
CONC_ROWS = ["pg_stock", "d_srp", "d_srp_local", "d_srp_given"]
EXTRA = {"d_sp": Config("d_sp", "durable", ("sqlite", "postgres"), stock="pg_stock")}


def config(key: str) -> Config:
    return EXTRA.get(key) or CONFIG_BY_KEY[key]


class Figures:
    """Per configuration and round: ms per super-step, get_state p50 and history page p50 (ms)."""

    def __init__(self, keys: list[str]) -> None:
        self.step: dict[str, list[float]] = {k: [] for k in keys}
        self.read: dict[str, list[float]] = {k: [] for k in keys}
        self.page: dict[str, list[float]] = {k: [] for k in keys}

    def record(
        self,
        key: str,
        round_no: int,
        times: tuple[float, list[float], list[float]],
        values: Any,
        page: list[Any],
        mode: str,
        problems: list[str],
    ) -> None:
        """One round of `key`: `times` = (the run's wall time, each read's,
        each page's); `values` = the state read last and `page` the history
        page read last, checked. Round 0 is not kept."""
        what = f"{config(key).label(mode)} round {round_no}"
        problems += check_values(values, STEPS, SIZE, what)
        problems += check_page(page, what)
        if round_no:
            self.step[key].append(times[0] * 1000 / STEPS)
            self.read[key].append(statistics.median(times[1]) * 1000)
            self.page[key].append(statistics.median(times[2]) * 1000)


def check_page(page: list[Any], what: str) -> list[str]:
    """The newest `PAGE` states of a `STEPS`-step run, newest first."""
    steps = [s.metadata.get("step") for s in page]
    want = list(range(STEPS, STEPS - PAGE, -1))
    return [] if steps == want else [f"{what}: history page steps {steps}, expected {want}"]


def order(keys: list[str], round_no: int) -> list[str]:
    """The configurations in this round's order: rotated by one each round."""
    shift = round_no % len(keys)
    return keys[shift:] + keys[:shift]


def paired(mine: list[float], ref: list[float]) -> float | None:
    """Median over rounds of mine / ref, same round."""
    ratios = [a / b for a, b in zip(mine, ref) if b > 0]
    return statistics.median(ratios) if ratios else None


def measure_sync(graphs: dict[str, Any], rounds: int, reads: int, pages: int, problems: list[str]) -> Figures:
    fig = Figures(list(graphs))
    for r in range(rounds + 1):  # round 0 warms up, untimed
        for key in order(list(graphs), r):
            graph, tid = graphs[key], f"s{r}"
            t0 = time.perf_counter()
            graph.invoke(first_input(), run_config(tid, STEPS), durability="sync")
            step = time.perf_counter() - t0
            read_times, page_times = [], []
            for _ in range(reads):
                t1 = time.perf_counter()
                state = graph.get_state(thread_of(tid))
                read_times.append(time.perf_counter() - t1)
            for _ in range(pages):
                t1 = time.perf_counter()
                page = list(graph.get_state_history(thread_of(tid), limit=PAGE))
                page_times.append(time.perf_counter() - t1)
            fig.record(key, r, (step, read_times, page_times), state.values, page, "sync", problems)
    return fig


async def measure_async(graphs: dict[str, Any], rounds: int, reads: int, pages: int, problems: list[str]) -> Figures:
    fig = Figures(list(graphs))
    for r in range(rounds + 1):
        for key in order(list(graphs), r):
            graph, tid = graphs[key], f"a{r}"
            t0 = time.perf_counter()
            await graph.ainvoke(first_input(), run_config(tid, STEPS), durability="sync")
            step = time.perf_counter() - t0
            read_times, page_times = [], []
            for _ in range(reads):
                t1 = time.perf_counter()
                state = await graph.aget_state(thread_of(tid))
                read_times.append(time.perf_counter() - t1)
            for _ in range(pages):
                t1 = time.perf_counter()
                page = [s async for s in graph.aget_state_history(thread_of(tid), limit=PAGE)]
                page_times.append(time.perf_counter() - t1)
            fig.record(key, r, (step, read_times, page_times), state.values, page, "async", problems)
    return fig


async def measure_concurrent(
    graphs: dict[str, Any], rounds: int, concurrent: int, problems: list[str]
) -> dict[str, list[float]]:
    """Per configuration and round: the wall time (s) of `concurrent` 10-step
    `ainvoke` runs gathered at once on fresh threads; every result checked."""
    walls: dict[str, list[float]] = {k: [] for k in graphs}
    for r in range(rounds + 1):  # round 0 warms up, untimed
        for key in order(list(graphs), r):
            graph = graphs[key]
            t0 = time.perf_counter()
            outs = await asyncio.gather(
                *(
                    graph.ainvoke(first_input(), run_config(f"c{r}-{i}", CONC_STEPS), durability="sync")
                    for i in range(concurrent)
                ),
                return_exceptions=True,
            )
            wall = time.perf_counter() - t0
            what = f"{config(key).label('async')} concurrent round {r}"
            for out in outs:
                if isinstance(out, BaseException):
                    problems.append(f"{what}: {type(out).__name__}: {out}")
                else:
                    problems += check_values(out, CONC_STEPS, SIZE, what)
            if r:
                walls[key].append(wall)
    return walls


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(fig: Figures, mode: str) -> list[str]:
    def stock_ratio(key: str, figures: dict[str, list[float]]) -> str:
        stock = config(key).stock
        return ratio(paired(figures[key], figures[stock])) if stock in figures else "-"

    def cells(key: str, figures: dict[str, list[float]], digits: int) -> str:
        mine = figures[key]
        return (
            f"{statistics.median(mine):.{digits}f} | {ratio(paired(mine, figures[REFERENCE]))} "
            f"| {stock_ratio(key, figures)}"
        )

    head = "p50 (ms) | vs PostgresSaver | vs matching stock"
    lines = [
        f"| saver | ms/step p50 | vs PostgresSaver | vs matching stock | get_state {head} | history page {head} |",
        "|---|" + "---:|" * 9,
    ]
    for key in fig.step:
        lines.append(
            f"| {config(key).label(mode)} | {cells(key, fig.step, 2)} | {cells(key, fig.read, 3)} "
            f"| {cells(key, fig.page, 3)} |"
        )
    return lines


def concurrent_table(walls: dict[str, list[float]], concurrent: int) -> list[str]:
    steps = concurrent * CONC_STEPS
    lines = [
        "| saver | wall p50 (s) | steps/s | vs AsyncPostgresSaver |",
        "|---|---:|---:|---:|",
    ]
    for key, mine in walls.items():
        wall = statistics.median(mine)
        lines.append(
            f"| {config(key).label('async')} | {wall:.3f} | {steps / wall:,.0f} "
            f"| {ratio(paired(mine, walls[REFERENCE]))} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per face (default 20)")
    parser.add_argument("--reads", type=int, default=30, help="get_state calls per round (default 30)")
    parser.add_argument("--pages", type=int, default=10, help="history pages per round (default 10)")
    parser.add_argument("--concurrent", type=int, default=50, help="runs gathered at once (default 50)")
    parser.add_argument("--conc-rounds", type=int, default=5, help="rounds of concurrent runs (default 5)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_PAIRED.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    args = parser.parse_args(argv)
    exit_on_sigterm()
    started = dt.datetime.now(dt.UTC)
    load_start = os.getloadavg()[0]
    code = git_state(HERE.parent)
    t_run = time.perf_counter()
    res = Resources(uuid.uuid4().hex[:10])
    problems: list[str] = []
    body: list[str] = []
    try:
        if not res.probe():
            problems += res.down
        else:
            pg: dict[str, str] = {}
            stores: dict[str, dict[str, Storage]] = {
                mode: {k: allocate(config(k), mode, res, pg, f"{k}_{mode}") for k in ROWS} for mode in ("sync", "async")
            }
            with contextlib.ExitStack() as stack:
                graphs = {
                    k: build_graph(
                        STEPS, SIZE, is_async=False, checkpointer=stack.enter_context(open_sync(config(k), st))
                    )
                    for k, st in stores["sync"].items()
                }
                sync = measure_sync(graphs, args.rounds, args.reads, args.pages, problems)

            async def run_async() -> Figures:
                async with contextlib.AsyncExitStack() as stack:
                    graphs = {
                        k: build_graph(
                            STEPS,
                            SIZE,
                            is_async=True,
                            checkpointer=await stack.enter_async_context(open_async(config(k), st)),
                        )
                        for k, st in stores["async"].items()
                    }
                    fig = await measure_async(graphs, args.rounds, args.reads, args.pages, problems)
                    conc_graphs = {
                        k: build_graph(CONC_STEPS, SIZE, is_async=True, checkpointer=graphs[k].checkpointer)
                        for k in CONC_ROWS
                    }
                    walls = await measure_concurrent(conc_graphs, args.conc_rounds, args.concurrent, problems)
                    return fig, walls

            async_fig, walls = asyncio.run(run_async())
            faces = "`get_state`, `get_state_history(limit=10)`"
            body += [f"## Sync face (`invoke`, {faces})", "", *table(sync, "sync"), ""]
            body += [f"## Async face (`ainvoke`, async {faces})", "", *table(async_fig, "async"), ""]
            body += [
                f"## {args.concurrent} concurrent `ainvoke` runs of {CONC_STEPS} super-steps",
                "",
                *concurrent_table(walls, args.concurrent),
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
            "bench_paired.py",
            quick=False,
            started=started,
            wall=wall,
            load=(load_start, os.getloadavg()[0]),
            code=code,
            packages=PACKAGES,
        )
        intro = [
            "# Paired benchmark: every saver in every round",
            "",
            *head,
            f"- Servers (loopback): {', '.join(f'{k} {v}' for k, v in res.server_versions.items())}",
            f"- Workload: `bench_growth.py`'s graph, {STEPS} super-steps each appending one {SIZE}-byte "
            f'message, `durability="sync"`, on a fresh thread per round; then {args.reads} `get_state` '
            f"calls and {args.pages} `get_state_history(limit={PAGE})` pages on that thread (their medians "
            f"are the round's figures). {args.rounds} timed rounds per face after one untimed, every "
            "configuration once per round, the order rotated each round. Then "
            f"{args.conc_rounds} timed rounds (after one untimed) of {args.concurrent} {CONC_STEPS}-step "
            "`ainvoke` runs gathered at once on fresh threads, the savers taking turns the same way.",
            "- `vs PostgresSaver` and `vs matching stock`: the median over rounds of the row's figure divided "
            "by the reference's figure in the same round (AsyncPostgresSaver / AsyncSqliteSaver in the async "
            "table). The stock Postgres savers run on a psycopg pool of 10, as in `bench_growth.py`.",
            "- By default a DurableSaver with a local cache in front of a shared tier keeps a run's writer "
            "lease after it (`lease_linger`, 30 s), so its reads come from the local cache; with "
            "`Leases(linger=0)` a read asks every tier which checkpoint is newest.",
            "",
        ]
        Path(args.output).write_text("\n".join(intro) + "\n" + text)
        print(f"wrote {args.output}")
    print(f"total {wall:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
