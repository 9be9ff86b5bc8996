"""State versions on the command line, against real compiled graphs on real
tiers: ``migrate`` (a dry run that writes nothing, the real thing, a step
that raises, a run killed part-way and run again), ``threads``' count of
threads per state version, and ``verify``'s threads at a version no step
brings up.

The app is `tests.migration_app`: version 1 of its graph keeps ``topic``,
version 2 calls it ``subject`` (``--migrations tests.migration_app:migrations``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from langgraph_durable import DurableSaver, Migrations, browse, cli
from tests.flat_options import durable_options

from . import migration_app as app
from . import test_cli
from .conftest import REDIS_URL
from .test_cli import check_envelope, run
from .test_cli_safety import snapshot

no_tier_env = test_cli.no_tier_env

ROOT = Path(__file__).resolve().parent.parent
SPEC = "tests.migration_app:migrations"


@dataclass
class Store:
    """One tier configuration: the saver options of the app's replicas, and
    the same store as the command line's flags."""

    options: dict[str, Any]
    flags: list[str]
    postgres_url: str | None
    redis_prefix: str | None

    def saver(self, **more: Any) -> DurableSaver:
        return DurableSaver(**durable_options({**self.options, **more}))

    def snapshot(self) -> dict[str, Any]:
        """Every row and key the tiers hold."""
        return snapshot(self.postgres_url, self.redis_prefix, self.options["sqlite"])


def _store(request: pytest.FixtureRequest, tmp_path: Path, tiers: str) -> Store:
    parts = set(tiers.split("+"))
    sqlite = str(tmp_path / "local.sqlite") if "sqlite" in parts else None
    options: dict[str, Any] = {"sqlite": sqlite}
    flags = ["--sqlite", sqlite or "", "--redis", "", "--postgres", ""]
    prefix = postgres_url = None
    if "redis" in parts:
        prefix = request.getfixturevalue("redis_prefix")
        options.update(redis=REDIS_URL, redis_key_prefix=prefix)
        flags += ["--redis", REDIS_URL, "--redis-key-prefix", prefix]
    if "postgres" in parts:
        postgres_url = request.getfixturevalue("postgres_url")
        options["postgres"] = postgres_url
        flags += ["--postgres", postgres_url]
    return Store(options, flags, postgres_url, prefix)


@pytest.fixture(params=["sqlite", "sqlite+redis+postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return _store(request, tmp_path, request.param)


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def start_v1(
    store: Store, topics: dict[str, str], *, migrations: Migrations | None = None, finish: bool = False
) -> None:
    """Run deploy 1's graph on each thread (id -> topic) up to its interrupt(),
    or to its end if `finish`; its checkpoints stamped only with `migrations`."""
    with store.saver(migrations=migrations) as saver:
        graph = app.graph_v1().compile(checkpointer=saver)
        for thread, topic in topics.items():
            graph.invoke({"topic": topic, "notes": []}, _cfg(thread))
            if finish:
                graph.invoke(Command(resume="yes"), _cfg(thread))


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Exit status and the whole --json envelope (checked)."""
    code, out, _ = run(capsys, *argv, "--json")
    return code, check_envelope(code, argv[0], json.loads(out))


def latest(saver: DurableSaver, thread: str) -> Any:
    tup = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    assert tup is not None
    return tup


def count(saver: DurableSaver, thread: str) -> int:
    return len(list(saver.list(_cfg(thread))))


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {t["thread_id"]: t["outcome"] for t in report["threads"]}


# -- migrate ------------------------------------------------------------------------------


def test_a_dry_run_writes_nothing_then_migrate_brings_every_thread_up(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    start_v1(store, {"waiting": "tides"})
    start_v1(store, {"done": "moths"}, finish=True)
    start_v1(store, {"stamped": "ferns"}, migrations=app.migrations_v1)
    with store.saver() as saver:
        before = {t: (str(latest(saver, t).checkpoint["id"]), count(saver, t)) for t in ("done", "stamped", "waiting")}
    tiers = store.snapshot()

    code, doc = run_json(capsys, "migrate", "--dry-run", "--migrations", SPEC, *store.flags)
    report = doc["report"]
    assert code == cli.EXIT_OK and report["dry_run"] is True and report["state_version"] == 2
    assert outcomes(report) == {"done": "would migrate", "stamped": "would migrate", "waiting": "would migrate"}
    for t in report["threads"]:
        assert (t["from_version"], t["to_version"]) == (1, 2) and "subject" in t["detail"], t
        assert t["checkpoint_id"] == before[t["thread_id"]][0]  # the thread's latest, unchanged
    assert report["counts"]["would migrate"] == 3 and report["counts"]["migrated"] == 0
    code, out, err = run(capsys, "migrate", "--dry-run", "--migrations", SPEC, *store.flags)
    assert code == cli.EXIT_OK and "dry run" in err
    assert out.splitlines()[-1] == "3 thread(s) looked at: 3 would migrate; dry run: nothing written"
    assert "would migrate  waiting  1 -> 2  renames topic -> subject; carries 1 of 1 pending writes" in out
    assert store.snapshot() == tiers  # nothing written anywhere: no checkpoint, pin, lease or setting

    code, out, err = run(capsys, "migrate", "--migrations", SPEC, *store.flags)
    assert code == cli.EXIT_OK, err
    assert [line.split()[:4] for line in out.splitlines()[:-1]] == [
        ["migrated", "done", "1", "->"], ["migrated", "stamped", "1", "->"], ["migrated", "waiting", "1", "->"],
    ]  # fmt: skip
    assert out.splitlines()[-1] == "3 thread(s) looked at: 3 migrated"
    with store.saver(migrations=app.migrations) as saver:
        for thread, (old_id, checkpoints) in before.items():
            tup = latest(saver, thread)
            assert tup.metadata["state_version"] == 2 and tup.checkpoint["id"] != old_id
            assert count(saver, thread) == checkpoints + 1  # written beside the old one, which stays
            assert [p.checkpoint_id for p in saver.pins(thread)] == [old_id]  # the recovery point of a rollback
        graph = app.graph_v2().compile(checkpointer=saver)
        values = graph.get_state(_cfg("done")).values
        assert values == {"subject": "moths", "notes": ["outline of moths", "approved: yes", "written about moths"]}
        # The thread waiting at its interrupt() resumes on deploy 2's graph, which reads `subject`.
        done = graph.invoke(Command(resume="ok"), _cfg("waiting"))
        assert done == {"subject": "tides", "notes": ["outline of tides", "approved: ok", "written about tides"]}

    # Run again: nothing left to do.
    code, doc = run_json(capsys, "migrate", "--migrations", SPEC, *store.flags)
    assert code == cli.EXIT_OK and set(outcomes(doc["report"]).values()) == {"current"}
    code, out, _ = run(capsys, "migrate", "--migrations", SPEC, *store.flags)
    assert out == "3 thread(s) looked at: 3 current\n"  # threads already at the version are only counted


def test_a_step_that_raises_leaves_its_thread_as_it_was(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    start_v1(store, {"fine": "owls", "poisoned": app.POISON})
    with store.saver() as saver:
        before = (str(latest(saver, "poisoned").checkpoint["id"]), count(saver, "poisoned"))
    failing = "tests.migration_app:failing"

    code, doc = run_json(capsys, "migrate", "--migrations", failing, *store.flags)
    assert code == cli.EXIT_FINDINGS and doc["error"]["type"] == "findings"
    report = doc["report"]
    assert outcomes(report) == {"fine": "migrated", "poisoned": "failed"}
    failed = next(t for t in report["threads"] if t["outcome"] == "failed")
    assert failed["from_version"] == 1 and failed["to_version"] is None
    assert "rename_unless_poisoned" in failed["detail"] and "ValueError" in failed["detail"]
    with store.saver() as saver:
        tup = latest(saver, "poisoned")
        assert (str(tup.checkpoint["id"]), count(saver, "poisoned")) == before
        assert "state_version" not in tup.metadata and saver.pins("poisoned") == []
        assert tup.checkpoint["channel_values"]["topic"] == app.POISON

    # Run again with the bug still there: the migrated thread is current, the other fails again.
    code, out, _ = run(capsys, "migrate", "--migrations", failing, *store.flags)
    assert code == cli.EXIT_FINDINGS
    lines = out.splitlines()
    assert lines[0].startswith("failed         poisoned  1       migrating thread 'poisoned'")
    assert lines[1] == "2 thread(s) looked at: 1 current, 1 failed"
    assert lines[2].startswith("1 failed: a step that raised wrote nothing: fix it and run migrate again")
    # The bug fixed, the rest goes.
    code, doc = run_json(capsys, "migrate", "--migrations", SPEC, *store.flags)
    assert code == cli.EXIT_OK and outcomes(doc["report"]) == {"fine": "current", "poisoned": "migrated"}


def test_a_killed_migration_carries_on_where_it_stopped(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A paced run killed with SIGKILL between two threads; the next run
    finds the threads it migrated current and migrates the rest."""
    store = _store(request, tmp_path, "sqlite+redis+postgres")
    threads = ["t1", "t2", "t3"]
    start_v1(store, {t: f"topic {t}" for t in threads})
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_") or "TEST" in k}
    argv = ["migrate", "--pace", "5", "--migrations", SPEC, *store.flags]
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_durable", *argv],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Another replica watching the shared tiers (no local file of its own).
        with store.saver(sqlite=None, read_only=True) as reader:
            deadline = time.monotonic() + 60
            while browse.stamped_version(latest(reader, "t1").metadata) != 2:
                assert proc.poll() is None and time.monotonic() < deadline, "the first thread was never migrated"
                time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # in the 5 s pause before the second thread
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with store.saver(sqlite=None, read_only=True) as reader:
        assert [browse.stamped_version(latest(reader, t).metadata) for t in threads] == [2, None, None]

    code, doc = run_json(capsys, "migrate", "--migrations", SPEC, *store.flags)
    assert code == cli.EXIT_OK
    assert outcomes(doc["report"]) == {"t1": "current", "t2": "migrated", "t3": "migrated"}
    with store.saver(migrations=app.migrations) as saver:
        for thread in threads:
            assert len(saver.pins(thread)) == 1  # each migrated once
        values = app.graph_v2().compile(checkpointer=saver).invoke(Command(resume="yes"), _cfg("t2"))
        assert values["notes"][-1] == "written about topic t2"


# -- threads and verify -------------------------------------------------------------------


def test_threads_counts_the_threads_of_each_state_version(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    start_v1(store, {"plain": "a", "plain2": "b"})
    start_v1(store, {"stamped": "c"}, migrations=app.migrations_v1)

    code, doc = run_json(capsys, "threads", *store.flags)
    report = doc["report"]
    assert code == cli.EXIT_OK and report["running_version"] is None
    assert {t["thread_id"]: t["state_version"] for t in report["threads"]} == {
        "plain": None, "plain2": None, "stamped": 1,
    }  # fmt: skip
    assert report["state_versions"] == [
        {"state_version": 1, "threads": 1, "unstamped": 0, "status": None, "missing": []},
        {"state_version": None, "threads": 2, "unstamped": 2, "status": None, "missing": []},
    ]
    code, out, _ = run(capsys, "threads", *store.flags)
    lines = out.splitlines()
    assert lines[0].split()[-1] == "version" and lines[1].split()[-1] == "none" and lines[3].split()[-1] == "1"
    assert lines[4:6] == [
        "state version 1: 1 thread(s)",
        "state version none: 2 thread(s) unstamped (--migrations says which version that is)",
    ]

    # With the app's migrations, the unstamped are its `unversioned` version (1).
    code, doc = run_json(capsys, "threads", "--migrations", SPEC, *store.flags)
    assert doc["report"]["running_version"] == 2
    assert doc["report"]["state_versions"] == [
        {"state_version": 1, "threads": 3, "unstamped": 2, "status": "older", "missing": []},
    ]
    code, out, _ = run(capsys, "threads", "--migrations", SPEC, *store.flags)
    assert "state version 1: 3 thread(s), 2 of them unstamped (`migrate` brings them up)" in out

    # Deploy 2 starts a thread; a deploy 3 that lost the step from version 1 looks.
    with store.saver(migrations=app.migrations) as saver:
        app.graph_v2().compile(checkpointer=saver).invoke({"subject": "d", "notes": []}, _cfg("new"))
    code, doc = run_json(capsys, "threads", "--migrations", "tests.migration_app:ahead", *store.flags)
    assert doc["report"]["state_versions"] == [
        {"state_version": 2, "threads": 1, "unstamped": 0, "status": "older", "missing": []},
        {"state_version": 1, "threads": 3, "unstamped": 2, "status": "unreachable", "missing": [1]},
    ]
    code, out, _ = run(capsys, "threads", "--migrations", "tests.migration_app:ahead", *store.flags)
    assert out.splitlines()[-3:-1] == [
        "state version 2: 1 thread(s) (`migrate` brings them up)",
        "state version 1: 3 thread(s), 2 of them unstamped (no step from version 1: nothing brings them up)",
    ]
    code, out, _ = run(capsys, "threads", *store.flags)
    assert out.splitlines()[-4:-1] == [
        "state version 2: 1 thread(s)",
        "state version 1: 1 thread(s)",
        "state version none: 2 thread(s) unstamped (--migrations says which version that is)",
    ]


def test_verify_names_the_threads_no_step_brings_up(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    start_v1(store, {"old": "a"})
    with store.saver(migrations=app.migrations_v3) as saver:  # a replica of deploy 3 started a thread
        app.graph_v2().compile(checkpointer=saver).invoke({"subject": "b", "notes": []}, _cfg("newest"))

    # Without --migrations, verify is what it was.
    code, doc = run_json(capsys, "verify", *store.flags)
    assert code == cli.EXIT_OK and doc["report"]["state_versions"] is None
    code, out, _ = run(capsys, "verify", *store.flags)
    assert "state version" not in out and "UNREACHABLE" not in out

    # Deploy 2: the newer thread is listed, no finding (deploy 3's replicas run it).
    code, doc = run_json(capsys, "verify", "--migrations", SPEC, *store.flags)
    versions = doc["report"]["state_versions"]
    assert code == cli.EXIT_OK and versions["running_version"] == 2 and versions["unreachable"] == []
    assert versions["newer"] == [{"thread_id": "newest", "state_version": 3, "stamped": True, "missing": []}]
    assert [(v["state_version"], v["threads"], v["status"]) for v in versions["versions"]] == [
        (3, 1, "newer"), (1, 1, "older"),
    ]  # fmt: skip
    code, out, _ = run(capsys, "verify", "--migrations", SPEC, *store.flags)
    assert "NEWER  thread 'newest' at state version 3: this code (version 2) neither runs nor writes it" in out

    # A deploy 3 that lost the step from version 1: the old thread is a finding.
    ahead = "tests.migration_app:ahead"
    code, doc = run_json(capsys, "verify", "--migrations", ahead, *store.flags)
    versions = doc["report"]["state_versions"]
    assert code == cli.EXIT_FINDINGS and doc["error"]["type"] == "findings"
    assert versions["unreachable"] == [{"thread_id": "old", "state_version": 1, "stamped": False, "missing": [1]}]
    assert versions["newer"] == []
    code, out, _ = run(capsys, "verify", "--migrations", ahead, *store.flags)
    assert code == cli.EXIT_FINDINGS
    assert "UNREACHABLE  thread 'old' at state version 1 (unstamped): no migration step from version 1" in out
    assert out.splitlines()[-1] == (
        "state versions against version 3: 1 at version 3 (current), 1 at version 1 (unreachable); "
        "1 unreachable, 0 newer"
    )
    code, doc = run_json(capsys, "verify", "--thread", "newest", "--migrations", ahead, *store.flags)
    assert code == cli.EXIT_OK and doc["report"]["state_versions"]["unreachable"] == []
    # migrate says the same: deploy 3 cannot reach the old thread; deploy 2 would migrate it, not the newer.
    code, doc = run_json(capsys, "migrate", "--dry-run", "--migrations", ahead, *store.flags)
    assert code == cli.EXIT_FINDINGS and outcomes(doc["report"]) == {"newest": "current", "old": "unreachable"}
    code, doc = run_json(capsys, "migrate", "--dry-run", "--migrations", SPEC, *store.flags)
    assert code == cli.EXIT_OK and outcomes(doc["report"]) == {"newest": "newer", "old": "would migrate"}


# -- naming the migrations ----------------------------------------------------------------


def test_migrate_without_migrations_or_with_a_wrong_spec_says_how_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "new" / "local.sqlite"  # not there: a writable migrate would create it
    flags = ["--sqlite", str(new)]
    for dry_run in ([], ["--dry-run"]):
        code, doc = run_json(capsys, "migrate", *dry_run, *flags)
        assert code == cli.EXIT_CANNOT_RUN and doc["error"]["type"] == "ConfigError"
        assert "--migrations MODULE:ATTR" in doc["error"]["message"]
        assert "LANGGRAPH_DURABLE_MIGRATIONS" in doc["error"]["message"]
    for spec, says in (
        ("nocolon", "takes MODULE:ATTR"),
        ("tests.migration_app:nothing", "cannot import it (AttributeError"),
        ("no_such_module_here:migrations", "cannot import it (ModuleNotFoundError"),
        ("tests.migration_app:NOT_MIGRATIONS", "is a dict, not a langgraph_durable.Migrations"),
        ("tests.migration_app:graph_v1", "is a StateGraph, not a langgraph_durable.Migrations"),
    ):
        code, out, err = run(capsys, "migrate", "--migrations", spec, *flags)
        assert code == cli.EXIT_CANNOT_RUN and out == ""
        assert says in err and "--migrations" in err and err.count("\n") == 1, err
    monkeypatch.setenv("LANGGRAPH_DURABLE_MIGRATIONS", "tests.migration_app:NOT_MIGRATIONS")
    code, _, err = run(capsys, "migrate", *flags)
    assert code == cli.EXIT_CANNOT_RUN and err.startswith("langgraph-durable: error: LANGGRAPH_DURABLE_MIGRATIONS")
    assert list(tmp_path.iterdir()) == []

    code, _, err = run(capsys, "migrate", "--dry-run", "--migrations", SPEC, *flags)
    assert code == cli.EXIT_CANNOT_RUN and "no store at" in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as info:
        cli.main(["migrate", "--pace", "-1", "--migrations", SPEC, *flags])
    assert info.value.code == cli.EXIT_USAGE and "a pause is a number of seconds from 0" in capsys.readouterr().err


def test_the_migrations_from_the_environment_or_a_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite = str(tmp_path / "local.sqlite")
    with DurableSaver(sqlite=sqlite) as saver:
        app.graph_v1().compile(checkpointer=saver).invoke({"topic": "x", "notes": []}, _cfg("t"))
    flags = ["--sqlite", sqlite]
    monkeypatch.setenv("LANGGRAPH_DURABLE_MIGRATIONS", SPEC)
    with DurableSaver.from_env(sqlite=sqlite) as saver:
        assert saver.migrations is app.migrations
    code, doc = run_json(capsys, "migrate", "--dry-run", *flags)
    assert code == cli.EXIT_OK and outcomes(doc["report"]) == {"t": "would migrate"}
    # The flag overrides the variable; a function returning the Migrations does too.
    code, doc = run_json(capsys, "migrate", "--dry-run", "--migrations", "tests.migration_app:ahead", *flags)
    assert code == cli.EXIT_FINDINGS and outcomes(doc["report"]) == {"t": "unreachable"}
    code, doc = run_json(capsys, "migrate", "--dry-run", "--migrations", "tests.migration_app:make_migrations", *flags)
    assert code == cli.EXIT_OK and doc["report"]["state_version"] == 2
    code, doc = run_json(capsys, "migrate", "--dry-run", "--thread", "t", "--thread", "nobody", *flags)
    assert code == cli.EXIT_OK and outcomes(doc["report"]) == {"t": "would migrate", "nobody": "empty"}
