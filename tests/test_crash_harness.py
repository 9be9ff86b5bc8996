"""Crash-and-resume under SIGKILL: real graphs in child processes, killed at
random points (inside nodes, between super-steps, in the middle of a put),
resumed in fresh processes, for each tier configuration and durability mode,
through both faces of the saver.

Each test checks (see `tests.crash_harness`): the final state equals an
uncrashed run; no acknowledged checkpoint or write is lost from any tier;
every non-resumable action ran exactly once; every unconfirmed action was
escalated, and only those. It fails unless its target number of kills
landed inside started runs (a kill before the worker began the run is
retried, not counted) within its time limit.

The workers drive one face of the saver: ``invoke`` (``graph.invoke``, the
sync face) or ``ainvoke`` (``graph.ainvoke``, the async face), named in the
ids of the parametrized tests and in every test's printed figures. Every
configuration runs every durability mode; each one but all three tiers runs
one mode (a different one from configuration to configuration) on the async
face and the other two on the sync face, and all three tiers run every mode
on the sync face and the default one ("async") on both. Writing behind runs
one mode on each face; keeping leases runs on the async face, the archive
and the worker program on the sync one.

CI runs a few kills per test. For thousands::

    LANGGRAPH_DURABLE_CRASH_KILLS=2000 pytest -s tests/test_crash_harness.py
    python -m tests.crash_harness --kills 5000 --tiers all --durability all [--api async]

Other knobs: LANGGRAPH_DURABLE_CRASH_SEED (default "ci"),
LANGGRAPH_DURABLE_CRASH_TIME (seconds per test; default 120 for the CI
budget, 15 to 60 times what a test takes alone, none when KILLS is set),
LANGGRAPH_DURABLE_CRASH_SPAWN=exec (start every worker as ``python -m
tests.crash_worker`` instead of forking it from a pre-imported server).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import CONFIGS, REDIS_URL
from .crash_harness import (
    DURABILITIES,
    ExecSpawner,
    Figures,
    Harness,
    Problem,
    Settings,
    Spawner,
    Tiers,
    crash_test,
    make_spawner,
)

CI_KILLS = {"sqlite": 5, "redis": 5}  # per test; the Postgres configurations are slower
CI_KILLS_DEFAULT = 4
# Seconds a CI test has to reach its kills. Only a failing test waits it out:
# a passing one stops at its target, in a few seconds alone and several
# times that with other test processes on the cores.
CI_TIME = 120.0
ALL_TIERS = "sqlite+redis+postgres"
FACE = {"sync": "invoke", "async": "ainvoke"}  # what a test's id calls its api: the graph method its workers call


def _cases() -> list[Any]:
    """(tiers, durability, api): every configuration and mode on the sync
    face, except that each configuration but all three tiers runs one mode
    on the async face instead (rotating through the modes, so each mode
    meets the async face on two of them). All three tiers, the default
    deployment, keep every mode on the sync face and add the default run on
    the async face: ``graph.ainvoke`` with its default durability, "async".
    Both faces of all three tiers in every mode would add two more of the
    slowest cases for little: those modes meet the async face elsewhere."""
    cases = []
    for i, tiers in enumerate(CONFIGS):
        for durability in DURABILITIES:
            if tiers == ALL_TIERS:
                apis = ["sync", "async"] if durability == "async" else ["sync"]
            else:
                apis = ["async" if durability == DURABILITIES[i % len(DURABILITIES)] else "sync"]
            cases += [pytest.param(tiers, durability, api, id=f"{tiers}-{durability}-{FACE[api]}") for api in apis]
    return cases


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


def _time_limit() -> float | None:
    if _env("TIME"):
        return float(_env("TIME"))
    return None if _env("KILLS") else CI_TIME


def _report(tiers: str, durability: str, seed: str, fig: Figures, kills: int) -> None:
    print(f"\n[crash {tiers}/{durability} seed={seed}] {fig.summary()}")
    # crash_test raises when the target is missed; asserted again so no test passes below its target.
    assert fig.kills >= kills, f"{fig.kills} of {kills} kills landed inside a started run"
    assert fig.failures() == {}, fig.summary()
    assert fig.lost_checkpoints == 0 and fig.lost_writes == 0
    assert fig.repeated == 0 and fig.missing_effects == 0
    assert fig.wrong_states == 0


@pytest.mark.parametrize(("tiers", "durability", "api"), _cases())
def test_kill_and_resume(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, tiers: str, durability: str, api: str
) -> None:
    kills_env = _env("KILLS")
    kills = int(kills_env) if kills_env else CI_KILLS.get(tiers, CI_KILLS_DEFAULT)
    seed = _env("SEED", "ci")
    fig = crash_test(
        spawner,
        _tiers(request, tiers, tmp_path),
        durability,
        tmp_path,
        kills=kills,
        seed=seed,
        time_limit=_time_limit(),
        settings=Settings(api=api),
    )
    _report(f"{tiers} {FACE[api]}", durability, seed, fig, kills)


def _ci_kills() -> int:
    return int(_env("KILLS")) if _env("KILLS") else CI_KILLS_DEFAULT


# write="local" in two modes, one on each face (as test_kill_and_resume
# picks, rather than both faces in both modes).
@pytest.mark.parametrize(
    ("durability", "api"), [("sync", "sync"), ("exit", "async")], ids=["sync-invoke", "exit-ainvoke"]
)
def test_kill_and_resume_writing_behind(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, durability: str, api: str
) -> None:
    """``write="local"``: an acknowledged checkpoint is only in the killed
    worker's local journal until the replicator ships it, in batches; the
    next worker on the same file ships what is owed, and nothing is lost,
    repeated or forked."""
    kills = _ci_kills()
    seed = _env("SEED", "ci")
    fig = crash_test(
        spawner,
        _tiers(request, ALL_TIERS, tmp_path),
        durability,
        tmp_path,
        kills=kills,
        seed=seed,
        time_limit=_time_limit(),
        settings=Settings(api=api, write="local"),
    )
    _report(f"{ALL_TIERS} write=local {FACE[api]}", durability, seed, fig, kills)


def test_kill_and_resume_keeping_leases(request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path) -> None:
    """``lease_linger``: each worker keeps its run's lease after the run and
    reads its threads from its local file meanwhile; a worker killed while
    keeping one is taken over at once by the next (same host, dead process),
    and nothing is lost, repeated or forked. On the async face, whose lease
    keeper also settles an async run's end (the archive test runs the sync
    face)."""
    api = "async"
    kills = _ci_kills()
    seed = _env("SEED", "ci")
    fig = crash_test(
        spawner,
        _tiers(request, ALL_TIERS, tmp_path),
        "sync",
        tmp_path,
        kills=kills,
        seed=seed,
        time_limit=_time_limit(),
        settings=Settings(api=api, lease_linger=30.0),
    )
    _report(f"{ALL_TIERS} lease_linger=30 {FACE[api]}", "sync", seed, fig, kills)


@pytest.mark.s3
def test_kill_and_resume_with_an_archive(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, archive_url: str
) -> None:
    """``archive=``: every worker ships to the archive behind its steps; a
    killed worker's unshipped threads are shipped by the next one (its
    replica's rescan, or its own run's ship of the thread), and at the end
    the archive holds every acknowledged checkpoint and write. On the sync
    face (the lease test runs the async one)."""
    api = "sync"
    kills = _ci_kills()
    seed = _env("SEED", "ci")
    aws = tuple(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("AWS_"))
    tiers = dataclasses.replace(_tiers(request, ALL_TIERS, tmp_path), archive=archive_url, archive_env=aws)
    fig = crash_test(
        spawner,
        tiers,
        "sync",
        tmp_path,
        kills=kills,
        seed=seed,
        time_limit=_time_limit(),
        settings=Settings(api=api),
    )
    _report(f"{ALL_TIERS} archive {FACE[api]}", "sync", seed, fig, kills)


def test_the_worker_program_itself(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The same, through ``python -m tests.crash_worker`` processes (no fork
    server): the command line the harness documents, on every tier."""
    seed = _env("SEED", "ci")
    spawner = ExecSpawner()
    fig = crash_test(
        spawner,
        _tiers(request, ALL_TIERS, tmp_path),
        "sync",
        tmp_path,
        kills=1,
        seed=seed,
        time_limit=CI_TIME,
    )
    _report(f"{ALL_TIERS} invoke", "sync/exec", seed, fig, 1)


def test_a_kill_before_the_run_started_is_not_counted(
    request: pytest.FixtureRequest, spawner: Spawner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every kill aimed at the worker's first event (its start, before the
    saver is open): none lands in a run, so none counts, each attempt is
    retried, and the test fails on its unmet target when the time is up."""
    monkeypatch.setattr(Harness, "_plan_kill", lambda self, rng, progress: ("event", 1.0))
    # The limit must leave time for at least one attempt: on a loaded machine
    # 1 s may not see one, so a longer limit is tried before the test gives up.
    for limit in (1.0, 5.0, 30.0):
        with pytest.raises(Problem, match=r"only 0 of the 1 kills landed inside a started run") as caught:
            crash_test(
                spawner, _tiers(request, "sqlite", tmp_path), "sync", tmp_path, kills=1, seed="early", time_limit=limit
            )
        if re.search(r"\(([1-9]\d*) more landed before the worker began the run", str(caught.value)):
            return
    raise AssertionError(f"no kill was even attempted in {limit} s: {caught.value}")
