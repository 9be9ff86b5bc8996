"""The command line against real tiers: every command, as text and as JSON,
with its exit status.

The store is made by running real compiled graphs (tests/graphs.py) through a
DurableSaver on SQLite -> Redis -> Postgres: a plain loop, a thread stopped
at an ``interrupt()``, one with a subgraph namespace, and one with long
values; plus a ledger of non-resumable actions.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis as redis_lib

from langgraph_durable import DurableSaver, LedgerEntry, Tiers, __version__, cli
from langgraph_durable.errors import ConfigError

from .conftest import REDIS_URL
from .graphs import interrupt_graph, loop_graph, subgraph_graph

ENV_TIERS = ("LANGGRAPH_DURABLE_SQLITE", "LANGGRAPH_DURABLE_REDIS_URL", "LANGGRAPH_DURABLE_POSTGRES_URL")
LONG = 500  # characters in each message of the "long" thread


@pytest.fixture(autouse=True)
def no_tier_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LANGGRAPH_DURABLE_") and not name.startswith("LANGGRAPH_DURABLE_TEST_"):
            monkeypatch.delenv(name)


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def store(tmp_path: Path, postgres_url: str, redis_prefix: str) -> Iterator[list[str]]:
    """The tier flags of a store holding four threads and a ledger."""
    sqlite = str(tmp_path / "local.sqlite")
    with DurableSaver(
        sqlite=sqlite, redis=REDIS_URL, postgres=postgres_url, tiers=Tiers(redis_key_prefix=redis_prefix)
    ) as saver:
        loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("loop"))
        loop_graph(1, message_bytes=LONG).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("long"))
        interrupt_graph().compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("asks"))
        subgraph_graph().compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("nested"))
        saver.record_action("asks", LedgerEntry("email:1", "intent", updated_at=1.0))
        saver.record_action("asks", LedgerEntry("charge:1", "done", result={"receipt": "r-1"}, updated_at=2.0))
        saver.record_action("asks", LedgerEntry("cache", "intent", idempotent=True, updated_at=3.0))
    yield ["--sqlite", sqlite, "--redis", REDIS_URL, "--redis-key-prefix", redis_prefix, "--postgres", postgres_url]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


ENVELOPE = {"command", "ok", "version", "ts", "report"}


def check_envelope(code: int, command: str, doc: Any) -> Any:
    """`doc` is the --json envelope of `command` that ended with exit status `code`."""
    assert set(doc) == ENVELOPE | ({"error"} if code else set()), doc
    assert doc["command"] == command and doc["ok"] is (code == 0) and doc["version"] == __version__
    assert doc["ts"].endswith("Z") and datetime.fromisoformat(
        doc["ts"].replace("Z", "+00:00")
    ).utcoffset() == timedelta(0)
    assert isinstance(doc["report"], dict)
    if code:
        error = doc["error"]
        assert set(error) == {"type", "message", "exit_status"} and error["exit_status"] == code and error["message"]
    return doc


def run_envelope(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Exit status and the whole --json envelope (checked)."""
    code, out, _ = run(capsys, *argv, "--json")
    return code, check_envelope(code, argv[0], json.loads(out))  # one document, nothing else


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Exit status and the report of the --json envelope (checked)."""
    code, doc = run_envelope(capsys, *argv)
    return code, doc["report"]


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


# -- the parser -------------------------------------------------------------------------


def test_help_lists_public_commands_and_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in (
        "demo", "threads", "history", "show", "verify", "repair", "doctor", "actions", "resolve-action", "archive",
        "restore", "pin", "unpin", "pins",
    ):  # fmt: skip
        assert f"\n    {name}" in out
    assert "_demo-worker" not in out and "demo-worker" not in out
    for var in (
        "LANGGRAPH_DURABLE_SIGNING_KEY",
        "LANGGRAPH_DURABLE_OLD_SIGNING_KEYS",
        "LANGGRAPH_DURABLE_SQLITE",
        "LANGGRAPH_DURABLE_REDIS_URL",
        "LANGGRAPH_DURABLE_REDIS_KEY_PREFIX",
        "LANGGRAPH_DURABLE_POSTGRES_URL",
        "LANGGRAPH_DURABLE_WRITE",
        "LANGGRAPH_DURABLE_ARCHIVE_URL",
    ):
        assert var in out
    assert "exit status" in out and "130" in out
    # Nor in the error for an unknown command.
    with pytest.raises(SystemExit) as info:
        cli.main(["no-such-command"])
    assert info.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == "langgraph-durable: unknown command no-such-command (see `langgraph-durable --help`)\n"


def test_every_command_and_option_is_described() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {c.name for c in cli.COMMANDS if not c.internal} == set(parser.subcommands)
    for name, p in sub.choices.items():
        assert p.description, name
        # A command that chooses an action (quarantine list|restore|purge): each action takes the flags.
        for leaf in p.subcommands.values() or [p]:
            assert leaf.description, (name, leaf.prog)
            options = {o for a in leaf._actions for o in a.option_strings}
            assert "--json" in options and "--redis" in options, leaf.prog
            assert set(leaf.flags) == options, leaf.prog  # the parser's own record of its options
            for action in leaf._actions:
                assert action.help, (leaf.prog, action.dest)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"langgraph-durable {__version__}"


def test_the_demo_worker_still_parses() -> None:
    args = cli.build_parser(internal="_demo-worker").parse_args(
        ["_demo-worker", "--thread", "t", "--steps", "3", "--executions", "x", "--sqlite", ""]
    )
    assert args.spec.name == "_demo-worker" and args.sqlite == "" and not hasattr(args, "json")


# -- inspection ---------------------------------------------------------------------------


def test_threads(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "threads", *store)
    assert code == cli.EXIT_OK, err
    rows = {r[0]: r for r in _rows(out)[1:-1]}
    assert _rows(out)[0][:2] == ["thread", "namespaces"]
    assert set(rows) == {"asks", "long", "loop", "nested"}
    # thread, namespaces, checkpoints, last step, interrupt, age, size
    assert rows["loop"][1:5] == ["(root)", "5", "3", "-"]
    assert rows["asks"][1:5] == ["(root)", "3", "1", "yes"]
    assert rows["nested"][1:6] == ["(root),", "child", "9", "3", "-"]
    assert "4 thread(s)" in out.splitlines()[-1]
    assert "reading" in err and "4/4 threads" in err  # progress, on stderr

    code, doc = run_json(capsys, "threads", *store)
    assert code == cli.EXIT_OK
    by = {t["thread_id"]: t for t in doc["threads"]}
    assert by["loop"]["checkpoints"] == 5 and by["loop"]["namespaces"] == [""] and by["loop"]["last_step"] == 3
    assert by["asks"]["interrupted"] is True and by["loop"]["interrupted"] is False
    assert by["nested"]["namespaces"][0] == "" and by["nested"]["namespaces"][1].startswith("child:")
    assert all(t["age_seconds"] >= 0 and t["latest_ts"] and t["latest_checkpoint_id"] for t in doc["threads"])
    # Serialized bytes: the long messages weigh; each value version counts once.
    assert by["long"]["size_bytes"] > LONG > by["loop"]["size_bytes"] / 10 > 0
    assert "serialized" in doc["size"]


def test_history(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "history", "asks", *store)
    assert code == cli.EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == ["checkpoint", "step", "source", "writes", "interrupts", "age"]
    assert [r[1:4] for r in _rows(out)[1:4]] == [["1", "loop", "1"], ["0", "loop", "2"], ["-1", "input", "3"]]
    assert "1: {'question': 'approve?', 'n': 0}" in lines[1]
    assert lines[-1] == "3 checkpoint(s), newest first"

    code, doc = run_json(capsys, "history", "asks", *store)
    assert code == cli.EXIT_OK and doc["thread_id"] == "asks"
    newest, *older = doc["checkpoints"]
    assert [c["step"] for c in doc["checkpoints"]] == [1, 0, -1]
    assert newest["interrupts"][0]["value"] == {"question": "approve?", "n": 0} and newest["interrupts"][0]["id"]
    assert [c["checkpoint_id"] for c in older] == [newest["parent_checkpoint_id"], older[1]["checkpoint_id"]]
    ids = [c["checkpoint_id"] for c in doc["checkpoints"]]
    assert ids == sorted(ids, reverse=True)

    # A subgraph's checkpoints carry its namespace.
    code, out, _ = run(capsys, "history", "nested", *store)
    assert code == cli.EXIT_OK and "namespace" in out.splitlines()[0]
    assert sum(r[1] == "child" for r in _rows(out)[1:-1]) == 4
    code, doc = run_json(capsys, "history", "nested", "--ns", "", "--limit", "2", *store)
    assert [(c["checkpoint_ns"], c["step"]) for c in doc["checkpoints"]] == [("", 3), ("", 2)]

    code, out, err = run(capsys, "history", "nobody", *store)
    assert code == cli.EXIT_FINDINGS and out == "" and "thread 'nobody' has no checkpoints" in err
    code, doc = run_envelope(capsys, "history", "nobody", *store)
    assert code == cli.EXIT_FINDINGS and doc["error"]["type"] == "findings" and "nobody" in doc["error"]["message"]


def test_show(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "asks", *store)
    assert code == cli.EXIT_OK
    assert "(root graph)" in out.splitlines()[0] and "step 1, source loop" in out
    assert "waiting on 1 interrupt(s)" in out and "{'question': 'approve?', 'n': 0}" in out
    assert "channel values (3)" in out and ["messages", "['prepared']"] in _rows(out)
    assert "pending writes (1)" in out and "__interrupt__" in out

    code, doc = run_json(capsys, "show", "asks", *store)
    assert code == cli.EXIT_OK
    assert doc["channel_values"]["messages"] == ["prepared"] and doc["step"] == 1 and doc["metadata"]["step"] == 1
    assert doc["writes"][0]["channel"] == "__interrupt__"
    assert doc["writes"][0]["value"][0]["value"] == {"question": "approve?", "n": 0}
    assert doc["interrupts"][0]["value"] == {"question": "approve?", "n": 0}

    # A checkpoint by id, found in whichever namespace holds it.
    _, hist = run_json(capsys, "history", "nested", *store)
    inner = next(c for c in hist["checkpoints"] if c["checkpoint_ns"] and c["step"] == 1)
    code, out, _ = run(capsys, "show", "nested", inner["checkpoint_id"], *store)
    assert code == cli.EXIT_OK and f"namespace {inner['checkpoint_ns']!r}" in out
    assert ["messages", "['outer", "before',", "'inner", "a']"] in _rows(out)
    code, doc = run_json(capsys, "show", "nested", inner["checkpoint_id"], *store)
    assert doc["checkpoint_ns"] == inner["checkpoint_ns"] and doc["channel_values"]["n"] == 1

    # Long values are shortened unless --full; JSON carries them whole.
    code, out, _ = run(capsys, "show", "long", *store)
    assert code == cli.EXIT_OK and "x" * LONG not in out and "chars)" in out and "--full" in out
    code, out, _ = run(capsys, "show", "long", "--full", *store)
    assert code == cli.EXIT_OK and "x" * LONG in out
    code, doc = run_json(capsys, "show", "long", *store)
    assert doc["channel_values"]["messages"] == ["message 0: " + "x" * LONG]

    missing = "00000000-0000-6000-8000-000000000000"
    code, out, err = run(capsys, "show", "asks", missing, *store)
    assert code == cli.EXIT_FINDINGS and f"no checkpoint {missing!r}" in err
    code, out, err = run(capsys, "show", "asks", "no-such-checkpoint", *store)
    assert code == cli.EXIT_CANNOT_RUN and "is not a checkpoint id" in err
    code, doc = run_envelope(capsys, "show", "nobody", *store)
    assert code == cli.EXIT_FINDINGS and doc["report"] == {}
    assert doc["error"] == {"type": "findings", "message": "thread 'nobody' has no checkpoint", "exit_status": 1}


# -- integrity ------------------------------------------------------------------------------


def _damage_local_copy(flags: list[str], thread: str) -> str:
    """Flip a byte of the newest checkpoint of `thread` in the SQLite tier only."""
    with sqlite3.connect(flags[flags.index("--sqlite") + 1]) as conn:
        cid, record = conn.execute(
            "SELECT checkpoint_id, CAST(record AS BLOB) FROM lgd_checkpoints WHERE thread_id = ? "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread,),
        ).fetchone()
        damaged = bytearray(record)
        damaged[len(damaged) // 2] ^= 0x55
        conn.execute(
            "UPDATE lgd_checkpoints SET record = ? WHERE thread_id = ? AND checkpoint_id = ?",
            (bytes(damaged), thread, cid),
        )
    return str(cid)


def test_verify_repair_and_quarantine(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", *store)
    assert code == cli.EXIT_OK and "4 thread(s)" in out and " 0 bad" in out
    assert "verifying tiers sqlite -> redis -> postgres" in err and "4/4 threads" in err
    code, doc = run_json(capsys, "verify", *store)
    assert code == cli.EXIT_OK and doc["threads"] == 4 and doc["tiers"] == ["sqlite", "redis", "postgres"]
    assert doc["bad"] == [] and doc["copies_checked"] > 0

    cid = _damage_local_copy(store, "loop")
    code, out, _ = run(capsys, "verify", "--thread", "loop", *store)
    assert code == cli.EXIT_FINDINGS
    assert out.splitlines()[0].startswith(f"sqlite: thread 'loop' checkpoint {cid}") and "1 bad" in out
    code, doc = run_envelope(capsys, "verify", "--thread", "loop", *store)
    assert code == cli.EXIT_FINDINGS and doc["error"]["type"] == "findings" and "1 bad" in doc["error"]["message"]
    [bad] = doc["report"]["bad"]
    assert bad["tier"] == "sqlite" and bad["kind"] == "checkpoint" and bad["thread_id"] == "loop" and cid in bad["key"]

    code, doc = run_json(capsys, "repair", *store)
    assert code == cli.EXIT_OK and len(doc["restored"]) == 1

    code, out, _ = run(capsys, "quarantine", "list", *store)
    # repair wrote an intact copy in its place: list says restore would keep the bad one out.
    assert code == cli.EXIT_OK and out.splitlines()[-1] == "1 quarantined record(s), 0 restorable"
    assert _rows(out)[0] == ["id", "thread", "namespace", "record", "reason", "age", "restorable"]
    row = _rows(out)[1]
    assert row[0].startswith("sqlite:") and row[1:5] == ["loop", "(root)", "checkpoint", cid]
    assert out.splitlines()[1].endswith(" no: intact copy in place")
    code, doc = run_json(capsys, "quarantine", "list", "--thread", "loop", *store)
    assert code == cli.EXIT_OK
    [q] = doc["records"]
    assert q["id"] == row[0] and q["tier"] == "sqlite" and q["size_bytes"] > 0
    assert q["restorable"] is False and q["on_restore"] == "keep"
    assert q["detected_at"].endswith("Z")
    code, doc = run_json(capsys, "quarantine", "list", "--thread", "asks", *store)
    assert doc == {"records": []}
    # The intact copy is in place again: restore keeps the bad one out.
    code, doc = run_json(capsys, "quarantine", "restore", q["id"], *store)
    assert code == cli.EXIT_OK and doc["restored"] == [] and [k["id"] for k in doc["kept"]] == [q["id"]]


def test_doctor(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor", *store)
    assert code == cli.EXIT_OK
    assert [r[:2] for r in _rows(out)[1:4]] == [["sqlite", "yes"], ["redis", "yes"], ["postgres", "yes"]]
    assert out.splitlines()[-1].startswith("write mode 'shared'; 0 record(s) owed")
    code, doc = run_json(capsys, "doctor", *store)
    assert code == cli.EXIT_OK and doc["write"] == "shared"
    assert [(t["name"], t["reachable"], t["breaker"]["state"]) for t in doc["tiers"]] == [
        ("sqlite", True, "closed"),
        ("redis", True, "closed"),
        ("postgres", True, "closed"),
    ]
    assert doc["lag"]["records"] == 0


# -- actions ------------------------------------------------------------------------------------


def test_actions_and_resolve_action(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "actions", "--thread", "asks", *store)
    assert code == cli.EXIT_OK
    rows = {r[0]: r for r in _rows(out)[1:-1]}
    assert rows["email:1"][1:4] == ["ESCALATED", "no", "-"]
    assert rows["charge:1"][1:3] == ["done", "no"] and "{'receipt': 'r-1'}" in out
    assert rows["cache"][1:3] == ["intent", "yes"]
    assert out.splitlines()[-1] == "3 action(s), 1 escalated"
    code, doc = run_json(capsys, "actions", "--thread", "asks", *store)
    by = {a["key"]: a for a in doc["actions"]}
    assert by["email:1"]["escalated"] is True and by["charge:1"]["result"] == {"receipt": "r-1"}

    # No such action: refused, nothing written.
    code, out, err = run(capsys, "resolve-action", "--thread", "asks", "--key", "email:2", "--done", *store)
    assert code == cli.EXIT_FINDINGS and out == ""
    assert "thread 'asks' has no action 'email:2'" in err and "'email:1'" in err
    code, doc = run_envelope(capsys, "resolve-action", "--thread", "nobody", "--key", "email:1", "--done", *store)
    assert code == cli.EXIT_FINDINGS and "has no action 'email:1'" in doc["error"]["message"]

    # The escalated one, answered with its result.
    code, out, err = run(
        capsys, "resolve-action", "--thread", "asks", "--key", "email:1", "--done", "--result", '{"id": 7}', *store
    )
    assert code == cli.EXIT_OK, err
    assert out.strip() == "email:1: done; thread 'asks' may run again"
    code, doc = run_json(capsys, "actions", "--thread", "asks", *store)
    email = next(a for a in doc["actions"] if a["key"] == "email:1")
    assert email["state"] == "done" and email["result"] == {"id": 7} and email["resolved_by"] == "operator"

    # Confirmed: not changed without --force.
    for key in ("email:1", "charge:1"):
        code, out, err = run(capsys, "resolve-action", "--thread", "asks", "--key", key, "--not-done", *store)
        assert code == cli.EXIT_FINDINGS and f"action {key!r} of thread 'asks' is already confirmed done" in err
        assert "--force" in err
    code, doc = run_envelope(capsys, "resolve-action", "--thread", "asks", "--key", "charge:1", "--not-done", *store)
    assert code == cli.EXIT_FINDINGS and "already confirmed done (by the code that ran it)" in doc["error"]["message"]
    code, doc = run_json(
        capsys, "resolve-action", "--thread", "asks", "--key", "charge:1", "--not-done", "--force", *store
    )
    assert code == cli.EXIT_OK
    assert doc["previous"]["state"] == "done" and doc["action"]["state"] == "not_done"
    assert doc["action"]["resolved_by"] == "operator"
    # An operator's answer is final too.
    code, out, err = run(capsys, "resolve-action", "--thread", "asks", "--key", "charge:1", "--done", *store)
    assert code == cli.EXIT_FINDINGS and "already answered not done (by an operator)" in err
    # An idempotent intent may be answered.
    code, out, _ = run(capsys, "resolve-action", "--thread", "asks", "--key", "cache", "--done", *store)
    assert code == cli.EXIT_OK

    # --result is JSON, and goes with --done.
    for bad in (["--done", "--result", "{not json"], ["--not-done", "--result", "1"]):
        with pytest.raises(SystemExit) as info:
            cli.main(["resolve-action", "--thread", "asks", "--key", "email:1", *bad, *store])
        assert info.value.code == cli.EXIT_USAGE
    assert "--result" in capsys.readouterr().err


def test_an_entry_damaged_everywhere_can_be_answered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "local.sqlite")
    with DurableSaver(sqlite=path) as saver:
        saver.record_action("t", LedgerEntry("email:1", "intent"))
    with sqlite3.connect(path) as conn:
        (record,) = conn.execute("SELECT CAST(record AS BLOB) FROM lgd_ledger").fetchone()
        conn.execute("UPDATE lgd_ledger SET record = ?", (record[:-1] + bytes([record[-1] ^ 1]),))
    code, _, err = run(capsys, "actions", "--thread", "t", "--sqlite", path)
    assert code == cli.EXIT_CANNOT_RUN and "damaged in every tier" in err
    code, out, err = run(capsys, "resolve-action", "--thread", "t", "--key", "email:1", "--done", "--sqlite", path)
    assert code == cli.EXIT_OK and "email:1: done" in out, err
    with DurableSaver(sqlite=path) as saver:
        assert saver.actions("t")["email:1"].state == "done"


async def test_resolve_action_refusals_in_the_library(tmp_path: Path) -> None:
    async with DurableSaver(sqlite=str(tmp_path / "local.sqlite")) as saver:
        await saver.arecord_action("t", LedgerEntry("a", "intent"))
        with pytest.raises(ConfigError, match="has no action 'b'"):
            await saver.aresolve_action("t", "b", done=True)
        assert (await saver.aresolve_action("t", "a", done=True, result=1)).result == 1
        with pytest.raises(ConfigError, match="already confirmed done"):
            await saver.aresolve_action("t", "a", done=False)
        assert (await saver.aactions("t"))["a"].state == "done"
        assert (await saver.aresolve_action("t", "a", done=False, force=True)).state == "not_done"


# -- tier flags, errors and plain output -------------------------------------------------------


def test_an_empty_tier_flag_switches_off_the_environments_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    local = ["--sqlite", str(tmp_path / "local.sqlite")]
    with DurableSaver(sqlite=local[1], redis=None, postgres=None) as made:  # a store there (read commands make none)
        made.get_tuple({"configurable": {"thread_id": "t"}})
    monkeypatch.setenv("LANGGRAPH_DURABLE_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    monkeypatch.setenv("LANGGRAPH_DURABLE_POSTGRES_URL", "postgresql://127.0.0.1:1/none")
    code, doc = run_json(capsys, "doctor", "--timeout", "1", *local)
    assert code == cli.EXIT_FINDINGS
    assert {t["name"]: t["reachable"] for t in doc["tiers"]} == {"sqlite": True, "redis": False, "postgres": False}
    code, doc = run_json(capsys, "doctor", *local, "--redis", "", "--postgres", "")
    assert code == cli.EXIT_OK and [t["name"] for t in doc["tiers"]] == ["sqlite"]
    code, doc = run_json(capsys, "threads", *local, "--redis", "", "--postgres", "")
    assert code == cli.EXIT_OK and doc["threads"] == []
    # Only the one switched off.
    code, doc = run_envelope(capsys, "doctor", "--timeout", "1", *local, "--postgres", "")
    assert code == cli.EXIT_FINDINGS and [t["name"] for t in doc["report"]["tiers"]] == ["sqlite", "redis"]
    assert doc["error"] == {"type": "findings", "message": "DOWN: redis", "exit_status": 1}


def test_a_tier_that_cannot_be_reached_is_exit_3_with_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--sqlite", str(tmp_path / "x.sqlite"), "--redis", "redis://:secret@127.0.0.1:1/0"]
    for command in (["threads"], ["history", "t"], ["show", "t"], ["verify"], ["actions", "--thread", "t"]):
        code, out, err = run(capsys, *command, *flags, "--json")
        assert code == cli.EXIT_CANNOT_RUN, command
        doc = check_envelope(code, command[0], json.loads(out))
        assert doc["error"]["type"] == "TierUnavailable" and doc["error"]["message"].startswith("redis tier at ")
        assert "secret" not in out
        assert err.startswith("langgraph-durable: error: redis tier at ") and err.count("\n") == 1


def test_piped_output_is_plain_text(store: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    env.pop("FORCE_COLOR", None)
    env.pop("COLUMNS", None)
    env["TERM"] = "xterm-256color"
    for command in (["threads"], ["history", "nested"], ["show", "asks"], ["verify"]):
        done = subprocess.run(
            [sys.executable, "-m", "langgraph_durable", *command, *store],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout + done.stderr, command
        assert all(line == line.rstrip() for line in done.stdout.splitlines()), command
    assert "verifying 4/4 threads" in done.stderr


def test_progress_bar_in_a_log() -> None:
    log = io.StringIO()
    with cli.progress_bar("importing", unit="checkpoints", file=log) as show:
        for done in range(1, 21):
            show(done, 20)
            show(done, 20)  # the same again: no new line
    assert log.getvalue().splitlines() == [f"  importing {n}/20 checkpoints" for n in range(2, 21, 2)]
    log = io.StringIO()
    with cli.progress_bar("saved", file=log) as show:
        show(0, 5)
        show(2, 5)
        show(2, 5)
    assert log.getvalue().splitlines() == ["  saved 0/5", "  saved 2/5"]


def test_ledger_does_not_import_the_saver() -> None:
    source = (Path(cli.__file__).parent.parent / "ledger.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported.add(("." * node.level) + (node.module or ""))
    assert not {m for m in imported if m.endswith("saver") or m in (".", "..")}, imported


# -- import, prune ------------------------------------------------------------------------


def test_import_from_a_sqlite_saver_file_then_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, postgres_url: str
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    source = tmp_path / "stock.sqlite"
    conn = sqlite3.connect(source, check_same_thread=False)
    stock = SqliteSaver(conn)
    interrupt_graph().compile(checkpointer=stock).invoke({"messages": [], "n": 0}, _cfg("asks"))
    subgraph_graph().compile(checkpointer=stock).invoke({"messages": [], "n": 0}, _cfg("nested"))
    total = sum(1 for _ in stock.list(None))
    conn.close()
    flags = ["--sqlite", str(tmp_path / "local.sqlite"), "--postgres", postgres_url]
    code, out, err = run(capsys, "import", "--from", f"sqlite:///{source}", *flags)
    assert code == 0, err
    assert f"2 thread(s), 3 namespace(s): {total} checkpoint(s)" in out and "verified" in out
    code, doc = run_json(capsys, "import", "--from", str(source), *flags)
    assert code == 0 and doc["checkpoints"] == 0 and doc["skipped"] == total
    code, doc = run_json(capsys, "history", "asks", *flags)
    assert code == 0 and doc["checkpoints"][0]["interrupts"]
    code, out, err = run(capsys, "import", "--from", str(tmp_path / "nope.sqlite"), *flags)
    assert code == cli.EXIT_CANNOT_RUN and "not a SqliteSaver file" in err


_TABLES = {  # each stored record's key, per table
    "lgd_checkpoints": "thread_id, checkpoint_ns, checkpoint_id",
    "lgd_blobs": "thread_id, checkpoint_ns, channel, version",
    "lgd_writes": "thread_id, checkpoint_ns, checkpoint_id, task_id, idx",
}


def _stored(flags: list[str]) -> dict[str, Any]:
    """The key of every checkpoint, channel value and pending write each tier
    of the store holds, read from the tiers themselves, not through a saver."""
    opt = dict(zip(flags[::2], flags[1::2], strict=True))
    out: dict[str, Any] = {}
    with contextlib.closing(sqlite3.connect(opt["--sqlite"])) as conn:
        out["sqlite"] = {t: sorted(conn.execute(f"SELECT {cols} FROM {t}")) for t, cols in _TABLES.items()}
    with psycopg.connect(opt["--postgres"]) as pg:
        out["postgres"] = {t: sorted(pg.execute(f"SELECT {cols} FROM {t}").fetchall()) for t, cols in _TABLES.items()}
    client = redis_lib.Redis.from_url(opt["--redis"])
    try:
        records: dict[str, list[bytes]] = {}
        for key in client.scan_iter(match=f"{opt['--redis-key-prefix']}:{{*}}:*"):
            part = key.decode().split("}:", 1)[1]
            if part in ("cp", "blob") or part.startswith("w:"):
                records[key.decode()] = sorted(client.hkeys(key))
            elif part.startswith("ids:"):
                records[key.decode()] = sorted(client.zrange(key, 0, -1))
        out["redis"] = records
    finally:
        client.close()
    return out


def _checkpoint_ids(stored: dict[str, Any], thread: str) -> dict[str, set[str]]:
    """Per tier, the ids of the thread's checkpoints in `_stored`."""
    ids = {tier: {r[2] for r in stored[tier]["lgd_checkpoints"] if r[0] == thread} for tier in ("sqlite", "postgres")}
    ids["redis"] = {
        f.decode().split("\x00")[1]
        for key, fields in stored["redis"].items()
        if key.endswith(f"{{{thread}}}:cp")
        for f in fields
    }
    return ids


def test_prune_dry_run_then_for_real(capsys: pytest.CaptureFixture[str], store: list[str]) -> None:
    code, before = run_json(capsys, "history", "loop", *store)
    assert code == 0 and len(before["checkpoints"]) > 1
    stored = _stored(store)
    every = {c["checkpoint_id"] for c in before["checkpoints"]}
    assert _checkpoint_ids(stored, "loop") == {"sqlite": every, "postgres": every, "redis": every}
    code, report = run_json(capsys, "prune", "--keep-last", "1", "--dry-run", *store)
    assert code == 0 and report["dry_run"] and report["threads"] == 4 and report["checkpoints_deleted"] > 0
    assert report["left_alone"] == ["asks"]  # an unconfirmed action
    # A dry run changes nothing, in any tier.
    assert _stored(store) == stored
    code, again = run_json(capsys, "history", "loop", *store)
    assert code == 0 and again == before
    code, out, err = run(capsys, "prune", "--keep-last", "1", "--thread", "loop", *store)
    assert code == 0, err
    assert "checkpoint(s) deleted" in out and "would be" not in out
    code, after = run_json(capsys, "history", "loop", *store)
    newest = before["checkpoints"][0]["checkpoint_id"]
    assert [c["checkpoint_id"] for c in after["checkpoints"]] == [newest]
    assert _checkpoint_ids(_stored(store), "loop") == {"sqlite": {newest}, "postgres": {newest}, "redis": {newest}}
    code, out, err = run(capsys, "prune", *store)
    assert code == cli.EXIT_USAGE and "--keep-last" in err
    with pytest.raises(SystemExit) as usage:
        cli.main(["prune", "--keep-for", "7x", *store])
    assert usage.value.code == cli.EXIT_USAGE and "is not a duration" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], ["verify", "--help"], ["no-such-command"], ["doctor", "--postgress", "x"]]
)
def test_help_version_and_usage_errors_load_no_driver(argv: list[str]) -> None:
    """--help, --version and a usage error answer without loading LangGraph,
    the database drivers or the saver (they take a fraction of a second)."""
    probe = (
        "import sys\n"
        "from langgraph_durable import cli\n"
        "try:\n"
        f"    cli.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('langgraph', 'psycopg', 'redis', 'obstore', 'langgraph_durable.saver')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]
