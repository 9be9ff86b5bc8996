"""Postgres behind PgBouncer in transaction pooling mode, as many replicas
reach it: each transaction may run on another server session.

With ``postgres_prepared_statements=False`` the Postgres tier keeps nothing
in a server session between transactions, so the conformance suite, real
graphs, writer leases and migrations behave as on a direct connection.
Without it, psycopg's prepared statements break after a few calls. Through
a private ``pgbouncer`` per test (tests/pgbouncer.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import ConfigError, DurableSaver, Tiers
from langgraph_durable.saver import ENV_POSTGRES_PREPARED_STATEMENTS
from langgraph_durable.tiers.postgres.tier_async import MIGRATIONS
from tests import lease_worker
from tests import test_lease as lease_tests

from .conftest import POSTGRES_URL
from .graphs import arun_scenarios, loop_graph, run_scenarios
from .pgbouncer import PrivateBouncer
from .test_conformance import _run_suite
from .test_graphs import DURABILITIES, _compare

SPAWN = lease_tests.SPAWN
POOLED = ["postgres", "sqlite+postgres"]


@pytest.fixture
def bouncer() -> Iterator[PrivateBouncer]:
    with PrivateBouncer(POSTGRES_URL) as b:
        yield b


@pytest.fixture
def pooled_url(postgres_url: str, bouncer: PrivateBouncer) -> str:
    """The test's fresh database, through the pooler (which stops before
    the database is dropped)."""
    return bouncer.url_for(postgres_url)


@pytest.fixture
def make_pooled(make_saver: Any, pooled_url: str) -> Any:
    """`make_saver` with Postgres through the pooler, prepared statements off."""

    def make(which: str, /, **options: Any) -> DurableSaver:
        return make_saver(which, **({"postgres": pooled_url, "postgres_prepared_statements": False} | options))

    return make


# -- the option, no servers ------------------------------------------------------------------


def test_the_option_reaches_the_pool_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://postgres@127.0.0.1:1/none"  # nothing connects until first use
    for option, kwargs in ((False, {"prepare_threshold": None}), (True, {})):  # {}: psycopg's default
        saver = DurableSaver(
            sqlite=None, postgres=url, tiers=Tiers(postgres_prepared_statements=option, drain_timeout=0)
        )
        (tier,) = saver._sync_chain().raw_shared
        assert {k: v for k, v in tier.pool.kwargs.items() if k == "prepare_threshold"} == kwargs
        saver.close()
    for value, on in (("false", False), ("0", False), ("Off", False), ("true", True), ("yes", True)):
        monkeypatch.setenv(ENV_POSTGRES_PREPARED_STATEMENTS, value)
        assert DurableSaver.from_env(sqlite=None, postgres=url).postgres_prepared_statements is on
    monkeypatch.setenv(ENV_POSTGRES_PREPARED_STATEMENTS, "sometimes")
    with pytest.raises(ConfigError, match="true or false"):
        DurableSaver.from_env(sqlite=None, postgres=url)
    with pytest.raises(ConfigError, match="True or False"):
        DurableSaver(sqlite=None, postgres=url, tiers=Tiers(postgres_prepared_statements="false"))  # type: ignore[arg-type]


# -- the failure it prevents -------------------------------------------------------------------


@pytest.fixture
def one_session_url(postgres_url: str) -> Iterator[str]:
    """The test's database through a pooler with ONE server session: the
    statements psycopg prepares for every client land in it, so the second
    client to prepare one meets the first one's name ("already exists")
    every time. Across several sessions a client may instead bind its
    statement's name in a session where another client's statement of the
    same shape holds it, and run that one: a type error at best, nothing
    the tier can tell from a bad argument."""
    bouncer = PrivateBouncer(POSTGRES_URL)
    settings = bouncer.ini.read_text()
    one = re.sub(r"(?m)^default_pool_size = \d+$", "default_pool_size = 1", settings)
    assert one != settings, settings
    bouncer.ini.write_text(one)
    with bouncer:
        yield bouncer.url_for(postgres_url)


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("prepared", [True, False])
async def test_prepared_statements_break_behind_transaction_pooling(
    make_saver: Any, one_session_url: str, prepared: bool, face: str
) -> None:
    """Two replicas taking turns: psycopg prepares a statement once a
    connection has run it 5 times, as ``_pg3_0``, ``_pg3_1``, ... on
    whichever server session the pooler lent it; here every client shares
    one, so the second connection to prepare a statement meets the first
    one's ``_pg3_0`` ("already exists"). The tier turns that into a
    `ConfigError` that says what to do. With prepared statements off, the
    same turns all succeed."""
    runs = 20
    replicas = [
        make_saver("postgres", postgres=one_session_url, postgres_prepared_statements=prepared) for _ in range(2)
    ]
    graphs = [lease_worker.counter().compile(checkpointer=s) for s in replicas]
    failed: ConfigError | None = None
    try:
        for i in range(runs):
            try:
                for n, graph in enumerate(graphs):
                    args = ({"hits": [f"{n}-{i}"]}, {"configurable": {"thread_id": f"replica-{n}"}})
                    _ = graph.invoke(*args) if face == "sync" else await graph.ainvoke(*args)
            except ConfigError as exc:
                failed = exc  # in the first turns, in practice
                break
    finally:
        for s in replicas:
            with contextlib.suppress(ConfigError):  # releasing the lease may meet the same broken statement
                _ = s.close() if face == "sync" else await s.aclose()
    if not prepared:
        assert failed is None
        with make_saver("postgres") as direct:  # straight to Postgres
            for n in range(2):
                state = direct.get_tuple({"configurable": {"thread_id": f"replica-{n}"}}).checkpoint
                assert state["channel_values"]["count"] == runs
        return
    assert failed is not None, f"{runs} turns of two replicas through the pooler met no broken prepared statement"
    _is_the_advice(failed, psycopg.errors.DuplicatePreparedStatement, "already exists")


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_prepared_statement_missing_from_the_session_gets_the_same_advice(
    make_saver: Any, one_session_url: str, face: str
) -> None:
    """The other way a pooler breaks them: the session a transaction lands
    in lacks the statement the connection prepared elsewhere ("does not
    exist"). Here the one session forgets them (``DEALLOCATE ALL``) between
    two runs of a replica with one connection (so no "already exists" of
    its own comes first)."""
    saver = make_saver("postgres", postgres=one_session_url, postgres_pool_size=1)
    graph = lease_worker.counter().compile(checkpointer=saver)

    async def run(hit: str) -> None:
        args = ({"hits": [hit]}, {"configurable": {"thread_id": "solo"}})
        _ = graph.invoke(*args) if face == "sync" else await graph.ainvoke(*args)

    failed: ConfigError | None = None
    try:
        for i in range(8):  # past psycopg's prepare threshold (5 runs of a statement)
            await run(str(i))
        with psycopg.connect(one_session_url, autocommit=True) as session:
            assert session.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() != (0,)
            session.execute("DEALLOCATE ALL")
        with pytest.raises(ConfigError) as info:
            await run("8")
        failed = info.value
    finally:
        with contextlib.suppress(ConfigError):  # releasing the lease may meet the same missing statement
            _ = saver.close() if face == "sync" else await saver.aclose()
    _is_the_advice(failed, psycopg.errors.InvalidSqlStatementName, "does not exist")


def _is_the_advice(failed: ConfigError | None, cause: type[psycopg.Error], reason: str) -> None:
    """The server's error, kept as the cause and quoted, and the advice:
    what is in the way, and both ways out of it."""
    assert failed is not None
    message = str(failed)
    assert isinstance(failed.__cause__, cause), repr(failed.__cause__)
    assert re.search(rf'prepared statement "_pg3_\d+" {reason}', message), message
    for advice in (
        "pool_mode = transaction",
        "postgres_prepared_statements=False",
        f"{ENV_POSTGRES_PREPARED_STATEMENTS}=false",
        "max_prepared_statements > 0",
    ):
        assert advice in message, (advice, message)


# -- with the option: everything works ---------------------------------------------------------


@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("tiers", POOLED)
async def test_conformance_through_pgbouncer(make_pooled: Any, tiers: str, face: str) -> None:
    await _run_suite(make_pooled, tiers, face)


@pytest.mark.parametrize("face", ["async", "sync"])
async def test_conformance_write_behind_through_pgbouncer(make_pooled: Any, face: str) -> None:
    """The replicator ships the journal to Postgres through the pooler."""
    await _run_suite(make_pooled, "sqlite+postgres", face, write="local")


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("tiers", POOLED)
def test_graphs_sync_through_pgbouncer(make_pooled: Any, tiers: str, durability: str) -> None:
    expected = run_scenarios(InMemorySaver(), durability)
    with make_pooled(tiers) as saver:
        actual = run_scenarios(saver, durability)
    _compare(expected, actual)


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("tiers", POOLED)
async def test_graphs_async_through_pgbouncer(make_pooled: Any, tiers: str, durability: str) -> None:
    expected = await arun_scenarios(InMemorySaver(), durability)
    async with make_pooled(tiers) as saver:
        actual = await arun_scenarios(saver, durability)
    _compare(expected, actual)


# -- writer leases: replicas contending for one thread through the pooler ------------------------


@pytest.mark.parametrize("tiers", POOLED)
def test_two_processes_increment_one_thread_through_pgbouncer(
    tmp_path: Path, make_pooled: Any, pooled_url: str, tiers: str
) -> None:
    """Two replica processes, each running the same thread 20 times: the
    lease, taken and renewed in Postgres through the pooler, lets one run at
    a time, so no run is lost and the history never forks."""
    runs, thread_id = 20, f"counter-{uuid.uuid4().hex[:8]}"
    start, results = SPAWN.Event(), SPAWN.Queue()
    procs = []
    for tag in ("A", "B"):
        kwargs = {
            "sqlite": str(tmp_path / f"{tag}.sqlite") if "sqlite" in tiers else None,
            "postgres": pooled_url,
            "postgres_prepared_statements": False,
            "on_busy": "wait",
            "lease_ttl": 2.0,
            "lease_wait": 60,
        }
        procs.append(SPAWN.Process(target=lease_worker.increments, args=(kwargs, thread_id, tag, runs, start, results)))
    for p in procs:
        p.start()
    start.set()
    outcomes = lease_tests._collect(results, 2, procs)
    assert sorted(outcomes) == [("ok", "A"), ("ok", "B")], outcomes
    with make_pooled(tiers, sqlite_name="check.sqlite") as saver:
        state = saver.get_tuple({"configurable": {"thread_id": thread_id}}).checkpoint["channel_values"]
        assert state["count"] == 2 * runs
        assert sorted(state["hits"]) == sorted(f"{t}-{i}" for t in "AB" for i in range(runs))
        lease_tests._history_is_one_line(saver, thread_id)


@pytest.mark.parametrize("durability", ["async", "sync"])
def test_a_stalled_holder_is_fenced_out_through_pgbouncer(
    make_pooled: Any, durability: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A holder that stalls past its lease's TTL loses the thread to another
    replica, and its late write is refused by the fence (one statement that
    checks and renews the lease, then writes)."""
    lease_tests.test_a_holder_that_stalls_past_the_ttl_loses_the_thread_and_its_write(
        make_pooled, "postgres", durability, caplog
    )


# -- setup: migrations on a fresh database, many replicas at once -------------------------------


def test_replicas_migrate_a_fresh_database_at_once_through_pgbouncer(
    make_pooled: Any, postgres_url: str, bouncer: PrivateBouncer
) -> None:
    """Six replicas (sync and async faces) call setup() at the same moment
    on an empty database. The migration lock is a transaction's
    (``pg_advisory_xact_lock``), so it holds through the pooler: each
    migration runs once and every replica starts."""
    savers = [make_pooled("postgres") for _ in range(6)]
    barrier = threading.Barrier(len(savers))
    errors: list[BaseException] = []

    def sync_setup(saver: DurableSaver) -> None:
        try:
            barrier.wait(10)
            saver.setup()
        except BaseException as exc:
            errors.append(exc)

    def async_setup(saver: DurableSaver) -> None:
        async def go() -> None:
            barrier.wait(10)
            await saver.asetup()
            await saver.aclose()

        try:
            asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sync_setup if i % 2 else async_setup, args=(s,)) for i, s in enumerate(savers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)  # a liveness bound
    try:
        assert not any(t.is_alive() for t in threads), "a setup did not return within 60 s"
        assert not errors, errors
        config = {"configurable": {"thread_id": "after-setup"}}
        out = lease_worker.counter().compile(checkpointer=savers[1]).invoke({"hits": ["x"]}, config)
        assert out == {"count": 1, "hits": ["x"]}
    finally:
        for s in savers:
            s.close()
    with psycopg.connect(postgres_url, autocommit=True) as direct:  # what really happened, past the pooler
        versions = [r[0] for r in direct.execute("SELECT v FROM lgd_migrations ORDER BY v").fetchall()]
        assert versions == list(range(1, len(MIGRATIONS)))
        tables = {r[0] for r in direct.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'lgd_%'")}
        assert {"lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_leases", "lgd_meta"} <= tables


def test_lease_linger_keeps_no_lease_where_hand_off_requests_are_not_heard(
    make_pooled: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Transaction pooling does not pass one session's notifications on to
    another client, so a kept lease could not be asked for: the listener
    finds that out by asking itself, and runs give their leases back."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    with make_pooled("sqlite+postgres", lease_linger=30.0) as a:
        a.setup()
        loop_graph(2).compile(checkpointer=a).invoke({"messages": [], "n": 0}, config)
        assert a._runtime.leases.kept(thread, time.monotonic()) is None
        assert "lease hand-offs: not listening" in caplog.text
        with make_pooled("sqlite+postgres", sqlite_name="b.sqlite") as b:
            assert loop_graph(3).compile(checkpointer=b).invoke({"messages": [], "n": 0}, config)["n"] == 3
