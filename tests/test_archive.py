"""The archive tier: the replica, archived idle threads brought back by a
read, pins, the object store failing mid-archive, and a whole store rebuilt
from the archive. Real compiled graphs, real Redis and Postgres, and an
S3-compatible server (moto's) on loopback; faults through a TCP proxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from langgraph.types import Command

from langgraph_durable import DurableSaver, RetentionPolicy
from langgraph_durable.archive.segments import THREADS, segments_prefix
from langgraph_durable.archive.store import ArchiveStore
from langgraph_durable.errors import ConfigError, CorruptCheckpoint, ThreadBusy
from tests.conftest import CONFIGS, SaverFactory, lose_every_hot_tier
from tests.graphs import _ahistory, _history, interrupt_graph, loop_graph, subgraph_graph
from tests.waiting import LIVENESS_S

pytestmark = [pytest.mark.s3]

FULL = "sqlite+redis+postgres"


@contextlib.contextmanager
def store_behind_a_proxy(s3_env: str, monkeypatch: pytest.MonkeyPatch, prefix: str) -> Iterator[tuple[Any, str]]:
    """A bucket of its own reached through a TCP proxy (cut it to take the
    object store away) and its ``s3://`` URL."""
    from tests.conftest import make_bucket
    from tests.proxy import TcpProxy

    bucket = make_bucket(s3_env)
    parts = urlsplit(s3_env)
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 80) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        yield proxy, f"s3://{bucket}/{prefix}"


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def hot_thread_ids(saver: DurableSaver) -> set[str]:
    chain = saver._sync_chain()
    chain.ensure_setup()
    return {t for tier in chain.tiers for t in tier.thread_ids()}


def store_of(archive_url: str) -> ArchiveStore:
    return ArchiveStore(archive_url)


# -- the replica ------------------------------------------------------------------------------


def test_every_run_reaches_the_archive_in_few_objects(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(5).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t1"))
        graph.invoke({"messages": ["again"], "n": 0}, cfg("t1"))
        lag = saver.lag().archive
        assert lag is not None and lag.threads == 1 and lag.seconds >= 0
        left = saver.drain_archive()
        assert left is not None and left.caught_up
        keys = store_of(archive_url).keys(segments_prefix("t1"))
        # One pass, one segment for the thread, whatever its number of records.
        assert len(keys) == 1
        image = saver._archiver().image("t1")
        hot = saver._archiver().hot("t1", saver._sync_chain().tiers)
        assert image.holds(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger)
        assert saver.drain_archive().segments == 1  # nothing new: nothing written
        graph.invoke({"messages": ["third"], "n": 0}, cfg("t1"))
        saver.drain_archive()
        assert len(store_of(archive_url).keys(segments_prefix("t1"))) == 2
        health = saver.health()
        assert health.archive is not None and health.archive.reachable and health.ok


def test_the_replica_ships_behind_the_steps_within_its_lag(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url, archive_lag=0.4) as saver:
        loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-lag"))
        deadline = time.monotonic() + 10
        while not store_of(archive_url).keys(segments_prefix("t-lag")):
            assert time.monotonic() < deadline, "the replica did not ship within 10 s"
            time.sleep(0.05)
        assert saver.lag().archive is not None


def test_a_new_process_ships_what_a_killed_one_wrote_before_its_pass(
    make_saver: SaverFactory, archive_url: str
) -> None:
    # A saver that never ships (its pass would come an hour later) and never closes:
    # what it wrote reaches the archive through the next process's rescan.
    dead = make_saver(FULL, archive=archive_url, archive_lag=7200.0)
    loop_graph(3).compile(checkpointer=dead).invoke({"messages": [], "n": 0}, cfg("t-orphan"))
    assert dead._runtime.archive_replica is not None
    dead._runtime.archive_replica.stop()
    assert not store_of(archive_url).keys(segments_prefix("t-orphan"))
    with make_saver(FULL, sqlite_name="other.sqlite", archive=archive_url, archive_lag=7200.0) as saver:
        noted = saver._runtime.rescan_archive(saver._runtime.archive_replica.note, lambda: True)  # type: ignore[union-attr]
        assert noted == 1
        saver.drain_archive()
        assert store_of(archive_url).keys(segments_prefix("t-orphan"))
        # Current now: the next rescan notes nothing.
        assert saver._runtime.rescan_archive(saver._runtime.archive_replica.note, lambda: True) == 0  # type: ignore[union-attr]


# -- archived idle threads, brought back by a read ------------------------------------------


@pytest.mark.parametrize("tiers", CONFIGS)
def test_an_archived_thread_comes_back_whole_on_its_next_run(
    make_saver: SaverFactory, archive_url: str, tiers: str
) -> None:
    with make_saver(tiers, archive=archive_url) as saver:
        graph = subgraph_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-sub"))
        before = _history(graph, cfg("t-sub"))
        state = graph.get_state(cfg("t-sub"), subgraphs=True).values
        report = saver.archive_idle(0.0)
        assert report.archived == ["t-sub"]
        assert "t-sub" not in hot_thread_ids(saver)
        assert saver.archived_threads() == ["t-sub"]
        # A read brings it back, transparently.
        assert graph.get_state(cfg("t-sub"), subgraphs=True).values == state
        assert saver.archive_restores == 1
        assert _history(graph, cfg("t-sub")) == before
        assert saver.archived_threads() == []
        assert "t-sub" in hot_thread_ids(saver)
        # And it runs on from where it was.
        result = graph.invoke({"messages": ["more"], "n": 0}, cfg("t-sub"))
        assert result["messages"][: len(state["messages"])] == state["messages"]


@pytest.mark.parametrize("tiers", CONFIGS)
async def test_an_archived_thread_comes_back_whole_on_the_async_face(
    make_saver: SaverFactory, archive_url: str, tiers: str
) -> None:
    async with make_saver(tiers, archive=archive_url) as saver:
        graph = loop_graph(4).compile(checkpointer=saver)
        await graph.ainvoke({"messages": [], "n": 0}, cfg("t-async"))
        before = await _ahistory(graph, cfg("t-async"))
        report = await saver.aarchive_idle(0.0)
        assert report.archived == ["t-async"]
        assert await saver.aarchived_threads() == ["t-async"]
        # list() (get_state_history) brings it back as well as get_tuple.
        assert await _ahistory(graph, cfg("t-async")) == before
        assert saver.archive_restores == 1
        out = await graph.ainvoke({"messages": ["again"], "n": 0}, cfg("t-async"))
        assert out["n"] == 4 and "again" in out["messages"]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_thread_waiting_at_an_interrupt_resumes_after_archiving(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        first = graph.invoke({"messages": [], "n": 0}, cfg("t-int"))
        assert first["__interrupt__"]
        before = _history(graph, cfg("t-int"))
        assert saver.archive_idle(0.0).archived == ["t-int"]
        if face == "sync":
            result = graph.invoke(Command(resume="approved"), cfg("t-int"))
        else:

            async def resume() -> Any:
                try:
                    return await graph.ainvoke(Command(resume="approved"), cfg("t-int"))
                finally:
                    await saver.aclose()

            result = asyncio.run(resume())
        assert result["messages"] == ["prepared", "answer: approved", "finished"]
        assert _history(graph, cfg("t-int"))[-len(before) :] == before


def test_dry_run_and_busy_and_young_threads_stay(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-young"))
        dry = saver.archive_idle(0.0, dry_run=True)
        assert dry.archived == ["t-young"] and "t-young" in hot_thread_ids(saver)
        assert not store_of(archive_url).keys(f"{THREADS}/") or saver.archived_threads() == []
        young = saver.archive_idle(3600.0)
        assert young.archived == [] and young.threads[0].skipped == "not idle"
    with make_saver(FULL, archive=archive_url, sqlite_name="b.sqlite") as other:
        # Another replica's run holds the lease: the thread stays.
        lease = other._sync_leases().hold("t-young")
        try:
            with make_saver(FULL, archive=archive_url, sqlite_name="c.sqlite", on_busy="raise") as third:
                busy = third.archive_idle(0.0)
            assert busy.archived == [] and busy.threads[0].skipped == "busy"
        finally:
            other._sync_leases().release_quietly(lease)


def test_a_policy_archives_idle_threads(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-policy"))
        report = saver.apply_retention(RetentionPolicy(keep_last=1, archive_idle_after=60.0), now=time.time() + 120)
        assert report.threads_archived == 1
        assert saver.archived_threads() == ["t-policy"]
        # Retention ran first: what comes back is what it kept.
        assert len(list(saver.list(cfg("t-policy")))) == 1


def test_deleting_an_archived_thread_removes_its_archive_copy(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-del"))
        graph.invoke({"messages": [], "n": 0}, cfg("t-kept"))
        saver.archive_idle(0.0, thread_ids=["t-del"])
        saver.delete_thread("t-del")
        assert saver.archived_threads() == []
        assert graph.get_state(cfg("t-del")).values == {}  # not brought back
        saver.drain_archive()
        # What stays is the segment saying it was deleted: a restore never brings it back.
        assert len(store_of(archive_url).keys(segments_prefix("t-del"))) == 1
        report = saver.restore(["t-del"])
        assert report.threads == 0
        assert graph.get_state(cfg("t-del")).values == {}
        assert graph.get_state(cfg("t-kept")).values["n"] == 2


# -- pins ---------------------------------------------------------------------------------------


def test_a_pin_survives_retention_prune_delete_for_runs_and_archiving(
    make_saver: SaverFactory, archive_url: str
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        run_id = uuid.uuid4()
        graph.invoke({"messages": [], "n": 0}, {**cfg("t-pin"), "run_id": run_id})
        middle = list(graph.get_state_history(cfg("t-pin")))[2]
        pin = saver.pin(middle.config, label="before the risky step")
        assert [p.checkpoint_id for p in saver.pins("t-pin")] == [pin.checkpoint_id]
        assert saver.actions("t-pin") == {}  # a pin is not an action
        saver.apply_retention(RetentionPolicy(keep_last=1))
        saver.prune(["t-pin"])
        saver.prune(["t-pin"], strategy="delete")
        saver.delete_for_runs([str(run_id)])
        assert saver.get_tuple(pin.config) is not None  # type: ignore[arg-type]
        assert saver.archive_idle(0.0).threads[0].skipped == "pinned"
        # Time travel from the pin.
        resumed = graph.invoke(None, pin.config)  # type: ignore[arg-type]
        assert resumed["n"] == 3
        assert saver.unpin(pin.config)  # type: ignore[arg-type]
        assert not saver.unpin(pin.config)  # type: ignore[arg-type]
        assert saver.pins("t-pin") == []
        assert saver.archive_idle(0.0).archived == ["t-pin"]


async def test_pins_on_the_async_face(make_saver: SaverFactory, archive_url: str) -> None:
    async with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        await graph.ainvoke({"messages": [], "n": 0}, cfg("t-apin"))
        pin = await saver.apin(cfg("t-apin"), label="done")
        assert [p.label for p in await saver.apins("t-apin")] == ["done"]
        await saver.aapply_retention(RetentionPolicy(keep_last=1))
        assert (await saver.aget_tuple(pin.config)) is not None  # type: ignore[arg-type]
        assert await saver.aunpin(pin.config)  # type: ignore[arg-type]
        assert await saver.apins("t-apin") == []


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_pins_meet_archived_threads(make_saver: SaverFactory, archive_url: str, face: str) -> None:
    """A pinned thread is never archived (a pin is kept where retention and
    its sweep see it); pinning an archived thread brings it back whole
    first, so the pin lands on its latest checkpoint and nothing is lost."""
    later = time.time() + 60  # every thread idle long enough
    async with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        for thread in ("t-pinned", "t-archived"):
            graph.invoke({"messages": [], "n": 0}, cfg(thread))
        before = _history(graph, cfg("t-archived"))
        newest = graph.get_state(cfg("t-archived")).config["configurable"]["checkpoint_id"]
        if face == "sync":
            saver.pin(cfg("t-pinned"), label="kept hot")
            report = saver.archive_idle(0.0, now=later)
        else:
            await saver.apin(cfg("t-pinned"), label="kept hot")
            report = await saver.aarchive_idle(0.0, now=later)
        assert report.archived == ["t-archived"]
        assert [(t.thread_id, t.skipped) for t in report.threads if t.thread_id == "t-pinned"] == [
            ("t-pinned", "pinned")
        ]
        assert saver._archiver().flag("t-archived") is not None
        if face == "sync":
            pin = saver.pin(cfg("t-archived"), label="after")
            pins = saver.pins("t-archived")
        else:
            pin = await saver.apin(cfg("t-archived"), label="after")
            pins = await saver.apins("t-archived")
        assert saver._archiver().flag("t-archived") is None, "pin() brought the thread back"
        assert [p.label for p in pins] == ["after"] and pin.checkpoint_id == newest
        assert _history(graph, cfg("t-archived")) == before


def test_an_action_key_in_the_reserved_space_is_refused(make_saver: SaverFactory) -> None:
    from langgraph_durable.ledger import LedgerEntry

    with make_saver("sqlite") as saver, pytest.raises(ConfigError, match="keeps for its own entries"):
        saver.record_action("t", LedgerEntry("langgraph-durable:pin::x", "done"))


# -- the object store failing ----------------------------------------------------------------


def test_the_object_store_down_mid_archive_deletes_nothing_hot(
    make_saver: SaverFactory, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store_behind_a_proxy(s3_env, monkeypatch, "cut") as (proxy, url):
        with make_saver(FULL, archive=url) as saver:
            graph = loop_graph(3).compile(checkpointer=saver)
            for t in ("t-a", "t-b"):
                graph.invoke({"messages": [], "n": 0}, cfg(t))
            states = {t: graph.get_state(cfg(t)).values for t in ("t-a", "t-b")}
            # The store goes away after the first thread's segment is written.
            archiver = saver._archiver()
            real_put = archiver.store.put
            calls = {"n": 0}

            def put_then_cut(key: str, data: bytes) -> None:
                calls["n"] += 1
                real_put(key, data)
                proxy.cut()

            monkeypatch.setattr(archiver.store, "put", put_then_cut)
            with pytest.raises(Exception, match="archive"):
                saver.archive_idle(0.0)
            assert hot_thread_ids(saver) >= {"t-a", "t-b"}
            assert {t: graph.get_state(cfg(t)).values for t in states} == states
            # Runs go on while the store is down; the replica keeps its notes.
            graph.invoke({"messages": ["down"], "n": 0}, cfg("t-a"))
            left = saver.drain_archive(timeout=30)
            assert left is not None and not left.caught_up and not left.reachable
            monkeypatch.setattr(archiver.store, "put", real_put)
            proxy.restore()
            assert saver.drain_archive().caught_up  # type: ignore[union-attr]
            assert sorted(saver.archive_idle(0.0).archived) == ["t-a", "t-b"]
            assert graph.get_state(cfg("t-a")).values["messages"][-1].startswith("message")


# -- integrity: one bad copy in one tier ---------------------------------------------------------


def test_a_damaged_hot_copy_is_archived_from_an_intact_tier(make_saver: SaverFactory, archive_url: str) -> None:
    from tests.tamper import CHECKPOINT, Rec, flip, postgres_store

    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-bad"))
        state = graph.get_state(cfg("t-bad")).values
        newest = graph.get_state(cfg("t-bad")).config["configurable"]["checkpoint_id"]
        assert saver.postgres_url is not None
        pg = postgres_store(saver.postgres_url)
        try:
            rec = Rec(CHECKPOINT, "", (newest,))
            stored = pg.get("t-bad", rec)
            assert stored is not None
            pg.put_raw("t-bad", rec, flip(stored.raw, len(stored.raw) - 3, 0x40), stored)
        finally:
            pg.close()
        assert saver.archive_idle(0.0).archived == ["t-bad"]
        row = saver._archiver().image("t-bad").checkpoints[("", newest)]
        saver._codec.decode_checkpoint(row)  # the intact copy went to the archive
        assert graph.get_state(cfg("t-bad")).values == state
        report = saver.verify()
        assert not report.bad and not report.missing


@pytest.mark.parametrize("harm", ["damaged", "planted", "replayed", "missing"])
def test_one_bad_segment_is_left_out_and_reported(make_saver: SaverFactory, archive_url: str, harm: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-seg"))
        saver.drain_archive()
        graph.invoke({"messages": ["second run"], "n": 0}, cfg("t-seg"))
        saver.drain_archive()
        graph.invoke({"messages": [], "n": 0}, cfg("t-other"))
        saver.drain_archive()
        store = store_of(archive_url)
        _first, second = store.keys(segments_prefix("t-seg"))
        if harm == "damaged":
            data = bytearray(store.get(second) or b"")
            data[-5] ^= 0xFF
            store.put(second, bytes(data))
        elif harm == "planted":
            import zlib

            import ormsgpack

            from langgraph_durable.archive.segments import SEGMENT_TAG, _context
            from langgraph_durable.model.records import seal

            # Bound to this store, thread and name, but sealed without the store's key.
            store_id = saver._archiver().store_id
            assert store_id
            shape = {
                "thread": "t-seg",
                "at": 0.0,
                "c": [],
                "b": [],
                "w": [],
                "l": [],
                "gone": [],
                "deleted_through": None,
            }
            body = zlib.compress(ormsgpack.packb(shape))
            store.put(second, seal(_context(store_id, "t-seg", second), SEGMENT_TAG, body))
        elif harm == "replayed":
            (other,) = store.keys(segments_prefix("t-other"))
            store.put(second, store.get(other) or b"")
        else:
            store.delete([second])
        bad: list[str] = []
        image = saver._archiver().image("t-seg", bad=bad)
        assert bad == ([] if harm == "missing" else [second])
        # The first run's records are all there; nothing of the other thread.
        assert image.checkpoints and all(k[1] for k in image.checkpoints)
        assert all(row.thread_id == "t-seg" for row in image.checkpoints.values())
    # The hot tiers keep the thread whole; the next process's ship writes
    # what the archive lacks again, and archiving checks the copy afresh.
    with make_saver(FULL, archive=archive_url, sqlite_name="next.sqlite") as again:
        assert again._archiver().ship("t-seg") > 0
        healed = again._archiver().image("t-seg", bad=[])
        hot = again._archiver().hot("t-seg", again._sync_chain().tiers)
        assert healed.holds(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger)
        state = graph.get_state(cfg("t-seg")).values
        assert again.archive_idle(0.0, thread_ids=["t-seg"]).archived == ["t-seg"]
        # Checked when archived: the copy without the bad segment held everything.
        assert loop_graph(2).compile(checkpointer=again).get_state(cfg("t-seg")).values == state
        # A segment found bad after the copy was checked is never trusted:
        # the thread stays archived rather than come back without it.
        assert again.archive_idle(0.0, thread_ids=["t-seg"]).archived == ["t-seg"]
        newest = store.keys(segments_prefix("t-seg"))[-1]
        data = bytearray(store.get(newest) or b"")
        data[-5] ^= 0xFF
        store.put(newest, bytes(data))
        with pytest.raises(CorruptCheckpoint, match="do not verify"):
            again.get_tuple(cfg("t-seg"))
        assert again.archived_threads() == ["t-seg"]
        assert "t-seg" not in hot_thread_ids(again)


# -- disaster recovery --------------------------------------------------------------------------


def _lose_every_hot_tier(saver: DurableSaver, redis_prefix: str) -> None:
    """Postgres' database dropped and created empty, Redis' keys flushed."""
    assert saver.postgres_url is not None
    lose_every_hot_tier(saver.postgres_url, redis_prefix)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_the_whole_store_is_rebuilt_from_the_archive(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str, face: str
) -> None:
    with make_saver(FULL, archive=archive_url, redis_key_prefix=redis_prefix) as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-dr-int"))
        loop = loop_graph(3).compile(checkpointer=saver)
        loop.invoke({"messages": [], "n": 0}, cfg("t-dr-loop"))
        loop.invoke({"messages": [], "n": 0}, cfg("t-dr-old"))
        histories = {t: _history(loop, cfg(t)) for t in ("t-dr-loop", "t-dr-old")}
        histories["t-dr-int"] = _history(graph, cfg("t-dr-int"))
        assert saver.archive_idle(0.0, thread_ids=["t-dr-old"]).archived == ["t-dr-old"]
        assert saver.drain_archive().caught_up  # type: ignore[union-attr]
        fingerprint = saver.health().store_key_fingerprint
    _lose_every_hot_tier(saver, redis_prefix)
    with make_saver(
        FULL,
        archive=archive_url,
        redis_key_prefix=redis_prefix,
        sqlite_name="new.sqlite",
        archive_key_fingerprint=fingerprint,
    ) as fresh:
        if face == "sync":
            report = fresh.restore()
        else:

            async def arestore() -> Any:
                try:
                    return await fresh.arestore()
                finally:
                    await fresh.aclose()

            report = asyncio.run(arestore())
        assert report.threads == 2 and report.archived == 1 and report.bad_segments == []
        loop = loop_graph(3).compile(checkpointer=fresh)
        graph = interrupt_graph().compile(checkpointer=fresh)
        assert _history(loop, cfg("t-dr-loop")) == histories["t-dr-loop"]
        assert _history(graph, cfg("t-dr-int")) == histories["t-dr-int"]
        # The archived thread stayed archived, and comes back when read.
        assert fresh.archived_threads() == ["t-dr-old"]
        assert _history(loop, cfg("t-dr-old")) == histories["t-dr-old"]
        assert graph.invoke(Command(resume="ok"), cfg("t-dr-int"))["messages"][-1] == "finished"
        report = fresh.verify()
        assert not report.bad and not report.missing


def test_restore_until_a_time_leaves_later_segments_out(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str
) -> None:
    with make_saver(FULL, archive=archive_url, redis_key_prefix=redis_prefix) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-pit"))
        saver.drain_archive()
        early = graph.get_state(cfg("t-pit")).values
        cut = time.time()
        time.sleep(0.01)
        graph.invoke({"messages": ["later"], "n": 0}, cfg("t-pit"))
        saver.drain_archive()
        fingerprint = saver.health().store_key_fingerprint
    _lose_every_hot_tier(saver, redis_prefix)
    with make_saver(
        FULL,
        archive=archive_url,
        redis_key_prefix=redis_prefix,
        sqlite_name="pit.sqlite",
        archive_key_fingerprint=fingerprint,
    ) as fresh:
        report = fresh.restore(["t-pit"], until=cut)
        assert report.threads == 1
        assert loop_graph(2).compile(checkpointer=fresh).get_state(cfg("t-pit")).values == early


def test_an_archive_url_is_checked(make_saver: SaverFactory) -> None:
    with pytest.raises(ConfigError, match="s3://"):
        make_saver("sqlite", archive="https://bucket/prefix")
    with pytest.raises(ConfigError, match="bucket"):
        make_saver("sqlite", archive="s3:///prefix")
    with pytest.raises(ConfigError, match=r"Archive\(lag=\)"):
        make_saver("sqlite", archive="s3://b/p", archive_lag=0)
    with make_saver("sqlite") as saver, pytest.raises(ConfigError, match="no archive"):
        saver.archive_idle(0.0)


# -- threads whose values are rebuilt from other records -------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_delta_channel_and_list_piece_threads_come_back_the_same(
    make_saver: SaverFactory, archive_url: str, use_async: bool
) -> None:
    from tests.test_delta import RUNS, _cfg, _history, _invoke, delta_graph

    # list_snapshot_every=4: the growing message list is stored as pieces.
    saver = make_saver(FULL, archive=archive_url, list_snapshot_every=4)
    try:
        delta = delta_graph().compile(checkpointer=saver)
        pieces = loop_graph(9).compile(checkpointer=saver)
        for run in RUNS:
            await _invoke(delta, run, _cfg("t-delta"), use_async)
        await _invoke(pieces, {"messages": [], "n": 0}, _cfg("t-pieces"), use_async)
        before = {
            "t-delta": await _history(delta, _cfg("t-delta"), use_async),
            "t-pieces": await _history(pieces, _cfg("t-pieces"), use_async),
        }
        # A pin in the middle of the delta thread: retention keeps it and
        # every ancestor its delta channels are rebuilt from.
        snaps = list(delta.get_state_history(_cfg("t-delta")))
        pinned = snaps[len(snaps) // 2]
        saver.pin(pinned.config)
        saver.apply_retention(RetentionPolicy(keep_last=1), thread_ids=["t-delta"])
        pinned_values = delta.get_state(pinned.config).values
        assert pinned_values == dict(next(v for s, v in before["t-delta"] if s == pinned.metadata["step"]))
        before = {
            "t-delta": await _history(delta, _cfg("t-delta"), use_async),
            "t-pieces": await _history(pieces, _cfg("t-pieces"), use_async),
        }
        if use_async:
            report = await saver.aarchive_idle(0.0)
        else:
            report = saver.archive_idle(0.0)
        assert sorted(report.archived) == ["t-pieces"]  # the pinned thread stays
        saver.unpin(pinned.config)
        assert saver.archive_idle(0.0).archived == ["t-delta"]
        assert hot_thread_ids(saver) == set()
        for thread, graph in (("t-delta", delta), ("t-pieces", pieces)):
            assert await _history(graph, _cfg(thread), use_async) == before[thread]
        assert delta.get_state(pinned.config).values == pinned_values
    finally:
        if use_async:
            await saver.aclose()
        else:
            saver.close()


# -- seams: what another saver, a fault or a late write does meanwhile -----------------------------


def test_a_deleted_thread_stays_deleted_while_the_object_store_is_down(
    make_saver: SaverFactory, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store_behind_a_proxy(s3_env, monkeypatch, "down") as (proxy, url):
        with make_saver(FULL, archive=url) as saver:
            graph = loop_graph(2).compile(checkpointer=saver)
            graph.invoke({"messages": [], "n": 0}, cfg("t-gone"))
            assert saver.archive_idle(0.0).archived == ["t-gone"]
            proxy.cut()
            saver.delete_thread("t-gone")  # the store cannot be told: the hot tiers' flag decides
            assert graph.get_state(cfg("t-gone")).values == {}
            assert saver.get_tuple(cfg("t-gone")) is None
            proxy.restore()
            assert saver.get_tuple(cfg("t-gone")) is None
            saver.drain_archive()
            assert saver.restore(["t-gone"]).threads == 0


def test_a_plain_read_brings_back_under_the_lease(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-held"))
        assert saver.archive_idle(0.0).archived == ["t-held"]
    with (
        make_saver(FULL, archive=archive_url, sqlite_name="a.sqlite") as a,
        make_saver(FULL, archive=archive_url, sqlite_name="b.sqlite", on_busy="raise") as b,
    ):
        lease = a._sync_leases().hold("t-held")  # another replica is archiving or bringing it back
        try:
            with pytest.raises(ThreadBusy):
                b.get_tuple(cfg("t-held"))
            assert b.archived_threads() == ["t-held"]
        finally:
            a._sync_leases().release_quietly(lease)
        assert b.get_tuple(cfg("t-held")) is not None
        assert b.archived_threads() == []


def test_a_write_during_a_ship_is_shipped_by_the_next_pass() -> None:
    from langgraph_durable.archive.replica import ArchiveReplica

    shipped: list[str] = []
    replica: ArchiveReplica

    class Host:
        def ship_to_archive(self, thread_id: str) -> int:
            shipped.append(thread_id)
            if len(shipped) == 1:
                replica.note(thread_id)  # a step of the thread lands while it ships
            return 1

        def rescan_archive(self, note: Any, paced: Any) -> int:
            return 0

        def archive_failing(self, failing: dict[str, str]) -> None:
            pass

    replica = ArchiveReplica(Host(), lag=3600.0)
    try:
        replica.note("t")
        assert replica.run_pass() == 1
        assert replica.lag().threads == 1  # still noted
        assert replica.run_pass() == 1
        assert replica.lag().threads == 0 and shipped == ["t", "t"]
    finally:
        replica.stop()


def test_write_behind_ships_to_the_archive_only_what_the_shared_tiers_hold(
    make_saver: SaverFactory, archive_url: str, postgres_proxy: tuple[Any, str]
) -> None:
    proxy, url = postgres_proxy
    with make_saver("sqlite+postgres", postgres=url, archive=archive_url, write="local") as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-behind"))
        saver.drain()
        proxy.cut()
        graph.invoke({"messages": ["while postgres is away"], "n": 0}, cfg("t-behind"))
        left = saver.drain_archive(timeout=5)
        assert left is not None and left.threads == 1  # the journal still owes it: kept noted
        proxy.restore()
        assert saver.drain(30).caught_up
        assert saver.drain_archive().caught_up  # type: ignore[union-attr]
        image = saver._archiver().image("t-behind")
        newest = graph.get_state(cfg("t-behind")).config["configurable"]["checkpoint_id"]
        assert ("", newest) in image.checkpoints


def test_an_operators_answer_reaches_the_archive(make_saver: SaverFactory, archive_url: str) -> None:
    from langgraph_durable.ledger import LedgerEntry

    with make_saver(FULL, archive=archive_url) as saver:
        saver.record_action("t-ledger", LedgerEntry("email:1", "intent", updated_at=1.0))
        assert saver.lag().archive.threads == 1  # type: ignore[union-attr]
        saver.drain_archive()
        saver.resolve_action("t-ledger", "email:1", done=True, result="sent")
        assert saver.lag().archive.threads == 1  # type: ignore[union-attr]
        saver.drain_archive()
        entry = saver._codec.decode_ledger("t-ledger", "email:1", saver._archiver().image("t-ledger").ledger["email:1"])
        assert entry.state == "done" and entry.result == "sent"


def test_a_copy_lost_after_a_bring_back_does_not_delete_the_archives(
    make_saver: SaverFactory, archive_url: str
) -> None:
    from tests.tamper import CHECKPOINT, Rec, postgres_store

    with make_saver("redis+postgres", archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-lost"))
        oldest = list(graph.get_state_history(cfg("t-lost")))[-1].config["configurable"]["checkpoint_id"]
        assert saver.archive_idle(0.0).archived == ["t-lost"]
        assert graph.get_state(cfg("t-lost")).values["n"] == 3  # brought back
        assert saver.postgres_url is not None
        pg = postgres_store(saver.postgres_url)
        try:
            pg.delete("t-lost", Rec(CHECKPOINT, "", (oldest,)))  # Postgres loses one copy
        finally:
            pg.close()
        graph.invoke({"messages": ["more"], "n": 0}, cfg("t-lost"))
        saver.drain_archive()
        assert ("", oldest) in saver._archiver().image("t-lost").checkpoints


def test_a_restore_never_moves_a_ledger_entry_backwards(make_saver: SaverFactory, archive_url: str) -> None:
    from langgraph_durable.ledger import LedgerEntry

    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-led"))
        saver.record_action("t-led", LedgerEntry("charge:1", "intent", updated_at=1.0))
        saver.drain_archive()  # the archive holds the intent
        saver.resolve_action("t-led", "charge:1", done=True, result="r-1")
        assert saver.restore(["t-led"]).threads == 1
        assert saver.actions("t-led")["charge:1"].state == "done"


@pytest.fixture
def compact_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments fold as soon as there are 4, whatever their age."""
    from langgraph_durable.archive import archiver, archiver_async

    for module in (archiver, archiver_async):
        monkeypatch.setattr(module, "COMPACT_AFTER_S", 0.0)
        monkeypatch.setattr(module, "COMPACT_AT", 4)


@pytest.mark.usefixtures("compact_soon")
def test_compaction_folds_old_segments_and_keeps_every_record(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(1).compile(checkpointer=saver)
        times = []
        for i in range(6):
            graph.invoke({"messages": [f"run {i}"], "n": 0}, cfg("t-compact"))
            saver.drain_archive()
            times.append(time.time())
            time.sleep(0.002)
        keys = store_of(archive_url).keys(segments_prefix("t-compact"))
        assert len(keys) < 6  # folded
        image = saver._archiver().image("t-compact")
        hot = saver._archiver().hot("t-compact", saver._sync_chain().tiers)
        assert image.holds(hot.checkpoints.values(), hot.blobs.values(), hot.writes.values(), hot.ledger)
        assert len(image.checkpoints) == len(hot.checkpoints)
        assert saver.archive_idle(0.0).archived == ["t-compact"]
        assert len(list(saver.list(cfg("t-compact")))) == len(hot.checkpoints)


# -- verify: the archive's word against every hot tier's ---------------------------------------


def test_verify_finds_a_whole_store_rolled_back_and_a_bad_segment(
    make_saver: SaverFactory, archive_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable import cli
    from tests.tamper import CHECKPOINT, Rec, open_stores

    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-roll"))
        graph.invoke({"messages": [], "n": 0}, cfg("t-fine"))
        state = graph.get_state(cfg("t-roll")).values
        saver.drain_archive()
        report = saver.verify()
        assert report.archive is not None and report.archive.ok and report.archive.signed
        # Every hot tier goes back to an older backup: the newest checkpoint is gone from each.
        newest = graph.get_state(cfg("t-roll")).config["configurable"]["checkpoint_id"]
        assert saver.redis_url is not None
        for store in open_stores(saver, saver.redis_url):
            try:
                store.delete("t-roll", Rec(CHECKPOINT, "", (newest,)))
            finally:
                store.close()
        flags = [
            "--sqlite", saver.sqlite_path or "", "--redis", saver.redis_url, "--redis-key-prefix",
            saver.redis_key_prefix, "--postgres", saver.postgres_url or "", "--archive", archive_url,
        ]  # fmt: skip
    code = cli.main(["verify", *flags])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FINDINGS
    assert "archive: ROLLED BACK  thread 't-roll'" in out and "t-fine" not in out.split("ROLLED BACK")[1]
    with make_saver(FULL, archive=archive_url) as saver:
        report = saver.verify()
        assert report.archive.rolled_back == ["t-roll"]
        assert saver.restore(["t-roll"]).threads == 1
        assert loop_graph(3).compile(checkpointer=saver).get_state(cfg("t-roll")).values == state
        assert saver.verify().archive.ok
        # A damaged segment is reported, never trusted.
        store = store_of(archive_url)
        key = store.keys(segments_prefix("t-fine"))[0]
        data = bytearray(store.get(key) or b"")
        data[-3] ^= 0x01
        store.put(key, bytes(data))
        check = saver.verify().archive
        assert check.bad_segments == [key] and not check.ok
    code = cli.main(["verify", "--json", *flags])
    doc = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_FINDINGS and not doc["ok"] and doc["report"]["archive"]["bad_segments"] == [key]


def test_archive_operations_reach_the_metrics_hooks(make_saver: SaverFactory, archive_url: str) -> None:
    from langgraph_durable.metrics import TierStats

    stats = TierStats()
    with make_saver(FULL, archive=archive_url, metrics=stats) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-metrics"))
        saver.drain_archive()
        saver.archive_idle(0.0)
        graph.get_state(cfg("t-metrics"))
        ops = {s.op: s.calls for s in stats.ops("archive")}
        assert ops == {"ship": 1, "archive_thread": 1, "bring_back": 1}


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_node_pins_before_a_risky_step_and_a_validator_rewinds_to_it(make_saver: SaverFactory, face: str) -> None:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from langgraph_durable import apin_here, pin_here
    from tests.graphs import LoopState

    broken = {"now": False}

    def risky(state: LoopState) -> dict[str, Any]:
        pin_here("before risky")
        return {"messages": ["risky done"], "n": state.get("n", 0) + 1}

    async def arisky(state: LoopState) -> dict[str, Any]:
        await apin_here("before risky")
        return {"messages": ["risky done"], "n": state.get("n", 0) + 1}

    def wait(state: LoopState) -> dict[str, Any]:
        return {"messages": [f"answer {interrupt('go on?')}"]}

    g = StateGraph(LoopState)
    g.add_node("prepare", lambda s: {"messages": ["prepared"]})
    g.add_node("risky", risky if face == "sync" else arisky)
    g.add_node("wait", wait)
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "risky")
    g.add_edge("risky", "wait")
    g.add_edge("wait", END)

    def undo_if_broken(ctx: Any) -> Any:
        return ctx.rewind_to_pin("the risky step broke something") if broken["now"] else None

    outcomes: list[Any] = []
    saver = make_saver("sqlite+postgres", validators=[undo_if_broken], on_validation=outcomes.append)
    graph = g.compile(checkpointer=saver)

    async def go() -> list[Any]:
        async with saver:
            await graph.ainvoke({"messages": [], "n": 0}, cfg("t-risky"))
            pins = await saver.apins("t-risky")
            broken["now"] = True
            await graph.ainvoke(Command(resume="yes"), cfg("t-risky"))
            return pins

    if face == "sync":
        with saver:
            graph.invoke({"messages": [], "n": 0}, cfg("t-risky"))
            pins = saver.pins("t-risky")
            broken["now"] = True
            graph.invoke(Command(resume="yes"), cfg("t-risky"))
            state = graph.get_state(cfg("t-risky"))
    else:
        pins = asyncio.run(go())
        with make_saver("sqlite+postgres") as again:
            state = g.compile(checkpointer=again).get_state(cfg("t-risky"))
    assert [p.label for p in pins] == ["before risky"]
    # Resumed from (a fork of) the pinned checkpoint: risky ran again from
    # the state it was pinned with, and the thread waits at the interrupt.
    last = outcomes[-1]
    assert last.resumed_from != last.checkpoint_id
    assert [name for name, _ in last.decisions] == ["undo_if_broken", "undo_if_broken"]
    assert last.decisions[0][1].checkpoint_id == pins[0].checkpoint_id
    assert state.values == {"messages": ["prepared", "risky done"], "n": 1} and state.next == ("wait",)


def test_a_pin_written_while_its_thread_is_archived_deletes_nothing(make_saver: SaverFactory, archive_url: str) -> None:
    from langgraph_durable.model.pins import pin_entry

    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(4).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-late-pin"))
        before = _history(graph, cfg("t-late-pin"))
        newest = graph.get_state(cfg("t-late-pin")).config["configurable"]["checkpoint_id"]
        assert saver.archive_idle(0.0).archived == ["t-late-pin"]
        # Another replica's pin() read the thread before it was archived and writes its entry now.
        saver._sync_chain().record_entry("t-late-pin", pin_entry("", newest, "late"))
        saver._runtime.note_archive("t-late-pin")
        saver.drain_archive()
        image = saver._archiver().image("t-late-pin")
        assert len(image.checkpoints) == len(before) and not image.gone
        assert _history(graph, cfg("t-late-pin")) == before  # brought back whole
        assert [p.label for p in saver.pins("t-late-pin")] == ["late"]


def test_archiving_skips_a_thread_this_savers_own_run_holds(make_saver: SaverFactory, archive_url: str) -> None:
    from tests.graphs import looping

    outcomes: list[Any] = []
    saver = make_saver(FULL, archive=archive_url)

    def step(state: Any) -> dict[str, Any]:
        if state.get("n", 0) == 1:
            outcomes.append(saver.archive_idle(0.0, thread_ids=["t-own"]).threads[0])
        return {"messages": ["x"], "n": state.get("n", 0) + 1}

    with saver:
        graph = looping(step, 3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-own"))
        assert outcomes[0].skipped == "busy"
        assert graph.get_state(cfg("t-own")).values["n"] == 3
        assert saver.archive_idle(0.0).archived == ["t-own"]


def test_a_delete_waits_for_a_bring_back_in_flight(
    make_saver: SaverFactory, archive_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bring-back is held inside its read of the archive (under the thread's
    lease) until the delete is seen waiting for that lease; had the delete
    gone ahead, the bring-back would write the deleted thread back."""
    import threading

    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-race"))
        assert saver.archive_idle(0.0).archived == ["t-race"]
    with (
        make_saver(FULL, archive=archive_url, sqlite_name="a.sqlite") as a,
        make_saver(FULL, archive=archive_url, sqlite_name="b.sqlite") as b,
    ):
        # A's bring-back stops at its listing of the thread's segments.
        store = a._archiver().store
        list_keys = store.keys
        reading, release = threading.Event(), threading.Event()

        def held_keys(prefix: str) -> list[str]:
            if prefix == segments_prefix("t-race") and threading.current_thread() is bringing:
                reading.set()
                assert release.wait(LIVENESS_S), "the test never let the bring-back go on"
            return list_keys(prefix)

        monkeypatch.setattr(store, "keys", held_keys)
        # B's looks at the lease while it takes it for the delete (`hold`),
        # as opposed to its first ask for a kept lease, which gives up soon.
        keeper = b._sync_leases()
        hold, ask_hand_off = keeper.hold, keeper._ask_hand_off
        in_hold: list[bool] = []
        looks: list[str] = []
        waiting = threading.Event()  # also set when the delete returns

        def holding(thread_id: str) -> Any:
            in_hold.append(True)
            return hold(thread_id)

        def asking(tier: Any, thread_id: str, holder: str) -> None:
            if in_hold and threading.current_thread() is deleting and thread_id == "t-race":
                looks.append(holder)
                if len(looks) >= 2:  # looked, slept, looked again: it waits
                    waiting.set()
            ask_hand_off(tier, thread_id, holder)

        monkeypatch.setattr(keeper, "hold", holding)
        monkeypatch.setattr(keeper, "_ask_hand_off", asking)

        brought: list[Any] = []
        deleted: list[bool] = []

        def delete() -> None:
            try:
                b.delete_thread("t-race")
                deleted.append(True)
            finally:
                waiting.set()

        bringing = threading.Thread(target=lambda: brought.append(a.get_tuple(cfg("t-race"))))
        deleting = threading.Thread(target=delete)
        bringing.start()
        assert reading.wait(LIVENESS_S), "the read did not start bringing the thread back"
        deleting.start()
        assert waiting.wait(LIVENESS_S), "the delete neither waited for the lease nor returned"
        assert not deleted, "the delete went ahead while the bring-back was in flight"
        assert set(looks) == {a._sync_leases().book.holder}  # the lease it waits for is the bring-back's
        # Let go at once: with on_busy="raise" (the default) the delete waits
        # for a busy lease only LEASE_HANDOFF_GRACE_S, then goes ahead without it.
        release.set()
        bringing.join(LIVENESS_S)
        deleting.join(LIVENESS_S)
        assert not bringing.is_alive() and not deleting.is_alive()
        assert brought[0] is not None and deleted  # the read was served, then the thread deleted
        assert b.get_tuple(cfg("t-race")) is None and a.get_tuple(cfg("t-race")) is None
        assert b.archived_threads() == []


def test_an_archived_thread_comes_back_while_redis_is_down(
    make_saver: SaverFactory, archive_url: str, redis_proxy: tuple[Any, str]
) -> None:
    proxy, url = redis_proxy
    with make_saver(FULL, redis=url, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-noredis"))
        state = graph.get_state(cfg("t-noredis")).values
        assert saver.archive_idle(0.0).archived == ["t-noredis"]
        proxy.cut()
        assert graph.get_state(cfg("t-noredis")).values == state
        out = graph.invoke({"messages": ["on"], "n": 0}, cfg("t-noredis"))
        assert out["n"] == 3 and "on" in out["messages"]
        proxy.restore()


@pytest.mark.usefixtures("compact_soon")
def test_a_restore_until_a_time_before_a_compaction_finds_what_existed_then(
    make_saver: SaverFactory, archive_url: str
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(1).compile(checkpointer=saver)
        counts, times = [], []
        for i in range(6):
            graph.invoke({"messages": [f"run {i}"], "n": 0}, cfg("t-pit2"))
            saver.drain_archive()
            counts.append(len(list(saver.list(cfg("t-pit2")))))
            times.append(time.time())
            time.sleep(0.005)
        assert len(store_of(archive_url).keys(segments_prefix("t-pit2"))) < 6  # folded
        for count, at in zip(counts, times):
            assert len(saver._archiver().image("t-pit2", until=at).checkpoints) == count
