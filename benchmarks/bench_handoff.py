"""Two replicas taking turns on one thread: what the kept lease costs the other one.

Replica A runs a thread (3 super-steps); then replica B, another saver on the
same shared tiers with a local file of its own, runs the same thread one
super-step further; then A reads it. This script times B's run (the other
replica's first run after A's, from `invoke` to its return) and A's
`graph.get_state` right after it, median and p99 over `--threads` threads,
side by side in one run, and prints the tables (`--write` also overwrites
`RESULTS_HANDOFF.md`).

By default (``lease_linger``, 30 s) A keeps each run's lease, so B finds it
busy and asks for it (`langgraph_durable.engine.leases.handoff`); with
``Leases(linger=0)`` A gave it back when its run ended. The stock PostgresSaver
(two savers on one database) is the reference. Every read is checked against
what B wrote.

Then the worst case of the kept lease: A, a process of its own (on "another
host", as far as its lease tells), runs a thread, keeps its lease and is
SIGKILLed; nobody hears B's request, and B (default options) runs the
thread once the kept lease's window lapses. Timed from the kill to the end
of B's run, `--takeovers` times; B's state is checked to hold A's run.

Loopback servers only; everything the run creates is removed at the end
(also on error, Ctrl-C or SIGTERM).

    .venv/bin/python benchmarks/bench_handoff.py --threads 5
    .venv/bin/python benchmarks/bench_handoff.py --write    # under a minute
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

from langgraph_durable import DurableSaver, Leases, Tiers

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
            (GIVEN_BACK, "srp_given", True, {"leases": Leases(linger=0.0)}),
            ("Durable sqlite+redis+postgres, A keeping the lease (the default)", "srp_kept", True, {}),
            ("Durable sqlite+redis, A keeping the lease (the default)", "sr_kept", False, {}),
        ]
        for label, tag, with_postgres, a_options in configs:
            shared: dict[str, Any] = {"redis": res.redis_url, "tiers": Tiers(redis_key_prefix=res.new_prefix(tag))}
            if with_postgres:
                shared["postgres"] = res.new_database(tag)
            a = stack.enter_context(DurableSaver(sqlite=str(res.tmp_path / f"{tag}_a.sqlite"), **shared, **a_options))
            b = stack.enter_context(DurableSaver(sqlite=str(res.tmp_path / f"{tag}_b.sqlite"), **shared))
            a.setup()
            b.setup()
            opened.append((label, a, b))
        yield opened


GIVEN_BACK = "Durable sqlite+redis+postgres, A with Leases(linger=0)"


def keep_and_wait(kwargs: dict[str, Any], thread_id: str, ready: Any) -> None:
    """(A process of its own.) Replica A on "another host" (a holder on this
    one that died is seen dead by its pid): one run, its lease kept, then
    wait to be killed."""
    import socket

    socket.gethostname = lambda: "another-host"  # type: ignore[assignment]
    saver = DurableSaver(**kwargs)
    saver.setup()
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph(A_STEPS).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, config, durability="sync")
    ready.set()
    time.sleep(600)


def take_over_killed_keepers(res: Resources, trials: int, problems: list[str]) -> list[float]:
    """Seconds from SIGKILLing replica A, which keeps a thread's lease, to the
    end of replica B's run on that thread (default options both)."""
    import multiprocessing
    import os
    import signal

    spawn = multiprocessing.get_context("spawn")
    shared = {
        "redis": res.redis_url,
        "tiers": Tiers(redis_key_prefix=res.new_prefix("killed")),
        "postgres": res.new_database("killed"),
    }
    seconds: list[float] = []
    with DurableSaver(sqlite=str(res.tmp_path / "killed_b.sqlite"), **shared) as b:
        b.setup()
        gb = graph(1).compile(checkpointer=b)
        for i in range(trials):
            thread_id = f"killed-{i}"
            ready = spawn.Event()
            a_kwargs = {"sqlite": str(res.tmp_path / f"killed_a{i}.sqlite"), **shared}
            a = spawn.Process(target=keep_and_wait, args=(a_kwargs, thread_id, ready), daemon=True)
            a.start()
            try:
                if not ready.wait(120):
                    problems.append(f"takeover {i}: replica A did not run")
                    continue
            finally:
                t0 = time.perf_counter()
                os.kill(a.pid, signal.SIGKILL)
            a.join(60)
            values = gb.invoke({"messages": [], "n": A_STEPS}, {"configurable": {"thread_id": thread_id}})
            seconds.append(time.perf_counter() - t0)
            if values.get("n") != A_STEPS + 1 or len(values.get("messages", [])) != A_STEPS + 1:
                problems.append(f"takeover {i}: B's run did not continue A's ({values.get('n')!r})")
    return seconds


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) > 1 else xs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=60, help="threads per configuration (default 60)")
    parser.add_argument("--takeovers", type=int, default=5, help="killed keepers taken over (default 5)")
    parser.add_argument("--output", default=str(HERE / "RESULTS_HANDOFF.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    args = parser.parse_args()
    exit_on_sigterm()
    res = Resources(NAME, uuid.uuid4().hex[:8])
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    code = git_state(HERE.parent)
    rows: list[tuple[str, list[float], list[float], str]] = []
    takeovers: list[float] = []
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
                    hand_offs = (
                        a._runtime.hand_offs.hand_offs if isinstance(a, DurableSaver) and a._runtime.hand_offs else None
                    )
                    rows.append((label, runs[k], reads[k], "-" if hand_offs is None else str(hand_offs)))
            takeovers = take_over_killed_keepers(res, args.takeovers, problems)
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    stock = next((statistics.median(r) for label, r, _, _ in rows if label == "PostgresSaver"), None)
    plain = next((statistics.median(r) for label, r, _, _ in rows if label == GIVEN_BACK), None)
    lines = [
        "| configuration | B's run p50 (ms) | p99 (ms) | vs PostgresSaver | vs A giving the lease back "
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
    if takeovers:
        lines += [
            "",
            "### A replica killed while it keeps a lease",
            "",
            "| killed keepers | from the kill to the end of B's run: p50 (s) | max (s) |",
            "|---:|---:|---:|",
            f"| {len(takeovers)} | {statistics.median(takeovers):.2f} | {max(takeovers):.2f} |",
        ]
    body = "\n".join(lines) + "\n\n## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None.") + "\n"
    print(body)
    if args.body:
        Path(args.body).write_text(body)
    if args.write:
        head = (
            "# Two replicas taking turns on one thread\n\n"
            f"- Date: {started}\n- Command: `python benchmarks/bench_handoff.py`\n"
            f"- Machine: {machine()}\n- Python: {python_version()}\n- Code measured: langgraph_durable at git {code}\n"
            f"- Packages: {package_versions(PACKAGES)}\n"
            f"- Workload: per thread, replica A runs {A_STEPS} super-steps (each appends one ~420-byte message), "
            "then replica B (another saver on the same Postgres database and Redis prefix, its own SQLite "
            'file) runs one more, then A calls `graph.get_state`; every invoke with `durability="sync"`, '
            f"{args.threads} threads after 3 untimed ones, the configurations taking turns thread by thread. B's run is timed from `invoke` to its return: "
            "where A keeps its lease (the default) it includes asking A for it (a Postgres NOTIFY, or a "
            "Redis PUBLISH without Postgres) and A giving it back. A's read after B's run asks the shared "
            "tiers: A no longer holds the lease. The killed keepers: A runs a thread in a process of its own "
            "(its lease naming another host), keeps the lease and is SIGKILLed; B's run is timed from the "
            f"kill to its return, {args.takeovers} times.\n\n"
        )
        Path(args.output).write_text(head + body)
        print(f"wrote {args.output}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
