"""Where a super-step's time goes: the saver's calls, timed one by one.

`bench_paired.py` says how a super-step compares with PostgresSaver; this
says why. One process runs the paired benchmark's graph (a 40-step run
appending one dict message per step, ``durability="sync"``, sync face) on
fresh threads, once with `PostgresSaver.from_conn_string` and once with
`DurableSaver` on SQLite + Redis + Postgres (default options), with the
methods below wrapped in a timer (the wall clock by default): the saver's own calls (`put`,
`put_writes`, `get_tuple`), and under DurableSaver the tier calls they make
and the lease's start and end of a run. Each row is milliseconds per
super-step (its total over the run divided by the super-steps), microseconds
per call, and calls per super-step; each table's title gives the step's wall time and the
process's CPU time per step (InMemorySaver's run shows LangGraph's own).
Calls made at once on other threads overlap (LangGraph stores a step's
writes while its checkpoint is put), so rows are not meant to add up to the
step. Then the statements DurableSaver's local SQLite tier ran, by kind,
timed the same way (per super-step, per statement, statements per
super-step). Last, the Postgres writes of a step are timed alone, one call
at a time, DurableSaver's fenced statements against PostgresSaver's.

``--clock thread`` times each call with its thread's CPU clock instead of
the wall clock: the CPU the calling thread spent in it, without the time it
waited (for a server, a lock, the interpreter); work a call hands to
another thread (an overlapped write) is in no row. ``--tiers sqlite`` measures
DurableSaver on SQLite alone against SqliteSaver (no Postgres writes).

Timings only, never asserted; every run's result is checked.

    .venv/bin/python benchmarks/bench_step_calls.py                  # about 30 s
    .venv/bin/python benchmarks/bench_step_calls.py --size 4096 --runs 40
    .venv/bin/python benchmarks/bench_step_calls.py --tiers sqlite --clock thread
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from _env import Resources, exit_on_sigterm  # benchmarks/ is on sys.path when run as a script
from bench_growth import first_input, run_config
from bench_paired import build_graph, check_values
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

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
STOCK_CALLS = {
    "postgres": [
        ("langgraph.checkpoint.postgres", "PostgresSaver", "put", "put"),
        ("langgraph.checkpoint.postgres", "PostgresSaver", "put_writes", "put_writes"),
        ("langgraph.checkpoint.postgres", "PostgresSaver", "get_tuple", "get_tuple (a run's start)"),
    ],
    "sqlite": [
        ("langgraph.checkpoint.sqlite", "SqliteSaver", "put", "put"),
        ("langgraph.checkpoint.sqlite", "SqliteSaver", "put_writes", "put_writes"),
        ("langgraph.checkpoint.sqlite", "SqliteSaver", "get_tuple", "get_tuple (a run's start)"),
    ],
}
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


class Timers:
    """Total time (on `clock`) and calls per label."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self.on = True  # off: calls go untimed (a warm-up)

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def add(self, label: str, seconds: float) -> None:
        if self.on:
            self.seconds[label] += seconds
            self.calls[label] += 1

    def wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        clock = self.clock

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(label, clock() - started)

        return timed


class TimedConnection:
    """A sqlite3 connection whose statements are timed by kind
    (`statement_kind`), everything else passed through."""

    def __init__(self, conn: Any, timers: Timers) -> None:
        self._conn = conn
        self._timers = timers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _timed(self, fn: Callable[..., Any], label: str, *args: Any) -> Any:
        clock = self._timers.clock
        started = clock()
        try:
            return fn(*args)
        finally:
            self._timers.add(label, clock() - started)

    def execute(self, statement: str, *args: Any) -> Any:
        return self._timed(self._conn.execute, statement_kind(statement), statement, *args)

    def executemany(self, statement: str, *args: Any) -> Any:
        return self._timed(self._conn.executemany, statement_kind(statement) + " (many rows)", statement, *args)


def statement_kind(statement: str) -> str:
    """A statement by what it does to which table: its words up to the table
    (``INSERT OR IGNORE INTO lgd_writes``, ``UPDATE lgd_leases``), ``SELECT …
    FROM`` the table, or its first two words (``BEGIN IMMEDIATE``,
    ``PRAGMA data_version``, ``COMMIT``)."""
    words = statement.split()
    at = next((i for i, word in enumerate(words) if word.startswith("lgd_")), None)
    if at is None:
        return " ".join(words[:2])
    table = words[at].split("(")[0].rstrip(",;")
    if words[0].upper() == "SELECT":
        return f"SELECT … FROM {table}"
    return " ".join([*words[:at], table])


@contextlib.contextmanager
def sqlite_statements(timers: Timers) -> Iterator[None]:
    """Every SQLite tier's connection timed by statement (`TimedConnection`) while inside."""
    from langgraph_durable.tiers.sqlite.tier import SqliteTier

    real = SqliteTier._connect

    def connect(self: SqliteTier) -> Any:
        conn = real(self)
        if not isinstance(conn, TimedConnection):
            conn = self._conn = TimedConnection(conn, timers)  # type: ignore[assignment]
        return conn

    SqliteTier._connect = connect  # type: ignore[method-assign]
    try:
        yield
    finally:
        SqliteTier._connect = real  # type: ignore[method-assign]


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


def measure(
    saver: Any,
    calls: list[tuple[str, str, str, str]],
    runs: int,
    size: int,
    problems: list[str],
    clock: Callable[[], float] = time.perf_counter,
    statements: Timers | None = None,
) -> Any:
    """Rows (label, ms per step, us per call, calls per step) and the run's
    ms per step; `statements`, if given, times the local SQLite tier's
    statements of the timed runs (`sqlite_statements`)."""
    graph = build_graph(STEPS, size, is_async=False, checkpointer=saver)
    timers = Timers(clock)
    watched = sqlite_statements(statements) if statements is not None else contextlib.nullcontext()
    with timing(calls, timers), watched:
        timers.on = False
        if statements is not None:
            statements.on = False
        for i in range(3):  # warm up, untimed
            graph.invoke(first_input(), run_config(f"warm-{i}", STEPS), durability="sync")
        timers.on = True
        if statements is not None:
            statements.on = True
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(runs):
            out = graph.invoke(first_input(), run_config(f"run-{i}", STEPS), durability="sync")
            problems += check_values(out, STEPS, size, f"{type(saver).__name__} run {i}")
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        if statements is not None:
            statements.on = False
    steps = runs * STEPS
    rows = [
        (label, timers.seconds[label] * 1000 / steps, timers.seconds[label] * 1e6 / n, n / steps)
        for _, _, _, label in calls
        if (n := timers.calls[label])
    ]
    return rows, (wall * 1000 / steps, cpu * 1000 / steps)


def statements(res: Resources, n: int) -> list[str]:
    """The Postgres writes of one step alone, one at a time (nothing else
    running): DurableSaver's fenced statements against PostgresSaver's
    `put` and `put_writes`, median microseconds over `n` calls each."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_durable.model.lease import Fence
    from langgraph_durable.model.records import BlobRow, CheckpointRow, WriteRow
    from langgraph_durable.tiers.postgres.tier import PostgresTier

    def median_us(call: Callable[[int], Any]) -> float:
        times = []
        for i in range(n):
            started = time.perf_counter()
            call(i)
            times.append((time.perf_counter() - started) * 1e6)
        return statistics.median(times)

    record = b"x" * 400
    tier = PostgresTier(res.new_database("statements"))
    try:
        tier.setup()
        tier.swap_lease("t", None, "me", 1, 30.0)
        fence = Fence("t", "me", 1, 30.0, "postgres")
        ours_put = median_us(
            lambda i: tier.write_checkpoint(
                CheckpointRow("t", "", f"c{i:06d}", f"c{i - 1:06d}", "run", "{}", record),
                [BlobRow("t", "", "messages", f"v{i}", record), BlobRow("t", "", "n", f"v{i}", b"y" * 40)],
                fence=fence,
            )
        )
        ours_writes = median_us(
            lambda i: tier.write_writes(
                [WriteRow("t", "", f"c{i:06d}", "task", j, ch, "", record) for j, ch in enumerate(("messages", "n"))],
                False,
                fence=fence,
            )
        )
    finally:
        tier.close()
    with PostgresSaver.from_conn_string(res.new_database("statements_stock")) as stock:
        stock.setup()

        def put(i: int) -> None:
            cp = empty_checkpoint()
            cp["id"] = f"1ef{i:033d}"
            cp["channel_values"] = {"messages": "x" * 400, "n": i}
            cp["channel_versions"] = {"messages": str(i), "n": str(i)}
            stock.put(thread, cp, {"step": i}, {"messages": str(i), "n": str(i)})

        thread: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stock_put = median_us(put)
        stock_writes = median_us(
            lambda i: stock.put_writes(
                {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": f"1ef{i:033d}"}},
                [("messages", "x" * 400), ("n", i)],
                "task",
            )
        )
    return [
        f"### The Postgres writes of a step alone, one at a time (median over {n} calls)",
        "",
        "| write | DurableSaver (us) | PostgresSaver (us) |",
        "|---|---:|---:|",
        f"| the checkpoint and two values | {ours_put:.0f} | {stock_put:.0f} |",
        f"| two pending writes | {ours_writes:.0f} | {stock_writes:.0f} |",
    ]


def table(title: str, rows: list[tuple[str, float, float, float]], per_step: tuple[float, float]) -> list[str]:
    lines = [
        f"### {title}: {per_step[0]:.3f} ms per super-step, {per_step[1]:.3f} ms of the process's CPU",
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
    parser.add_argument("--statements", type=int, default=400, help="calls per write timed alone (default 400)")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="time calls on the wall clock or their thread's CPU"
    )
    parser.add_argument(
        "--tiers",
        choices=["sqlite+redis+postgres", "sqlite"],
        default="sqlite+redis+postgres",
        help="DurableSaver's tiers; SQLite alone is compared with SqliteSaver",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    clock = CLOCKS[args.clock]
    shared = args.tiers != "sqlite"
    res = Resources("lgd_bcalls", uuid.uuid4().hex[:10])
    problems: list[str] = []
    body: list[str] = []
    try:
        if shared and not res.probe():
            problems += res.down
        else:
            _, per_step = measure(InMemorySaver(), [], args.runs, args.size, problems)
            body += [
                f"### InMemorySaver (LangGraph's own work): {per_step[0]:.3f} ms per super-step, "
                f"{per_step[1]:.3f} ms of the process's CPU",
                "",
            ]
            stock: Any
            if shared:
                stock, stock_name = (
                    PostgresSaver.from_conn_string(res.new_database("stock")),
                    "PostgresSaver.from_conn_string",
                )
            else:
                stock, stock_name = SqliteSaver.from_conn_string(str(res.tmp_path / "stock.sqlite")), "SqliteSaver"
            with stock as saver:
                saver.setup()
                rows, per_step = measure(
                    saver, STOCK_CALLS["postgres" if shared else "sqlite"], args.runs, args.size, problems, clock
                )
                body += [*table(stock_name, rows, per_step), ""]
            path = str(res.tmp_path / "durable.sqlite")
            durable = (
                DurableSaver(
                    sqlite=path,
                    redis=res.redis_url,
                    postgres=res.new_database("durable"),
                    tiers=Tiers(redis_key_prefix=res.new_prefix("durable")),
                )
                if shared
                else DurableSaver(sqlite=path)
            )
            local = Timers(clock)
            with durable:
                durable.setup()
                rows, per_step = measure(durable, DURABLE_CALLS, args.runs, args.size, problems, clock, local)
                body += [*table(f"DurableSaver {args.tiers}", rows, per_step), ""]
            steps = args.runs * STEPS
            body += [
                "### The local SQLite tier's statements (DurableSaver), by kind",
                "",
                "| statement | ms / super-step | us / statement | statements / super-step |",
                "|---|---:|---:|---:|",
                *(
                    f"| `{kind}` | {local.seconds[kind] * 1000 / steps:.3f} | "
                    f"{local.seconds[kind] * 1e6 / n:.0f} | {n / steps:.2f} |"
                    for kind, n in sorted(local.calls.items(), key=lambda item: -local.seconds[item[0]])
                ),
                "",
            ]
            if shared:
                body += [*statements(res, args.statements), ""]
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    timed = "each call's time on the wall clock" if args.clock == "wall" else "each call's thread CPU time"
    print(f"{args.runs} runs of {STEPS} super-steps, {args.size}-byte messages, sync face; tables: {timed}\n")
    print("\n".join(body))
    print("## Problems\n\n" + ("\n".join(f"- {p}" for p in problems) or "None."))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
