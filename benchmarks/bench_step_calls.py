"""Where a super-step's time goes: the saver's calls, timed one by one.

`bench_paired.py` says how a super-step compares with PostgresSaver; this
says why. One process runs the paired benchmark's graph (a 40-step run
appending one dict message per step, ``durability="sync"``, sync face) on
fresh threads, once with `PostgresSaver.from_conn_string` and once with
`DurableSaver` on SQLite + Redis + Postgres (default options), with the
methods below wrapped in a wall-clock timer: the saver's own calls (`put`,
`put_writes`, `get_tuple`), and under DurableSaver the tier calls they make
and the lease's start and end of a run. Each row is milliseconds per
super-step (its total over the run divided by the super-steps), microseconds
per call, and calls per super-step. Calls made at once on other threads
overlap (LangGraph stores a step's writes while its checkpoint is put), so
rows are not meant to add up to the step.

Timings only, never asserted; every run's result is checked.

    .venv/bin/python benchmarks/bench_step_calls.py                  # about 30 s
    .venv/bin/python benchmarks/bench_step_calls.py --size 4096 --runs 40
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from _env import Resources, exit_on_sigterm  # benchmarks/ is on sys.path when run as a script
from bench_growth import first_input, run_config
from bench_paired import build_graph, check_values
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_durable import DurableSaver, Tiers

STEPS = 40

# (class, method, label) of what is timed under DurableSaver; labels
# indented under the call they are part of.
DURABLE_CALLS = [
    ("langgraph_durable.faces.ops", "SaverOps", "put", "put"),
    ("langgraph_durable.tiers.postgres.tier", "PostgresTier", "write_checkpoint", "  postgres: write_checkpoint"),
    ("langgraph_durable.tiers.sqlite.tier", "SqliteTier", "write_checkpoint", "  sqlite: write_checkpoint"),
    ("langgraph_durable.faces.ops", "SaverOps", "put_writes", "put_writes"),
    ("langgraph_durable.tiers.postgres.tier", "PostgresTier", "write_writes", "  postgres: write_writes"),
    ("langgraph_durable.tiers.sqlite.tier", "SqliteTier", "write_writes", "  sqlite: write_writes"),
    ("langgraph_durable.faces.ops", "SaverOps", "get_tuple", "get_tuple (a run's start)"),
    ("langgraph_durable.engine.leases.keeper", "LeaseKeeper", "begin_run", "  lease taken"),
    ("langgraph_durable.engine.leases.keeper", "LeaseKeeper", "_run_ended", "a run's end"),
    ("langgraph_durable.engine.leases.keeper", "LeaseKeeper", "_ship_behind", "  shipped to Redis"),
    ("langgraph_durable.engine.leases.keeper", "LeaseKeeper", "_give_back", "  lease kept"),
]
STOCK_CALLS = [
    ("langgraph.checkpoint.postgres", "PostgresSaver", "put", "put"),
    ("langgraph.checkpoint.postgres", "PostgresSaver", "put_writes", "put_writes"),
    ("langgraph.checkpoint.postgres", "PostgresSaver", "get_tuple", "get_tuple (a run's start)"),
]


class Timers:
    """Total wall time and calls per label."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started
                self.calls[label] += 1

        return timed


@contextlib.contextmanager
def timing(calls: list[tuple[str, str, str, str]], timers: Timers) -> Iterator[None]:
    """The methods in `calls` timed while inside; put back after."""
    import importlib

    saved = []
    for module, cls_name, method, label in calls:
        cls = getattr(importlib.import_module(module), cls_name)
        saved.append((cls, method, cls.__dict__[method]))
        setattr(cls, method, timers.wrap(getattr(cls, method), label))
    try:
        yield
    finally:
        for cls, method, original in saved:
            setattr(cls, method, original)


def measure(saver: Any, calls: list[tuple[str, str, str, str]], runs: int, size: int, problems: list[str]) -> Any:
    """Rows (label, ms per step, us per call, calls per step) and the run's ms per step."""
    graph = build_graph(STEPS, size, is_async=False, checkpointer=saver)
    for i in range(3):  # warm up, untimed
        graph.invoke(first_input(), run_config(f"warm-{i}", STEPS), durability="sync")
    timers = Timers()
    with timing(calls, timers):
        started = time.perf_counter()
        for i in range(runs):
            out = graph.invoke(first_input(), run_config(f"run-{i}", STEPS), durability="sync")
            problems += check_values(out, STEPS, size, f"{type(saver).__name__} run {i}")
        wall = time.perf_counter() - started
    steps = runs * STEPS
    rows = [
        (label, timers.seconds[label] * 1000 / steps, timers.seconds[label] * 1e6 / n, n / steps)
        for _, _, _, label in calls
        if (n := timers.calls[label])
    ]
    return rows, wall * 1000 / steps


def table(title: str, rows: list[tuple[str, float, float, float]], per_step: float) -> list[str]:
    lines = [
        f"### {title}: {per_step:.3f} ms per super-step",
        "",
        "| call | ms / super-step | us / call | calls / super-step |",
        "|---|---:|---:|---:|",
    ]
    for label, ms, us, n in rows:
        shown = label.replace("  ", "&nbsp;&nbsp;&nbsp;&nbsp;", 1) if label.startswith("  ") else label
        lines.append(f"| {shown} | {ms:.3f} | {us:.0f} | {n:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="timed runs of the 40-step graph per saver (default 40)")
    parser.add_argument("--size", type=int, default=300, help="bytes per message (default 300)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    res = Resources("lgd_bcalls", uuid.uuid4().hex[:10])
    problems: list[str] = []
    body: list[str] = []
    try:
        if not res.probe():
            problems += res.down
        else:
            with PostgresSaver.from_conn_string(res.new_database("stock")) as stock:
                stock.setup()
                rows, per_step = measure(stock, STOCK_CALLS, args.runs, args.size, problems)
                body += [*table("PostgresSaver.from_conn_string", rows, per_step), ""]
            durable = DurableSaver(
                sqlite=str(res.tmp_path / "durable.sqlite"),
                redis=res.redis_url,
                postgres=res.new_database("durable"),
                tiers=Tiers(redis_key_prefix=res.new_prefix("durable")),
            )
            with durable:
                durable.setup()
                rows, per_step = measure(durable, DURABLE_CALLS, args.runs, args.size, problems)
                body += [*table("DurableSaver sqlite+redis+postgres", rows, per_step), ""]
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    print(f"{args.runs} runs of {STEPS} super-steps, {args.size}-byte messages, sync face\n")
    print("\n".join(body))
    print("## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None."))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
