"""Redis Cluster and Redis Sentinel: a real cluster of three primaries (and a
real primary watched by a sentinel) on loopback ports of our own.

The saver is given a plain ``redis://`` URL of one node and must find the
cluster by itself; everything the single-server tests check must hold on it:
the conformance suite, the graph scenarios against InMemorySaver, the
whole-store operations across primaries, and a primary killed (SIGKILL, no
persistence: it comes back empty) in the middle of a run.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from langgraph.checkpoint.memory import InMemorySaver
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError

import langgraph_durable.faces.runtime as faces_runtime
from langgraph_durable import ConfigError, DurableSaver, LeaseLost, Tiers, TierUnavailable
from langgraph_durable.model.lease import Fence
from langgraph_durable.model.records import BlobRow, CheckpointRow, WriteRow
from langgraph_durable.tiers.redis.tier import RedisTier
from langgraph_durable.tiers.redis.tier_async import AsyncRedisTier, SentinelAddress, sentinel_address
from tests.flat_options import durable_options

from .cluster import RedisClusterProcesses, SentinelProcesses, started
from .conftest import REDIS_URL, SaverFactory
from .graphs import arun_scenarios, loop_graph, looping, run_scenarios
from .test_conformance import _run_suite
from .test_lease_linger import kept_run
from .waiting import wait_until

# One worker runs them all (pytest-xdist, --dist loadgroup): one session
# cluster instead of one per worker.
pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.xdist_group("redis-cluster")]

# The tier configurations run on the cluster: Redis alone (it holds the
# leases too), and under SQLite and above Postgres.
CLUSTER_CONFIGS = ["rediscluster", "sqlite+rediscluster+postgres"]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterProcesses]:
    """Three primaries, shared by the tests that do not kill a node."""
    yield from started(RedisClusterProcesses, "a Redis Cluster of three primaries")


@pytest.fixture
def cluster_client(redis_cluster: RedisClusterProcesses) -> Iterator[Any]:
    client = RedisCluster.from_url(redis_cluster.url)
    yield client
    client.close()


@pytest.fixture
def cluster_prefix(cluster_client: Any) -> Iterator[str]:
    """A key prefix of this test's own on the cluster, its keys deleted afterwards."""
    prefix = f"lgd_test_{uuid.uuid4().hex[:16]}"
    yield prefix
    keys = list(cluster_client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        cluster_client.delete(*keys)


# A signing key for the tests that open Redis alone next to a store that keeps
# its own key in Postgres.
KEY = "k" * 32


def _factory(request: pytest.FixtureRequest, tmp_path: Path, url: str, prefix: str, **defaults: Any) -> SaverFactory:
    """Like conftest's make_saver, with "rediscluster" for the cluster at `url`."""
    state: dict[str, str] = {}

    def make(which: str, /, *, sqlite_name: str = "local.sqlite", **options: Any) -> DurableSaver:
        parts = set(which.split("+"))
        assert parts <= {"sqlite", "rediscluster", "postgres"}, parts
        kwargs: dict[str, Any] = {"sqlite": str(tmp_path / sqlite_name) if "sqlite" in parts else None}
        if "rediscluster" in parts:
            kwargs.update(redis=url, redis_key_prefix=prefix)
        if "postgres" in parts:
            if "postgres" not in state:
                state["postgres"] = request.getfixturevalue("postgres_url")
            kwargs["postgres"] = state["postgres"]
        return DurableSaver(**durable_options({**kwargs, **defaults, **options}))

    return make


@pytest.fixture
def make_cluster_saver(
    request: pytest.FixtureRequest, tmp_path: Path, redis_cluster: RedisClusterProcesses, cluster_prefix: str
) -> SaverFactory:
    return _factory(request, tmp_path, redis_cluster.url, cluster_prefix)


def _redis_tier(saver: DurableSaver, face: str = "sync") -> Any:
    chain: Any = saver._sync_chain() if face == "sync" else saver._async_chain()
    return next(t for t in chain.raw_shared if t.name == "redis")


def _threads_per_primary(cluster: RedisClusterProcesses, per_primary: int, tag: str) -> dict[int, list[str]]:
    """Thread ids, `per_primary` of them on each primary (by the slot of their hash tag)."""
    found: dict[int, list[str]] = {port: [] for port in cluster.ports}
    ranges = cluster.slot_ranges()
    i = 0
    while any(len(ts) < per_primary for ts in found.values()):
        thread = f"{tag}-{i}"
        slot = key_slot(f"{{{thread}}}".encode())
        owner = next(port for low, high, port in ranges if low <= slot <= high)
        if len(found[owner]) < per_primary:
            found[owner].append(thread)
        i += 1
    return found


# -- which client -------------------------------------------------------------------


def test_a_single_server_url_keeps_the_plain_client(redis_prefix: str) -> None:
    with DurableSaver(sqlite=None, redis=REDIS_URL, tiers=Tiers(redis_key_prefix=redis_prefix)) as saver:
        saver.setup()
        tier = _redis_tier(saver)
        assert (tier.cluster, tier.clustered) == (False, False)
        assert type(tier.client) is redis_lib.Redis


async def test_a_single_server_url_keeps_the_plain_async_client(redis_prefix: str) -> None:
    async with DurableSaver(sqlite=None, redis=REDIS_URL, tiers=Tiers(redis_key_prefix=redis_prefix)) as saver:
        await saver.asetup()
        tier = _redis_tier(saver, "async")
        assert (tier.cluster, tier.clustered) == (False, False)
        assert type(tier.client) is redis_lib.asyncio.Redis


@pytest.mark.parametrize("option", [None, True])
def test_any_node_url_finds_the_cluster(
    redis_cluster: RedisClusterProcesses, cluster_prefix: str, option: bool | None
) -> None:
    for port in redis_cluster.ports:
        with DurableSaver(
            sqlite=None,
            redis=redis_cluster.url_of(port),
            tiers=Tiers(redis_key_prefix=cluster_prefix, redis_cluster=option),
        ) as saver:
            saver.setup()
            tier = _redis_tier(saver)
            assert tier.clustered
            assert isinstance(tier.client, RedisCluster)
            graph = loop_graph(2).compile(checkpointer=saver)
            assert graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"t{port}"}})["n"] == 2


async def test_any_node_url_finds_the_cluster_async(redis_cluster: RedisClusterProcesses, cluster_prefix: str) -> None:
    async with DurableSaver(
        sqlite=None, redis=redis_cluster.url, tiers=Tiers(redis_key_prefix=cluster_prefix)
    ) as saver:
        await saver.asetup()
        tier = _redis_tier(saver, "async")
        assert tier.clustered
        assert isinstance(tier.client, redis_lib.asyncio.RedisCluster)


def _clients_named(cluster: RedisClusterProcesses, name: str, skip: int | None = None) -> int:
    """Connections named `name` that the cluster's nodes (but `skip`) hold, counted by the nodes."""
    count = 0
    for port in cluster.ports:
        if port == skip:
            continue
        node = redis_lib.Redis(port=port)
        try:
            count += sum(1 for c in node.client_list() if c.get("name") == name)
        finally:
            node.close()
    return count


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_closed_cluster_tier_leaves_no_connection_open(
    redis_cluster: RedisClusterProcesses, cluster_prefix: str, face: str
) -> None:
    """redis-py's sync cluster client leaves each node's pool open at close;
    the tier closes them, or every saver closed leaks a socket per node."""
    name = f"lgd-close-{uuid.uuid4().hex[:8]}"
    url = f"{redis_cluster.url}?client_name={name}"
    tier: Any = (RedisTier if face == "sync" else AsyncRedisTier)(url, key_prefix=cluster_prefix)
    await _call(tier, "setup")
    for t in ("a", "b", "c", "d", "e", "f"):  # threads on every primary, most likely
        await _call(tier, "head", t, "")
    assert _clients_named(redis_cluster, name) > 0
    await _call(tier, "close")
    deadline = time.monotonic() + 5
    while _clients_named(redis_cluster, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _clients_named(redis_cluster, name) == 0


def assert_nothing_unclosed() -> None:
    """Collect garbage now: no connection, socket or cluster node that
    nobody closed is found (each would warn, as a ResourceWarning, in
    whichever test happened to collect it)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not unclosed, unclosed


async def test_a_cluster_tier_closed_after_a_node_failed_closes_every_node(own_cluster: RedisClusterProcesses) -> None:
    """A command that meets a connection error (its node is down) leaves
    redis-py's async cluster client marked for re-initialization, and its
    ``aclose()`` then disconnects nothing (redis-py 8.1): the tier closes
    every node itself. Else the live nodes keep the connections open, and
    the garbage collector reports them unclosed in some later test."""
    prefix = f"lgd_test_{uuid.uuid4().hex[:16]}"
    name = f"lgd-failed-{uuid.uuid4().hex[:8]}"
    tier = AsyncRedisTier(f"{own_cluster.url}?client_name={name}", key_prefix=prefix, socket_timeout=1.0)
    per_primary = _threads_per_primary(own_cluster, 1, "failed")
    victim = own_cluster.ports[1]
    try:
        await tier.setup()
        for threads in per_primary.values():  # a connection to every primary
            assert (await tier.head(threads[0], "")).checkpoint_id is None
        own_cluster.kill(victim)
        with pytest.raises(TierUnavailable):
            await tier.head(per_primary[victim][0], "")
        assert tier.client._initialize, "redis-py re-initializes at once now: this test no longer shows anything"
        assert _clients_named(own_cluster, name, skip=victim) > 0
    finally:
        await tier.close()
    deadline = time.monotonic() + 5
    while _clients_named(own_cluster, name, skip=victim) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _clients_named(own_cluster, name, skip=victim) == 0
    del tier
    assert_nothing_unclosed()


def test_a_cluster_url_with_a_database_number_is_a_config_error(redis_cluster: RedisClusterProcesses) -> None:
    url = redis_cluster.url.rsplit("/", 1)[0] + "/3"
    with DurableSaver(sqlite=None, redis=url) as saver, pytest.raises(ConfigError, match="only database 0"):
        saver.setup()


# -- the compare-and-set steps: WATCH on one server, scripts on a cluster --------------------


async def _call(tier: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    result = getattr(tier, method)(*args, **kwargs)
    return await result if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("server", ["single", "cluster"])
async def test_compare_and_set_steps_agree(
    request: pytest.FixtureRequest, redis_prefix: str, server: str, face: str
) -> None:
    """Fenced writes, leases, ledger swaps and exact-copy removal answer the
    same on a single server (WATCH ... MULTI/EXEC) and on a cluster (scripts)."""
    if server == "cluster":
        url = request.getfixturevalue("redis_cluster").url
        prefix = request.getfixturevalue("cluster_prefix")
    else:
        url, prefix = REDIS_URL, redis_prefix
    tier = (RedisTier if face == "sync" else AsyncRedisTier)(url, key_prefix=prefix)
    try:
        await _call(tier, "setup")
        assert tier.clustered == (server == "cluster")
        t = "cas"
        assert (await _call(tier, "read_lease", t))[0] is None
        taken = await _call(tier, "swap_lease", t, None, "me", 1, 30.0)
        lease, now = await _call(tier, "read_lease", t)
        assert (lease.holder, lease.token) == ("me", 1) and lease.expires_at == taken.expires_at
        assert now < lease.expires_at <= now + 30.5
        # Kept leases renewed in bulk: threads on many slots, in one pipeline.
        others = [f"kept-{i}" for i in range(8)]
        for other in others:
            await _call(tier, "swap_lease", other, None, "me", 1, 30.0)
        renewed_threads = await _call(tier, "renew_leases", "me", [(o, 1) for o in others] + [("kept-0", 2)], 90.0)
        assert renewed_threads == set(others)
        for other in others:
            assert (await _call(tier, "read_lease", other))[0].expires_at > now + 60

        fence = Fence(t, "me", 1, 60.0)
        row = CheckpointRow(t, "", "0001", None, "run", "{}", b"checkpoint 1")
        await _call(tier, "write_checkpoint", row, [BlobRow(t, "", "ch", "1", b"blob 1")], fence=fence)
        renewed, _ = await _call(tier, "read_lease", t)
        assert renewed.expires_at > lease.expires_at + 20, "the fenced write did not renew the lease"
        write = WriteRow(t, "", "0001", "task", 0, "ch", "", b"write 1")
        await _call(tier, "write_writes", [write], False, fence=fence)
        head = await _call(tier, "head", t, "")
        assert (head.checkpoint_id, head.row, head.writes) == ("0001", row, (write,))
        assert await _call(tier, "read_blobs", t, "", [("ch", "1")]) == {
            ("ch", "1"): BlobRow(t, "", "ch", "1", b"blob 1")
        }

        # Another holder's fence, then a released lease: refused, nothing stored.
        other = CheckpointRow(t, "", "0002", "0001", "run", "{}", b"checkpoint 2")
        with pytest.raises(LeaseLost, match="token was 1; it now belongs to"):
            await _call(tier, "write_checkpoint", other, [], fence=Fence(t, "you", 1, 60.0))
        await _call(tier, "release_lease", t, "me", 1)
        with pytest.raises(LeaseLost, match="it was released"):
            await _call(tier, "write_checkpoint", other, [], fence=fence)
        assert (await _call(tier, "head", t, "")).checkpoint_id == "0001"
        # A late write (write-behind) of the same holder still lands after the release.
        await _call(tier, "write_checkpoint", other, [], fence=Fence(t, "me", 1, 60.0, late=True))
        assert (await _call(tier, "head", t, "")).checkpoint_id == "0002"

        # Ledger: replaced only if it still holds what the caller saw.
        await _call(tier, "write_ledger", t, "act", b"intent")
        await _call(tier, "swap_ledger", t, "act", b"something else", b"done")
        assert await _call(tier, "read_ledger", t) == {"act": b"intent"}
        await _call(tier, "swap_ledger", t, "act", b"intent", b"done")
        await _call(tier, "swap_ledger", t, "new", None, b"first")
        assert await _call(tier, "read_ledger", t) == {"act": b"done", "new": b"first"}

        # Removing a copy removes that exact copy only.
        await _call(tier, "remove_copy", "blob", BlobRow(t, "", "ch", "1", b"another copy"))
        assert await _call(tier, "read_blobs", t, "", [("ch", "1")])
        await _call(tier, "remove_copy", "blob", BlobRow(t, "", "ch", "1", b"blob 1"))
        assert await _call(tier, "read_blobs", t, "", [("ch", "1")]) == {}
        await _call(tier, "remove_copy", "write", WriteRow(t, "", "0001", "task", 0, "ch", "", b"write 1"))
        assert await _call(tier, "read_writes", t, "", ["0001"]) == []
        await _call(tier, "remove_copy", "checkpoint", other)
        assert [r.checkpoint_id for r in await _call(tier, "list_checkpoints", t, "", None, None, None, None)] == [
            "0001"
        ]
    finally:
        await _call(tier, "close")


# -- conformance and graphs -------------------------------------------------------------


@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("tiers", CLUSTER_CONFIGS)
async def test_conformance_on_the_cluster(make_cluster_saver: SaverFactory, tiers: str, face: str) -> None:
    await _run_suite(make_cluster_saver, tiers, face)


def _compare(expected: dict[str, Any], actual: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key] == expected[key], f"{key} differs from InMemorySaver"


@pytest.mark.parametrize("tiers", CLUSTER_CONFIGS)
def test_graphs_sync_on_the_cluster(make_cluster_saver: SaverFactory, tiers: str) -> None:
    expected = run_scenarios(InMemorySaver(), "sync")
    with make_cluster_saver(tiers) as saver:
        _compare(expected, run_scenarios(saver, "sync"))


@pytest.mark.parametrize("tiers", CLUSTER_CONFIGS)
async def test_graphs_async_on_the_cluster(make_cluster_saver: SaverFactory, tiers: str) -> None:
    expected = await arun_scenarios(InMemorySaver(), "sync")
    async with make_cluster_saver(tiers) as saver:
        _compare(expected, await arun_scenarios(saver, "sync"))


# -- whole-store operations across primaries -------------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_kept_lease_is_handed_off_on_the_cluster(make_cluster_saver: SaverFactory, face: str) -> None:
    """``lease_linger`` on a cluster: the hand-off request is a PUBLISH, which
    reaches a subscriber on whichever node it is connected to."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    async with make_cluster_saver("sqlite+rediscluster", sqlite_name="a.sqlite", lease_linger=30.0) as a:
        await kept_run(a, face, thread, 2)
        # B does not wait: with on_busy="raise" it looks again for the
        # hand-off grace only, then raises ThreadBusy (A keeps it for 30 s).
        async with make_cluster_saver("sqlite+rediscluster", sqlite_name="b.sqlite") as b:
            graph = loop_graph(4).compile(checkpointer=b)
            config: Any = {"configurable": {"thread_id": thread}}
            out = (
                graph.invoke({"messages": [], "n": 0}, config)
                if face == "sync"
                else await graph.ainvoke({"messages": [], "n": 0}, config)
            )
            assert out["n"] == 4
        assert a._runtime.hand_offs is not None and a._runtime.hand_offs.hand_offs == 1
        tup = a.get_tuple(config) if face == "sync" else await a.aget_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"]["n"] == 4


def _run_threads(saver: DurableSaver, threads: list[str], run_of: dict[str, str], steps: int = 3) -> None:
    graph = loop_graph(steps).compile(checkpointer=saver)
    for t in threads:
        config = {"configurable": {"thread_id": t}, "metadata": {"run_id": run_of[t]}}
        assert graph.invoke({"messages": [], "n": 0}, config)["n"] == steps


def test_whole_store_operations_visit_every_primary(
    make_cluster_saver: SaverFactory, redis_cluster: RedisClusterProcesses, cluster_client: Any, cluster_prefix: str
) -> None:
    per_primary = _threads_per_primary(redis_cluster, 2, "whole")
    threads = sorted(t for ts in per_primary.values() for t in ts)
    doomed = {ts[0] for ts in per_primary.values()}  # one per primary
    run_of = {t: ("doomed-run" if t in doomed else f"run-{t}") for t in threads}
    # One key of the user's: Redis alone cannot reach the store's own key, which Postgres keeps.
    with (
        make_cluster_saver("sqlite+rediscluster+postgres", signing_key=KEY) as saver,
        make_cluster_saver("rediscluster", signing_key=KEY) as redis_only,
    ):
        _run_threads(saver, threads, run_of)

        # list(None) of the Redis tier alone finds the threads of every primary.
        listed = {c.config["configurable"]["thread_id"] for c in redis_only.list(None)}
        assert listed == set(threads)
        assert sorted(c.checkpoint["id"] for c in redis_only.list(None)) == sorted(
            c.checkpoint["id"] for c in saver.list(None)
        )

        assert_clean(saver.verify())

        # delete_for_runs: one run's checkpoints, spread over every primary.
        saver.delete_for_runs(["doomed-run"])
        for view in (saver, redis_only):
            assert {c.config["configurable"]["thread_id"] for c in view.list(None)} == set(threads) - doomed
        assert_clean(saver.verify())

        # Damage Redis's copies on every primary: one checkpoint garbled, one
        # channel value deleted per surviving thread.
        damaged = []
        for ts in per_primary.values():
            t = ts[1]
            latest = saver.get_tuple({"configurable": {"thread_id": t}})
            assert latest is not None
            cid = latest.checkpoint["id"]
            cp_key = f"{cluster_prefix}:{{{t}}}:cp"
            blob_key = f"{cluster_prefix}:{{{t}}}:blob"
            assert cluster_client.hexists(cp_key, f"\x00{cid}")
            cluster_client.hset(cp_key, f"\x00{cid}", b"\x93garbage")
            blob_field = sorted(cluster_client.hkeys(blob_key))[0]
            cluster_client.hdel(blob_key, blob_field)
            damaged.append(t)

        report = saver.verify()
        assert {b.thread_id for b in report.bad if b.tier == "redis"} == set(damaged)
        assert {b.thread_id for b in report.missing if b.tier == "redis"} == set(damaged)
        repaired = saver.repair()
        assert not repaired.unrestorable, repaired.unrestorable
        assert_clean(saver.verify())
        # Redis alone serves every thread's latest checkpoint again.
        for t in set(threads) - doomed:
            config = {"configurable": {"thread_id": t}}
            assert redis_only.get_tuple(config) == saver.get_tuple(config)


def assert_clean(report: Any) -> None:
    assert (report.bad, report.missing, report.unrestorable) == ([], [], []), report


# -- a primary killed in the middle of a run ------------------------------------------------------


@pytest.fixture
def own_cluster() -> Iterator[RedisClusterProcesses]:
    """A cluster of this test's own, since the test kills one of its nodes."""
    yield from started(RedisClusterProcesses, "a Redis Cluster of three primaries")


STEPS = 45
STEP_S = 0.1  # a run lasts about STEPS * STEP_S
# Every run waits at this step until the node is killed: the kill comes mid-run
# however slow the machine. (The node stays down until the others declare the
# cluster failed, after --cluster-node-timeout, 2 s, and answer CLUSTERDOWN
# for every slot; the runs go on meanwhile.)
KILL_AT_STEP = 8
LIVENESS_S = 120.0  # a bound on waiting for the kill, not a measure of speed


def _slow_graph(killed: threading.Event) -> Any:
    def step(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(STEP_S)
        n = state.get("n", 0)
        if n == KILL_AT_STEP:
            assert killed.wait(LIVENESS_S), "the node was never killed"
        return {"messages": [f"message {n}"], "n": n + 1}

    return looping(step, STEPS)


def _aslow_graph(killed: threading.Event) -> Any:
    async def step(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(STEP_S)
        n = state.get("n", 0)
        if n == KILL_AT_STEP:
            assert await asyncio.to_thread(killed.wait, LIVENESS_S), "the node was never killed"
        return {"messages": [f"message {n}"], "n": n + 1}

    return looping(step, STEPS)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_primary_killed_mid_run(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    own_cluster: RedisClusterProcesses,
    face: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGKILL the primary holding some running threads, restart it empty on
    the same port and nodes.conf: every run succeeds (SQLite and Postgres
    carry on while Redis is down), every thread's latest checkpoint is
    served afterwards, and `repair` puts back what the node lost."""
    # Redis is written behind; here records ship as soon as a pass runs, not
    # at the runs' ends, so that the killed node has some to lose.
    monkeypatch.setattr(faces_runtime, "RUN_SHIPS_ITS_OWN_S", 0.0)
    prefix = f"lgd_test_{uuid.uuid4().hex[:16]}"
    # One key of the user's: Redis alone cannot reach the store's own key, which Postgres keeps.
    make = _factory(request, tmp_path, own_cluster.url, prefix, connect_timeout=1.0, call_timeout=2.0, signing_key=KEY)
    per_primary = _threads_per_primary(own_cluster, 2, "kill")
    victim = own_cluster.ports[1]
    threads = per_primary[victim] + [t for port, ts in per_primary.items() if port != victim for t in ts[:1]]
    killed, restarted = threading.Event(), threading.Event()

    # A tier of its own, to see what a call answers while the cluster is failed.
    survivor = next(port for port in own_cluster.ports if port != victim)
    probe = RedisTier(own_cluster.url_of(survivor), key_prefix=prefix, socket_timeout=1.0)
    probe.setup()
    seen: list[BaseException] = []

    def victim_holds_records() -> bool:
        node = redis_lib.Redis(port=victim)
        try:
            return any(any(True for _ in node.scan_iter(match=f"{prefix}:{{{t}}}:*")) for t in per_primary[victim])
        finally:
            node.close()

    def kill_then_restart() -> None:
        # Once some records have shipped to the victim (so that it has some to
        # lose); the runs wait at KILL_AT_STEP for the kill.
        try:
            wait_until(victim_holds_records, "nothing shipped to the node to kill", timeout=LIVENESS_S)
        except BaseException as exc:
            seen.append(exc)
        own_cluster.kill(victim)
        killed.set()
        try:
            own_cluster.wait_failed(survivor)
            probe.head(per_primary[survivor][0], "")
        except BaseException as exc:
            seen.append(exc)
        own_cluster.restart(victim)
        restarted.set()

    with make("sqlite+rediscluster+postgres") as saver:
        saver.setup()
        chaos = threading.Thread(target=kill_then_restart)
        chaos.start()
        try:
            if face == "sync":
                graph = _slow_graph(killed).compile(checkpointer=saver)
                with ThreadPoolExecutor(len(threads)) as pool:
                    results = list(
                        pool.map(
                            lambda t: graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": t}}),
                            threads,
                        )
                    )
            else:

                async def runs() -> list[Any]:
                    graph = _aslow_graph(killed).compile(checkpointer=saver)
                    try:
                        return await asyncio.gather(
                            *(
                                graph.ainvoke({"messages": [], "n": 0}, {"configurable": {"thread_id": t}})
                                for t in threads
                            )
                        )
                    finally:
                        await saver.aclose()

                results = asyncio.run(runs())
                # Every connection of the run's loop was closed with it (see
                # test_a_cluster_tier_closed_after_a_node_failed_closes_every_node).
                assert_nothing_unclosed()
        finally:
            chaos.join(LIVENESS_S)  # a liveness bound: the node is killed, then restarted
        assert not chaos.is_alive() and killed.is_set() and restarted.is_set()
        probe.close()
        # Even a thread on a live primary: the failed cluster is a Redis outage.
        assert [type(e) for e in seen] == [TierUnavailable], seen
        assert isinstance(seen[0].__cause__, ClusterDownError), seen[0]
        assert [r["n"] for r in results] == [STEPS] * len(threads)

    # After the restart: every thread's latest checkpoint is served, by a
    # fresh replica (its own local file) as by Redis after `repair`.
    with (
        make("sqlite+rediscluster+postgres", sqlite_name="replica.sqlite") as replica,
        make("rediscluster") as redis_only,
    ):
        replica.setup()
        for t in threads:
            latest = replica.get_tuple({"configurable": {"thread_id": t}})
            assert latest is not None and latest.checkpoint["channel_values"]["n"] == STEPS, t
        report = replica.repair()
        assert not report.unrestorable, report.unrestorable
        assert any(b.thread_id in per_primary[victim] for b in report.missing), "the restarted node lost nothing?"
        assert_clean(replica.verify())
        for t in threads:
            config = {"configurable": {"thread_id": t}}
            assert redis_only.get_tuple(config) == replica.get_tuple(config), t
            assert len(list(redis_only.list(config))) == len(list(replica.list(config))), t


# -- Sentinel -----------------------------------------------------------------------------------


@pytest.fixture
def sentinel() -> Iterator[SentinelProcesses]:
    yield from started(SentinelProcesses, "a primary and a sentinel")


def test_sentinel_url_finds_the_primary(sentinel: SentinelProcesses, tmp_path: Path) -> None:
    expected = run_scenarios(InMemorySaver(), "sync")
    with DurableSaver(
        sqlite=str(tmp_path / "s.sqlite"), redis=sentinel.url, tiers=Tiers(redis_key_prefix="sent")
    ) as saver:
        saver.setup()
        tier = _redis_tier(saver)
        assert not tier.clustered
        assert type(tier.client.connection_pool).__name__ == "SentinelConnectionPool"
        _compare(expected, run_scenarios(saver, "sync"))
    primary = redis_lib.Redis(port=sentinel.port)
    try:
        assert primary.exists("sent:{t-loop}:cp")
    finally:
        primary.close()


async def test_sentinel_url_async(sentinel: SentinelProcesses) -> None:
    expected = await arun_scenarios(InMemorySaver(), "sync")
    async with DurableSaver(sqlite=None, redis=sentinel.url, tiers=Tiers(redis_key_prefix="asent")) as saver:
        _compare(expected, await arun_scenarios(saver, "sync"))


def test_sentinel_urls_parse() -> None:
    assert sentinel_address("redis+sentinel://a:1,b/svc") == SentinelAddress([("a", 1), ("b", 26379)], "svc")
    parsed = sentinel_address("redis+sentinel://me:p%40ss@[::1]:5000/svc/2")
    assert parsed == SentinelAddress([("::1", 5000)], "svc", 2, "me", "p@ss")
    assert "p@ss" not in repr(parsed)
    for bad in (
        "redis+sentinel://a:1",
        "redis+sentinel://a:x/svc",
        "redis+sentinel://a/svc/db",
        "redis+sentinel://a/s?x=1",
    ):
        with pytest.raises(ConfigError):
            sentinel_address(bad)
    with pytest.raises(ConfigError, match=r"Tiers\(redis_cluster=True\)"):
        DurableSaver(sqlite=None, redis="redis+sentinel://a/svc", tiers=Tiers(redis_cluster=True))
