"""The command line as a careless operator and a hostile id would try it:
read commands write nothing anywhere, a store written with another
serializer is reported and never moved, and ids cannot drive the terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis as redis_lib

from langgraph_durable import DurableSaver, cli
from tests.flat_options import durable_options

from . import typed_state
from .conftest import REDIS_URL

ROOT = Path(__file__).resolve().parent.parent
SERDE = "tests.typed_state:encrypted_serde"
READ_COMMANDS = [
    ["threads"],
    ["history", "t"],
    ["show", "t"],
    ["verify"],
    ["doctor"],
    ["actions", "--thread", "t"],
    ["quarantine", "list"],
    ["migrate", "--dry-run", "--migrations", "tests.migration_app:migrations"],
]


@pytest.fixture(autouse=True)
def no_tier_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LANGGRAPH_DURABLE_") and not name.startswith("LANGGRAPH_DURABLE_TEST_"):
            monkeypatch.delenv(name)


def snapshot(postgres_url: str | None, prefix: str | None, sqlite: str | None) -> dict[str, Any]:
    """Every row and key the tiers hold, to compare before and after."""
    out: dict[str, Any] = {}
    if postgres_url:
        with psycopg.connect(postgres_url) as conn:
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'lgd_%'")]
            for t in sorted(tables):
                out[f"pg:{t}"] = sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall()))
    if prefix:
        client = redis_lib.Redis.from_url(REDIS_URL)
        for key in sorted(client.scan_iter(match=f"{prefix}*")):
            kind = client.type(key)
            value: Any = client.hgetall(key) if kind == b"hash" else client.dump(key)
            out[f"redis:{key!r}"] = repr(sorted(value.items())) if isinstance(value, dict) else value
        client.close()
    if sqlite and Path(sqlite).exists():
        import sqlite3

        conn2 = sqlite3.connect(sqlite)
        tables = [r[0] for r in conn2.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in sorted(tables):
            out[f"sqlite:{t}"] = sorted(map(repr, conn2.execute(f"SELECT * FROM {t}").fetchall()))
        conn2.close()
    return out


@pytest.mark.parametrize("tiers", ["postgres", "sqlite+redis+postgres"])
def test_an_encrypted_store_through_every_read_command(
    tiers: str, tmp_path: Path, postgres_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite = str(tmp_path / "local.sqlite") if "sqlite" in tiers else None
    redis = REDIS_URL if "redis" in tiers else None
    app_options: dict[str, Any] = {
        "sqlite": sqlite,
        "redis": redis,
        "redis_key_prefix": redis_prefix,
        "postgres": postgres_url,
    }
    with DurableSaver(**durable_options(app_options), serde=typed_state.encrypted_serde()) as app:
        graph = typed_state.build().compile(checkpointer=app)
        graph.invoke({"log": []}, {"configurable": {"thread_id": "t"}})
        checkpoints = len(list(app.list({"configurable": {"thread_id": "t"}})))
    flags = ["--sqlite", sqlite or "", "--redis", redis or "", "--postgres", postgres_url]
    flags += ["--redis-key-prefix", redis_prefix]
    before = snapshot(postgres_url, redis_prefix if redis else None, sqlite)
    for command in READ_COMMANDS:
        code = cli.main([*command, *flags])
        err = capsys.readouterr().err
        assert snapshot(postgres_url, redis_prefix if redis else None, sqlite) == before, command
        if command[0] in ("threads", "history", "show"):
            assert code == cli.EXIT_CANNOT_RUN, (command, code, err)
            assert "--serde" in err, err
        if command[0] == "verify":
            assert code == cli.EXIT_FINDINGS
    # With the application's serializer the same commands read it all.
    for command in (["threads"], ["history", "t"], ["show", "t"], ["verify"]):
        code = cli.main([*command, *flags, "--serde", SERDE, "--json"])
        doc = json.loads(capsys.readouterr().out)["report"]
        assert code == cli.EXIT_OK, (command, doc)
        if command == ["history", "t"]:
            assert len(doc["checkpoints"]) == checkpoints
        if command == ["show", "t"]:
            assert doc["channel_values"]["item"] == {"id": "i1", "qty": 2}
    assert snapshot(postgres_url, redis_prefix if redis else None, sqlite) == before
    with DurableSaver(**durable_options(app_options), serde=typed_state.encrypted_serde()) as app:
        assert app.quarantined() == []
        values = typed_state.build().compile(checkpointer=app).get_state({"configurable": {"thread_id": "t"}}).values
        assert values["order"] == typed_state.EXPECTED["order"]


def test_serde_from_the_environment_and_a_bad_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite = str(tmp_path / "local.sqlite")
    with DurableSaver(sqlite=sqlite, serde=typed_state.encrypted_serde()) as app:
        typed_state.build().compile(checkpointer=app).invoke({"log": []}, {"configurable": {"thread_id": "t"}})
    monkeypatch.setenv("LANGGRAPH_DURABLE_SERDE", SERDE)
    assert cli.main(["show", "t", "--sqlite", sqlite]) == cli.EXIT_OK
    capsys.readouterr()
    monkeypatch.delenv("LANGGRAPH_DURABLE_SERDE")
    for spec, says in (
        ("nocolon", "MODULE:ATTR"),
        ("tests.typed_state:nothing", "cannot import"),
        ("tests.typed_state:Color", "no arguments failed"),
        ("tests.typed_state:EXPECTED", "not a serializer"),
    ):
        assert cli.main(["threads", "--sqlite", sqlite, "--serde", spec]) == cli.EXIT_CANNOT_RUN
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err


# -- escape sequences ----------------------------------------------------------------------

HOSTILE = [
    "clear\x1b[2J\x1b[H",
    "title\x1b]0;owned\x07",
    "link\x1b]8;;http://example.invalid\x1b\\click\x1b]8;;\x1b\\",
    "rtl\u202ereversed",
]


@pytest.fixture
def hostile_store(tmp_path: Path) -> list[str]:
    sqlite = str(tmp_path / "local.sqlite")
    with DurableSaver(sqlite=sqlite) as saver:
        graph = typed_state.build().compile(checkpointer=saver)
        for thread in HOSTILE:
            graph.invoke({"log": [thread]}, {"configurable": {"thread_id": thread}})
    return ["--sqlite", sqlite]


def _argv(flags: list[str]) -> list[list[str]]:
    return [["threads", *flags], *(["history", t, *flags] for t in HOSTILE), *(["show", t, *flags] for t in HOSTILE)]


def _clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text[:400])


def test_ids_are_escaped_on_a_pipe(hostile_store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for argv in _argv(hostile_store):
        assert cli.main(argv) == cli.EXIT_OK, argv
        captured = capsys.readouterr()
        _clean(captured.out)
        _clean(captured.err)
        if argv[0] != "history":  # history names checkpoints, not the thread
            assert "\\x1b" in captured.out or "\\u202e" in captured.out
    # --json stays exact: the ids read back as they are.
    assert cli.main(["threads", *hostile_store, "--json"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)["report"]
    assert sorted(t["thread_id"] for t in doc["threads"]) == sorted(HOSTILE)


def test_ids_are_escaped_on_a_terminal(hostile_store: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_") or "TEST" in k}
    env["COLUMNS"] = "300"
    for argv in (["threads", *hostile_store], ["show", HOSTILE[1], *hostile_store]):
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "langgraph_durable", *argv], stdout=follower, stderr=follower, cwd=ROOT, env=env
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.close(leader)
        assert proc.wait(timeout=60) == 0
        text = b"".join(chunks).decode("utf-8", "replace")
        assert "\\x1b" in text
        # On a terminal rich styles its own output with SGR codes (ESC [ ... m);
        # nothing else may reach it: no clear screen, no title, no hyperlink.
        for bad in ("\x1b[2J", "\x1b[H", "\x1b]0;", "\x1b]8;", "\x07", "\u202e"):
            assert bad not in text, (argv, bad)


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=lambda a: a[0])
def test_a_read_command_on_a_missing_store_says_so_and_creates_nothing(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped path, or the default path from the wrong directory: exit 3
    with one line naming the path, and no folder or file made."""
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no" / "such" / "x.sqlite"
    for flags in (["--sqlite", str(missing)], []):  # [] : the default file, from a directory without one
        code = cli.main([*argv, *flags])
        err = capsys.readouterr().err
        assert code == cli.EXIT_CANNOT_RUN, err
        assert "no store at" in err and len(err.strip().splitlines()) == 1
        assert list(tmp_path.iterdir()) == [], "a read-only command created something"


def test_a_read_only_saver_on_a_missing_file_with_shared_tiers_reads_them_and_creates_no_file(
    tmp_path: Path, postgres_url: str
) -> None:
    """A replica that has no local copy yet: the shared tiers answer."""
    from tests.graphs import loop_graph

    with DurableSaver(sqlite=str(tmp_path / "a.sqlite"), postgres=postgres_url) as writer:
        loop_graph(2).compile(checkpointer=writer).invoke(
            {"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}}
        )
    missing = tmp_path / "b" / "b.sqlite"
    for write in ("shared", "local"):  # write-behind replicas too: a reader writes nothing
        with DurableSaver(sqlite=str(missing), postgres=postgres_url, read_only=True, write=write) as looker:
            assert looker.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    assert not missing.parent.exists()
    code = cli.main(["threads", "--sqlite", str(missing), "--postgres", postgres_url, "--redis", ""])
    assert code == cli.EXIT_OK and not missing.parent.exists()


def test_a_read_command_on_an_empty_database_says_so_and_creates_nothing(
    postgres_url: str, redis_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped database name, or one the app never ran on: exit 3 naming
    it, and no table (nor Redis key) made."""
    flags = ["--sqlite", "", "--postgres", postgres_url, "--redis", REDIS_URL, "--redis-key-prefix", redis_prefix]
    for argv in READ_COMMANDS:
        code = cli.main([*argv, *flags])
        err = capsys.readouterr().err
        assert code == cli.EXIT_CANNOT_RUN and "no store in the database" in err, (argv, err)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'lgd_%'").fetchone() == (0,)
    assert snapshot(None, redis_prefix, None) == {}


def test_a_read_command_on_a_missing_store_answers_without_loading_the_saver(tmp_path: Path) -> None:
    """The usual slip (a mistyped path, the wrong directory) is told from the
    flags and the environment alone: the saver, LangGraph and the drivers
    are never loaded for it. Named shared tiers are read instead, as the
    read-only saver does."""
    import textwrap

    script = textwrap.dedent(
        """
        import os, sys
        from langgraph_durable import cli
        code = cli.main(sys.argv[1:])
        print(code, "langgraph_durable.saver" in sys.modules)
        """
    )
    missing = str(tmp_path / "no" / "x.sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    for argv, extra in (
        (["threads", "--sqlite", missing], {}),
        (["history", "t"], {"LANGGRAPH_DURABLE_SQLITE": missing}),
        (["verify"], {}),  # the default file, from a directory without one
    ):
        done = subprocess.run(
            [sys.executable, "-c", script, *argv],
            cwd=tmp_path,
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.stdout.split() == [str(cli.EXIT_CANNOT_RUN), "False"], (argv, done.stdout, done.stderr)
        assert "no store at" in done.stderr
    done = subprocess.run(
        [sys.executable, "-c", script, "threads", "--sqlite", missing, "--redis", REDIS_URL],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split()[-2:] == [str(cli.EXIT_OK), "True"], done.stderr  # Redis answers
    assert list(tmp_path.iterdir()) == []
