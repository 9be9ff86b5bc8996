"""The headline figures in one command, side by side with the stock savers.

Runs, one after another and each in a process of its own:

1. `bench_paired.py`: both faces, messages of 300 and 4096 bytes, every
   saver taking its turn in every round: ms per super-step, `get_state`, a
   `get_state_history(limit=10)` page, and 50 concurrent `ainvoke` runs,
   against the stock Postgres saver opened with `from_conn_string` and on a
   pool.
2. `bench_delta_channel.py`: `get_state` of a `DeltaChannel` thread, the
   first read after a run (cold) and repeated reads (warm).
3. `bench_handoff.py`: two replicas taking turns on a thread, and a replica
   killed while it keeps leases taken over by another.
4. `bench_processes.py`: 500 concurrent runs across 4 processes, and every
   thread's next run on another process, against AsyncPostgresSaver in the
   same processes.
5. `bench_memory.py`: one process serving 16,000 threads one after another,
   each saver in a process of its own: does its memory level off?

It prints every part's tables as they come, and at the end a ``## Targets``
summary: every line of the parts' own ``## Targets`` sections (each of the
project's speed and memory targets, met or missed) and how many were met.
Nothing is written unless `--write` is given: then `benchmarks/RESULTS.md`
gets the summary first and then every part's tables, with the machine, the
servers, the code and the packages described. (Each part also runs alone,
and writes its own results file with `--write`.) `--quick` runs every part
small, to check that everything works; its figures, and so its verdicts,
mean little.

    .venv/bin/python benchmarks/bench_all.py --quick      # about 1 minute
    .venv/bin/python benchmarks/bench_all.py --write      # about 18 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _env import Resources, exit_on_sigterm, git_state, run_lines  # benchmarks/ is on sys.path when run as a script
from bench_growth import PACKAGES

HERE = Path(__file__).resolve().parent

# (script, title, what it measures, arguments of the full run, of the quick run)
PARTS: list[tuple[str, str, str, list[str], list[str]]] = [
    (
        "bench_paired.py",
        "Steps, reads and history pages, paired",
        "A 40-super-step run of a graph appending one dict message per step (a 300-byte content, and "
        'in tables of their own a 4096-byte one; `durability="sync"`) on a fresh thread, then 30 '
        "`get_state` calls and 10 `get_state_history(limit=10)` pages on it; 20 rounds per face and "
        "size, every saver once per round in a rotating order; a ratio is the median over rounds of "
        "the row's figure over the reference's in the same round. The stock Postgres saver twice: "
        "opened with `from_conn_string` (one connection) and on a psycopg pool of 10. Then, per size, "
        "5 rounds of 50 concurrent 10-step `ainvoke` runs.",
        [],
        ["--rounds", "2", "--reads", "5", "--pages", "3", "--concurrent", "10", "--conc-rounds", "1"],
    ),
    (
        "bench_delta_channel.py",
        "The latest state of a DeltaChannel thread",
        "Threads whose list is a `DeltaChannel`: at LangGraph's default snapshot frequency (100) with 90 and "
        "990 super-steps, and at 10 with 95, each ending between two snapshots. Cold: the first "
        "`graph.get_state` right after each thread's run, 20 threads per saver (5 of 990 steps), the savers "
        "taking turns; warm: 200 more calls on the last thread, one saver after the other. The target: at "
        "most 0.5x PostgresSaver (`from_conn_string`), cold and warm.",
        [],
        ["--shapes", "100:30,10:15", "--reads", "20", "--cold", "3"],
    ),
    (
        "bench_handoff.py",
        "Two replicas taking turns, and a killed keeper taken over",
        "Replica A runs a thread, replica B runs it one step further (asking A for the lease it "
        "keeps), A reads it back; 60 threads. Then A, a process of its own, keeps a lease and is "
        "SIGKILLed: the time from the kill to the end of B's run of that thread, 5 times.",
        [],
        ["--threads", "5", "--takeovers", "1"],
    ),
    (
        "bench_processes.py",
        "Many concurrent runs across processes",
        "4 processes (replicas) run 500 10-step `ainvoke` runs at once, 125 each, on threads of their "
        "own; then every thread's second run on another process. 3 rounds, the savers taking turns.",
        [],
        ["--quick"],
    ),
    (
        "bench_memory.py",
        "Memory of one process serving many threads",
        "One 5-super-step graph run on each of 16,000 fresh threads, one after another, by one process per "
        "saver (sync face); every 1,000 threads its RSS, Python's blocks and DurableSaver's memos are "
        "sampled and two threads read back. The target: RSS growth over the second half under 0.5 MB per "
        "1,000 threads for DurableSaver.",
        [],
        ["--quick"],
    ),
]

# The parts whose tables end with a ``## Targets`` section.
TARGET_PARTS = {"bench_paired.py", "bench_delta_channel.py", "bench_memory.py"}
# A line of a part's ``## Targets`` section (`_env.target_line`): the verdict is its last words.
TARGET = re.compile(r"^- \(\d+\) .*: (met|missed|not measured)$")


def target_lines(markdown: str) -> list[str]:
    """The target lines of a part's tables: the lines under its ``## Targets`` heading."""
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Targets"
        elif inside and TARGET.match(line):
            lines.append(line)
    return lines


def summary(found: list[tuple[str, list[str]]], missing: list[str]) -> list[str]:
    """The ``## Targets`` section of the whole run: every part's target
    lines, by part, and how many of them were met."""
    every = [line for _, lines in found for line in lines]
    met = sum(1 for line in every if line.endswith(": met"))
    unmeasured = sum(1 for line in every if line.endswith(": not measured"))
    lines = [
        "## Targets",
        "",
        f"**{met} of {len(every)} targets met**"
        + (f" ({unmeasured} not measured)" if unmeasured else "")
        + ". Each line comes from the part named above it, where its figures are; the number in "
        "parentheses is the target's in `benchmarks/README.md`.",
    ]
    for script, part_lines in found:
        lines += ["", f"`{script}`:", "", *(part_lines or ["- none measured (see its section)"])]
    for script in missing:
        lines += ["", f"`{script}`: no `## Targets` section (it failed: see its section)"]
    return lines


def demote(markdown: str) -> list[str]:
    """A part's tables under this file's headings: every heading one level down."""
    return [("#" + line if line.startswith("#") else line) for line in markdown.rstrip().splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every part small: a check that everything works")
    parser.add_argument("--only", help="comma-separated scripts to run (default: all of them)")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--write", action="store_true", help="also write the results file")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    exit_on_sigterm()
    started = dt.datetime.now(dt.UTC)
    load_start = os.getloadavg()[0]
    code = git_state(HERE.parent)
    probe = Resources("lgd_all", uuid.uuid4().hex[:8])
    probe.probe()
    probe.cleanup()
    t_run = time.perf_counter()
    sections: list[str] = []
    failed: list[str] = []
    found: list[tuple[str, list[str]]] = []  # (part, its target lines)
    missing: list[str] = []  # parts that have targets but gave none
    with tempfile.TemporaryDirectory(prefix="lgd_all_") as tmp:
        for script, title, what, full, quick in PARTS:
            if only is not None and script not in only:
                continue
            body = Path(tmp) / f"{script}.md"
            cmd = [sys.executable, str(HERE / script), *(quick if args.quick else full), "--body", str(body)]
            print(f"\n=== {script} ===\n", flush=True)
            t0 = time.perf_counter()
            code_ = subprocess.run(cmd, cwd=HERE.parent).returncode
            took = time.perf_counter() - t0
            if code_:
                failed.append(f"{script} exited with status {code_}")
            text = body.read_text() if body.exists() else f"({script} wrote no tables: see its output)\n"
            if "## Targets" in text:
                found.append((script, target_lines(text)))
            elif script in TARGET_PARTS:
                missing.append(script)
            sections += [
                f"## {title}",
                "",
                f"`python benchmarks/{script}" + "".join(f" {a}" for a in (quick if args.quick else full)) + "`, "
                f"{took:.0f} s. {what}",
                "",
                *demote(text),
                "",
            ]
    wall = time.perf_counter() - t_run
    targets = summary(found, missing)
    print("\n" + "\n".join(targets) + "\n")
    if args.write:
        head = run_lines(
            "bench_all.py",
            quick=args.quick,
            started=started,
            wall=wall,
            load=(load_start, os.getloadavg()[0]),
            code=code,
            packages=PACKAGES,
        )
        servers = ", ".join(f"{k} {v}" for k, v in probe.server_versions.items()) or "; ".join(probe.down)
        intro = [
            "# Benchmarks: the headline figures",
            "",
            *head,
            f"- Servers (loopback): {servers}",
            "- Every saver runs with its default options unless its row names one. DurableSaver rows name "
            "their tiers; the stock savers (InMemorySaver, SqliteSaver, PostgresSaver and their async "
            "twins) come from langgraph-checkpoint, -sqlite and -postgres; the Postgres ones opened with "
            "`from_conn_string` (one connection) and, as a second reference where a table says so, on a "
            "psycopg pool of 10.",
            "- Reproduce: `python benchmarks/bench_all.py --write` (each section also names its own "
            "command). See `benchmarks/README.md` for what every column means.",
            "",
        ]
        Path(args.output).write_text("\n".join(intro + targets + [""] + sections) + "\n")
        print(f"wrote {args.output}")
    print(f"total {wall:.0f} s" + (f"; failed: {'; '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
