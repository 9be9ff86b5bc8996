"""The latest-state read of a thread whose list is a LangGraph `DeltaChannel`.

A `DeltaChannel` stores a sentinel at most checkpoints; LangGraph rebuilds
its value by replaying the ancestors' pending writes back to the nearest
stored snapshot, through `get_delta_channel_history`. For each shape (the
channel's `snapshot_frequency` and the thread's length, ending between two
snapshots, where the replay is longest) this script runs one thread on each
saver and times `graph.get_state` on it (median and p99 over `--reads`
calls), side by side in one run, and prints the tables and whether
DurableSaver with its defaults (all three tiers) meets its target: at most
0.5x PostgresSaver (`--write` also overwrites `RESULTS_DELTA_CHANNEL.md`).
Loopback servers only; everything the run creates is removed at the end
(also on error, Ctrl-C or SIGTERM).

    .venv/bin/python benchmarks/bench_delta_channel.py --shapes 100:90 --reads 50
    .venv/bin/python benchmarks/bench_delta_channel.py --write    # about 2 min
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

from langgraph_durable import DurableSaver, Leases, Tiers

HERE = Path(__file__).resolve().parent
NAME = "lgd_dbench"
# (snapshot_frequency, super-steps): LangGraph's default frequency on threads
# of about 100 and 1,000 steps, and a small one; each 90 (or 5) steps past
# its last snapshot.
SHAPES = [(100, 90), (100, 990), (10, 95)]
# DurableSaver with its defaults, all three tiers, against PostgresSaver.
TARGET_LABEL = "Durable sqlite+redis+postgres"
TARGET_RATIO = 0.5
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        default=",".join(f"{every}:{steps}" for every, steps in SHAPES),
        help="snapshot_frequency:steps of each thread measured, comma-separated (default %(default)s)",
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
    shapes = [tuple(int(x) for x in shape.split(":")) for shape in args.shapes.split(",")]
    rows: dict[tuple[int, int], list[tuple[str, float, float]]] = {shape: [] for shape in shapes}
    problems: list[str] = []
    try:
        res.probe()
        problems += [f"Postgres/Redis rows skipped: {why}" for why in res.down]
        with savers(res) as opened:
            for every, steps in shapes:
                expected = None
                for label, saver in opened:
                    g = graph(steps, every).compile(checkpointer=saver)
                    thread = f"delta-{every}-{steps}"
                    config = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
                    g.invoke({"n": 0}, config)
                    values = g.get_state(config).values
                    expected = expected or values
                    if values != expected or len(values["items"]) != steps:
                        problems.append(f"{label}: get_state does not return the state InMemorySaver holds")
                    ms = timed(lambda g=g, config=config: g.get_state(config), args.reads)
                    rows[every, steps].append((label, statistics.median(ms), statistics.quantiles(ms, n=100)[98]))
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    parts: list[str] = []
    targets: list[str] = []
    for (every, steps), measured in rows.items():
        pg = next((p50 for label, p50, _ in measured if label == "PostgresSaver"), None)
        sq = next((p50 for label, p50, _ in measured if label == "SqliteSaver"), None)
        lines = [
            f"### snapshot_frequency={every}, {steps} steps ({steps % every} past the last snapshot)",
            "",
            "| saver | get_state p50 (ms) | p99 (ms) | vs PostgresSaver | vs SqliteSaver |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, p50, p99 in measured:
            vs_pg = f"{p50 / pg:.2f}x" if pg else "-"
            vs_sq = f"{p50 / sq:.2f}x" if sq else "-"
            lines.append(f"| {label} | {p50:.3f} | {p99:.3f} | {vs_pg} | {vs_sq} |")
        parts.append("\n".join(lines))
        ours = next((p50 for label, p50, _ in measured if label == TARGET_LABEL), None)
        if pg and ours is not None:
            ratio = ours / pg
            verdict = "met" if ratio <= TARGET_RATIO else "missed"
            targets.append(
                f"- snapshot_frequency={every}, {steps} steps: {TARGET_LABEL} {ratio:.2f}x PostgresSaver "
                f"(target at most {TARGET_RATIO}x): {verdict}"
            )
    body = (
        "\n\n".join(parts)
        + "\n\n## Targets\n\n"
        + ("\n".join(targets) or "None measured (no Postgres).")
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
            f"- Date: {started}\n- Command: `python benchmarks/bench_delta_channel.py`\n"
            f"- Machine: {machine()}\n- Python: {python_version()}\n- Code measured: langgraph_durable at git {code}\n"
            f"- Packages: {package_versions(PACKAGES)}\n"
            f"- Workload: for each shape below, one thread whose every super-step appends one ~420-byte item "
            "to `items: Annotated[list, DeltaChannel(extend, snapshot_frequency=N)]`; "
            f"`graph.get_state` on its latest checkpoint, {args.reads} calls per saver after 5 untimed ones. "
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
    return 1 if any(p.startswith("cleanup") for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
