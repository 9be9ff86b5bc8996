"""How long the command line takes to answer: ``--help``, and the data
commands against a store that is not there (a missing local file, a
Postgres or Redis with nothing listening, a Postgres database that does not
exist), as a person typing them waits for the answer.

Each row is one ``langgraph-durable`` command line, run as a process of its
own (what the ``langgraph-durable`` script runs), timed from start to exit:
the wall time in seconds, median and range over ``--runs`` runs after one
untimed round, every row taking its turn in every round, and the CPU time
the process used (user and system: what the command costs, which other
work on the machine changes less than the wall time). Two reference rows
say what any Python process pays: the interpreter alone, and importing
``langgraph.checkpoint.base`` (what `DurableSaver` subclasses, with the
LangChain modules it imports), which every command that loads the saver
pays too.

Each row runs twice: with the package's bytecode compiled beforehand (as
``pip install`` of a wheel leaves it), and compiled from source by every
run (an editable checkout where no bytecode is ever written, as under
``PYTHONDONTWRITEBYTECODE=1``). The package measured is a copy of
``--source``'s ``langgraph_durable/`` (default: this checkout), put first on
the path, so another checkout is measured with the same interpreter and
packages; ``--source`` given more than once measures each checkout (a
worktree at another commit, say) in the same rounds, for a fair before and
after. The installed packages keep their own bytecode either way.

The rows that need a server use the test Postgres (loopback only) for a
database name that does not exist; nothing is created anywhere. Each row's
exit status and message are checked, and a surprise is listed under
Problems. Nothing here is asserted on a timing.

    .venv/bin/python benchmarks/bench_cli.py              # about 2 minutes on 2 cores
    .venv/bin/python benchmarks/bench_cli.py --write      # also overwrites RESULTS_CLI.md
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from _env import (  # benchmarks/ is on sys.path when run as a script
    POSTGRES_URL,
    database_url,
    git_state,
    is_loopback,
    machine,
    package_versions,
    python_version,
)

HERE = Path(__file__).resolve().parent
PACKAGES = ["langgraph-durable", "langgraph-checkpoint", "langchain-core", "psycopg", "redis", "rich"]
# What the ``langgraph-durable`` script runs: cli.run (cli.main in a checkout from before run).
SCRIPT = "import sys; from langgraph_durable import cli; sys.exit(cli.run() if hasattr(cli, 'run') else cli.main())"
# The two ways the package's own modules are loaded.
CONDITIONS = {
    "compiled": "The package's bytecode compiled beforehand",
    "source": "The package compiled from source by every run",
}


@dataclass
class Row:
    label: str
    argv: list[str]
    """The process's arguments after the interpreter."""
    status: int
    """The exit status it must end with."""
    says: str = ""
    """Text its output must contain."""
    times: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)
    """Per (checkout, condition): the wall time and CPU time of each timed run."""


def closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rows(missing_db: str | None) -> list[Row]:
    port = closed_port()
    refused_pg = f"postgresql://127.0.0.1:{port}/x"
    refused_redis = f"redis://127.0.0.1:{port}"

    def cli(*argv: str) -> list[str]:
        return ["-c", SCRIPT, *argv]

    out = [
        Row("(python -c pass: the interpreter alone)", ["-c", "pass"], 0),
        Row("(import langgraph.checkpoint.base)", ["-c", "import langgraph.checkpoint.base"], 0),
        Row("--help", cli("--help"), 0, "usage: langgraph-durable"),
        Row("threads --sqlite missing.sqlite", cli("threads", "--sqlite", "missing.sqlite"), 3, "no store at"),
        Row("threads --postgres (nothing listening)", cli("threads", "--postgres", refused_pg), 3, "unreachable"),
        Row("doctor --postgres (nothing listening)", cli("doctor", "--postgres", refused_pg), 1, "DOWN: postgres"),
        Row("doctor --redis (nothing listening)", cli("doctor", "--redis", refused_redis), 1, "DOWN: redis"),
    ]
    if missing_db is not None:
        out += [
            Row("threads --postgres (no such database)", cli("threads", "--postgres", missing_db), 3, "does not exist"),
            Row("doctor --postgres (no such database)", cli("doctor", "--postgres", missing_db), 3, "does not exist"),
        ]
    return out


def copy_package(source: Path, into: Path, *, compiled: bool) -> Path:
    """`source`'s langgraph_durable/ copied under `into` (without bytecode,
    or compiled); the directory to put on the path."""
    into.mkdir(parents=True)
    shutil.copytree(
        source / "langgraph_durable", into / "langgraph_durable", ignore=shutil.ignore_patterns("__pycache__")
    )
    if compiled:
        compileall.compile_dir(into / "langgraph_durable", quiet=1)
    return into


def label(source: Path) -> str:
    state = git_state(source)
    return state.split()[0] + ("+" if "uncommitted" in state else "")


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(row: Row, env: dict[str, str], cwd: Path, problems: list[str]) -> tuple[float, float]:
    """One run of `row`: its wall time and its CPU time (user and system) in
    seconds (a surprise goes to `problems`)."""
    cpu = cpu_of_children()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *row.argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - start, cpu_of_children() - cpu
    output = done.stdout + done.stderr
    if done.returncode != row.status or row.says not in output:
        problem = f"{row.label}: exit {done.returncode} (expected {row.status}): {output.strip()[-300:]!r}"
        if problem not in problems:
            problems.append(problem)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each row in each condition (default 7)")
    parser.add_argument("--quick", action="store_true", help="one timed run each, to check that it works")
    parser.add_argument(
        "--source",
        action="append",
        help="a checkout whose package is measured (default: this one); give it again to compare checkouts",
    )
    parser.add_argument("--output", default=str(HERE / "RESULTS_CLI.md"))
    parser.add_argument("--write", action="store_true", help="also overwrite the results file")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    sources = [Path(s).resolve() for s in args.source or [HERE.parent]]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    # A column names its checkout's commit ("+": with uncommitted changes) when there are several.
    codes = {label(source) if len(sources) > 1 else "": source for source in sources}
    if len(codes) < len(sources):
        parser.error("two --source checkouts at the same commit, both clean or both changed: give each once")
    load = os.getloadavg()[0]
    problems: list[str] = []
    notes: list[str] = []
    missing_db = None
    if is_loopback(POSTGRES_URL):
        missing_db = database_url(POSTGRES_URL, f"lgd_bench_cli_absent_{uuid.uuid4().hex[:8]}")
    else:
        notes.append("The no-such-database rows were skipped: the test Postgres is not on loopback.")
    measured = rows(missing_db)
    with tempfile.TemporaryDirectory(prefix="lgd_bench_cli_") as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
        base.pop("PYTHONPYCACHEPREFIX", None)
        envs = {
            (code, condition): {
                **base,
                "PYTHONPATH": str(
                    copy_package(source, Path(tmp) / f"{i}_{condition}", compiled=condition == "compiled")
                ),
                "PYTHONDONTWRITEBYTECODE": "1",  # the source copy stays without bytecode
            }
            for i, (code, source) in enumerate(codes.items())
            for condition in CONDITIONS
        }
        work = Path(tmp) / "work"  # an empty directory: no local store in it
        work.mkdir()
        for round_ in range(runs + 1):  # the first round is not timed
            for row in measured:
                for key, env in envs.items():
                    took = run(row, env, work, problems)
                    if round_:
                        row.times.setdefault(key, []).append(took)
    lines = []
    for condition, text in CONDITIONS.items():
        columns = [code for code, c in envs if c == condition]
        named = [f"{code} " if code else "" for code in columns]
        lines += [
            f"### {text}",
            "",
            "| command | exit | "
            + " | ".join(f"{name}wall s: median (min-max) | {name}CPU s: median" for name in named)
            + " |",
            "|---|---:|" + "---:|---:|" * len(columns),
        ]
        for row in measured:
            cells = []
            for code in columns:
                wall, cpu = zip(*row.times[code, condition], strict=True)
                cells += [
                    f"{statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f})",
                    f"{statistics.median(cpu):.2f}",
                ]
            lines.append(f"| {row.label} | {row.status} | " + " | ".join(cells) + " |")
        lines.append("")
    body = (
        "\n".join(lines).rstrip()
        + "".join(f"\n\n{n}" for n in notes)
        + "\n\n## Problems\n\n"
        + ("\n".join(f"- {p}" for p in problems) or "None.")
        + "\n"
    )
    print(body)
    if args.write:
        # A checkout is named by its commit, not by where it lies on this machine.
        shown = {s: f"<checkout at {label(Path(s).resolve())}>" for s in args.source or []}
        head = (
            "# Command-line start-up\n\n"
            f"- Date: {started}\n- Command: `python benchmarks/bench_cli.py"
            + "".join(f" {shown.get(a, a)}" for a in sys.argv[1:])
            + "`\n"
            f"- Machine: {machine()}; 1-minute load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end\n"
            f"- Python: {python_version()}\n"
            f"- Code measured: langgraph_durable at git {', '.join(git_state(s) for s in sources)}\n"
            f"- Packages: {package_versions(PACKAGES)}\n"
            f"- Each row: one process, wall time from start to exit in seconds, median and range over {runs} "
            "run(s) after one untimed round, every row taking its turn in every round; the package's own "
            "modules compiled beforehand, or from source by every run (the installed packages keep their "
            "bytecode). 'nothing listening': a loopback port with no server; 'no such database': the test "
            "Postgres, a database name that does not exist.\n\n"
        )
        Path(args.output).write_text(head + body)
        print(f"wrote {args.output}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
