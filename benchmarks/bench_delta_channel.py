"""The latest-state read of a thread whose list is a LangGraph `DeltaChannel`.

A `DeltaChannel` stores a sentinel at most checkpoints; LangGraph rebuilds
its value by replaying the ancestors' pending writes back to the nearest
stored snapshot, through `get_delta_channel_history`. For each shape (the
channel's `snapshot_frequency` and the thread's length, ending between two
snapshots, where the replay is longest) this script times `graph.get_state`
two ways, side by side in one run:

* cold: the first `get_state` right after a thread's run, what an app meets
  when it reads the state a run just wrote (DurableSaver's read cache holds
  nothing of it yet). Each saver runs `--cold` threads of the shape
  (`--cold-long` for shapes of 500 steps or more, which take long to
  build), the savers taking turns thread by thread; p50 over them.
* warm: `--reads` more calls on the last of those threads (median and p99),
  which a saver with a read cache serves from it after the first.

It prints the tables and whether DurableSaver with its defaults (all three
tiers) meets its target at snapshot_frequency=100: at most 0.5x PostgresSaver
(opened with `from_conn_string`), cold and warm (`--write` also overwrites
`RESULTS_DELTA_CHANNEL.md`). Loopback servers only; everything the run
creates is removed at the end (also on error, Ctrl-C or SIGTERM).

    .venv/bin/python benchmarks/bench_delta_channel.py --shapes 100:90 --reads 50 --cold 5
    .venv/bin/python benchmarks/bench_delta_channel.py --write
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from _env import (  # benchmarks/ is on sys.path when run as a script
    Resources,
    exit_on_sigterm,
    git_state,
    machine,
    package_versions,
    python_version,
    target_line,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver, Leases, Tiers

HERE = Path(__file__).resolve().parent
NAME = "lgd_dbench"
# (snapshot_frequency, super-steps): LangGraph's default frequency on threads
# of about 100 and 1,000 steps, and a small one; each 90 (or 5) steps past
# its last snapshot.
SHAPES = [(100, 90), (100, 990), (10, 95)]
# Threads of LONG steps or more get --cold-long cold threads per saver, not --cold.
LONG = 500
# The stock Postgres saver as most apps open it: one connection.
PG_LABEL = "PostgresSaver (from_conn_string)"
# DurableSaver with its defaults, all three tiers, against PostgresSaver, on
# threads at LangGraph's default snapshot frequency (the target's shapes).
TARGET_LABEL = "Durable sqlite+redis+postgres"
TARGET_RATIO = 0.5
TARGET_FREQUENCY = 100
PACKAGES = ["langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"]


def extend(state: list[Any], batches: Sequence[list[Any]]) -> list[Any]:
    return [*state, *(x for batch in batches for x in batch)]


def graph(steps: int, every: int) -> StateGraph:
    """`steps` super-steps, each appending one ~420-byte item to a
    `DeltaChannel` that snapshots every `every` updates."""
    # The functional form: a class body's annotations are strings here
    # (postponed evaluation), and `every` could not be found from them.
    state = TypedDict(  # type: ignore[misc]  # noqa: UP013
        "State",
        {"items": Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=every)], "n": int},
        total=False,
    )

    def step(state: dict[str, Any]) -> dict[str, Any]:
        n = state.get("n", 0)
        return {"items": [[f"item {n}: " + "x" * 400]], "n": n + 1}

    g = StateGraph(state)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return g


@contextlib.contextmanager
def savers(res: Resources) -> Iterator[list[tuple[str, Any]]]:
    """(label, saver) for every saver measured, all set up; closed at the end."""
    opened: list[tuple[str, Any]] = [("InMemorySaver", InMemorySaver())]
    with contextlib.ExitStack() as stack:
        stock = stack.enter_context(SqliteSaver.from_conn_string(str(res.tmp_path / "stock.sqlite")))
        stock.setup()
        opened.append(("SqliteSaver", stock))
        if not res.down:
            pg = stack.enter_context(PostgresSaver.from_conn_string(res.new_database("stock")))
            pg.setup()
            opened.append((PG_LABEL, pg))
        configs = [("Durable sqlite", {"sqlite": str(res.tmp_path / "d_s.sqlite")})]
        if not res.down:
            configs.append(("Durable postgres", {"sqlite": None, "postgres": res.new_database("d_p")}))
            configs.append(
                (
                    "Durable sqlite+redis+postgres",
                    {
                        "sqlite": str(res.tmp_path / "d_srp.sqlite"),
                        "redis": res.redis_url,
                        "tiers": Tiers(redis_key_prefix=res.new_prefix("d_srp")),
                        "postgres": res.new_database("d_srp"),
                    },
                )
            )
            configs.append(
                (
                    "Durable sqlite+redis+postgres Leases(linger=0)",
                    {
                        "sqlite": str(res.tmp_path / "d_srp_given.sqlite"),
                        "redis": res.redis_url,
                        "tiers": Tiers(redis_key_prefix=res.new_prefix("d_srp_given")),
                        "postgres": res.new_database("d_srp_given"),
                        "leases": Leases(linger=0.0),
                    },
                )
            )
        for label, kw in configs:
            saver = stack.enter_context(DurableSaver(**kw))
            saver.setup()
            opened.append((label, saver))
        yield opened


def timed(call: Callable[[], Any], n: int) -> list[float]:
    for _ in range(5):
        call()
    out = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


class Row:
    """One saver's figures on one shape (ms): the cold first reads, one per
    thread, and the warm repeated reads of the last thread."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.cold: list[float] = []
        self.warm: list[float] = []


def measure(
    opened: list[tuple[str, Any]], every: int, steps: int, cold: int, reads: int, problems: list[str]
) -> list[Row]:
    """`cold` threads of the shape per saver, the savers taking turns thread
    by thread, each thread's first `get_state` timed; then `reads` timed
    calls on each saver's last thread. Every state read is checked against
    the one InMemorySaver (the first saver) returns."""
    rows = [Row(label) for label, _ in opened]
    graphs = [graph(steps, every).compile(checkpointer=saver) for _, saver in opened]
    for _, saver in opened:  # untimed: a saver's first read of all pays for more than this shape
        small = graph(2, every).compile(checkpointer=saver)
        warm_up = {"configurable": {"thread_id": f"delta-{every}-{steps}-warm-up"}}
        small.invoke({"n": 0}, warm_up)
        small.get_state(warm_up)
    expected: Any = None
    config: dict[str, Any] = {}
    for i in range(cold):
        thread = f"delta-{every}-{steps}-{i}"
        config = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
        for row, g in zip(rows, graphs):
            g.invoke({"n": 0}, config)
            started = time.perf_counter()
            values = g.get_state(config).values
            row.cold.append((time.perf_counter() - started) * 1000)
            expected = expected or values
            if values != expected or len(values["items"]) != steps:
                problems.append(f"{row.label}: {thread}: get_state does not return the state InMemorySaver holds")
    for row, g in zip(rows, graphs):
        row.warm = timed(lambda g=g, config=config: g.get_state(config), reads)
        if g.get_state(config).values != expected:
            problems.append(f"{row.label}: repeated get_state does not return the state InMemorySaver holds")
    return rows


def p99(ms: list[float]) -> float:
    return statistics.quantiles(ms, n=100)[98] if len(ms) > 1 else ms[0]


def shape_table(every: int, steps: int, rows: list[Row]) -> str:
    by = {row.label: row for row in rows}
    pg, sq = by.get(PG_LABEL), by.get("SqliteSaver")

    def vs(mine: list[float], ref: Row | None, cold: bool) -> str:
        theirs = (ref.cold if cold else ref.warm) if ref else None
        return f"{statistics.median(mine) / statistics.median(theirs):.2f}x" if theirs else "-"

    lines = [
        f"### snapshot_frequency={every}, {steps} steps ({steps % every} past the last snapshot)",
        "",
        f"cold: the first `get_state` right after each thread's run, over {len(rows[0].cold)} threads; warm: "
        f"{len(rows[0].warm)} more calls on the last thread.",
        "",
        "| saver | cold p50 (ms) | cold max | vs PostgresSaver | vs SqliteSaver "
        "| warm p50 (ms) | warm p99 | vs PostgresSaver | vs SqliteSaver |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.label} | {statistics.median(row.cold):.3f} | {max(row.cold):.3f} | {vs(row.cold, pg, True)} "
            f"| {vs(row.cold, sq, True)} | {statistics.median(row.warm):.3f} | {p99(row.warm):.3f} "
            f"| {vs(row.warm, pg, False)} | {vs(row.warm, sq, False)} |"
        )
    return "\n".join(lines)


def target(every: int, steps: int, rows: list[Row]) -> str | None:
    """The target line of a shape at the target's snapshot frequency: cold
    and warm both at most TARGET_RATIO x PostgresSaver; None for other shapes."""
    by = {row.label: row for row in rows}
    pg, ours = by.get(PG_LABEL), by.get(TARGET_LABEL)
    if every != TARGET_FREQUENCY or pg is None or ours is None:
        return None
    cold = statistics.median(ours.cold) / statistics.median(pg.cold)
    warm = statistics.median(ours.warm) / statistics.median(pg.warm)
    return target_line(
        1,
        f"DeltaChannel `get_state`, snapshot_frequency={every}, {steps} steps",
        f"{TARGET_LABEL} cold {cold:.2f}x, warm {warm:.2f}x {PG_LABEL}, target at most {TARGET_RATIO}x both",
        cold <= TARGET_RATIO and warm <= TARGET_RATIO,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        default=",".join(f"{every}:{steps}" for every, steps in SHAPES),
        help="snapshot_frequency:steps of each thread measured, comma-separated (default %(default)s)",
    )
    parser.add_argument("--reads", type=int, default=200, help="warm get_state calls per saver (default 200)")
    parser.add_argument(
        "--cold",
        type=int,
        default=20,
        help=f"threads per saver, first get_state timed, under {LONG} steps (default 20)",
    )
    parser.add_argument(
        "--cold-long", type=int, default=5, help=f"the same for threads of {LONG} steps or more (default 5)"
    )
    parser.add_argument("--output", default=str(HERE / "RESULTS_DELTA_CHANNEL.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    args = parser.parse_args()
    if args.cold < 1 or args.cold_long < 1 or args.reads < 1:
        parser.error("--cold, --cold-long and --reads need at least 1")
    exit_on_sigterm()
    res = Resources(NAME, uuid.uuid4().hex[:8])
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    t_run = time.perf_counter()
    code = git_state(HERE.parent)
    shapes = [tuple(int(x) for x in shape.split(":")) for shape in args.shapes.split(",")]
    rows: dict[tuple[int, ...], list[Row]] = {}
    problems: list[str] = []
    try:
        res.probe()
        problems += [f"Postgres/Redis rows skipped: {why}" for why in res.down]
        with savers(res) as opened:
            for every, steps in shapes:
                cold = args.cold_long if steps >= LONG else args.cold
                rows[every, steps] = measure(opened, every, steps, cold, args.reads, problems)
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    parts = [shape_table(every, steps, measured) for (every, steps), measured in rows.items()]
    targets = [line for (every, steps), measured in rows.items() if (line := target(every, steps, measured))]
    body = (
        f"{PG_LABEL} is the stock saver opened as most apps open it, on one connection.\n\n"
        + "\n\n".join(parts)
        + "\n\n## Targets\n\n"
        + ("\n".join(targets) or f"None measured (no Postgres, or no shape at snapshot_frequency={TARGET_FREQUENCY}).")
        + "\n\n## Problems\n\n"
        + ("\n".join(f"- {p}" for p in problems) or "None.")
        + "\n"
    )
    print(body)
    if args.body:
        Path(args.body).write_text(body)
    if args.write:
        head = (
            "# DeltaChannel latest-state read\n\n"
            f"- Date: {started} (run took {time.perf_counter() - t_run:.0f} s)\n"
            f"- Command: `python benchmarks/bench_delta_channel.py{''.join(' ' + a for a in sys.argv[1:])}`\n"
            f"- Machine: {machine()}\n- Python: {python_version()}\n- Code measured: langgraph_durable at git {code}\n"
            f"- Packages: {package_versions(PACKAGES)}\n"
            f"- Workload: for each shape below, threads whose every super-step appends one ~420-byte item "
            "to `items: Annotated[list, DeltaChannel(extend, snapshot_frequency=N)]`. Cold: "
            f"{args.cold} threads per saver ({args.cold_long} for shapes of {LONG} steps or more), the savers "
            "taking turns thread by thread, each thread's first `graph.get_state` right after its run timed. "
            f"Warm: `graph.get_state` on the last of them, {args.reads} calls per saver after 5 untimed ones. "
            "Every saver with its defaults; DurableSaver's `get_delta_channel_history` reads the ancestors "
            "with `list`, as many at once as LangGraph's counters since the last snapshot say (at most 128), "
            "the stock savers with their own override "
            "(Postgres: one query) or LangGraph's default walk. By default a DurableSaver with a local cache "
            "in front of a shared tier keeps the run's writer lease after the run (`lease_linger`, 30 s), and "
            "the reads (the head and the ancestors the saver wrote under that lease) come from its local "
            "SQLite cache alone; `Leases(linger=0)` gives the lease back.\n\n"
        )
        Path(args.output).write_text(head + body)
        print(f"wrote {args.output}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
