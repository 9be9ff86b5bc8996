"""Crash-and-resume under SIGKILL: real graphs in child processes, killed at
random points (inside nodes, between super-steps, in the middle of a put),
resumed in fresh processes, for each tier configuration and durability mode.

Each test checks (see `tests.crash_harness`): the final state equals an
uncrashed run; no acknowledged checkpoint or write is lost from any tier;
every non-resumable action ran exactly once; every unconfirmed action was
escalated, and only those.

CI runs a few kills per test. For thousands::

    LANGGRAPH_DURABLE_CRASH_KILLS=2000 pytest -s tests/test_crash_harness.py
    python -m tests.crash_harness --kills 5000 --tiers all --durability all

Other knobs: LANGGRAPH_DURABLE_CRASH_SEED (default "ci"),
LANGGRAPH_DURABLE_CRASH_TIME (seconds per test; default 60 for the CI
budget, none when KILLS is set), LANGGRAPH_DURABLE_CRASH_SPAWN=exec (start
every worker as ``python -m tests.crash_worker`` instead of forking it from a
pre-imported server), LANGGRAPH_DURABLE_CRASH_API=async (graph.ainvoke).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import CONFIGS, REDIS_URL
from .crash_harness import DURABILITIES, ExecSpawner, Figures, Settings, Spawner, Tiers, crash_test, make_spawner

CI_KILLS = {"sqlite": 5, "redis": 5}  # per test; the Postgres configurations are slower
CI_KILLS_DEFAULT = 4


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"LANGGRAPH_DURABLE_CRASH_{name}", default)


@pytest.fixture(scope="session")
def spawner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawner]:
    made = make_spawner(_env("SPAWN", "fork"), tmp_path_factory.mktemp("crash-spawner"))
    try:
        yield made
    finally:
        made.close()


def _tiers(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> Tiers:
    parts = name.split("+")
    return Tiers(
        name=name,
        sqlite=str(tmp_path / "local.sqlite") if "sqlite" in parts else None,
        redis=REDIS_URL if "redis" in parts else None,
        redis_prefix=request.getfixturevalue("redis_prefix") if "redis" in parts else "",
        postgres=request.getfixturevalue("postgres_url") if "postgres" in parts else None,
    )


def _report(tiers: str, durability: str, seed: str, fig: Figures) -> None:
    print(f"\n[crash {tiers}/{durability} seed={seed}] {fig.summary()}")
    assert fig.kills >= 1, "no worker was killed"
    assert fig.failures() == {}, fig.summary()
    assert fig.lost_checkpoints == 0 and fig.lost_writes == 0
    assert fig.repeated == 0 and fig.missing_effects == 0
    assert fig.wrong_states == 0


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("tiers", CONFIGS)
def test_kill_and_resume(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, tiers: str, durability: str
) -> None:
    kills_env = _env("KILLS")
    kills = int(kills_env) if kills_env else CI_KILLS.get(tiers, CI_KILLS_DEFAULT)
    time_env = _env("TIME")
    time_limit = float(time_env) if time_env else (None if kills_env else 60.0)
    seed = _env("SEED", "ci")
    fig = crash_test(
        spawner,
        _tiers(request, tiers, tmp_path),
        durability,
        tmp_path,
        kills=kills,
        seed=seed,
        time_limit=time_limit,
        settings=Settings(api=_env("API", "sync")),
    )
    _report(tiers, durability, seed, fig)


@pytest.mark.parametrize("durability", ["sync", "exit"])
def test_kill_and_resume_writing_behind(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, durability: str
) -> None:
    """``write="local"``: an acknowledged checkpoint is only in the killed
    worker's local journal until the replicator ships it, in batches; the
    next worker on the same file ships what is owed, and nothing is lost,
    repeated or forked."""
    kills_env = _env("KILLS")
    kills = int(kills_env) if kills_env else CI_KILLS_DEFAULT
    seed = _env("SEED", "ci")
    fig = crash_test(
        spawner,
        _tiers(request, "sqlite+redis+postgres", tmp_path),
        durability,
        tmp_path,
        kills=kills,
        seed=seed,
        time_limit=None if kills_env else 60.0,
        settings=Settings(api=_env("API", "sync"), write="local"),
    )
    _report("sqlite+redis+postgres write=local", durability, seed, fig)


def test_kill_and_resume_keeping_leases(request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path) -> None:
    """``lease_linger``: each worker keeps its run's lease after the run and
    reads its threads from its local file meanwhile; a worker killed while
    keeping one is taken over at once by the next (same host, dead
    process), and nothing is lost, repeated or forked."""
    kills_env = _env("KILLS")
    seed = _env("SEED", "ci")
    fig = crash_test(
        spawner,
        _tiers(request, "sqlite+redis+postgres", tmp_path),
        "sync",
        tmp_path,
        kills=int(kills_env) if kills_env else CI_KILLS_DEFAULT,
        seed=seed,
        time_limit=None if kills_env else 60.0,
        settings=Settings(api=_env("API", "sync"), lease_linger=30.0),
    )
    _report("sqlite+redis+postgres lease_linger=30", "sync", seed, fig)


@pytest.mark.s3
def test_kill_and_resume_with_an_archive(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, archive_url: str
) -> None:
    """``archive=``: every worker ships to the archive behind its steps; a
    killed worker's unshipped threads are shipped by the next one (its
    replica's rescan, or its own run's ship of the thread), and at the end
    the archive holds every acknowledged checkpoint and write."""
    kills_env = _env("KILLS")
    seed = _env("SEED", "ci")
    aws = tuple(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("AWS_"))
    tiers = dataclasses.replace(
        _tiers(request, "sqlite+redis+postgres", tmp_path), archive=archive_url, archive_env=aws
    )
    fig = crash_test(
        spawner,
        tiers,
        "sync",
        tmp_path,
        kills=int(kills_env) if kills_env else CI_KILLS_DEFAULT,
        seed=seed,
        time_limit=None if kills_env else 60.0,
        settings=Settings(api=_env("API", "sync")),
    )
    _report("sqlite+redis+postgres archive", "sync", seed, fig)


def test_the_worker_program_itself(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The same, through ``python -m tests.crash_worker`` processes (no fork
    server): the command line the harness documents, on every tier."""
    tiers = "sqlite+redis+postgres"
    seed = _env("SEED", "ci")
    spawner = ExecSpawner()
    fig = crash_test(
        spawner,
        _tiers(request, tiers, tmp_path),
        "sync",
        tmp_path,
        kills=1,
        seed=seed,
        time_limit=120,
        settings=Settings(event_kill_share=1.0),  # a timer would mostly land in the imports
    )
    _report(tiers, "sync/exec", seed, fig)
