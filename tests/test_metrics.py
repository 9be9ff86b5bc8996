"""Per-tier metrics (`langgraph_durable.metrics`): what the hook sees.

The pure parts (what a miss is, what a corruption event says was served,
the aggregation) are tested alone; the rest against real tiers, with real
compiled graphs, on both faces: counts per tier, a local hit after a write,
misses on an unknown thread, a tier taken away behind a TCP proxy, a damaged
record served from another tier (and repaired) or from an ancestor, a hook
that raises, and the OpenTelemetry instruments read back with the SDK's
in-memory reader.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import ConfigError, DurableSaver
from langgraph_durable.integrity import CorruptionEvent, served_from
from langgraph_durable.metrics import (
    READS,
    CorruptCopy,
    MetricsSink,
    OpenTelemetryMetrics,
    TierCall,
    TierStats,
    is_miss,
    percentile,
)
from langgraph_durable.model.backlog import Lag
from langgraph_durable.tiers.base import Head

from .conftest import SaverFactory
from .graphs import loop_graph
from .proxy import TcpProxy
from .tamper import BLOB, Rec, flip, sqlite_store
from .waiting import await_until

STEPS = 3
FACES = ["sync", "async"]


# -- pure parts -------------------------------------------------------------------------


def test_what_a_miss_is() -> None:
    assert is_miss("head", Head(None, None))
    assert not is_miss("head", Head("1", None))
    assert is_miss("read_checkpoint", None)
    assert is_miss("read_writes", [])
    assert is_miss("list_checkpoints", [])
    assert is_miss("read_ledger", {})
    keys = [("a", "1"), ("b", "1")]
    assert is_miss("read_blobs", {}, ("t", "", keys))
    assert is_miss("read_blobs", {keys[0]: object()}, ("t", "", keys))  # the next tier is asked for the rest
    assert not is_miss("read_blobs", {k: object() for k in keys}, ("t", "", keys))
    # Writes and the rest never miss.
    assert not is_miss("write_checkpoint", None)
    assert not is_miss("read_meta", None)
    assert "head" in READS and "write_blobs" not in READS


def test_what_a_corruption_event_says_was_served() -> None:
    assert served_from("intact copy from redis") == ("other_tier", "redis")
    assert served_from("ancestor checkpoint 1ef0") == ("ancestor", None)
    assert served_from("no write: task t1 runs again") == ("rerun", None)
    assert served_from("nothing: CorruptCheckpoint raised (on_corruption='raise')") == ("nothing", None)
    assert served_from("left out of list: it is damaged") == ("nothing", None)


def _event(served: str, tier: str = "sqlite") -> CorruptionEvent:
    return CorruptionEvent(tier, "blob", "t", "", "channel n @ 1", "checksum mismatch", served)


def test_tier_stats_counts_outcomes_percentiles_and_recoveries() -> None:
    stats = TierStats(samples=100)
    for i in range(1, 101):
        stats(TierCall("sqlite", "head", i / 1000, "ok" if i % 4 else "miss"))
    stats(TierCall("redis", "write_checkpoint", 0.5, "unavailable"))
    stats(TierCall("redis", "write_checkpoint", 0.0, "unavailable"))
    stats(TierCall("postgres", "swap_lease", 0.002, "error"))
    stats(CorruptCopy.of(_event("intact copy from postgres")))
    stats(CorruptCopy.of(_event("ancestor checkpoint 2")))
    stats(CorruptCopy.of(_event("no write: task x runs again", tier="redis")))

    head = stats.ops("sqlite")[0]
    assert (head.op, head.calls, head.ok, head.misses) == ("head", 100, 75, 25)
    assert head.hits == 75 and head.hit_rate == 0.75
    assert head.p50 == pytest.approx(0.050) and head.p95 == pytest.approx(0.095)
    assert head.max_seconds == pytest.approx(0.1) and head.mean == pytest.approx(0.0505)
    assert stats.hit_rate("sqlite") == 0.75
    assert stats.hit_rate("redis") is None  # no read answered
    assert stats.tier("redis").unavailable == 2
    assert stats.tier("postgres").errors == 1
    assert stats.tiers == ["sqlite", "redis", "postgres"]
    assert len(stats.latencies("sqlite", "head")) == 100
    r = stats.recoveries()
    assert (r.corruptions, r.from_other_tier, r.from_ancestor, r.writes_dropped, r.fallbacks) == (3, 1, 1, 1, 2)
    assert r.repaired == {"sqlite": 1}
    assert [c.source for c in stats.corrupt_copies()] == ["postgres", None, None]
    assert "write_checkpoint" in str(stats) and "bad copies: 3" in str(stats)
    assert stats.backlog() is None  # watches no saver
    stats.reset()
    assert stats.ops() == [] and stats.recoveries().corruptions == 0


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([1.0], 0.99) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 1.0) == 4.0


def test_the_sink_logs_a_failing_hook_once_per_kind_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Any) -> None:
        raise RuntimeError("hook bug")

    stats = TierStats()
    sink = MetricsSink.of([broken, stats], lag=lambda: Lag(0, 0.0, {}))
    assert sink is not None
    with caplog.at_level(logging.ERROR, logger="langgraph_durable"):
        for _ in range(3):
            sink(TierCall("sqlite", "head", 0.001, "ok"))
            sink.corruption(_event("intact copy from redis"))
    failures = [r for r in caplog.records if "metrics hook" in r.getMessage()]
    assert len(failures) == 2  # one TierCall, one CorruptCopy
    assert stats.tier("sqlite").calls == 3 and stats.recoveries().corruptions == 3


def test_metrics_option_is_checked_and_costs_nothing_when_absent(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="metrics="):
        DurableSaver(sqlite=str(tmp_path / "a.sqlite"), metrics=["not a hook"])  # type: ignore[list-item]
    with DurableSaver(sqlite=str(tmp_path / "b.sqlite")) as saver:
        chain: Any = saver._sync_chain()
        assert saver._runtime.metrics is None and all(t.metrics is None for t in chain.tiers)


# -- against real tiers, both faces -------------------------------------------------------------


class Face:
    """The sync or the async face of a saver and its graph, awaited alike."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def run(self, graph: Any, thread: str, inputs: Any = None) -> Any:
        config = {"configurable": {"thread_id": thread}}
        inputs = {"messages": [], "n": 0} if inputs is None else inputs
        if self.name == "sync":
            return graph.invoke(inputs, config)
        return await graph.ainvoke(inputs, config)

    async def settle(self, saver: DurableSaver, thread: str) -> None:
        """Wait for the end of a run on `thread` to have been handled (its
        lease given back, its records shipped), then ship what is owed."""
        if self.name == "async":
            keeper = saver._async_leases()
            await await_until(
                lambda: saver._runtime.leases.held(thread) is None and not keeper._to_release and not keeper._releasing,
                "the run's lease was not given back",
            )
        assert (await self.drain(saver)).caught_up

    async def drain(self, saver: DurableSaver, timeout: float = 60) -> Any:
        """Ship what Redis is owed now (it is written behind; an async run's
        end ships its thread in a task that may not have run yet). A drain
        towards a tier that is down passes at least once, then keeps trying
        until `timeout`."""
        return saver.drain(timeout) if self.name == "sync" else await saver.adrain(timeout)

    async def get_tuple(self, saver: DurableSaver, thread: str) -> Any:
        config: Any = {"configurable": {"thread_id": thread}}
        return saver.get_tuple(config) if self.name == "sync" else await saver.aget_tuple(config)

    async def setup(self, saver: DurableSaver) -> None:
        saver.setup() if self.name == "sync" else await saver.asetup()

    async def close(self, saver: DurableSaver) -> None:
        saver.close() if self.name == "sync" else await saver.aclose()


@pytest.fixture(params=FACES)
def face(request: pytest.FixtureRequest) -> Face:
    return Face(request.param)


def _thread() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


@pytest.mark.redis
@pytest.mark.postgres
async def test_a_graph_run_is_counted_per_tier_and_read_back_from_the_local_tier(
    make_saver: SaverFactory, face: Face
) -> None:
    stats = TierStats()
    # The run's lease given back (a read under a kept one asks no shared tier: test_lease_linger.py).
    saver = make_saver("sqlite+redis+postgres", metrics=stats, lease_linger=0)
    thread = _thread()
    try:
        out = await face.run(loop_graph(STEPS).compile(checkpointer=saver), thread)
        assert out["n"] == STEPS
        assert (await face.drain(saver)).caught_up
        # LangGraph stores STEPS + 2 checkpoints (input, each step, none after
        # the last), one by one in the lease's tier and the local one; Redis
        # is written behind, in batches (`write_batch`).
        for tier in ("sqlite", "redis", "postgres"):
            writes = stats.ops(tier)
            if tier == "redis":  # (a read that copies a checkpoint into it uses write_batch too)
                put = next(s for s in writes if s.op == "write_batch")
                assert 1 <= put.calls == put.ok <= STEPS + 2, (tier, put)
            else:
                put = next(s for s in writes if s.op == "write_checkpoint")
                assert put.calls == put.ok == STEPS + 2, (tier, put)
            assert put.p50 is not None and put.p50 > 0
            head = next(s for s in writes if s.op == "head")
            assert head.misses >= 1  # the new thread
        # The writer lease lives in the most authoritative tier.
        assert any(s.op == "swap_lease" for s in stats.ops("postgres"))
        assert not any(s.op == "swap_lease" for s in stats.ops("sqlite"))

        # A read after the write: every tier names the same head, and the
        # channel values come from the nearest tier, the local one.
        stats.reset()
        tup = await face.get_tuple(saver, thread)
        assert tup.checkpoint["channel_values"]["n"] == STEPS
        assert stats.tier("sqlite", ["read_blobs"]).hits >= 1
        assert stats.hit_rate("sqlite") == 1.0
        for shared in ("redis", "postgres"):
            assert stats.tier(shared, ["read_blobs"]).calls == 0
            assert stats.tier(shared, ["head"]).hits == 1
    finally:
        await face.close(saver)


@pytest.mark.redis
@pytest.mark.postgres
async def test_a_cold_replica_misses_locally_then_hits(make_saver: SaverFactory, face: Face) -> None:
    thread = _thread()
    writer = make_saver("sqlite+redis+postgres")
    try:
        await face.run(loop_graph(STEPS).compile(checkpointer=writer), thread)
    finally:
        await face.close(writer)
    stats = TierStats()
    replica = make_saver("sqlite+redis+postgres", sqlite_name="replica.sqlite", metrics=stats)
    try:
        assert (await face.get_tuple(replica, thread)).checkpoint["channel_values"]["n"] == STEPS
        assert stats.tier("sqlite", ["head"]).misses == 1
        # (A list channel stored as pieces takes a second read, for the records it extends.)
        local = stats.tier("sqlite", ["read_blobs"])
        assert local.misses >= 1 and local.hits == 0
        assert stats.tier("redis", ["read_blobs"]).hits >= 1  # the next tier, nearest first
        assert stats.tier("postgres", ["read_blobs"]).calls == 0
        # Read-repair filled the local tier: the whole checkpoint, its values with it, in one write.
        assert stats.tier("sqlite", ["write_batch"]).ok == 1 and stats.tier("sqlite", ["write_blobs"]).calls == 0
        stats.reset()
        await face.get_tuple(replica, thread)
        local = stats.tier("sqlite", ["read_blobs"])
        assert local.hits >= 1 and local.misses == 0 and stats.hit_rate("sqlite") == 1.0
        assert stats.tier("redis", ["read_blobs"]).calls == 0
    finally:
        await face.close(replica)


@pytest.mark.redis
@pytest.mark.postgres
async def test_an_unknown_thread_misses_in_every_tier(make_saver: SaverFactory, face: Face) -> None:
    stats = TierStats()
    saver = make_saver("sqlite+redis+postgres", metrics=stats)
    try:
        await face.setup(saver)
        stats.reset()
        assert await face.get_tuple(saver, _thread()) is None
        for tier in ("sqlite", "redis", "postgres"):
            head = stats.tier(tier, ["head"])
            assert (head.calls, head.misses, head.hit_rate) == (1, 1, 0.0), tier
    finally:
        await face.close(saver)


@pytest.mark.redis
@pytest.mark.postgres
async def test_a_tier_cut_off_is_counted_unavailable_and_owed(
    make_saver: SaverFactory, face: Face, redis_proxy: tuple[TcpProxy, str]
) -> None:
    proxy, proxied = redis_proxy
    stats = TierStats()
    saver = make_saver("sqlite+redis+postgres", redis=proxied, connect_timeout=1, metrics=stats)
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    try:
        first = _thread()
        await face.run(graph, first)
        await face.settle(saver, first)  # nothing of this run reaches Redis after the cut
        assert stats.tier("redis").unavailable == 0
        proxy.cut()
        stats.reset()
        out = await face.run(graph, _thread())  # the run does not notice
        assert out["n"] == STEPS
        # Redis is written behind: at least one pass calls it. It stays cut,
        # so the drain cannot catch up: no need to wait long for it.
        assert not (await face.drain(saver, timeout=1)).caught_up
        redis = stats.tier("redis")
        assert redis.unavailable >= 1 and redis.ok == 0
        # The first failure opened the breaker: later calls were skipped at once.
        assert any(s == 0.0 for s in stats.latencies("redis"))
        assert stats.tier("postgres", ["write_checkpoint"]).ok == STEPS + 2
        backlog = stats.backlog()
        assert backlog is not None and backlog.by_tier["redis"] > 0 and backlog.by_tier["postgres"] == 0
        proxy.restore()
        saver.health()  # a probe closes the breaker at once
        assert saver.drain(10).caught_up
        assert stats.tier("redis", ["probe"]).ok == 1
        assert stats.backlog() == Lag(0, 0.0, {"redis": 0, "postgres": 0})
    finally:
        await face.close(saver)


def test_an_answered_error_is_not_an_outage(tmp_path: Path) -> None:
    """A refused lease is the tier answering: "error", and the breaker stays closed."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_durable.engine.guard import GuardedTier
    from langgraph_durable.errors import LeaseLost
    from langgraph_durable.model.breaker import Breaker
    from langgraph_durable.model.codec import RecordCodec
    from langgraph_durable.model.lease import Fence
    from langgraph_durable.tiers.sqlite.tier import SqliteTier

    tier = SqliteTier(str(tmp_path / "local.sqlite"))
    tier.setup()
    stats = TierStats()
    guarded = GuardedTier(tier, Breaker("sqlite"), timeout=None, metrics=MetricsSink([stats]))
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    row, blobs = RecordCodec(JsonPlusSerializer()).encode_checkpoint(config, empty_checkpoint(), {}, {})
    with pytest.raises(LeaseLost):
        guarded.write_checkpoint(row, blobs, fence=Fence("t", "nobody", 7, 30.0))
    guarded.read_checkpoint("t", "", row.checkpoint_id)
    assert [(s.op, s.errors, s.misses, s.unavailable) for s in stats.ops()] == [
        ("read_checkpoint", 0, 1, 0),
        ("write_checkpoint", 1, 0, 0),
    ]
    assert guarded.breaker.state == "closed"
    tier.close()


def _damage_latest_value(path: str, thread: str, channel: str = "n") -> tuple[Rec, bytes]:
    """Flip a byte of the newest stored value of `channel` in the local SQLite file."""
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute(
            "SELECT max(version) FROM lgd_blobs WHERE thread_id = ? AND channel = ?", (thread, channel)
        ).fetchone()
    rec = Rec(BLOB, "", (channel, version))
    store = sqlite_store(path)
    try:
        original = store.get(thread, rec)
        assert original is not None
        store.put_raw(thread, rec, flip(original.raw, len(original.raw) // 2, 0x10), original)
    finally:
        store.close()
    return rec, original.raw


def _stored(path: str, thread: str, rec: Rec) -> bytes | None:
    store = sqlite_store(path)
    try:
        got = store.get(thread, rec)
        return got.raw if got is not None else None
    finally:
        store.close()


@pytest.mark.redis
async def test_a_damaged_local_copy_is_served_from_redis_and_repaired(make_saver: SaverFactory, face: Face) -> None:
    thread = _thread()
    writer = make_saver("sqlite+redis")
    try:
        await face.run(loop_graph(STEPS).compile(checkpointer=writer), thread)
    finally:
        await face.close(writer)
    path = writer.sqlite_path
    assert path is not None
    rec, original = _damage_latest_value(path, thread)

    stats = TierStats()
    reader = make_saver("sqlite+redis", metrics=stats)
    try:
        tup = await face.get_tuple(reader, thread)
        assert tup.checkpoint["channel_values"]["n"] == STEPS
        r = stats.recoveries()
        assert (r.corruptions, r.from_other_tier, r.fallbacks, r.repaired) == (1, 1, 1, {"sqlite": 1})
        (copy,) = stats.corrupt_copies()
        assert (copy.tier, copy.kind, copy.served, copy.source) == ("sqlite", "blob", "other_tier", "redis")
        assert copy.event.served_instead == "intact copy from redis"
    finally:
        await face.close(reader)
    assert _stored(path, thread, rec) == original  # the bad bytes were replaced


async def test_a_damaged_value_with_no_other_copy_falls_back_to_the_ancestor(
    make_saver: SaverFactory, face: Face
) -> None:
    thread = _thread()
    events: list[CorruptionEvent] = []
    stats = TierStats()
    saver = make_saver("sqlite", metrics=stats, on_corruption=events.append)
    try:
        await face.run(loop_graph(STEPS).compile(checkpointer=saver), thread)
        assert saver.sqlite_path is not None
        _damage_latest_value(saver.sqlite_path, thread)
        assert await face.get_tuple(saver, thread) is not None
        r = stats.recoveries()
        assert r.corruptions == len(events) >= 1
        assert r.from_ancestor >= 1 and r.from_other_tier == 0 and r.repaired == {}
    finally:
        await face.close(saver)


@pytest.mark.redis
async def test_a_raising_hook_never_breaks_a_run(
    make_saver: SaverFactory, face: Face, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []

    def broken(event: Any) -> None:
        calls.append(event)
        raise ValueError("a bug in the hook")

    stats = TierStats()
    saver = make_saver("sqlite+redis", metrics=[broken, stats])
    thread = _thread()
    try:
        with caplog.at_level(logging.ERROR, logger="langgraph_durable"):
            out = await face.run(loop_graph(STEPS).compile(checkpointer=saver), thread)
            assert saver.sqlite_path is not None
            _damage_latest_value(saver.sqlite_path, thread)
            assert (await face.get_tuple(saver, thread)).checkpoint["channel_values"]["n"] == STEPS
        assert out["n"] == STEPS
        assert len(calls) > 10 and stats.tier("sqlite").calls > 0  # the next hook still got every event
        failures = [r for r in caplog.records if "metrics hook" in r.getMessage()]
        assert [r.getMessage().split(" on a ")[1].split()[0] for r in failures] == ["TierCall", "CorruptCopy"]
    finally:
        await face.close(saver)


# -- OpenTelemetry ---------------------------------------------------------------------------------


def _points(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


@pytest.mark.redis
@pytest.mark.postgres
async def test_open_telemetry_instruments(
    make_saver: SaverFactory, face: Face, redis_proxy: tuple[TcpProxy, str]
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel = OpenTelemetryMetrics(meter=provider.get_meter("test"))
    stats = TierStats()  # sees the same calls: what the durations must add up to
    proxy, proxied = redis_proxy
    saver = make_saver("sqlite+redis+postgres", redis=proxied, connect_timeout=1, metrics=[otel, stats])
    thread = _thread()
    try:
        await face.run(loop_graph(STEPS).compile(checkpointer=saver), thread)
        await face.drain(saver)
        points = _points(reader)
        durations = {
            (p.attributes["tier"], p.attributes["op"], p.attributes["outcome"]): p
            for p in points["langgraph_durable.tier.duration"]
        }
        for tier in ("sqlite", "redis", "postgres"):
            op = "write_batch" if tier == "redis" else "write_checkpoint"  # Redis is written behind, in batches
            put = durations[(tier, op, "ok")]
            assert 1 <= put.count <= STEPS + 2 if tier == "redis" else put.count == STEPS + 2, put.count
            # Each call's own duration, in seconds: the very ones TierStats was given.
            seen = stats.tier(tier, [op])
            assert seen.calls == seen.ok == put.count
            assert put.sum > 0 and put.sum == pytest.approx(seen.seconds, rel=1e-9, abs=1e-12)
            assert put.max == pytest.approx(seen.max_seconds, rel=1e-9, abs=1e-12)
            assert (tier, "head", "miss") in durations
        assert list(durations[("sqlite", "write_checkpoint", "ok")].explicit_bounds)[:2] == [0.00005, 0.0001]
        backlog = {p.attributes["tier"]: p.value for p in points["langgraph_durable.journal.backlog"]}
        assert backlog == {"redis": 0, "postgres": 0}

        # Redis goes away: its calls are "unavailable", and it is owed what it missed.
        proxy.cut()
        await face.run(loop_graph(STEPS).compile(checkpointer=saver), _thread())
        points = _points(reader)
        assert any(
            p.attributes["tier"] == "redis" and p.attributes["outcome"] == "unavailable"
            for p in points["langgraph_durable.tier.duration"]
        )
        backlog = {p.attributes["tier"]: p.value for p in points["langgraph_durable.journal.backlog"]}
        assert backlog["redis"] > 0 and backlog["postgres"] == 0
        (age,) = points["langgraph_durable.journal.backlog_age"]
        assert age.value >= 0
        proxy.restore()
        saver.health()
        assert saver.drain(60).caught_up

        # A damaged local copy: counted as a corruption, a fallback and a repair.
        assert saver.sqlite_path is not None
        _damage_latest_value(saver.sqlite_path, thread)
        fresh = make_saver("sqlite+redis+postgres", redis=proxied, metrics=otel)
        try:
            assert (await face.get_tuple(fresh, thread)).checkpoint["channel_values"]["n"] == STEPS
        finally:
            await face.close(fresh)
        points = _points(reader)
        for name in ("langgraph_durable.corruptions", "langgraph_durable.fallbacks", "langgraph_durable.repairs"):
            (point,) = points[name]
            assert point.value == 1 and point.attributes["tier"] == "sqlite", name
        (fallback,) = points["langgraph_durable.fallbacks"]
        assert fallback.attributes["served"] == "other_tier"
    finally:
        await face.close(saver)
        provider.shutdown()


def test_open_telemetry_needs_the_otel_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigError, match=r"langgraph-durable\[otel\]"):
        OpenTelemetryMetrics()
