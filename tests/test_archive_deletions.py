"""Deletions win over the archive: a thread or run deleted while the object
store was down stays deleted through a restore, a delete waits for a slow
bring-back of the thread, and a stray object in the bucket does not stop a
restore. Real tiers and moto's S3 server."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import cli
from langgraph_durable.archive.segments import segments_prefix
from langgraph_durable.errors import TierUnavailable
from langgraph_durable.faces.runtime import Runtime
from tests.conftest import SaverFactory
from tests.graphs import loop_graph
from tests.test_archive import FULL, _lose_every_hot_tier, cfg, store_behind_a_proxy, store_of
from tests.test_cli_archive import flags, run, run_json  # noqa: F401
from tests.waiting import LIVENESS_S

pytestmark = [pytest.mark.s3]


def _history_ids(saver: Any, thread_id: str) -> set[str]:
    return {t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread_id))}


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_restore_leaves_what_was_deleted_while_the_object_store_was_down_deleted(
    make_saver: SaverFactory, s3_env: str, monkeypatch: pytest.MonkeyPatch, redis_prefix: str, face: str
) -> None:
    run_kept, run_gone = str(uuid.uuid4()), str(uuid.uuid4())
    with store_behind_a_proxy(s3_env, monkeypatch, f"dels-{face}") as (proxy, url):
        with make_saver(FULL, archive=url, redis_key_prefix=redis_prefix) as saver:
            graph = loop_graph(2).compile(checkpointer=saver)
            # In t-older, the run deleted is the older one: the thread's head stays as it was.
            graph.invoke({"messages": [], "n": 0}, {**cfg("t-older"), "metadata": {"run_id": run_gone}})
            older_gone = _history_ids(saver, "t-older")
            for thread_id in ("t-deleted", "t-archived", "t-runs", "t-older"):
                graph.invoke({"messages": [], "n": 0}, {**cfg(thread_id), "metadata": {"run_id": run_kept}})
            kept = _history_ids(saver, "t-runs")
            graph.invoke({"messages": ["again"], "n": 0}, {**cfg("t-runs"), "metadata": {"run_id": run_gone}})
            gone = _history_ids(saver, "t-runs") - kept
            assert gone
            assert saver.archive_idle(0.0, thread_ids=["t-archived"]).archived == ["t-archived"]
            saver.drain_archive()
            proxy.cut()
            saver.delete_thread("t-deleted")
            saver.delete_thread("t-archived")
            # The hot threads lose the run; the archived ones could not be looked
            # through, and the error says so (and how to finish).
            with pytest.raises(TierUnavailable, match="delete_for_runs again"):
                saver.delete_for_runs([run_gone])
            assert _history_ids(saver, "t-runs") == kept
            older_kept = _history_ids(saver, "t-older")
            assert older_kept and not older_kept & older_gone
            fingerprint = saver.health().store_key_fingerprint
        # The process is gone; the object store is back; the restore runs
        # before any replica shipped the deletions (its rescan held off).
        proxy.restore()
        rescan = Runtime.rescan_archive
        held_off = [True]

        def later(self: Runtime, note: Any, paced: Any) -> int:
            return 0 if held_off[0] else rescan(self, note, paced)

        monkeypatch.setattr(Runtime, "rescan_archive", later)
        with make_saver(FULL, archive=url, redis_key_prefix=redis_prefix) as again:
            report = again.restore(None) if face == "sync" else asyncio.run(again.arestore(None))
            assert again.get_tuple(cfg("t-deleted")) is None
            assert again.get_tuple(cfg("t-archived")) is None
            assert again.archived_threads() == []
            assert _history_ids(again, "t-runs") == kept
            assert _history_ids(again, "t-older") == older_kept
            assert sorted(report.deleted) == ["t-archived", "t-deleted"]
        # A replica has shipped the deletions since; a restore onto these
        # tiers, or onto empty ones (the archive's word alone), leaves them deleted.
        held_off[0] = False
        with make_saver(FULL, archive=url, redis_key_prefix=redis_prefix) as again:
            assert again.drain_archive().caught_up  # type: ignore[union-attr]
            again.restore(None)
            assert again.get_tuple(cfg("t-deleted")) is None
            assert again.get_tuple(cfg("t-archived")) is None
            assert _history_ids(again, "t-runs") == kept
            assert _history_ids(again, "t-older") == older_kept
        _lose_every_hot_tier(again, redis_prefix)
        with make_saver(
            FULL,
            archive=url,
            redis_key_prefix=redis_prefix,
            sqlite_name="new.sqlite",
            archive_key_fingerprint=fingerprint,
        ) as fresh:
            report = fresh.restore(None) if face == "sync" else asyncio.run(fresh.arestore(None))
            assert fresh.get_tuple(cfg("t-deleted")) is None
            assert fresh.get_tuple(cfg("t-archived")) is None
            assert fresh.archived_threads() == []
            assert _history_ids(fresh, "t-runs") == kept
            assert _history_ids(fresh, "t-older") == older_kept


def test_a_deletion_marker_planted_in_one_tier_does_not_hide_a_thread_from_a_restore(
    make_saver: SaverFactory, archive_url: str
) -> None:
    """Only the system of record's word on a deletion counts."""
    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-kept"))
        saver.drain_archive()
        chain = saver._sync_chain()
        first = next(t for t in chain.tiers if t is not chain.roles.by_authority()[0])
        first.mark_deleted("t-kept", "\uffff")
        assert saver.restore(["t-kept"]).threads == 1
        assert saver.get_tuple(cfg("t-kept")) is not None


def _plant(archive_url: str, thread_id: str) -> str:
    key = segments_prefix(thread_id) + "README"
    store_of(archive_url).put(key, b"notes about this folder")
    return key


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_stray_object_in_a_threads_folder_is_skipped_and_reported(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-a"))
        graph.invoke({"messages": [], "n": 0}, cfg("t-b"))
        saver.drain_archive()
        key = _plant(archive_url, "t-a")
        until = time.time() + 60
        report = saver.restore(None, until=until) if face == "sync" else asyncio.run(saver.arestore(None, until=until))
        assert report.threads == 2
        assert saver.get_tuple(cfg("t-a")) is not None
        assert report.unrecognised == [key]


def test_the_cli_restore_skips_and_names_a_stray_object(
    flags: list[str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    archive_url: str,
    tmp_path: Path,
) -> None:
    time.sleep(1.1)
    code, out, _ = run(capsys, "archive", "--idle-after", "1s", *flags)
    assert code == cli.EXIT_OK
    key = _plant(archive_url, "loop")
    until = str(int(time.time()) + 60)
    code, out, err = run(capsys, "restore", "--all", "--until", until, *flags)
    assert code == cli.EXIT_OK, err
    assert f"SKIPPED   {key}" in out
    code, report = run_json(capsys, "restore", "--all", "--until", until, *flags)
    assert code == cli.EXIT_OK
    assert report["unrecognised"] == [key]


def test_a_delete_waits_for_a_slow_bring_back(
    make_saver: SaverFactory, archive_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bring-back is held 3 s after the delete started waiting for its
    lease (longer than a busy lease is waited for): the delete still waits,
    and the thread stays deleted."""
    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-slow"))
        assert saver.archive_idle(0.0).archived == ["t-slow"]
    with (
        make_saver(FULL, archive=archive_url, sqlite_name="a.sqlite") as a,
        make_saver(FULL, archive=archive_url, sqlite_name="b.sqlite") as b,
    ):
        store = a._archiver().store
        list_keys = store.keys
        reading = threading.Event()
        done: list[str] = []

        def held_keys(prefix: str) -> list[str]:
            if prefix == segments_prefix("t-slow") and threading.current_thread() is bringing:
                reading.set()
                assert started.wait(LIVENESS_S)
                time.sleep(3.0)
                done.append("brought")
            return list_keys(prefix)

        monkeypatch.setattr(store, "keys", held_keys)
        started = threading.Event()

        def delete() -> None:
            started.set()
            b.delete_thread("t-slow")
            done.append("deleted")

        bringing = threading.Thread(target=lambda: a.get_tuple(cfg("t-slow")))
        deleting = threading.Thread(target=delete)
        bringing.start()
        assert reading.wait(LIVENESS_S)
        deleting.start()
        bringing.join(LIVENESS_S)
        deleting.join(LIVENESS_S)
        assert done == ["brought", "deleted"]  # the delete returned only after the bring-back
        assert a.get_tuple(cfg("t-slow")) is None and b.get_tuple(cfg("t-slow")) is None
        assert b.archived_threads() == []


async def test_a_delete_waits_for_a_slow_bring_back_on_the_async_face(
    make_saver: SaverFactory, archive_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("t-aslow"))
        assert saver.archive_idle(0.0).archived == ["t-aslow"]
    with (
        make_saver(FULL, archive=archive_url, sqlite_name="a.sqlite") as a,
        make_saver(FULL, archive=archive_url, sqlite_name="b.sqlite") as b,
    ):
        store = a._aarchiver().store
        list_keys = store.keys
        reading, started = asyncio.Event(), asyncio.Event()
        done: list[str] = []

        async def held_keys(prefix: str) -> list[str]:
            if prefix == segments_prefix("t-aslow"):
                reading.set()
                await started.wait()
                await asyncio.sleep(3.0)
                done.append("brought")
            return await list_keys(prefix)

        monkeypatch.setattr(store, "keys", held_keys)

        async def delete() -> None:
            started.set()
            await b.adelete_thread("t-aslow")
            done.append("deleted")

        bringing = asyncio.create_task(a.aget_tuple(cfg("t-aslow")))
        await asyncio.wait_for(reading.wait(), LIVENESS_S)
        await asyncio.wait_for(asyncio.gather(bringing, delete()), LIVENESS_S)
        assert done == ["brought", "deleted"]
        assert await a.aget_tuple(cfg("t-aslow")) is None and await b.aget_tuple(cfg("t-aslow")) is None


# -- every thread operation sees an archived thread ---------------------------------------------


def _call(saver: Any, face: str, name: str, *args: Any, **kwargs: Any) -> Any:
    if face == "sync":
        return getattr(saver, name)(*args, **kwargs)
    return asyncio.run(getattr(saver, "a" + name)(*args, **kwargs))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_delete_for_runs_reaches_an_archived_thread(make_saver: SaverFactory, archive_url: str, face: str) -> None:
    kept_run, gone_run = str(uuid.uuid4()), str(uuid.uuid4())
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, {**cfg("t-arch-runs"), "metadata": {"run_id": kept_run}})
        kept = _history_ids(saver, "t-arch-runs")
        graph.invoke({"messages": ["more"], "n": 0}, {**cfg("t-arch-runs"), "metadata": {"run_id": gone_run}})
        assert saver.archive_idle(0.0).archived == ["t-arch-runs"]
        _call(saver, face, "delete_for_runs", [gone_run])
        assert _history_ids(saver, "t-arch-runs") == kept


@pytest.mark.parametrize("face", ["sync", "async"])
def test_copy_thread_copies_an_archived_source(make_saver: SaverFactory, archive_url: str, face: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-src"))
        state = graph.get_state(cfg("t-src")).values
        assert saver.archive_idle(0.0).archived == ["t-src"]
        _call(saver, face, "copy_thread", "t-src", "t-dst")
        assert graph.get_state(cfg("t-dst")).values == state
        assert len(_history_ids(saver, "t-dst")) == len(_history_ids(saver, "t-src"))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_prune_prunes_an_archived_thread(make_saver: SaverFactory, archive_url: str, face: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-prune"))
        assert len(_history_ids(saver, "t-prune")) > 1
        assert saver.archive_idle(0.0).archived == ["t-prune"]
        _call(saver, face, "prune", ["t-prune"])
        assert len(_history_ids(saver, "t-prune")) == 1


# -- a deletion record damaged, missing or replayed in one place ------------------------------


def _segments(archive_url: str, thread_id: str) -> dict[str, bytes]:
    store = store_of(archive_url)
    return {key: store.get(key) or b"" for key in store.keys(segments_prefix(thread_id))}


def test_a_deletion_marker_lost_by_every_tier_but_the_system_of_record_still_wins_a_restore(
    make_saver: SaverFactory, s3_env: str, monkeypatch: pytest.MonkeyPatch, redis_prefix: str
) -> None:
    """Deleted while the object store was down (the archive still holds the
    thread), then Redis and the local file lose their deletion markers: a
    restore reads the system of record's, and the thread stays deleted."""
    with store_behind_a_proxy(s3_env, monkeypatch, "lost-marker") as (proxy, url):
        monkeypatch.setattr(Runtime, "rescan_archive", lambda self, note, paced: 0)
        with make_saver(FULL, archive=url, redis_key_prefix=redis_prefix) as saver:
            graph = loop_graph(2).compile(checkpointer=saver)
            graph.invoke({"messages": [], "n": 0}, cfg("t-gone"))
            graph.invoke({"messages": [], "n": 0}, cfg("t-kept"))
            assert saver.drain_archive().caught_up
            proxy.cut()
            saver.delete_thread("t-gone")
            chain = saver._sync_chain()
            authority = chain.roles.by_authority()[0]
            for tier in chain.tiers:
                if tier is not authority:
                    tier.mark_deleted("t-gone", None)
        proxy.restore()
        with make_saver(FULL, archive=url, redis_key_prefix=redis_prefix) as again:
            report = again.restore(None)
            assert report.deleted == ["t-gone"] and report.threads == 1
            assert again.get_tuple(cfg("t-gone")) is None
            assert again.get_tuple(cfg("t-kept")) is not None


def test_old_segments_put_back_after_a_deletion_do_not_bring_the_thread_back(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str
) -> None:
    """A bucket writer (or a careless copy from a backup) puts a deleted
    thread's old segments back: the segment that records the deletion is
    newer and covers them, on a live store and on empty tiers alike."""
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": ["secret"], "n": 0}, cfg("t-gone"))
        assert saver.drain_archive().caught_up
        old = _segments(archive_url, "t-gone")
        saver.delete_thread("t-gone")
        assert saver.drain_archive().caught_up
        assert not set(_segments(archive_url, "t-gone")) & set(old)  # the old ones went
        store = store_of(archive_url)
        for key, data in old.items():
            store.put(key, data)  # replayed
        assert saver.restore(None).threads == 0
        assert saver.get_tuple(cfg("t-gone")) is None
        fingerprint = saver.health().store_key_fingerprint
    _lose_every_hot_tier(saver, redis_prefix)
    with make_saver(FULL, archive=archive_url, sqlite_name="new.sqlite", archive_key_fingerprint=fingerprint) as fresh:
        report = fresh.restore(None)
        assert report.threads == 0 and report.bad_segments == []
        assert fresh.get_tuple(cfg("t-gone")) is None


def test_a_damaged_deletion_segment_is_reported_and_nothing_comes_back(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str
) -> None:
    """The segment that records a deletion is damaged in the bucket: a
    restore names it, and what it recorded deleted stays deleted (live
    store: the system of record's marker; empty tiers: nothing verifies)."""
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": ["secret"], "n": 0}, cfg("t-gone"))
        assert saver.drain_archive().caught_up
        saver.delete_thread("t-gone")
        assert saver.drain_archive().caught_up
        ((key, data),) = _segments(archive_url, "t-gone").items()
        store_of(archive_url).put(key, data[:-1] + bytes([data[-1] ^ 0xFF]))
        report = saver.restore(None)
        assert report.threads == 0 and report.bad_segments == [key]
        assert saver.get_tuple(cfg("t-gone")) is None
        fingerprint = saver.health().store_key_fingerprint
    _lose_every_hot_tier(saver, redis_prefix)
    with make_saver(FULL, archive=archive_url, sqlite_name="new.sqlite", archive_key_fingerprint=fingerprint) as fresh:
        report = fresh.restore(None)
        assert report.threads == 0 and report.bad_segments == [key]
        assert fresh.get_tuple(cfg("t-gone")) is None


def test_a_run_deleted_before_its_thread_stays_deleted_in_the_archive(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str
) -> None:
    """delete_for_runs takes a thread's newest run, then the thread is deleted
    (its marker now older than that run's checkpoints), then the id is used
    again: the deleted run's checkpoints never come back from the archive."""
    with make_saver(FULL, archive=archive_url, archive_lag=3600) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": ["r1"], "n": 0}, {**cfg("t"), "metadata": {"run_id": "r1"}})
        graph.invoke({"messages": ["r2 secret"], "n": 0}, {**cfg("t"), "metadata": {"run_id": "r2"}})
        assert saver.drain_archive().caught_up
        saver.delete_for_runs(["r2"])
        saver.delete_thread("t")
        assert saver.drain_archive().caught_up
        graph.invoke({"messages": ["new"], "n": 0}, {**cfg("t"), "metadata": {"run_id": "r3"}})
        drained = saver.drain_archive()
        assert drained.caught_up and not drained.failing, drained
        kept = _history_ids(saver, "t")
        fingerprint = saver.health().store_key_fingerprint
    _lose_every_hot_tier(saver, redis_prefix)
    with make_saver(FULL, archive=archive_url, sqlite_name="new.sqlite", archive_key_fingerprint=fingerprint) as fresh:
        fresh.restore(None)
        assert _history_ids(fresh, "t") == kept
        assert "r2 secret" not in str(fresh.get_tuple(cfg("t")).checkpoint["channel_values"])  # type: ignore[union-attr]
