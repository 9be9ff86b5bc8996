"""The quarantine on real SQLite, Redis and Postgres: `quarantine list` says
what `quarantine restore` would do with each copy now (a copy whose place
holds an intact record after a repair is not "restorable"), and `quarantine
purge --older-than` deletes old copies for good from every tier that holds
some, including a copy planted in one tier only; `list` never purges."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest

from langgraph_durable import ConfigError, DurableSaver, cli
from langgraph_durable.model.records import row_fields
from langgraph_durable.tiers.base import pack_fields
from tests.flat_options import durable_options

from . import test_cli
from .conftest import REDIS_URL
from .graphs import loop_graph

no_tier_env = test_cli.no_tier_env
DAY = 86400.0


@pytest.fixture
def tiers(tmp_path: Path, postgres_url: str, redis_prefix: str) -> Iterator[dict[str, Any]]:
    """A store holding the thread "loop", and its saver's options."""
    options = {
        "sqlite": str(tmp_path / "local.sqlite"),
        "redis": REDIS_URL,
        "redis_key_prefix": redis_prefix,
        "postgres": postgres_url,
    }
    with DurableSaver(**durable_options(options)) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, test_cli._cfg("loop"))
    yield options


def _flags(options: dict[str, Any]) -> list[str]:
    return [
        "--sqlite", options["sqlite"], "--redis", options["redis"], "--redis-key-prefix",
        options["redis_key_prefix"], "--postgres", options["postgres"],
    ]  # fmt: skip


def _tier(saver: DurableSaver, name: str) -> Any:
    chain = saver._sync_chain()
    chain.ensure_setup()  # the store's signing key first (Postgres keeps it)
    return next(t for t in chain.tiers if t.name == name)


def _plant(saver: DurableSaver, tier: str, key: str, *, age: float = 0.0) -> None:
    """A quarantined copy (not restorable: no row fields) in `tier` only, detected `age` seconds ago."""
    at = time.time() - age
    with mock.patch("time.time", return_value=at):
        _tier(saver, tier).quarantine("loop", "", "checkpoint", key, "planted", b"bad bytes")


def _age_postgres(postgres_url: str, key: str, age: float) -> None:
    # Postgres stamps the copy itself (its own clock): made old in place.
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE lgd_quarantine SET detected_at = detected_at - %s WHERE key = %s", (age, key))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = cli.main([*argv, "--json"])
    doc = test_cli.check_envelope(code, argv[0], json.loads(capsys.readouterr().out))
    return code, doc["report"]


def _listed(capsys: pytest.CaptureFixture[str], flags: list[str]) -> list[tuple[str, str]]:
    code, report = _json(capsys, "quarantine", "list", *flags)
    assert code == cli.EXIT_OK
    return sorted((q["tier"], q["key"]) for q in report["records"])


def test_purge_older_than_in_every_tier_and_list_never_purges(
    tiers: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    flags = _flags(tiers)
    with DurableSaver(**durable_options(tiers)) as saver:
        _plant(saver, "redis", "old-redis-only", age=40 * DAY)  # in one tier only
        _plant(saver, "postgres", "old-postgres")
        _plant(saver, "sqlite", "old-sqlite", age=31 * DAY)
        _plant(saver, "sqlite", "fresh-sqlite")
        _plant(saver, "postgres", "fresh-postgres")
    _age_postgres(tiers["postgres"], "old-postgres", 35 * DAY)
    everything = [
        ("postgres", "fresh-postgres"), ("postgres", "old-postgres"), ("redis", "old-redis-only"),
        ("sqlite", "fresh-sqlite"), ("sqlite", "old-sqlite"),
    ]  # fmt: skip
    old = {("postgres", "old-postgres"), ("redis", "old-redis-only"), ("sqlite", "old-sqlite")}
    assert _listed(capsys, flags) == everything

    # A dry run lists the old ones and deletes nothing.
    code, report = _json(capsys, "quarantine", "purge", "--older-than", "30d", "--dry-run", *flags)
    assert code == cli.EXIT_OK and report["dry_run"] is True and report["older_than_seconds"] == 30 * DAY
    assert {(q["tier"], q["key"]) for q in report["purged"]} == old
    assert all(q["detected_at"].endswith("Z") for q in report["purged"])
    assert _listed(capsys, flags) == everything  # and list, read-only, purged nothing either

    code = cli.main(["quarantine", "purge", "--older-than", "30d", *flags])
    out = capsys.readouterr().out
    assert code == cli.EXIT_OK
    assert out.splitlines()[-1] == "3 quarantined record(s) purged (1 in sqlite, 1 in redis, 1 in postgres)"
    assert _listed(capsys, flags) == [("postgres", "fresh-postgres"), ("sqlite", "fresh-sqlite")]

    # The Python API: nothing that old is left; the fresh ones go with a short duration.
    with DurableSaver(**durable_options(tiers)) as saver:
        assert saver.purge_quarantined(timedelta(days=30)) == []
        time.sleep(0.05)
        dry = asyncio.run(saver.apurge_quarantined(0.01, dry_run=True))
        assert sorted(q.key for q in dry) == ["fresh-postgres", "fresh-sqlite"]
        assert len(saver.quarantined()) == 2
        with pytest.raises(ConfigError, match="above 0"):
            saver.purge_quarantined(0)
        assert sorted(q.key for q in saver.purge_quarantined(0.01, thread_id="loop")) == dry_keys(dry)
        assert saver.quarantined() == []
    with (
        DurableSaver(**durable_options(tiers), read_only=True) as looker,
        pytest.raises(ConfigError, match="read-only"),
    ):
        looker.purge_quarantined(1.0)


def dry_keys(records: list[Any]) -> list[str]:
    return sorted(q.key for q in records)


def test_purge_needs_a_duration_and_only_purge_takes_one(
    tiers: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    flags = _flags(tiers)
    for argv in (
        ["quarantine", "purge", *flags],
        ["quarantine", "purge", "--older-than", "soon", *flags],
        ["quarantine", "list", "--older-than", "1d", *flags],
        ["quarantine", "purge", "--older-than", "1d", "sqlite:1", *flags],
    ):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == cli.EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert err.startswith(f"langgraph-durable quarantine {argv[1]}: ") and err.count("\n") == 1, err


def test_list_says_what_restore_would_do(tiers: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    flags = _flags(tiers)
    with DurableSaver(**durable_options(tiers)) as saver:
        sqlite = _tier(saver, "sqlite")
        row = sqlite.thread_records("loop").checkpoints[0]
        # Withdrawn from SQLite: its place there is empty, so restore would put it back.
        sqlite.remove_copy("checkpoint", row)
        sqlite.quarantine("loop", row.checkpoint_ns, "checkpoint", "withdrawn", "test", row.envelope,
                          pack_fields(row_fields(row)))  # fmt: skip
        # The same record quarantined in Postgres, whose intact copy is in place: restore would keep it out.
        _tier(saver, "postgres").quarantine(
            "loop", row.checkpoint_ns, "checkpoint", "twin", "test", row.envelope, pack_fields(row_fields(row))
        )
        _plant(saver, "redis", "no-fields")  # no row fields: cannot be put back
    code, report = _json(capsys, "quarantine", "list", *flags)
    by_key = {q["key"]: q for q in report["records"]}
    assert {k: (q["restorable"], q["on_restore"]) for k, q in by_key.items()} == {
        "withdrawn": (True, "restore"),
        "twin": (False, "keep"),
        "no-fields": (False, "refuse"),
    }
    code = cli.main(["quarantine", "list", *flags])
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "3 quarantined record(s), 1 restorable"
    # restore --all does what list said: puts back the one, keeps the twin, leaves the other alone.
    code, report = _json(capsys, "quarantine", "restore", "--all", *flags)
    assert code == cli.EXIT_OK
    assert [q["key"] for q in report["restored"]] == ["withdrawn"] and [q["key"] for q in report["kept"]] == ["twin"]
    assert _listed(capsys, flags) == [("postgres", "twin"), ("redis", "no-fields")]
    with DurableSaver(**durable_options(tiers)) as saver:
        assert _tier(saver, "sqlite").read_checkpoint("loop", row.checkpoint_ns, row.checkpoint_id) is not None
