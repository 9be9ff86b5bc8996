"""The latest-state read of a thread whose list is a LangGraph `DeltaChannel`.

A `DeltaChannel` stores a sentinel at most checkpoints; LangGraph rebuilds
its value by replaying the ancestors' pending writes back to the nearest
stored snapshot, through `get_delta_channel_history`. This script runs one
such thread to `--steps` super-steps on each saver and times `graph.get_state`
on it (median and p99 over `--reads` calls), side by side in one run, and
prints the table (`--write` also overwrites `RESULTS_DELTA_CHANNEL.md`). Loopback servers only; everything the
run creates is removed at the end (also on error, Ctrl-C or SIGTERM).

    .venv/bin/python benchmarks/bench_delta_channel.py --steps 30 --reads 50
    .venv/bin/python benchmarks/bench_delta_channel.py --write    # about 30 s
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
)
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver

HERE = Path(__file__).resolve().parent
NAME = "lgd_dbench"
SNAPSHOT_EVERY = 10
PACKAGES = ["langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"]


def extend(state: list[Any], batches: Sequence[list[Any]]) -> list[Any]:
    return [*state, *(x for batch in batches for x in batch)]


class State(TypedDict, total=False):
    items: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=SNAPSHOT_EVERY)]
    n: int


def graph(steps: int) -> StateGraph:
    def step(state: State) -> dict[str, Any]:
        n = state.get("n", 0)
        return {"items": [[f"item {n}: " + "x" * 400]], "n": n + 1}

    g = StateGraph(State)
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
            opened.append(("PostgresSaver", pg))
        configs = [("Durable sqlite", {"sqlite": str(res.tmp_path / "d_s.sqlite")})]
        if not res.down:
            configs.append(("Durable postgres", {"sqlite": None, "postgres": res.new_database("d_p")}))
            configs.append(
                (
                    "Durable sqlite+redis+postgres",
                    {
                        "sqlite": str(res.tmp_path / "d_srp.sqlite"),
                        "redis": res.redis_url,
                        "redis_key_prefix": res.new_prefix("d_srp"),
                        "postgres": res.new_database("d_srp"),
                    },
                )
            )
            configs.append(
                (
                    "Durable sqlite+redis+postgres lease_linger=0",
                    {
                        "sqlite": str(res.tmp_path / "d_srp_given.sqlite"),
                        "redis": res.redis_url,
                        "redis_key_prefix": res.new_prefix("d_srp_given"),
                        "postgres": res.new_database("d_srp_given"),
                        "lease_linger": 0.0,
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=95, help="super-steps of the thread (default 95: 5 past its last snapshot)"
    )
    parser.add_argument("--reads", type=int, default=200, help="get_state calls per saver (default 200)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_DELTA_CHANNEL.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    args = parser.parse_args()
    exit_on_sigterm()
    res = Resources(NAME, uuid.uuid4().hex[:8])
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    code = git_state(HERE.parent)
    rows: list[tuple[str, float, float]] = []
    problems: list[str] = []
    try:
        res.probe()
        problems += [f"Postgres/Redis rows skipped: {why}" for why in res.down]
        with savers(res) as opened:
            expected = None
            for label, saver in opened:
                g = graph(args.steps).compile(checkpointer=saver)
                config = {"configurable": {"thread_id": "delta"}, "recursion_limit": args.steps + 10}
                g.invoke({"n": 0}, config)
                values = g.get_state(config).values
                expected = expected or values
                if values != expected or len(values["items"]) != args.steps:
                    problems.append(f"{label}: get_state does not return the state InMemorySaver holds")
                ms = timed(lambda g=g, config=config: g.get_state(config), args.reads)
                rows.append((label, statistics.median(ms), statistics.quantiles(ms, n=100)[98]))
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    pg = next((p50 for label, p50, _ in rows if label == "PostgresSaver"), None)
    sq = next((p50 for label, p50, _ in rows if label == "SqliteSaver"), None)
    lines = [
        "| saver | get_state p50 (ms) | p99 (ms) | vs PostgresSaver | vs SqliteSaver |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, p50, p99 in rows:
        vs_pg = f"{p50 / pg:.2f}x" if pg else "-"
        vs_sq = f"{p50 / sq:.2f}x" if sq else "-"
        lines.append(f"| {label} | {p50:.3f} | {p99:.3f} | {vs_pg} | {vs_sq} |")
    body = "\n".join(lines) + "\n\n## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None.") + "\n"
    print(body)
    if args.body:
        Path(args.body).write_text(body)
    if args.write:
        head = (
            "# DeltaChannel latest-state read\n\n"
            f"- Date: {started}\n- Command: `python benchmarks/bench_delta_channel.py`\n"
            f"- Machine: {machine()}\n- Python: {python_version()}\n- Code measured: langgraph_durable at git {code}\n"
            f"- Packages: {package_versions(PACKAGES)}\n"
            f"- Workload: one thread, {args.steps} super-steps, each appending one ~420-byte item to "
            f"`items: Annotated[list, DeltaChannel(extend, snapshot_frequency={SNAPSHOT_EVERY})]`; "
            f"`graph.get_state` on its latest checkpoint, {args.reads} calls per saver after 5 untimed ones. "
            "Every saver with its defaults; DurableSaver's `get_delta_channel_history` reads the ancestors "
            "a page at a time with `list` (8, doubling to 128), the stock savers with their own override "
            "(Postgres: one query) or LangGraph's default walk. By default a DurableSaver with a local cache "
            "in front of a shared tier keeps the run's writer lease after the run (`lease_linger`, 30 s), and "
            "the reads (the head and the ancestors the saver wrote under that lease) come from its local "
            "SQLite cache alone; `lease_linger=0` gives the lease back.\n\n"
        )
        Path(args.output).write_text(head + body)
        print(f"wrote {args.output}")
    return 1 if any(p.startswith("cleanup") for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
