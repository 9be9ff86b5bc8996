"""Memory of one process serving many threads: does it level off?

One process runs a 5-super-step graph on `--threads` fresh thread ids, one
after another, with one saver, and every `--every` threads it collects the
garbage and samples its resident set size (``/proc/self/statm``), the
blocks Python has allocated (``sys.getallocatedblocks()``), the objects the
garbage collector tracks, what glibc's malloc holds in its heaps in use and
free (``mallinfo2``: memory outside Python's own arenas, which a C library
or a large object uses, and the free space the allocator keeps) and, for
`DurableSaver`, what its memos hold by their own estimate
(``memory_budget``). Each saver runs in a subprocess of
its own, so that their memory does not mix: the stock `PostgresSaver` and
`SqliteSaver`, and `DurableSaver` on SQLite + Redis + Postgres with its
default options. At every sample the state of the first thread and of the
thread just run is read back through the graph and checked (five messages,
``n == 5``): a memo that forgot a thread must only make it slower.

By default each saver serves 16,000 threads, a sample every 1,000. The
growth of RSS over the second half of the run (from 8,000 threads on,
once DurableSaver's memos are as full as this workload makes them) is the
figure of the project's target: under 0.5 MB per 1,000 threads for
DurableSaver, which the ``## Targets`` section judges.

    .venv/bin/python benchmarks/bench_memory.py --quick            # a few hundred threads
    .venv/bin/python benchmarks/bench_memory.py --write            # the 16,000-thread soak

It prints the tables; ``--write`` also overwrites `RESULTS_MEMORY.md`.
Loopback servers only; every database, key and file the run creates is
removed at the end (also on error, Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import operator
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

from _env import (  # benchmarks/ is on sys.path when run as a script
    Resources,
    exit_on_sigterm,
    git_state,
    run_lines,
    target_line,
)

from langgraph_durable import Tiers

HERE = Path(__file__).resolve().parent
NAME = "lgd_mbench"
PACKAGES = [
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-postgres",
    "langgraph-checkpoint-sqlite",
    "psycopg",
    "redis",
]
STEPS = 5
SAVERS = {
    "postgres": "PostgresSaver",
    "sqlite": "SqliteSaver",
    "durable": "DurableSaver sqlite+redis+postgres (default options)",
}
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
MB = 1_000_000  # the growth figures and the target are in MB (10^6 bytes) per 1,000 threads
THREADS = 16_000  # the soak of the target
EVERY = 1_000
# DurableSaver's RSS growth over the second half of the run, per 1,000 threads.
TARGET_SAVER = "durable"
TARGET_MB = 0.5


class State(TypedDict):
    messages: Annotated[list[str], operator.add]
    n: int


def build_graph() -> Any:
    """Each super-step appends one ~220-byte message; `STEPS` super-steps."""
    from langgraph.graph import END, START, StateGraph

    def step(state: State) -> dict[str, Any]:
        return {"messages": [f"message {state['n']}: " + "x" * 200], "n": state["n"] + 1}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] % STEPS else END)
    return g


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def c_heap() -> tuple[int, int] | None:
    """What glibc's malloc holds in its heaps (`mallinfo2`): bytes in use and
    bytes free (kept, not handed back to the system); None without glibc.
    Python's small objects live in its own arenas, not in these."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd), int(info.fordblks)


def memo_bytes(saver: Any) -> int | None:
    """What a DurableSaver's memos hold by their own estimates (None for other savers)."""
    from langgraph_durable import DurableSaver

    if not isinstance(saver, DurableSaver):
        return None
    runtime = saver._runtime
    total = runtime.seen.size + runtime.own.usage()["heads_bytes"] + runtime.own.usage()["early_bytes"]
    total += runtime.deltas.size if runtime.deltas is not None else 0
    total += runtime.read_cache.size if runtime.read_cache is not None else 0
    total += runtime.memory.outbox._bytes
    kept = runtime.leases.usage()
    return total + kept["kept_bytes"] + kept["handoff_bytes"]


def bounds(saver: Any) -> dict[str, Any]:
    """What bounds a DurableSaver's memory in this run: the bytes each memo
    may hold (`langgraph_durable.model.memory_budget`), the local file's
    bound and the list snapshots' spacing, read from the saver's options."""
    options = saver._runtime.options
    budget = options.limits.budget
    return {
        "budget": budget.total,
        "shares": {
            "read cache": budget.read_cache,
            "lists stored last (deltas)": budget.deltas,
            "records to ship (outbox)": budget.outbox,
            "own heads": budget.own_heads,
            "channel versions (seen)": budget.seen,
            "kept leases": budget.kept_leases,
        },
        "local_max_bytes": options.limits.local_max_bytes,
        "list_snapshot_every": options.write.list_snapshot_every,
    }


def child(args: argparse.Namespace) -> int:
    """Run one saver; print a JSON line per sample, then one with the checks."""
    import contextlib

    with contextlib.ExitStack() as stack:
        if args.child == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            saver: Any = stack.enter_context(PostgresSaver.from_conn_string(args.postgres))
            saver.setup()
        elif args.child == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            saver = stack.enter_context(SqliteSaver.from_conn_string(args.sqlite))
            saver.setup()
        else:
            from langgraph_durable import DurableSaver

            saver = stack.enter_context(
                DurableSaver(
                    sqlite=args.sqlite,
                    redis=args.redis,
                    postgres=args.postgres,
                    tiers=Tiers(redis_key_prefix=args.redis_prefix),
                )
            )
            saver.setup()
            print(json.dumps({"bounds": bounds(saver)}), flush=True)
        app = build_graph().compile(checkpointer=saver)
        problems: list[str] = []

        def check(i: int) -> None:
            values = app.get_state({"configurable": {"thread_id": f"t{i}"}}).values
            if values.get("n") != STEPS or len(values.get("messages", [])) != STEPS:
                problems.append(f"thread t{i}: read n={values.get('n')!r}, {len(values.get('messages', []))} messages")

        started = time.perf_counter()
        for i in range(args.threads):
            app.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"t{i}"}})
            done = i + 1
            if done % args.every == 0 or done == args.threads:
                check(0)
                check(i)
                gc.collect()
                heap = c_heap()
                sample = {
                    "threads": done,
                    "rss": rss(),
                    "c_heap": heap,
                    "blocks": sys.getallocatedblocks(),
                    "objects": len(gc.get_objects()),
                    "memos": memo_bytes(saver),
                    "seconds": time.perf_counter() - started,
                }
                print(json.dumps(sample), flush=True)
        print(json.dumps({"problems": problems}), flush=True)
    return 0


def child_command(name: str, args: argparse.Namespace, res: Resources) -> list[str]:
    """The command running saver `name`, on storage of its own (created here, one at a time:
    Postgres refuses two CREATE DATABASE from the same template at once)."""
    cmd = [sys.executable, __file__, "--child", name, "--threads", str(args.threads), "--every", str(args.every)]
    cmd += ["--sqlite", str(res.tmp_path / f"{name}.sqlite")]
    if name in ("postgres", "durable"):
        cmd += ["--postgres", res.new_database(name)]
    if name == "durable":
        cmd += ["--redis", res.redis_url, "--redis-prefix", res.new_prefix(name)]
    return cmd


def run_child(
    name: str,
    cmd: list[str],
    args: argparse.Namespace,
    samples: list[dict[str, Any]],
    problems: list[str],
    on_sample: Any = None,
    limits: dict[str, Any] | None = None,
) -> None:
    """Run saver `name` in a subprocess; its samples and problems are appended
    as they come, and what bounds its memory (DurableSaver) put in `limits`."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            data = json.loads(line)
            if "bounds" in data:
                if limits is not None:
                    limits[name] = data["bounds"]
            elif "problems" in data:
                problems += [f"{SAVERS[name]}: {p}" for p in data["problems"]]
            else:
                samples.append(data)
                if on_sample is not None:
                    on_sample()
                if args.progress:
                    print(f"  {name}: {data['threads']} threads, RSS {data['rss'] / MIB:.1f} MiB", file=sys.stderr)
        err = proc.stderr.read() if proc.stderr is not None else ""
    if proc.returncode != 0:
        problems.append(f"{SAVERS[name]}: exited {proc.returncode}: {err.strip()[-1500:]}")


def mib(x: float) -> str:
    return f"{x / MIB:.1f}"


def halves(samples: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The samples that open and close the second half of the run: the first
    at or past half the threads of the last, and the last."""
    last = samples[-1]
    mid = next(s for s in samples if 2 * s["threads"] >= last["threads"])
    return mid, last


def growth_mb(samples: list[dict[str, Any]]) -> float | None:
    """RSS growth over the second half of the run, in MB per 1,000 threads (None: too few samples)."""
    mid, last = halves(samples)
    if last["threads"] == mid["threads"]:
        return None
    return (last["rss"] - mid["rss"]) / MB * 1000 / (last["threads"] - mid["threads"])


def bounds_text(limits: dict[str, Any]) -> str:
    """A sentence stating what bounded DurableSaver's memory in the run."""
    shares = ", ".join(f"{what} {mib(n)}" for what, n in limits["shares"].items())
    local = limits["local_max_bytes"]
    return (
        f"DurableSaver's bounds in this run (its defaults, `Memory()`): its memos may hold "
        f"{mib(limits['budget'])} MiB in all (`Memory.budget`), shared out in MiB as {shares}; "
        f"`Memory.local_max_bytes` {'None: the local SQLite file is not bounded' if local is None else local}; "
        f"`Memory.list_snapshot_every` {limits['list_snapshot_every']}. SQLite's page cache and the drivers' "
        "buffers are bounded by their own defaults; the memos column is the memos' own estimate."
    )


def tables(results: dict[str, list[dict[str, Any]]], limits: dict[str, Any]) -> str:
    lines = [
        "## Summary",
        "",
        "RSS and Python's allocated blocks at the first sample, at the middle one (half the threads) and at the",
        "end; the growth over the second half of the run, per 1,000 threads (a plateau is about 0). MB = 10^6 bytes.",
        "",
        "| saver | threads | RSS first (MiB) | RSS middle | RSS end | RSS growth, 2nd half (MB / 1,000 threads) "
        "| blocks first | blocks end | blocks growth, 2nd half (per 1,000 threads) | memos end (MiB, estimated) "
        "| threads/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, samples in results.items():
        if not samples:
            lines.append(f"| {SAVERS[name]} | 0 | - | - | - | - | - | - | - | - | - |")
            continue
        first, (mid, last) = samples[0], halves(samples)
        per = 1000 / max(1, last["threads"] - mid["threads"])
        growth = growth_mb(samples)
        memos = "-" if last["memos"] is None else mib(last["memos"])
        lines.append(
            f"| {SAVERS[name]} | {last['threads']} | {mib(first['rss'])} | {mib(mid['rss'])} | {mib(last['rss'])} "
            f"| {'-' if growth is None else f'{growth:+.2f}'} | {first['blocks']} | {last['blocks']} "
            f"| {(last['blocks'] - mid['blocks']) * per:+.0f} | {memos} "
            f"| {last['threads'] / last['seconds']:.0f} |"
        )
    if TARGET_SAVER in limits:
        lines += ["", bounds_text(limits[TARGET_SAVER])]
    for name, samples in results.items():
        lines += [
            "",
            f"## {SAVERS[name]}",
            "",
            "| threads | RSS (MiB) | Python blocks | gc objects | memos (MiB, estimated) "
            "| C heap in use (MiB) | C heap free (MiB) |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in samples:
            memos = "-" if s["memos"] is None else mib(s["memos"])
            used, free = (mib(s["c_heap"][0]), mib(s["c_heap"][1])) if s.get("c_heap") else ("-", "-")
            lines.append(
                f"| {s['threads']} | {mib(s['rss'])} | {s['blocks']} | {s['objects']} | {memos} | {used} | {free} |"
            )
    return "\n".join(lines) + "\n"


def targets(results: dict[str, list[dict[str, Any]]]) -> str:
    """The ``## Targets`` section: DurableSaver's RSS growth over the second half."""
    samples = results.get(TARGET_SAVER)
    if not samples:
        return "## Targets\n\nNone measured (DurableSaver did not run).\n"
    mid, last = halves(samples)
    growth = growth_mb(samples)
    memos = "" if mid["memos"] is None else f"; memos {mib(mid['memos'])} to {mib(last['memos'])} MiB"
    measured = (
        f"{SAVERS[TARGET_SAVER]} "
        + ("-" if growth is None else f"{growth:+.2f}")
        + f" MB per 1,000 threads over the second half ({mid['threads']:,} to {last['threads']:,} threads{memos}), "
        f"target under {TARGET_MB} MB"
    )
    line = target_line(
        6,
        "RSS growth of one process serving thread after thread",
        measured,
        (None if growth is None else growth < TARGET_MB),
    )
    return "## Targets\n\n" + line + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=THREADS, help=f"threads per saver (default {THREADS})")
    parser.add_argument("--every", type=int, default=EVERY, help=f"sample every this many threads (default {EVERY})")
    parser.add_argument("--quick", action="store_true", help="300 threads, a sample every 50")
    parser.add_argument("--only", default=",".join(SAVERS), help=f"savers to run, of {','.join(SAVERS)}")
    parser.add_argument("--write", action="store_true", help="overwrite RESULTS_MEMORY.md")
    parser.add_argument("--output", default=str(HERE / "RESULTS_MEMORY.md"))
    parser.add_argument("--progress", action="store_true", help="report each sample on stderr")
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the savers' processes at the same time (their memory stays apart; their speed does not)",
    )
    parser.add_argument("--body", help=argparse.SUPPRESS)  # bench_all.py: the tables, to this file
    parser.add_argument("--child", choices=list(SAVERS), help=argparse.SUPPRESS)
    parser.add_argument("--sqlite", help=argparse.SUPPRESS)
    parser.add_argument("--postgres", help=argparse.SUPPRESS)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    parser.add_argument("--redis-prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.threads, args.every = 300, 50
    if args.child:
        return child(args)
    exit_on_sigterm()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SAVERS]
    if unknown:
        parser.error(f"unknown savers {unknown}; choose from {','.join(SAVERS)}")
    res = Resources(NAME, uuid.uuid4().hex[:8])
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    code = git_state(HERE.parent)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    limits: dict[str, Any] = {}
    problems: list[str] = []
    lock = threading.Lock()

    def report(final: bool) -> str:
        body = (
            tables(results, limits)
            + "\n"
            + targets(results)
            + "\n## Problems\n\n"
            + ("\n".join(f"- {p}" for p in problems) or "None.")
            + "\n"
        )
        if args.write:
            head = run_lines(
                "bench_memory.py",
                quick=args.quick,
                started=started,
                wall=time.perf_counter() - t0,
                load=(load0, os.getloadavg()[0]),
                code=code,
                packages=PACKAGES,
            )
            intro = (
                "# Memory of one process serving many threads\n\n"
                + ("" if final else "**Partial: the run was still going when this was written.**\n\n")
                + "\n".join(head)
                + "\n- Servers: "
                + ", ".join(f"{k} {v}" for k, v in sorted(res.server_versions.items()))
                + f"\n- Workload: one graph of {STEPS} super-steps (each appends one ~220-byte message) run once "
                f"on each of {args.threads} fresh threads, one after another (sync face, `invoke`, LangGraph's "
                f"default durability), each saver in its own process"
                + (" (the processes ran at the same time)" if args.parallel else "")
                + f". Every {args.every} threads: the first "
                "thread's and the newest thread's state read back and checked, `gc.collect()`, then RSS "
                "(`/proc/self/statm`), `sys.getallocatedblocks()`, the number of objects the collector tracks, "
                "and the bytes DurableSaver's memos hold by their own estimate (bounded by `Memory.budget`, "
                "64 MiB by default: see the sentence under the summary).\n\n"
            )
            Path(args.output).write_text(intro + body)
        return body

    def on_sample() -> None:
        if args.write:  # a run cut short still leaves what it measured
            with lock:
                report(final=False)

    try:
        if not res.probe():
            problems += res.down
        elif args.parallel:
            cmds = {name: child_command(name, args, res) for name in names}
            workers = [
                threading.Thread(
                    target=run_child, args=(name, cmds[name], args, results[name], problems, on_sample, limits)
                )
                for name in names
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        else:
            for name in names:
                run_child(name, child_command(name, args, res), args, results[name], problems, on_sample, limits)
    finally:
        problems += [f"cleanup: {n}" for n in res.cleanup()]
    with lock:
        text = report(final=True)
    print(text)
    if args.body:
        Path(args.body).write_text(text)
    if args.write:
        print(f"wrote {args.output}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
