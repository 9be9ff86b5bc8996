"""The headline ratios, paired: every saver takes its turn in every round.

`bench_growth.py` measures one saver after the other. On a small shared
machine the speed drifts by 20-50% over minutes, so a ratio between two rows
measured a minute apart carries that drift. Here the savers take turns: in
each round every configuration runs one 40-step graph that appends one dict
message per super-step (``durability="sync"``) on a fresh thread and then
reads that thread's state (`graph.get_state`, `--reads` calls) and its
newest history page (`graph.get_state_history(limit=10)`, `--pages` calls),
the order rotating from round to round. Each message size of `--sizes`
(default 300 and 4096 bytes) has rounds and tables of its own. A row's ratio
to a reference is the median over rounds of (its figure / the reference's
figure in the same round): drift that hits a whole round cancels out.

There are two Postgres references, as apps build the stock saver:
`PostgresSaver.from_conn_string(url)` (one connection) and `PostgresSaver`
on a psycopg pool of 10 (`AsyncPostgresSaver` on the async face). The sync
face runs first, then the async face (`ainvoke`, `aget_state`,
`aget_state_history`) in one event loop, and then, per size, `--concurrent`
runs of 10 super-steps gathered at once on fresh threads, the savers again
taking turns (`--conc-rounds` rounds). Every state read, page and run result
is checked. The `## Targets` section at the end says, for each of the
project's targets these figures measure, the ratio and whether it was met.

Prints the tables; `--write` also overwrites `benchmarks/RESULTS_PAIRED.md`.
Loopback servers only; everything a run creates is removed at the end.

    .venv/bin/python benchmarks/bench_paired.py --rounds 2 --reads 5 --pages 3 --concurrent 10 --conc-rounds 1
    .venv/bin/python benchmarks/bench_paired.py --write      # 20 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import operator
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

from _env import exit_on_sigterm, git_state, run_lines, target_line  # benchmarks/ is on sys.path when run as a script
from bench_growth import (
    CONFIG_BY_KEY,
    PACKAGES,
    POOL_SIZE,
    Config,
    Resources,
    Storage,
    allocate,
    first_input,
    make_message,
    open_async,
    open_sync,
    run_config,
    thread_of,
)
from bench_growth import (
    build_graph as growth_graph,
)
from typing_extensions import TypedDict

HERE = Path(__file__).resolve().parent
# Super-steps per run: the workload the targets were set on (a 40-step
# graph). Long enough that a history page of 10 is the newest quarter of
# the thread and that a run crosses DurableSaver's whole-list copies (every
# 16 versions) twice; short enough that 11 rows x 2 sizes x 2 faces x 20
# rounds stay within minutes.
STEPS = 40
SIZES = (300, 4096)  # bytes of each message's content: a short chat message and a long one
# Keys of bench_growth's configurations (and EXTRA), in table order.
ROWS = [
    "mem",
    "sqlite_stock",
    "pg_conn",
    "pg_stock",
    "d_s",
    "d_p",
    "d_sp",
    "d_srp",
    "d_srp_local",
    "d_srp_local_nofsync",
    "d_srp_given",
]
# The references every ratio column divides by: the stock Postgres saver as
# most apps build it (one connection), the same on a pool, and the stock SQLite saver.
CONN_REF = "pg_conn"
POOL_REF = "pg_stock"
SQLITE_REF = "sqlite_stock"
PAGE = 10  # get_state_history(limit=PAGE)
CONC_STEPS = 10
# The concurrent runs: both stock async references and the DurableSaver rows
# that differ in how a run writes. Their reference is the pool: one
# connection serialises the runs' queries.
CONC_ROWS = ["pg_stock", "pg_conn", "d_srp", "d_srp_local", "d_srp_given"]
CONC_REF = POOL_REF
EXTRA = {
    "pg_conn": Config("pg_conn", "stock_postgres", conn=True),
    "d_sp": Config("d_sp", "durable", ("sqlite", "postgres"), stock="pg_stock"),
}
# How a target line names the reference its parenthesis divides by.
ASIDE = {CONN_REF: "from_conn_string", POOL_REF: f"the pool of {POOL_SIZE}"}
# The rows the targets are about: DurableSaver with its defaults (all three
# tiers, and SQLite alone) and with write="local".
DEFAULT_ROW, SQLITE_ROW, LOCAL_ROW = "d_srp", "d_s", "d_srp_local"


def config(key: str) -> Config:
    return EXTRA.get(key) or CONFIG_BY_KEY[key]


def label(key: str, mode: str) -> str:
    """The row's name in the tables: the pool reference says it is one."""
    return config(key).label(mode) + (f" (pool of {POOL_SIZE})" if key == POOL_REF else "")


# -- the graph -------------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    n: int


def message(i: int, size: int) -> dict[str, Any]:
    """The message super-step ``i`` appends: a chat message as a dict, its
    content `size` bytes of seeded pseudo-random words (`make_message`)."""
    return {"id": f"msg-{i:05d}", "role": "user" if i % 2 == 0 else "assistant", "content": make_message(i, size)}


def build_graph(bound: int, size: int, *, is_async: bool, checkpointer: Any) -> Any:
    """`bench_growth`'s graph, each work step appending one dict message."""
    return growth_graph(bound, size, is_async=is_async, checkpointer=checkpointer, message=message, state=State)


def check_values(values: Any, steps: int, size: int, what: str) -> list[str]:
    """The state of a finished `steps`-step run: every message, in order, and ``n``."""
    if not isinstance(values, dict):
        return [f"{what}: got {type(values).__name__}, not a state dict"]
    issues = []
    got = values.get("messages")
    if got != [message(i, size) for i in range(steps)]:
        n = len(got) if isinstance(got, list) else type(got).__name__
        issues.append(f"{what}: {n} messages (want {steps}) or different content")
    if values.get("n") != steps:
        issues.append(f"{what}: n={values.get('n')!r} (want {steps})")
    return issues


def check_page(page: list[Any], what: str) -> list[str]:
    """The newest `PAGE` states of a `STEPS`-step run, newest first."""
    steps = [s.metadata.get("step") for s in page]
    want = list(range(STEPS, STEPS - PAGE, -1))
    return [] if steps == want else [f"{what}: history page steps {steps}, expected {want}"]


# -- measuring -------------------------------------------------------------------------------


class Figures:
    """Per configuration and round, for one face and message size: ms per
    super-step, get_state p50 and history page p50 (ms)."""

    def __init__(self, keys: list[str], size: int) -> None:
        self.size = size
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
        what = f"{label(key, mode)} {self.size}-byte messages round {round_no}"
        problems += check_values(values, STEPS, self.size, what)
        problems += check_page(page, what)
        if round_no:
            self.step[key].append(times[0] * 1000 / STEPS)
            self.read[key].append(statistics.median(times[1]) * 1000)
            self.page[key].append(statistics.median(times[2]) * 1000)


def order(keys: list[str], round_no: int) -> list[str]:
    """The configurations in this round's order: rotated by one each round."""
    shift = round_no % len(keys)
    return keys[shift:] + keys[:shift]


def paired(mine: list[float], ref: list[float]) -> float | None:
    """Median over rounds of mine / ref, same round."""
    ratios = [a / b for a, b in zip(mine, ref) if b > 0]
    return statistics.median(ratios) if ratios else None


def measure_sync(
    graphs: dict[str, Any], size: int, rounds: int, reads: int, pages: int, problems: list[str]
) -> Figures:
    fig = Figures(list(graphs), size)
    for r in range(rounds + 1):  # round 0 warms up, untimed
        for key in order(list(graphs), r):
            graph, tid = graphs[key], f"s{size}-{r}"
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


async def measure_async(
    graphs: dict[str, Any], size: int, rounds: int, reads: int, pages: int, problems: list[str]
) -> Figures:
    fig = Figures(list(graphs), size)
    for r in range(rounds + 1):
        for key in order(list(graphs), r):
            graph, tid = graphs[key], f"a{size}-{r}"
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
    graphs: dict[str, Any], size: int, rounds: int, concurrent: int, problems: list[str]
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
                    graph.ainvoke(first_input(), run_config(f"c{size}-{r}-{i}", CONC_STEPS), durability="sync")
                    for i in range(concurrent)
                ),
                return_exceptions=True,
            )
            wall = time.perf_counter() - t0
            what = f"{label(key, 'async')} concurrent, {size}-byte messages, round {r}"
            for out in outs:
                if isinstance(out, BaseException):
                    problems.append(f"{what}: {type(out).__name__}: {out}")
                else:
                    problems += check_values(out, CONC_STEPS, size, what)
            if r:
                walls[key].append(wall)
    return walls


# -- tables and targets ---------------------------------------------------------------------


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def vs(figures: dict[str, list[float]], key: str, ref: str) -> float | None:
    """Row `key`'s paired ratio to reference `ref` (None if `ref` did not run)."""
    return paired(figures[key], figures[ref]) if key in figures and ref in figures else None


def table(fig: Figures, mode: str) -> list[str]:
    def cells(key: str, figures: dict[str, list[float]], digits: int) -> str:
        ratios = " | ".join(ratio(vs(figures, key, ref)) for ref in (CONN_REF, POOL_REF, SQLITE_REF))
        return f"{statistics.median(figures[key]):.{digits}f} | {ratios}"

    refs = "vs PG conn | vs PG pool | vs SQLite"
    lines = [
        f"`PG conn`: {label(CONN_REF, mode)}; `PG pool`: {label(POOL_REF, mode)}; `SQLite`: {label(SQLITE_REF, mode)}.",
        "",
        f"| saver | ms/step p50 | {refs} | get_state p50 (ms) | {refs} | history page p50 (ms) | {refs} |",
        "|---|" + "---:|" * 12,
    ]
    for key in fig.step:
        lines.append(
            f"| {label(key, mode)} | {cells(key, fig.step, 2)} | {cells(key, fig.read, 3)} "
            f"| {cells(key, fig.page, 3)} |"
        )
    return lines


def concurrent_table(walls: dict[str, list[float]], concurrent: int) -> list[str]:
    steps = concurrent * CONC_STEPS
    lines = [
        f"| saver | wall p50 (s) | steps/s | vs {label(CONC_REF, 'async')} | vs {label(CONN_REF, 'async')} |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, mine in walls.items():
        wall = statistics.median(mine)
        lines.append(
            f"| {label(key, 'async')} | {wall:.3f} | {steps / wall:,.0f} "
            f"| {ratio(vs(walls, key, CONC_REF))} | {ratio(vs(walls, key, CONN_REF))} |"
        )
    return lines


def ratio_target(
    number: int,
    what: str,
    figures: dict[str, list[float]],
    key: str,
    mode: str,
    limit: float,
    refs: tuple[str, str | None],
) -> str:
    """A target line: row `key`'s ratio to `refs[0]` (the verdict's
    reference) against `limit`, its ratio to `refs[1]`, if any, in parentheses."""
    main = vs(figures, key, refs[0])
    measured = f"{label(key, mode)} {ratio(main)} {label(refs[0], mode)}"
    if refs[1] is not None:
        measured += f" (vs {ASIDE[refs[1]]}: {ratio(vs(figures, key, refs[1]))})"
    measured += f", target at most {limit:.1f}x"
    return target_line(number, what, measured, None if main is None else main <= limit)


def targets(faces: list[tuple[str, Figures]], walls: dict[int, dict[str, list[float]]], concurrent: int) -> list[str]:
    """One line per target these figures measure, face and message size;
    the verdict against `from_conn_string` except for the concurrent runs
    (against the pool, which that table is about)."""
    pg = (CONN_REF, POOL_REF)
    lines = []
    for mode, fig in faces:
        where = f"{mode} face, {fig.size}-byte messages"
        lines.append(ratio_target(2, f"ms per super-step, {where}", fig.step, DEFAULT_ROW, mode, 1.0, pg))
        lines.append(
            ratio_target(2, f"ms per super-step, {where}", fig.step, SQLITE_ROW, mode, 1.0, (SQLITE_REF, None))
        )
        lines.append(ratio_target(3, f"history page of {PAGE}, {where}", fig.page, DEFAULT_ROW, mode, 1.0, pg))
        lines.append(ratio_target(5, f"ms per super-step, {where}", fig.step, LOCAL_ROW, mode, 0.7, pg))
    for size, conc in walls.items():
        what = f"{concurrent} concurrent `ainvoke` runs, {size}-byte messages, wall time"
        lines.append(ratio_target(4, what, conc, DEFAULT_ROW, "async", 0.8, (CONC_REF, CONN_REF)))
    return sorted(lines, key=lambda line: line.split(")", 1)[0])  # by target number, stable


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per face and size (default 20)")
    parser.add_argument("--reads", type=int, default=30, help="get_state calls per round (default 30)")
    parser.add_argument("--pages", type=int, default=10, help="history pages per round (default 10)")
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="bytes of each message's content, comma-separated, a table of its own each (default %(default)s)",
    )
    parser.add_argument("--concurrent", type=int, default=50, help="runs gathered at once (default 50)")
    parser.add_argument("--conc-rounds", type=int, default=5, help="rounds of concurrent runs per size (default 5)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_PAIRED.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    args = parser.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x]
    except ValueError:
        parser.error(f"--sizes takes whole numbers of bytes, comma-separated, not {args.sizes!r}")
    if not sizes or min(sizes) < 20:
        parser.error("--sizes needs at least one size of 20 bytes or more")
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
            sync: list[Figures] = []
            with contextlib.ExitStack() as stack:
                savers = {k: stack.enter_context(open_sync(config(k), st)) for k, st in stores["sync"].items()}
                for size in sizes:
                    graphs = {k: build_graph(STEPS, size, is_async=False, checkpointer=s) for k, s in savers.items()}
                    sync.append(measure_sync(graphs, size, args.rounds, args.reads, args.pages, problems))

            async def run_async() -> tuple[list[Figures], dict[int, dict[str, list[float]]]]:
                figs: list[Figures] = []
                walls: dict[int, dict[str, list[float]]] = {}
                async with contextlib.AsyncExitStack() as stack:
                    savers = {
                        k: await stack.enter_async_context(open_async(config(k), st))
                        for k, st in stores["async"].items()
                    }
                    for size in sizes:
                        graphs = {k: build_graph(STEPS, size, is_async=True, checkpointer=s) for k, s in savers.items()}
                        figs.append(await measure_async(graphs, size, args.rounds, args.reads, args.pages, problems))
                    for size in sizes:
                        conc = {
                            k: build_graph(CONC_STEPS, size, is_async=True, checkpointer=savers[k]) for k in CONC_ROWS
                        }
                        walls[size] = await measure_concurrent(conc, size, args.conc_rounds, args.concurrent, problems)
                return figs, walls

            async_figs, walls = asyncio.run(run_async())
            faces = "`get_state`, `get_state_history(limit=10)`"
            for fig in sync:
                body += [f"## Sync face (`invoke`, {faces}), {fig.size}-byte messages", "", *table(fig, "sync"), ""]
            for fig in async_figs:
                body += [
                    f"## Async face (`ainvoke`, async {faces}), {fig.size}-byte messages",
                    "",
                    *table(fig, "async"),
                    "",
                ]
            for size, conc in walls.items():
                body += [
                    f"## {args.concurrent} concurrent `ainvoke` runs of {CONC_STEPS} super-steps, {size}-byte "
                    f"messages (reference: {config(CONC_REF).label('async')} on a pool of {POOL_SIZE})",
                    "",
                    *concurrent_table(conc, args.concurrent),
                    "",
                ]
            faced = [("sync", f) for f in sync] + [("async", f) for f in async_figs]
            body += [
                "## Targets",
                "",
                "DurableSaver with its default options (all three tiers, and SQLite alone) and with "
                '`write="local"`; the verdict is against the stock Postgres saver opened with `from_conn_string` '
                "(one connection, as most apps build it), the ratio to it on a pool in parentheses, except for "
                "the concurrent runs, whose verdict is against the pool (one connection serialises their "
                "queries), the `from_conn_string` ratio in parentheses. SQLite alone is held to the stock "
                "SQLite saver of its face.",
                "",
                *targets(faced, walls, args.concurrent),
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
            f"- Workload: a graph of {STEPS} super-steps each appending one dict message (`id`, `role` and a "
            f"`content` of {' or '.join(map(str, sizes))} bytes, a table per size) to an `operator.add` list, "
            f'`durability="sync"`, on a fresh thread per round; then {args.reads} `get_state` '
            f"calls and {args.pages} `get_state_history(limit={PAGE})` pages on that thread (their medians "
            f"are the round's figures). {args.rounds} timed rounds per face and size after one untimed, every "
            "configuration once per round, the order rotated each round. Then, per size, "
            f"{args.conc_rounds} timed rounds (after one untimed) of {args.concurrent} {CONC_STEPS}-step "
            "`ainvoke` runs gathered at once on fresh threads, the savers taking turns the same way.",
            "- `vs PG conn`, `vs PG pool` and `vs SQLite`: the median over rounds of the row's figure divided "
            "by the reference's figure in the same round: the stock Postgres saver opened with "
            f"`from_conn_string` (one connection), the same on a psycopg pool of {POOL_SIZE} (as in "
            "`bench_growth.py`), and the stock SQLite saver (their async twins in the async tables).",
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
