"""Two replicas taking turns on one thread: what ``lease_linger`` costs the other one.

Replica A runs a thread (3 super-steps); then replica B, another saver on the
same shared tiers with a local file of its own, runs the same thread one
super-step further; then A reads it. This script times B's run (the other
replica's first run after A's, from `invoke` to its return) and A's
`graph.get_state` right after it, median and p99 over `--threads` threads,
side by side in one run, and overwrites `RESULTS_HANDOFF.md`.

With ``lease_linger=30`` A keeps each run's lease, so B finds it busy and
asks for it (`langgraph_durable.engine.handoff`); without it, A gave it back when its
run ended. The stock PostgresSaver (two savers on one database) is the
reference. Every read is checked against what B wrote. Loopback servers only;
everything the run creates is removed at the end (also on error, Ctrl-C or
SIGTERM).

    .venv/bin/python benchmarks/bench_handoff.py            # about 30 s
    .venv/bin/python benchmarks/bench_handoff.py --threads 5 --no-write
"""

from __future__ import annotations

import argparse
import contextlib
import operator
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
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
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver

HERE = Path(__file__).resolve().parent
NAME = "lgd_hbench"
PACKAGES = ["langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "psycopg", "redis"]
A_STEPS = 3


class State(TypedDict):
    messages: Annotated[list[str], operator.add]
    n: int


def graph(bound_more: int) -> StateGraph:
    """Each super-step appends one ~420-byte message; runs `bound_more` steps past the input's `n`."""

    def step(state: State) -> dict[str, Any]:
        return {"messages": [f"message {state['n']}: " + "x" * 400], "n": state["n"] + 1}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] % bound_more else END)
    return g


@contextlib.contextmanager
def pairs(res: Resources) -> Iterator[list[tuple[str, Any, Any]]]:
    """(label, replica A, replica B) for every configuration, set up; closed at the end."""
    opened: list[tuple[str, Any, Any]] = []
    with contextlib.ExitStack() as stack:
        url = res.new_database("stock")
        a = stack.enter_context(PostgresSaver.from_conn_string(url))
        a.setup()
        opened.append(("PostgresSaver", a, stack.enter_context(PostgresSaver.from_conn_string(url))))
        configs = [
            ("Durable sqlite+redis+postgres", "srp", True, {}),
            ("Durable sqlite+redis+postgres, A with lease_linger=30", "srp_linger", True, {"lease_linger": 30.0}),
            ("Durable sqlite+redis, A with lease_linger=30", "sr_linger", False, {"lease_linger": 30.0}),
        ]
        for label, tag, with_postgres, a_options in configs:
            shared: dict[str, Any] = {"redis": res.redis_url, "redis_key_prefix": res.new_prefix(tag)}
            if with_postgres:
                shared["postgres"] = res.new_database(tag)
            a = stack.enter_context(DurableSaver(sqlite=str(res.tmp_path / f"{tag}_a.sqlite"), **shared, **a_options))
            b = stack.enter_context(DurableSaver(sqlite=str(res.tmp_path / f"{tag}_b.sqlite"), **shared))
            a.setup()
            b.setup()
            opened.append((label, a, b))
        yield opened


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) > 1 else xs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=60, help="threads per configuration (default 60)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_HANDOFF.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    exit_on_sigterm()
    res = Resources(NAME, uuid.uuid4().hex[:8])
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    code = git_state(HERE.parent)
    rows: list[tuple[str, list[float], list[float], str]] = []
    problems: list[str] = []
    try:
        if not res.probe():
            problems += res.down
        else:
            with pairs(res) as opened:
                graphs = [
                    (graph(A_STEPS).compile(checkpointer=a), graph(1).compile(checkpointer=b)) for _, a, b in opened
                ]
                runs: list[list[float]] = [[] for _ in opened]
                reads: list[list[float]] = [[] for _ in opened]
                # Round robin, one thread per configuration in turn, so that
                # the machine's drift hits every row alike.
                for i in range(args.threads + 3):  # the first 3 untimed
                    for k, ((label, _, _), (ga, gb)) in enumerate(zip(opened, graphs)):
                        config: Any = {"configurable": {"thread_id": f"t{i}"}}
                        ga.invoke({"messages": [], "n": 0}, config, durability="sync")
                        t0 = time.perf_counter()
                        gb.invoke({"messages": [], "n": A_STEPS}, config, durability="sync")
                        t1 = time.perf_counter()
                        values = ga.get_state(config).values
                        t2 = time.perf_counter()
                        if values.get("n") != A_STEPS + 1 or len(values.get("messages", [])) != A_STEPS + 1:
                            problems.append(f"{label}: A read {values.get('n')!r} after B's run, not B's state")
                        if i >= 3:
                            runs[k].append((t1 - t0) * 1000)
                            reads[k].append((t2 - t1) * 1000)
                for k, (label, a, _) in enumerate(opened):
                    hand_offs = a._hand_offs.hand_offs if isinstance(a, DurableSaver) and a._hand_offs else None
                    rows.append((label, runs[k], reads[k], "-" if hand_offs is None else str(hand_offs)))
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    stock = next((statistics.median(r) for label, r, _, _ in rows if label == "PostgresSaver"), None)
    plain = next((statistics.median(r) for label, r, _, _ in rows if label == "Durable sqlite+redis+postgres"), None)
    lines = [
        "| configuration | B's run p50 (ms) | p99 (ms) | vs PostgresSaver | vs Durable without linger "
        "| A's get_state after it, p50 (ms) | leases A handed off |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, runs, reads, hand_offs in rows:
        p50 = statistics.median(runs)
        vs_stock = f"{p50 / stock:.2f}x" if stock else "-"
        vs_plain = f"{p50 / plain:.2f}x" if plain and label.startswith("Durable") else "-"
        lines.append(
            f"| {label} | {p50:.2f} | {p99(runs):.2f} | {vs_stock} | {vs_plain} "
            f"| {statistics.median(reads):.3f} | {hand_offs} |"
        )
    body = "\n".join(lines) + "\n\n## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None.") + "\n"
    print(body)
    if not args.no_write:
        head = (
            "# Two replicas taking turns on one thread\n\n"
            f"- Date: {started}\n- Command: `python benchmarks/bench_handoff.py`\n"
            f"- Machine: {machine()}\n- Python: {python_version()}\n- Code measured: langgraph_durable at git {code}\n"
            f"- Packages: {package_versions(PACKAGES)}\n"
            f"- Workload: per thread, replica A runs {A_STEPS} super-steps (each appends one ~420-byte message), "
            "then replica B (another saver on the same Postgres database and Redis prefix, its own SQLite "
            'file) runs one more, then A calls `graph.get_state`; every invoke with `durability="sync"`, '
            f"{args.threads} threads after 3 untimed ones, the configurations taking turns thread by thread. B's run is timed from `invoke` to its return: "
            "with `lease_linger=30` on A it includes asking A for the lease it keeps (a Postgres NOTIFY, or a "
            "Redis PUBLISH without Postgres) and A giving it back. A's read after B's run asks the shared "
            "tiers: A no longer holds the lease.\n\n"
        )
        Path(args.output).write_text(head + body)
        print(f"wrote {args.output}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
