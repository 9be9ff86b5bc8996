"""The archive's commands against real tiers and moto's S3 server: archive,
threads --archived, restore, pin, unpin, pins, and doctor's archive line;
as text and as JSON, with their exit status."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import DurableSaver, cli
from tests.flat_options import durable_options

from . import test_cli
from .conftest import REDIS_URL
from .graphs import interrupt_graph, loop_graph

pytestmark = [pytest.mark.s3]


# test_cli's: no LANGGRAPH_DURABLE_* variable of the environment reaches a command.
no_tier_env = test_cli.no_tier_env
_cfg = test_cli._cfg


@pytest.fixture
def flags(tmp_path: Path, postgres_url: str, redis_prefix: str, archive_url: str) -> Iterator[list[str]]:
    """Tier flags (with --archive) of a store holding two threads."""
    sqlite = str(tmp_path / "local.sqlite")
    tiers = {"sqlite": sqlite, "redis": REDIS_URL, "redis_key_prefix": redis_prefix, "postgres": postgres_url}
    with DurableSaver(**durable_options(tiers), archive=archive_url) as saver:
        loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("loop"))
        interrupt_graph().compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("asks"))
    yield [
        "--sqlite", sqlite, "--redis", REDIS_URL, "--redis-key-prefix", redis_prefix, "--postgres", postgres_url,
        "--archive", archive_url,
    ]  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Exit status and the report of the --json envelope (checked)."""
    code, out, _ = run(capsys, *argv, "--json")
    return code, test_cli.check_envelope(code, argv[0], json.loads(out))["report"]


def test_archive_threads_archived_and_restore(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "archive", "--idle-after", "1h", *flags)
    assert code == cli.EXIT_OK
    assert out.strip().splitlines()[-1] == "2 thread(s) looked at, 0 archived"

    time.sleep(1.1)
    code, doc = run_json(capsys, "archive", "--idle-after", "1s", "--dry-run", *flags, "--thread", "loop")
    assert code == cli.EXIT_OK and doc["dry_run"] is True
    assert [t["thread_id"] for t in doc["threads"] if t["archived"]] == ["loop"]
    code, out, _ = run(capsys, "threads", "--archived", *flags)
    assert code == cli.EXIT_OK and out.startswith("0 archived thread(s)")

    code, out, _ = run(capsys, "archive", "--idle-after", "1s", *flags, "--thread", "loop")
    assert code == cli.EXIT_OK
    assert out.splitlines()[0].startswith("archived  loop (")
    code, doc = run_json(capsys, "threads", "--archived", *flags)
    assert code == cli.EXIT_OK and doc["archived"] == ["loop"]
    code, doc = run_json(capsys, "threads", *flags)
    assert [t["thread_id"] for t in doc["threads"]] == ["asks"]

    code, out, _ = run(capsys, "restore", "loop", *flags)
    assert code == cli.EXIT_OK
    assert out.strip().startswith("1 thread(s) restored (")
    assert out.strip().endswith(" records)")  # a named thread: nothing said of the others
    code, doc = run_json(capsys, "threads", *flags)
    assert sorted(t["thread_id"] for t in doc["threads"]) == ["asks", "loop"]
    code, doc = run_json(capsys, "threads", "--archived", *flags)
    assert doc["archived"] == []

    code, doc = run_json(capsys, "restore", "--all", *flags)
    assert code == cli.EXIT_OK and doc["threads"] == 2 and doc["bad_segments"] == []


def test_restore_needs_threads_or_all(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["restore", *flags])
    assert info.value.code == cli.EXIT_USAGE
    with pytest.raises(SystemExit) as info:
        cli.main(["restore", "loop", "--all", *flags])
    assert info.value.code == cli.EXIT_USAGE
    with pytest.raises(SystemExit) as info:
        cli.main(["restore", "--all", "--until", "yesterday", *flags])
    assert info.value.code == cli.EXIT_USAGE
    assert "is not a time" in capsys.readouterr().err


def test_pin_pins_unpin(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "pin", "loop", "--label", "known good", *flags)
    assert code == cli.EXIT_OK
    pinned = doc["pin"]["checkpoint_id"]
    code, out, _ = run(capsys, "pins", "loop", *flags)
    assert code == cli.EXIT_OK
    assert pinned in out and "known good" in out and out.strip().endswith("1 pin(s)")
    # An idle pinned thread is not archived.
    time.sleep(1.1)
    code, doc = run_json(capsys, "archive", "--idle-after", "1s", *flags, "--thread", "loop")
    assert doc["threads"] == [{"thread_id": "loop", "archived": False, "records": 0, "skipped": "pinned"}]
    code, out, _ = run(capsys, "unpin", "loop", pinned, *flags)
    assert code == cli.EXIT_OK and out.strip() == f"unpinned  loop {pinned}"
    code, out, err = run(capsys, "unpin", "loop", pinned, *flags)
    assert code == cli.EXIT_FINDINGS and "has no pin" in err
    code, doc = run_json(capsys, "pins", "loop", *flags)
    assert doc["pins"] == []
    code, out, err = run(capsys, "pin", "nobody", *flags)
    assert code == cli.EXIT_FINDINGS and "has no checkpoints to pin" in err  # as `history nobody`


def test_doctor_reports_the_archive(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor", *flags)
    assert code == cli.EXIT_OK
    assert "archive: reachable; 0 thread(s) not shipped yet" in out
    code, doc = run_json(capsys, "doctor", *flags)
    assert doc["archive"]["reachable"] is True


def test_archive_commands_without_an_archive_say_how_to_configure_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run(capsys, "archive", "--idle-after", "30d", "--sqlite", str(tmp_path / "x.sqlite"))
    assert code == cli.EXIT_CANNOT_RUN
    assert len(err.strip().splitlines()) == 1
    assert "--archive" in err and "LANGGRAPH_DURABLE_ARCHIVE_URL" in err
