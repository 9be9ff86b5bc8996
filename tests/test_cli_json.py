"""Every command with --json prints the one envelope: ``{"command", "ok",
"version", "ts", "report"}`` plus ``"error"`` when the exit status is not 0
(`cli.envelope`), against real SQLite, Redis, Postgres and an S3 archive."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import cli

from . import test_cli
from .graphs import interrupt_graph

pytestmark = [pytest.mark.s3]

no_tier_env = test_cli.no_tier_env
store = test_cli.store


def _stock_sqlite(path: Path) -> str:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    interrupt_graph().compile(checkpointer=SqliteSaver(conn)).invoke({"messages": [], "n": 0}, test_cli._cfg("old"))
    conn.close()
    return str(path)


def _envelope(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, Any]]:
    try:
        code = cli.main([*argv, "--json"])
    except SystemExit as exit_:  # a usage error
        code = int(exit_.code or 0)
    out = capsys.readouterr().out
    return code, test_cli.check_envelope(code, argv[0], json.loads(out))  # one document, nothing else


def test_every_command_prints_the_envelope(
    store: list[str], archive_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = ["--archive", archive_url]
    code, doc = _envelope(capsys, ["history", "loop", *store])
    latest = doc["report"]["checkpoints"][0]["checkpoint_id"]
    time.sleep(1.1)  # for archive --idle-after 1s
    runs: list[tuple[list[str], int]] = [
        (["threads", *store], 0),
        (["threads", "--archived", *store, *archive], 0),
        (["history", "loop", *store], 0),
        (["history", "nobody", *store], 1),
        (["show", "loop", *store], 0),
        (["verify", *store], 0),
        (["repair", *store], 0),
        (["doctor", *store], 0),
        (["actions", "--thread", "asks", *store], 0),
        (["resolve-action", "--thread", "asks", "--key", "email:1", "--done", *store], 0),
        (["quarantine", "list", *store], 0),
        (["quarantine", "restore", "--all", *store], 0),
        (["quarantine", "purge", "--older-than", "30d", "--dry-run", *store], 0),
        (["import", "--from", _stock_sqlite(tmp_path / "stock.sqlite"), *store], 0),
        (["prune", "--keep-last", "1", "--dry-run", *store], 0),
        (["migrate", "--dry-run", "--migrations", "tests.migration_app:migrations", *store], 0),
        (["promote", *store], 3),  # a cache of the shared tiers: nothing of its own to copy
        (["pin", "loop", *store], 0),
        (["pins", "loop", *store], 0),
        (["unpin", "loop", latest, *store], 0),
        (["unpin", "loop", latest, *store], 1),
        (["archive", "--idle-after", "1s", "--dry-run", *store, *archive], 0),
        (["restore", "--all", *store, *archive], 0),
        (["verify", *store, "--redis", "redis://127.0.0.1:1/0"], 3),
        (["doctor", "--postgress", "x", *store], 2),
    ]
    seen: set[str] = set()
    for argv, expected in runs:
        code, doc = _envelope(capsys, argv)
        assert code == expected, (argv, doc)
        seen.add(argv[0])
        if expected == 3:
            assert doc["error"]["type"] == ("ConfigError" if argv[0] == "promote" else "TierUnavailable")
        if expected == 2:
            assert doc["error"] == {
                "type": "usage",
                "message": "unknown option --postgress (did you mean --postgres?)",
                "exit_status": 2,
            }
    # The demo runs workers of its own: in a process of its own, on a SQLite file.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    demo = ["demo", "--steps", "3", "--kill-after", "1", "--sqlite", str(tmp_path / "demo.sqlite")]
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_durable", *demo, "--redis", "", "--postgres", "", "--json"],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    test_cli.check_envelope(done.returncode, "demo", json.loads(done.stdout))
    seen.add("demo")
    # Every public command was run: a new one gets a line here.
    assert seen == {c.name for c in cli.COMMANDS if not c.internal}
    for c in cli.COMMANDS:
        assert c.json or c.internal, f"{c.name} reports something: give it --json"
