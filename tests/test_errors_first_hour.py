"""A new user's first hour: each mistake or outage is one line on stderr
with the documented exit status from the CLI, and a typed `DurableError`
saying how to fix it from the Python API, without retries printed as log
lines first."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_durable import ConfigError, DurableSaver, Tiers, TierUnavailable, cli
from langgraph_durable.errors import as_cli_flags
from langgraph_durable.model.breaker import Breaker
from tests.conftest import POSTGRES_URL, database_url
from tests.servers import PrivatePostgres, free_port

KEY = b"k" * 32


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivatePostgres]:
    """A Postgres server of its own that asks for passwords (scram-sha-256):
    the shared one trusts loopback clients, so it takes any password."""
    with PrivatePostgres() as pg:
        yield pg


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("langgraph-durable: error: "), err
    return lines[0]


def run_cli(capsys: Any, argv: list[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


# -- 1. import from a database without checkpoint tables ------------------------------


def test_import_from_postgres_without_checkpoint_tables(postgres_url: str, tmp_path: Any, capsys: Any) -> None:
    argv = ["import", "--from", postgres_url, "--sqlite", str(tmp_path / "s.sqlite"), "--postgres", ""]
    code, err = run_cli(capsys, argv)
    assert code == cli.EXIT_CANNOT_RUN == 3
    line = one_line(err)
    assert "no checkpoints table" in line and "Traceback" not in err

    with PostgresSaver.from_conn_string(postgres_url) as source, DurableSaver(sqlite=str(tmp_path / "a.sqlite")) as s:
        with pytest.raises(ConfigError, match="no checkpoints table"):
            s.import_from(source)


@pytest.mark.parametrize("source", ["missing", "unreachable"])
def test_import_from_a_postgres_source_that_cannot_be_opened(source: str, tmp_path: Any, capsys: Any) -> None:
    if source == "missing":
        url, said, kind = database_url(POSTGRES_URL, f"lgd_missing_{uuid.uuid4().hex[:12]}"), "does not exist", "--from"
    else:
        url, said, kind = f"postgresql://postgres@127.0.0.1:{free_port()}/test", "unreachable", "server is running"
    argv = ["import", "--from", url, "--sqlite", str(tmp_path / "s.sqlite"), "--postgres", ""]
    code, err = run_cli(capsys, argv)
    assert code == cli.EXIT_CANNOT_RUN
    line = one_line(err)
    assert said in line and kind in line


# -- 2. a definite Postgres refusal: at once, one line, no pool retries ----------------


def refusals(pg: PrivatePostgres) -> list[tuple[str, str]]:
    return [
        (pg.url(password="wrong-password"), "password authentication failed"),
        (pg.url(user="no_such_role"), "password authentication failed"),
        (pg.url(db="no_such_db"), 'database "no_such_db" does not exist'),
    ]


@pytest.mark.parametrize("case", range(3))
def test_refusal_is_one_line_config_error_fast(
    private_pg: PrivatePostgres, case: int, tmp_path: Any, capsys: Any, caplog: Any
) -> None:
    url, said = refusals(private_pg)[case]
    caplog.set_level(logging.DEBUG)
    # With a connect timeout of 30 s, retrying the refused connect would
    # take that long; the refusal is final at once (measured: about 0.01 s).
    # The bound only separates the two, far from either.
    started = time.monotonic()
    with pytest.raises(ConfigError, match=said) as info:
        with DurableSaver(sqlite=None, postgres=url, tiers=Tiers(connect_timeout=30)) as saver:
            saver.setup()
    assert time.monotonic() - started < 15.0
    assert "postgres=" in str(info.value) and "--postgres" not in str(info.value)
    assert not [r for r in caplog.records if "error connecting" in r.getMessage()]
    # The password never shows.
    assert "wrong-password" not in str(info.value)

    for command in (["threads"], ["doctor"]):
        code, err = run_cli(capsys, [*command, "--sqlite", "", "--postgres", url])
        assert code == cli.EXIT_CANNOT_RUN, err
        line = one_line(err)
        assert said in line and "--postgres" in line and "postgres=" not in line
        # No retry of the refused connect (each would log "error connecting").
        assert not [r for r in caplog.records if "error connecting" in r.getMessage()]


def test_right_password_is_accepted(private_pg: PrivatePostgres) -> None:
    """The private server does check passwords: the right one opens it."""
    with DurableSaver(sqlite=None, postgres=private_pg.url(), signing_key=KEY) as saver:
        saver.setup()
        assert saver.health().ok
    with psycopg.connect(private_pg.url(), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS schema_migrations")  # what setup made, dropped below anyway
        for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall():
            conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')


def test_unreachable_postgres_is_an_outage_not_config(tmp_path: Any, capsys: Any, caplog: Any) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/test"
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(TierUnavailable, match="unreachable") as info:
        with DurableSaver(sqlite=None, postgres=url, write="all", tiers=Tiers(connect_timeout=30)) as saver:
            saver.setup()
    assert not isinstance(info.value, ConfigError)
    assert info.value.tier == "postgres"
    assert time.monotonic() - started < 15.0  # as above: no retries of a refused connect for 30 s
    assert not [r for r in caplog.records if "error connecting" in r.getMessage()]

    code, err = run_cli(capsys, ["threads", "--sqlite", "", "--postgres", url])
    assert code == cli.EXIT_CANNOT_RUN
    assert "unreachable" in one_line(err)


# -- 3. the CLI names its flags, the API its keywords ---------------------------------


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("pass sqlite=, redis= or postgres=.", "pass --sqlite, --redis or --postgres."),
        ("pass archive='s3://B/P' (or", "pass --archive 's3://B/P' (or"),
        ("its Postgres URL too (postgres=, --postgres).", "its Postgres URL too (--postgres)."),
        ("redis= redis://h/0 names a database", "--redis redis://h/0 names a database"),
        ("postgresql://u@h/db?sslmode=require&redis=1", "postgresql://u@h/db?sslmode=require&redis=1"),
    ],
)
def test_as_cli_flags(message: str, shown: str) -> None:
    assert as_cli_flags(message) == shown


def test_cli_message_names_the_flag(tmp_path: Any, capsys: Any) -> None:
    with pytest.raises(ConfigError, match="at least one tier: pass sqlite=, redis= or postgres="):
        DurableSaver(sqlite=None)
    code, err = run_cli(capsys, ["threads", "--sqlite", "", "--redis", "", "--postgres", ""])
    assert code == cli.EXIT_CANNOT_RUN
    line = one_line(err)
    assert "--sqlite, --redis or --postgres" in line and "postgres=" not in line


# -- 4. an outage logged once when it starts, once when it ends -----------------------


def test_outage_logged_once_each_way(redis_proxy: Any, redis_prefix: str, tmp_path: Any, caplog: Any) -> None:
    proxy, url = redis_proxy
    caplog.set_level(logging.INFO, logger="langgraph_durable")
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

    with DurableSaver(
        sqlite=str(tmp_path / "local.sqlite"), redis=url, tiers=Tiers(redis_key_prefix=redis_prefix)
    ) as saver:
        saver.setup()
        saver.put(config, generate_checkpoint(), {}, {})
        proxy.cut()
        caplog.clear()
        for _ in range(20):
            assert saver.get_tuple(config) is not None
        down = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(down) == 1, [r.getMessage() for r in down]
        assert "redis tier is down" in down[0].getMessage()
        proxy.restore()
        caplog.clear()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            saver.get_tuple(config)
            if saver.health().ok:
                break
            time.sleep(0.2)
        back = [r.getMessage() for r in caplog.records if "back after" in r.getMessage()]
        assert len(back) == 1, [r.getMessage() for r in caplog.records]
        assert back[0].startswith("redis tier is back after ")
        reads = int(back[0].split("meanwhile ")[1].split(" read")[0])
        assert reads >= 1
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_breaker_counts_an_outage() -> None:
    b = Breaker("redis", jitter=random.Random(0))
    assert b.failed(1.0, "refused") is True
    assert b.failed(2.0, "refused") is False  # still the same outage
    for _ in range(3):
        b.missed(write=False)
    b.missed(write=True)
    assert b.succeeded(13.3, 0.001) is True
    outage = b.last_outage
    assert outage is not None and (outage.reads, outage.writes) == (3, 1)
    assert outage.seconds == pytest.approx(12.3)
    assert outage.describe("redis").startswith("redis tier is back after 12.3 s; meanwhile 3 read(s) and 1 write(s)")
    # The next outage counts from zero.
    b.failed(20.0, "refused")
    b.missed(write=True)
    b.succeeded(21.0, 0.001)
    assert b.last_outage is not None and (b.last_outage.reads, b.last_outage.writes) == (0, 1)


# -- 5. a missing database does not wait out the drain --------------------------------


def test_missing_database_with_owed_journal_fails_at_once(postgres_proxy: Any, tmp_path: Any, capsys: Any) -> None:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

    local = str(tmp_path / "local.sqlite")
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    proxy, url = postgres_proxy
    with DurableSaver(sqlite=local, postgres=url, write="local", signing_key=KEY, tiers=Tiers(drain_timeout=0)) as s:
        s.setup()
        proxy.cut()  # so the journal keeps owing what is written now
        s.put(config, generate_checkpoint(), {}, {})
        assert s.lag().records > 0
    missing = database_url(POSTGRES_URL, f"lgd_missing_{uuid.uuid4().hex[:12]}")
    started = time.monotonic()
    with pytest.raises(ConfigError, match="does not exist"):
        with DurableSaver(
            sqlite=local, postgres=missing, write="local", signing_key=KEY, tiers=Tiers(drain_timeout=60)
        ) as s:
            s.get_tuple(config)
    # Retrying, the drain would take drain_timeout (60 s): a definite refusal does not wait it out.
    assert time.monotonic() - started < 20.0
    code, err = run_cli(capsys, ["threads", "--sqlite", local, "--postgres", missing])
    assert code == cli.EXIT_CANNOT_RUN
    assert "does not exist" in one_line(err)


async def test_refusal_on_the_async_face(private_pg: PrivatePostgres, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="password authentication failed"):
        async with DurableSaver(
            sqlite=None, postgres=private_pg.url(password="wrong-password"), tiers=Tiers(connect_timeout=30)
        ) as saver:
            await saver.asetup()
    assert time.monotonic() - started < 15.0  # retrying would take the connect timeout, 30 s
    assert not [r for r in caplog.records if "error connecting" in r.getMessage()]
