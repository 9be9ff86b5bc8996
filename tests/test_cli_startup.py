"""The command line imports what the command it runs needs, and no more.

A data command that cannot reach its store (nothing listening, a database
that does not exist, a local file that is not there) answers with its one
line and exit status without loading what only a graph run uses (LangGraph's
graph, config and tracing modules, LangChain's runnables and tracers,
LangSmith), nor the driver of a tier it was not given, nor rich when it
writes nothing but that line. ``--help`` and ``--version`` load none of
LangChain, LangGraph, the drivers or rich.

The saver itself subclasses LangGraph's ``BaseCheckpointSaver``, whose
module imports ``langchain_core.runnables.config`` (and pydantic): a command
that opens the saver pays for those, and nothing here forbids them. How long
each command takes is measured in seconds by ``benchmarks/bench_cli.py``;
no timing is asserted here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from langgraph_durable import cli

from .conftest import POSTGRES_URL, database_url, unavailable

# Runs `cli.main` on its arguments, then prints the exit status and every module loaded.
PROBE = """
import json, sys
from langgraph_durable import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

# What a graph run needs and a command never runs.
RUN_ONLY = (
    "langsmith",
    "langgraph.config",
    "langgraph.types",
    "langgraph.graph",
    "langgraph.pregel",
    "langchain_core.runnables.base",
    "langchain_core.tracers",
)
# Not needed before the arguments are parsed.
NOT_FOR_HELP = ("langchain_core", "langgraph", "langsmith", "psycopg", "psycopg_pool", "redis", "rich")


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(tmp_path: Path, *argv: str) -> tuple[int, list[str], str]:
    """`argv` run by the command line in a process of its own, from an empty
    directory and without the LANGGRAPH_DURABLE_ variables: its exit status,
    the modules it had loaded when it ended, and its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *output, last = done.stdout.splitlines()
    probe = json.loads(last)
    return probe["code"], probe["modules"], "\n".join(output) + done.stderr


def loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are one of `packages` or inside one."""
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


@pytest.mark.parametrize(
    ("command", "status", "says", "forbidden"),
    [
        # One line on stderr: not even rich is loaded for it.
        pytest.param(
            ["threads", "--postgres", "postgresql://127.0.0.1:{port}/x"],
            3,
            "is unreachable",
            ("redis", "rich"),
            id="threads-refused",
        ),
        pytest.param(
            ["history", "t", "--postgres", "postgresql://127.0.0.1:{port}/x"],
            3,
            "is unreachable",
            ("redis", "rich"),
            id="history-refused",
        ),
        pytest.param(
            ["threads", "--postgres", "{missing_db}"], 3, "does not exist", ("redis", "rich"), id="threads-no-database"
        ),
        pytest.param(
            ["doctor", "--postgres", "{missing_db}"], 3, "does not exist", ("redis", "rich"), id="doctor-no-database"
        ),
        # The doctor's table of the tiers, one of them down.
        pytest.param(
            ["doctor", "--postgres", "postgresql://127.0.0.1:{port}/x"],
            1,
            "DOWN: postgres",
            ("redis",),
            id="doctor-postgres-refused",
        ),
        pytest.param(
            ["doctor", "--redis", "redis://127.0.0.1:{port}"], 1, "DOWN: redis", (), id="doctor-redis-refused"
        ),
        # Told from the flags alone, before the saver is loaded.
        pytest.param(
            ["threads", "--sqlite", "missing.sqlite"],
            3,
            "no store at",
            ("langchain_core", "langgraph", "psycopg"),
            id="threads-missing-file",
        ),
    ],
)
def test_a_data_command_that_cannot_reach_its_store_loads_nothing_a_graph_run_needs(
    tmp_path: Path, command: list[str], status: int, says: str, forbidden: tuple[str, ...]
) -> None:
    missing_db = database_url(POSTGRES_URL, f"lgd_absent_{uuid.uuid4().hex[:12]}")
    if "{missing_db}" in command:
        try:
            psycopg.connect(POSTGRES_URL, connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            unavailable(f"Postgres is not reachable ({exc}): the missing database is looked for on it")
    argv = [a.format(port=closed_port(), missing_db=missing_db) for a in command]
    code, modules, output = run_cli(tmp_path, *argv)
    assert code == status and says in output, (code, output)
    assert loaded(modules, RUN_ONLY + forbidden) == []


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["threads", "--help"], ["doctor", "--postgress", "x"]])
def test_help_version_and_usage_errors_load_no_langchain_langgraph_driver_or_rich(
    tmp_path: Path, argv: list[str]
) -> None:
    code, modules, _ = run_cli(tmp_path, *argv)
    assert code in (cli.EXIT_OK, cli.EXIT_USAGE)
    assert loaded(modules, NOT_FOR_HELP) == []


def test_the_program_answers_as_main_does(tmp_path: Path) -> None:
    """``python -m langgraph_durable`` and the ``langgraph-durable`` script run
    `cli.run`: `main`, then the exit with its status (its garbage collector
    frozen, so that finalizing the interpreter does not walk every object)."""
    import tomllib

    scripts = tomllib.loads((Path(cli.__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"langgraph-durable": "langgraph_durable.cli:run"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    refused = f"postgresql://127.0.0.1:{closed_port()}/x"
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_durable", "threads", "--postgres", refused, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == cli.EXIT_CANNOT_RUN
    assert len(done.stderr.splitlines()) == 1 and "is unreachable" in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"]["exit_status"] == cli.EXIT_CANNOT_RUN
