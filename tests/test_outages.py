"""Outages: a tier that is down or cut off never fails a run (issue 8).

Real faults only: a private redis-server the test kills (SIGKILL, no
persistence, so it comes back empty) and Postgres behind a TCP proxy the
test cuts. Every test runs real compiled graphs, and checks afterwards, by
looking at the tiers directly, that what the down tier missed was shipped
to it once it was back.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis as redis_lib

from langgraph_durable import DurableSaver, Tiers, TierUnavailable
from tests.flat_options import durable_options
from tests.graphs import loop_graph
from tests.proxy import TcpProxy
from tests.servers import PrivateRedis
from tests.waiting import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

STEPS = 3
RUNS = 30
DOWN = range(10, 20)  # the runs during which the tier is down


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    with PrivateRedis() as server:
        yield server


def _saver(tmp_path: Path, name: str = "local.sqlite", **options: Any) -> DurableSaver:
    options.setdefault("connect_timeout", 2)
    return DurableSaver(sqlite=str(tmp_path / name) if name else None, **durable_options(options))


def _run(graph: Any, thread: str, face: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    if face == "sync":
        return graph.invoke({"messages": [], "n": 0}, config)
    return asyncio.run(graph.ainvoke({"messages": [], "n": 0}, config))


def _thirty_runs(
    saver: DurableSaver, face: str, down: Callable[[], None], up: Callable[[], None], prefix: str
) -> list[str]:
    """Thirty runs, the tier down for runs 10-19. Every run must succeed."""
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    failures = []
    for i in range(RUNS):
        if i == DOWN.start:
            down()
        if i == DOWN.stop:
            up()
        try:
            out = _run(graph, f"{prefix}-{i}", face)
            assert out["n"] == STEPS, out
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            failures.append(f"run {i}: {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})")
    assert failures == [], failures
    return [f"{prefix}-{i}" for i in range(RUNS)]


def _wait_for_probe(saver: DurableSaver, tier: str, within: float = 35.0) -> None:
    """Until the tier's breaker lets a probe through (its backoff has passed)."""
    deadline = time.monotonic() + within
    while not saver._runtime.breakers[tier].available(time.monotonic()):
        assert time.monotonic() < deadline, f"{tier}'s breaker stayed open"
        time.sleep(0.05)


def _latest_n(saver: DurableSaver, thread: str) -> int | None:
    tup = saver.get_tuple({"configurable": {"thread_id": thread}})
    return None if tup is None else tup.checkpoint["channel_values"].get("n")


def _postgres_ids(url: str, thread: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = %s", (thread,)).fetchall()
    return {r[0] for r in rows}


def _redis_ids(url: str, prefix: str, thread: str) -> set[str]:
    client = redis_lib.Redis.from_url(url)
    try:
        return {f.decode().split("\x00")[1] for f in client.hkeys(f"{prefix}:{{{thread}}}:cp")}
    finally:
        client.close()


def _sqlite_ids(path: Path, thread: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = ?", (thread,))}


# -- a shared tier down for ten runs in thirty ---------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_redis_killed_for_ten_runs(
    tmp_path: Path, private_redis: PrivateRedis, postgres_url: str, redis_prefix: str, face: str
) -> None:
    """Redis is SIGKILLed before run 10 and restarted (empty) before run 20:
    all thirty runs succeed; what Redis missed is shipped to it once it is
    back; an empty Redis is never served as complete."""
    saver = _saver(tmp_path, redis=private_redis.url, redis_key_prefix=redis_prefix, postgres=postgres_url)
    threads = _thirty_runs(saver, face, private_redis.kill, private_redis.start, "rk")
    lag = saver.drain(10)
    assert lag.caught_up, lag
    # Redis holds every checkpoint written while it was down (shipped from the
    # journal) and after; what it held before the kill died with it.
    for i in DOWN:
        assert _redis_ids(private_redis.url, redis_prefix, threads[i]) == _sqlite_ids(
            tmp_path / "local.sqlite", threads[i]
        )
    # Another replica (its own SQLite file, the same Redis and Postgres) sees
    # the latest checkpoint of every thread, the ones Redis lost included.
    with _saver(tmp_path, "replica.sqlite", redis=private_redis.url, redis_key_prefix=redis_prefix,
                postgres=postgres_url) as replica:  # fmt: skip
        assert [_latest_n(replica, t) for t in threads] == [STEPS] * RUNS
        replica.repair()  # refills what Redis lost before the kill
    # Redis alone cannot reach the store's own key, which Postgres keeps: given it.
    key = saver._codec.key
    with _saver(tmp_path, None, redis=private_redis.url, redis_key_prefix=redis_prefix, signing_key=key) as redis_only:
        assert [_latest_n(redis_only, t) for t in threads] == [STEPS] * RUNS
    saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_postgres_cut_off_for_ten_runs(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str, redis_prefix: str, face: str
) -> None:
    """Postgres is cut off (TCP proxy) for runs 10-19: all thirty runs succeed,
    the runs right after it is back too (no dead pooled connection), and
    Postgres then holds every checkpoint, as the local tier does."""
    from tests.conftest import REDIS_URL

    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, redis=REDIS_URL, redis_key_prefix=redis_prefix, postgres=proxied)
    threads = _thirty_runs(saver, face, proxy.cut, proxy.restore, "pc")
    lag = saver.drain(10)
    assert lag.caught_up, lag
    for t in threads:
        assert _postgres_ids(postgres_url, t) == _sqlite_ids(tmp_path / "local.sqlite", t), t
    health = saver.health()
    assert health.ok and health.lag.records == 0
    assert {t.name: t.breaker.state for t in health.tiers}["postgres"] == "closed"
    saver.close()


def test_first_run_after_postgres_returns_uses_it(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str
) -> None:
    """Once Postgres answers again, the next run writes to it at once: the
    pool hands out no connection the cut left dead."""
    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, postgres=proxied, write="all")
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "warm", "sync")  # the pool holds open connections now
    proxy.cut()
    with pytest.raises(TierUnavailable):
        _run(graph, "during", "sync")
    proxy.restore()
    _wait_for_probe(saver, "postgres")
    assert _run(graph, "after", "sync")["n"] == STEPS
    assert len(_postgres_ids(postgres_url, "after")) == STEPS + 2
    saver.close()


# -- write modes -----------------------------------------------------------------------


def test_asyncio_run_returns_while_a_connection_is_still_opening(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str]
) -> None:
    """Each event loop gets its own Postgres pool, which grows while a run's
    writes wait for a connection. A run that ends while the pool is still
    opening one must not hang ``asyncio.run``: it cancels every task left,
    the pool's workers included, and waits for them. (psycopg_pool's worker
    took that cancellation for a failed connect and went on waiting.)"""
    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, postgres=proxied)
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "warm", "async")
    proxy.connect_delay = 1.0  # every new connection takes a second to open
    outcome: list[Any] = []

    def runs() -> None:
        try:
            outcome.extend(_run(graph, f"slow-{i}", "async")["n"] for i in range(2))
        except BaseException as exc:  # reported by the assertion below
            outcome.append(exc)

    worker = threading.Thread(target=runs, daemon=True)  # left behind if it hangs
    worker.start()
    worker.join(60)  # a liveness bound (it hung for good before the fix), not a measure of speed
    assert not worker.is_alive(), "asyncio.run did not return within 60 s of its run's start"
    assert outcome == [STEPS, STEPS], outcome
    proxy.connect_delay = 0.0
    saver.close()


def test_write_all_fails_cleanly_while_a_tier_is_down(
    tmp_path: Path, private_redis: PrivateRedis, postgres_url: str, redis_prefix: str
) -> None:
    saver = _saver(tmp_path, redis=private_redis.url, redis_key_prefix=redis_prefix, postgres=postgres_url, write="all")
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "before", "sync")
    private_redis.kill()
    with pytest.raises(TierUnavailable) as info:
        _run(graph, "strict", "sync")
    assert info.value.tier == "redis"
    # Nothing half-written: neither the local tier nor Postgres kept a checkpoint.
    assert _sqlite_ids(tmp_path / "local.sqlite", "strict") == set()
    assert _postgres_ids(postgres_url, "strict") == set()
    saver.close()


def test_shared_mode_fails_only_when_no_shared_tier_answers(
    tmp_path: Path, private_redis: PrivateRedis, postgres_proxy: tuple[TcpProxy, str]
) -> None:
    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, redis=private_redis.url, postgres=proxied)
    # A replica that has started once (it has the store's key: a brand-new one
    # cannot start while Postgres, which keeps the key, is cut off).
    saver.setup()
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    private_redis.kill()
    proxy.cut()
    with pytest.raises(TierUnavailable):
        _run(graph, "nowhere", "sync")
    assert _sqlite_ids(tmp_path / "local.sqlite", "nowhere") == set()
    private_redis.start()
    _wait_for_probe(saver, "redis")
    assert _run(graph, "redis-back", "sync")["n"] == STEPS
    saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_write_behind_ships_in_order_and_reports_lag(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str, redis_prefix: str, face: str
) -> None:
    """write="local": runs succeed with every shared tier cut off; the lag
    counts what is owed; once Postgres is back the replicator ships it all."""
    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, postgres=proxied, write="local")
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "wb-0", face)
    proxy.cut()
    for i in range(1, 4):
        assert _run(graph, f"wb-{i}", face)["n"] == STEPS
    lag = saver.lag()
    assert lag.records >= 3 * (STEPS + 1) and lag.by_tier["postgres"] == lag.records and lag.seconds > 0
    proxy.restore()
    wait_until(lambda: saver.lag().caught_up, "the replicator did not catch up")  # the background one, not a drain
    for i in range(4):
        assert _postgres_ids(postgres_url, f"wb-{i}") == _sqlite_ids(tmp_path / "local.sqlite", f"wb-{i}")
    with _saver(tmp_path, None, postgres=postgres_url) as replica:
        assert [_latest_n(replica, f"wb-{i}") for i in range(4)] == [STEPS] * 4
    saver.close()


def test_write_behind_refuses_a_write_whose_thread_was_taken_over(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str
) -> None:
    """A write-behind record shipped after another writer took the thread
    over (a newer lease token) is refused, never grafted onto its history."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, postgres=proxied, write="local", lease_ttl=0.5)
    cfg = generate_config("taken")
    cp = generate_checkpoint()
    first = saver.put(cfg, cp, generate_metadata(step=0), {})
    assert saver.drain(5).caught_up
    # This saver's own lease for the next write, then the link goes down.
    lease = saver._sync_leases()._acquire("taken")
    saver._runtime.leases.begin(_Runtime(), lease)
    proxy.cut()
    saver.put(first, generate_checkpoint(), generate_metadata(step=1), {})
    assert saver.lag().records == 1
    # Another replica takes the thread over (it waits for the lease to expire) and writes.
    with _saver(tmp_path, None, postgres=postgres_url, lease_ttl=5, on_busy="wait", lease_wait=60) as other:
        other.put(first, generate_checkpoint(), generate_metadata(step=1), {})
    proxy.restore()
    lag = saver.drain(60)
    assert lag.caught_up
    journal = saver._sync_chain().journal
    assert journal.refused == 1
    assert len(_postgres_ids(postgres_url, "taken")) == 2  # the first, and the other replica's
    saver.close()


class _Runtime:
    """Stands in for a run's Runtime in the lease book (no stream writer)."""

    stream_writer = None
    control = None


# -- catch-up after a restart, drain on close ---------------------------------------------


def test_owed_records_survive_a_restart(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str, redis_prefix: str
) -> None:
    """Postgres is cut off: a run Redis acknowledges leaves its records owed
    to Postgres in the local journal; a run with no shared tier at all is
    refused and owes nothing. close() cannot drain (Postgres is still cut
    off), so what is owed is still in the journal at the next start, whose
    setup() ships it: a saver on Postgres alone then reads the run whole."""
    from tests.conftest import REDIS_URL

    proxy, proxied = postgres_proxy
    redis_port = urlsplit(REDIS_URL).port or 6379
    with TcpProxy(urlsplit(REDIS_URL).hostname or "127.0.0.1", redis_port) as redis_proxy:
        redis_url = REDIS_URL.replace(f":{redis_port}", f":{redis_proxy.port}")
        shared = {"redis": redis_url, "redis_key_prefix": redis_prefix, "postgres": proxied}
        saver = _saver(tmp_path, drain_timeout=0.5, **shared)
        graph = loop_graph(STEPS).compile(checkpointer=saver)
        _run(graph, "before", "sync")
        assert saver.drain(10).caught_up
        proxy.cut()
        saver._runtime.breakers["postgres"].failed(time.monotonic(), "test: cut")  # skip the first timeout
        assert _run(graph, "owed", "sync")["n"] == STEPS  # Redis acknowledges it
        owed = saver.lag()
        assert owed.records > 0 and owed.by_tier["postgres"] > 0, owed
        assert _postgres_ids(postgres_url, "owed") == set()
        redis_proxy.cut()
        saver._runtime.breakers["redis"].failed(time.monotonic(), "test: cut")
        with pytest.raises(TierUnavailable):
            _run(graph, "refused", "sync")  # no shared tier at all: not acknowledged
        assert saver.lag().by_tier == owed.by_tier  # the refused run owes nothing
        saver.close()  # drains for 0.5 s: both are still cut off
        with sqlite3.connect(tmp_path / "local.sqlite") as conn:
            assert conn.execute("SELECT count(*) FROM lgd_journal").fetchone()[0] > 0
        local = _sqlite_ids(tmp_path / "local.sqlite", "owed")
        assert len(local) == STEPS + 2  # input, one per step, end
        redis_proxy.restore()
        proxy.restore()
        restarted = _saver(tmp_path, **shared)
        restarted.setup()  # ships what the journal still owes
        assert restarted.lag().caught_up
        restarted.close()
    assert _postgres_ids(postgres_url, "owed") == local
    assert _postgres_ids(postgres_url, "refused") == set()
    with _saver(tmp_path, None, postgres=postgres_url) as far:  # Postgres alone reads the run whole
        assert _latest_n(far, "owed") == STEPS
        assert {
            t.config["configurable"]["checkpoint_id"] for t in far.list({"configurable": {"thread_id": "owed"}})
        } == local


def test_close_drains_what_is_owed(
    tmp_path: Path, private_redis: PrivateRedis, postgres_url: str, redis_prefix: str
) -> None:
    saver = _saver(
        tmp_path, redis=private_redis.url, redis_key_prefix=redis_prefix, postgres=postgres_url, drain_timeout=60
    )
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    private_redis.kill()
    _run(graph, "drained", "sync")
    assert saver.lag().by_tier["redis"] > 0
    private_redis.start()
    _wait_for_probe(saver, "redis")
    saver.close()  # drains within drain_timeout
    assert _redis_ids(private_redis.url, redis_prefix, "drained") == _sqlite_ids(tmp_path / "local.sqlite", "drained")
    with sqlite3.connect(tmp_path / "local.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM lgd_journal").fetchone()[0] == 0


# -- no local tier: the backlog is kept in memory ---------------------------------------------


def test_without_a_local_tier_a_down_tier_is_caught_up_from_memory(
    tmp_path: Path, private_redis: PrivateRedis, postgres_url: str, redis_prefix: str
) -> None:
    saver = _saver(tmp_path, None, redis=private_redis.url, redis_key_prefix=redis_prefix, postgres=postgres_url)
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    private_redis.kill()
    assert _run(graph, "mem", "sync")["n"] == STEPS
    assert saver.lag().by_tier["redis"] > 0
    private_redis.start()
    _wait_for_probe(saver, "redis")
    assert saver.drain(60).caught_up
    assert _redis_ids(private_redis.url, redis_prefix, "mem") == _postgres_ids(postgres_url, "mem")
    saver.close()


# -- local disk trouble --------------------------------------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_local_disk_full_the_shared_tiers_carry_on(
    tmp_path: Path, postgres_url: str, redis_prefix: str, face: str
) -> None:
    """The local SQLite file cannot grow (SQLite's own max_page_count, which
    fails writes with "database or disk is full"): runs go on with Redis and
    Postgres, the failures are counted, and reads fall through."""
    from tests.conftest import REDIS_URL

    saver = _saver(tmp_path, redis=REDIS_URL, redis_key_prefix=redis_prefix, postgres=postgres_url)
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "disk-ok", face)
    assert saver._runtime.local is not None
    with saver._runtime.local._lock:
        conn = saver._runtime.local._connect()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages}")
    for i in range(3):
        assert _run(graph, f"disk-full-{i}", face)["n"] == STEPS
    assert saver.health().local_write_failures > 0
    in_postgres = _postgres_ids(postgres_url, "disk-full-2")
    assert len(in_postgres) == STEPS + 2  # the input checkpoint, START's and one per step
    assert _sqlite_ids(tmp_path / "local.sqlite", "disk-full-2") < in_postgres  # the local file missed some
    assert _latest_n(saver, "disk-full-2") == STEPS
    saver.close()


# -- health ---------------------------------------------------------------------------------------


def test_health_reports_each_tier(
    tmp_path: Path, private_redis: PrivateRedis, postgres_url: str, redis_prefix: str
) -> None:
    saver = _saver(tmp_path, redis=private_redis.url, redis_key_prefix=redis_prefix, postgres=postgres_url)
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "h", "sync")
    health = saver.health()
    assert health.ok and [t.name for t in health.tiers] == ["sqlite", "redis", "postgres"]
    assert [t.role for t in health.tiers] == ["local", "hot", "record"]
    assert all(t.reachable and t.latency_ms is not None for t in health.tiers)
    private_redis.kill()
    _run(graph, "h2", "sync")
    health = saver.health()
    by = {t.name: t for t in health.tiers}
    assert not health.ok and not by["redis"].reachable and by["redis"].breaker.state == "open"
    with sqlite3.connect(tmp_path / "local.sqlite") as conn:
        journaled = conn.execute("SELECT count(*) FROM lgd_journal").fetchone()[0]
    assert by["redis"].owed == journaled == health.lag.records > 0 and by["postgres"].owed == 0
    assert by["redis"].error
    ahealth = asyncio.run(saver.ahealth())
    assert {t.name: t.reachable for t in ahealth.tiers} == {"sqlite": True, "redis": False, "postgres": True}
    private_redis.start()
    assert saver.health().ok
    saver.close()


# -- doctor and SIGTERM ----------------------------------------------------------------------------


def test_doctor_exit_status_follows_the_tiers(
    tmp_path: Path, private_redis: PrivateRedis, postgres_url: str, redis_prefix: str, capsys: Any
) -> None:
    from langgraph_durable import cli

    flags = ["--sqlite", str(tmp_path / "local.sqlite"), "--redis", private_redis.url, "--postgres", postgres_url,
             "--redis-key-prefix", redis_prefix]  # fmt: skip
    with DurableSaver(
        sqlite=flags[1], redis=private_redis.url, postgres=postgres_url, tiers=Tiers(redis_key_prefix=redis_prefix)
    ) as app:
        app.setup()  # the replica's local file exists (doctor only looks: it creates none)
    assert cli.main(["doctor", *flags]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert [line.split()[:2] for line in out.splitlines()[1:4]] == [
        ["sqlite", "yes"],
        ["redis", "yes"],
        ["postgres", "yes"],
    ]
    private_redis.kill()
    assert cli.main(["doctor", *flags, "--timeout", "1"]) == cli.EXIT_FINDINGS
    out = capsys.readouterr().out
    assert "redis     NO" in out and "Connection refused" in out


SIGTERM_WORKER = """
import sys, time
from langgraph_durable import DurableSaver, Tiers
from langgraph_durable.shutdown import drain_on_sigterm
from tests.graphs import loop_graph

saver = DurableSaver(sqlite=sys.argv[1], postgres=sys.argv[2], write="local", tiers=Tiers(connect_timeout=2, drain_timeout=0))
drain_on_sigterm(saver, timeout=20)
graph = loop_graph(3).compile(checkpointer=saver)
graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "sigterm"}})
print("owed", saver.lag().records, flush=True)
time.sleep(60)
"""


def test_sigterm_drains_before_the_process_stops(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str
) -> None:
    """A write-behind worker with Postgres cut off gets SIGTERM once Postgres
    is back: it ships its backlog, then exits with SIGTERM's status (143)."""
    import os
    import signal
    import subprocess
    import sys

    proxy, proxied = postgres_proxy
    # The worker's local file was set up once with Postgres reachable (the
    # schema, and its copy of the store's key, which Postgres keeps).
    local = tmp_path / "worker.sqlite"
    with DurableSaver(sqlite=str(local), postgres=postgres_url) as schema:
        schema.setup()
    proxy.cut()
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_WORKER, str(local), proxied],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parent.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("owed") and int(line.split()[1]) > 0, line
        proxy.restore()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()  # a no-op once it exited; a failed test leaves no worker behind
        proc.wait()
        proc.stdout.close()
    assert _postgres_ids(postgres_url, "sigterm") == _sqlite_ids(local, "sigterm") != set()


def test_a_hung_postgres_costs_one_call_timeout_then_is_skipped(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str, redis_prefix: str
) -> None:
    """Postgres accepts the connection but answers nothing (a hung server,
    the proxy stalled): the async face gives up after `call_timeout`, the
    breaker then skips Postgres without waiting, and the runs go on with
    SQLite and Redis; once it answers, it is caught up."""
    from tests.conftest import REDIS_URL

    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, redis=REDIS_URL, redis_key_prefix=redis_prefix, postgres=proxied, call_timeout=1.0)
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    _run(graph, "slow-0", "async")
    proxy.stall()
    for i in range(1, 6):
        assert _run(graph, f"slow-{i}", "async")["n"] == STEPS
    # Each timeout is one failure the breaker saw: the first call, then only
    # its probes, not every one of the runs' ~60 calls to Postgres.
    timeouts = saver._runtime.breakers["postgres"].stats(time.monotonic()).failures
    assert 1 <= timeouts <= 5, timeouts
    assert saver.lag().by_tier["postgres"] > 0
    proxy.restore()
    proxy.cut()  # the stalled connections are dead now; new ones go through
    proxy.restore()
    assert saver.drain(60).caught_up
    for i in range(6):
        assert _postgres_ids(postgres_url, f"slow-{i}") == _sqlite_ids(tmp_path / "local.sqlite", f"slow-{i}")
    saver.close()


KILLED_WORKER = """
import json, sys, time
from langgraph_durable import DurableSaver, Tiers
from tests.graphs import loop_graph

saver = DurableSaver(sqlite=sys.argv[1], postgres=sys.argv[2], write="local", tiers=Tiers(connect_timeout=2))
graph = loop_graph(3).compile(checkpointer=saver)
config = {"configurable": {"thread_id": "killed"}}
graph.invoke({"messages": [], "n": 0}, config)
acked = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)]
print(json.dumps({"acked": acked, "owed": saver.lag().records}), flush=True)
time.sleep(60)
"""


def test_write_behind_loses_nothing_acknowledged_when_the_process_is_killed(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], postgres_url: str
) -> None:
    """The loss bound of write="local" without losing the disk: a worker whose
    writes are all still owed (Postgres cut off) is SIGKILLed; the next
    process on the same local file ships every acknowledged checkpoint."""
    import json
    import os
    import subprocess
    import sys

    proxy, proxied = postgres_proxy
    # Set up once with Postgres reachable: the schema, and the local copy of
    # the store's key, which Postgres keeps.
    local = tmp_path / "worker.sqlite"
    with DurableSaver(sqlite=str(local), postgres=postgres_url) as schema:
        schema.setup()
    proxy.cut()
    root = Path(__file__).parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, str(local), proxied],
        stdout=subprocess.PIPE,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.stdout is not None
    try:
        report = json.loads(proc.stdout.readline())
    finally:
        proc.kill()  # SIGKILL: the crash under test (and no worker left behind)
        proc.wait(timeout=10)
        proc.stdout.close()
    assert report["owed"] > 0 and len(report["acked"]) == STEPS + 2
    assert _postgres_ids(postgres_url, "killed") == set()  # nothing was shipped before the kill
    proxy.restore()
    with DurableSaver(sqlite=str(local), postgres=proxied, write="local") as restarted:
        restarted.setup()  # ships what the dead process owed
        assert restarted.lag().caught_up
    assert _postgres_ids(postgres_url, "killed") == set(report["acked"])
    with DurableSaver(sqlite=None, postgres=postgres_url) as replica:
        assert _latest_n(replica, "killed") == STEPS
