"""The archive replica on default options: every thread id the saver accepts
gets object names the object store takes, one thread the store refuses
never holds the others back (and is reported), and what a pass reads from
the object store follows what is new, not a thread's history. Real Redis,
Postgres and moto's S3 server; object calls are counted (and one thread's
refused) by a wrapper on the real store object, never by a mock of it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import DurableSaver, cli
from langgraph_durable.archive.segments import MAX_FOLDER, segment_name, segments_prefix, thread_folder
from langgraph_durable.archive.store import ArchiveStore
from langgraph_durable.archive.store_async import MAX_PREFIX_BYTES, parse_archive_url
from langgraph_durable.errors import ConfigError, TierUnavailable
from langgraph_durable.metrics import TierCall
from tests.conftest import REDIS_URL, SaverFactory
from tests.graphs import loop_graph

pytestmark = [pytest.mark.s3]

FULL = "sqlite+redis+postgres"
FACES = ["sync", "async"]
# The longest id the saver accepts is 1,024 bytes; 700 made a 1,175-byte name.
LONG = "L" * 700
LONGEST = "x" * 1024


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def on(face: str, saver: DurableSaver, name: str, *args: Any, **kwargs: Any) -> Any:
    """`saver.name(...)`, or on the async face `saver.aname(...)`."""
    if face == "sync":
        return getattr(saver, name)(*args, **kwargs)
    return asyncio.run(getattr(saver, "a" + name)(*args, **kwargs))


def run(saver: DurableSaver, *thread_ids: str, steps: int = 2) -> None:
    graph = loop_graph(steps).compile(checkpointer=saver)
    for thread_id in thread_ids:
        graph.invoke({"messages": [], "n": 0}, cfg(thread_id))


# S3 refuses an object name over 1,024 bytes (moto's server takes it).
MAX_NAME_BYTES = 1024


class Refusing:
    """The real store object, but it refuses what S3 refuses and moto takes
    (a name over 1,024 bytes, prefix included) and the objects of the
    `refused` threads; every GET is counted with its bytes."""

    def __init__(self, store: Any, refused: set[str]) -> None:
        self.inner = store
        self.refused = refused  # shared by both faces' wrappers
        self.gets = 0
        self.bytes = 0
        self.puts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _refuses(self, key: str) -> bool:
        if len(f"{self.inner.prefix}/{key}".encode()) > MAX_NAME_BYTES:
            return True
        return any(key.startswith(segments_prefix(t)) for t in self.refused)

    def _refusal(self, key: str) -> TierUnavailable:
        return TierUnavailable(f"the archive could not store {key!r} (KeyTooLongError)", tier="archive")


class SyncRefusing(Refusing):
    def put(self, key: str, data: bytes) -> None:
        self.puts.append(key)
        if self._refuses(key):
            raise self._refusal(key)
        self.inner.put(key, data)

    def get(self, key: str) -> bytes | None:
        data = self.inner.get(key)
        self.gets += 1
        self.bytes += len(data or b"")
        return data


class AsyncRefusing(Refusing):
    async def put(self, key: str, data: bytes) -> None:
        self.puts.append(key)
        if self._refuses(key):
            raise self._refusal(key)
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes | None:
        data = await self.inner.get(key)
        self.gets += 1
        self.bytes += len(data or b"")
        return data


def refusing(saver: DurableSaver, refused: set[str]) -> SyncRefusing:
    """Both faces' archivers' stores wrapped (the replica ships on the sync
    one); the async face's archiver is made per event loop, so each is
    wrapped as it is made. Empty `refused` (the same set) to stop refusing."""
    sync = saver._archiver()
    sync.store = SyncRefusing(sync.store, refused)  # type: ignore[assignment]
    made = saver._aarchiver

    def wrapped() -> Any:
        archiver = made()
        if not isinstance(archiver.store, AsyncRefusing):
            archiver.store = AsyncRefusing(archiver.store, refused)
        return archiver

    saver._aarchiver = wrapped  # type: ignore[method-assign]
    return sync.store  # type: ignore[return-value]


# -- names ------------------------------------------------------------------------------------


def test_every_id_the_saver_accepts_makes_names_within_the_object_stores_limit() -> None:
    prefix = "p" * MAX_PREFIX_BYTES
    for thread_id in ["", "t1", "é" * 200, "a" * 400, "a" * 401, LONG, LONGEST, "🙂" * 256]:
        name = f"{prefix}/{segments_prefix(thread_id)}{segment_name(1e12, 'f' * 12)}"
        assert len(name.encode()) <= 1024, (len(thread_id.encode()), len(name.encode()))
    # Ids whose names fit before keep them: an archive written before reads as it did.
    for thread_id in ["t1", "a" * 400, "é" * 200]:
        assert thread_folder(thread_id) == base64.b32encode(thread_id.encode()).decode().rstrip("=").lower()
    assert len(thread_folder("a" * 400)) == MAX_FOLDER
    # Two long ids with the same start are two folders.
    assert thread_folder(LONG + "a") != thread_folder(LONG + "b")
    with pytest.raises(ConfigError, match="prefix"):
        parse_archive_url("s3://bucket/" + "p" * (MAX_PREFIX_BYTES + 1))


@pytest.mark.parametrize("face", FACES)
def test_a_thread_with_a_long_id_is_archived_and_holds_no_other_thread_back(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    with make_saver(FULL, archive=archive_url, archive_lag=3600.0) as saver:
        # The long one first: the pass meets it before the others.
        run(saver, LONG, LONGEST, "short-1", "short-2")
        refusing(saver, set())  # names S3 would refuse are refused
        left = on(face, saver, "drain_archive")
        assert left is not None and left.caught_up and left.reachable and not left.failing
        store = ArchiveStore(archive_url)
        for thread_id in (LONG, LONGEST, "short-1", "short-2"):
            assert store.keys(segments_prefix(thread_id)), thread_id
        lag = on(face, saver, "lag").archive
        assert lag is not None and lag.reachable and lag.threads == 0
        report = on(face, saver, "archive_idle", 0.0)
        assert sorted(report.archived) == sorted([LONG, LONGEST, "short-1", "short-2"])
        # Listings name it too: a restore of every thread finds it.
        assert on(face, saver, "archived_threads") == sorted([LONG, LONGEST, "short-1", "short-2"])
        assert saver._archiver().archived_thread_ids() == sorted([LONG, LONGEST, "short-1", "short-2"])
        # And it comes back whole on its next read.
        graph = loop_graph(2).compile(checkpointer=saver)
        assert graph.get_state(cfg(LONG)).values["n"] == 2
        assert saver.archive_restores == 1


# -- one thread's failure is that thread's ----------------------------------------------------


@pytest.mark.parametrize("face", FACES)
def test_a_thread_the_object_store_refuses_is_reported_and_the_others_ship(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    calls: list[TierCall] = []
    with make_saver(FULL, archive=archive_url, archive_lag=3600.0, metrics=calls.append) as saver:
        run(saver, "refused", "a", "b", "c")
        refused = {"refused"}
        refusing(saver, refused)
        left = on(face, saver, "drain_archive")
        assert left is not None
        store = ArchiveStore(archive_url)
        for thread_id in ("a", "b", "c"):
            assert store.keys(segments_prefix(thread_id)), thread_id
        assert not store.keys(segments_prefix("refused"))
        # Still behind on that one thread, with the object store answering.
        assert left.threads == 1 and left.reachable and left.failing == ("refused",)
        assert "KeyTooLongError" in left.failing_error
        lag = on(face, saver, "lag").archive
        assert lag is not None and lag.reachable and lag.failing == ("refused",)
        health = on(face, saver, "health")
        assert health.archive is not None and health.archive.reachable and health.archive.failing == ("refused",)
        # The hooks see an error of that ship, not the store down.
        ships = [c for c in calls if c.tier == "archive" and c.op == "ship"]
        assert [c.outcome for c in ships].count("error") == 1 and "unavailable" not in [c.outcome for c in ships]
        # Archiving idle threads goes on with the others.
        report = on(face, saver, "archive_idle", 0.0)
        assert sorted(report.archived) == ["a", "b", "c"]
        (kept,) = [t for t in report.threads if t.thread_id == "refused"]
        assert kept.skipped.startswith("archive refused it")
        assert [c.outcome for c in calls if c.op == "archive_thread"].count("error") == 1
        # Once the store takes it, it ships and is no longer reported.
        refused.clear()
        left = on(face, saver, "drain_archive")
        assert left is not None and left.caught_up and not left.failing
        assert store.keys(segments_prefix("refused"))


def test_a_refused_thread_is_retried_with_backoff_not_every_pass(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url, archive_lag=3600.0) as saver:
        run(saver, "refused", "a")
        store = refusing(saver, {"refused"})
        replica = saver._runtime.archive_replica
        assert replica is not None
        replica.run_pass()
        tried = [k for k in store.puts if k.startswith(segments_prefix("refused"))]
        assert len(tried) == 1
        run(saver, "a")  # more to ship for the other thread
        for _ in range(3):
            replica.run_pass()  # background passes within the backoff: not tried again
        assert len([k for k in store.puts if k.startswith(segments_prefix("refused"))]) == 1
        assert replica.lag().failing == ("refused",)
        assert replica.lag().threads == 1  # "a" shipped meanwhile
        saver.drain_archive()  # a drain tries it now
        assert len([k for k in store.puts if k.startswith(segments_prefix("refused"))]) == 2


@pytest.mark.parametrize("face", FACES)
def test_an_object_store_that_is_down_is_still_reported_unreachable(
    make_saver: SaverFactory, archive_url: str, s3_env: str, monkeypatch: pytest.MonkeyPatch, face: str
) -> None:
    from tests.test_archive import store_behind_a_proxy

    with store_behind_a_proxy(s3_env, monkeypatch, "down") as (proxy, url):
        with make_saver(FULL, archive=url, archive_lag=3600.0) as saver:
            run(saver, "a", "b")
            assert saver.drain_archive() is not None
            run(saver, "a", "b")
            proxy.cut()
            try:
                left = on(face, saver, "drain_archive", 30.0)
                assert left is not None and not left.reachable and not left.failing and left.threads == 2
                with pytest.raises(TierUnavailable) as raised:
                    on(face, saver, "archive_idle", 0.0)
                assert raised.value.tier == "archive"
            finally:
                proxy.restore()
            left = on(face, saver, "drain_archive")
            assert left is not None and left.caught_up and left.reachable


def test_doctor_in_another_process_reports_the_refused_thread(
    make_saver: SaverFactory,
    archive_url: str,
    postgres_url: str,
    redis_prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with make_saver(FULL, archive=archive_url, archive_lag=3600.0) as saver:
        run(saver, "refused", "a")
        refusing(saver, {"refused"})
        saver.drain_archive()
    # make_saver's tiers (the same fixtures' database and prefix).
    flags = [
        "--sqlite", str(tmp_path / "local.sqlite"), "--redis", REDIS_URL, "--redis-key-prefix", redis_prefix,
        "--postgres", postgres_url, "--archive", archive_url,
    ]  # fmt: skip
    code = cli.main(["doctor", *flags])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FINDINGS
    assert "1 thread(s) not shipped while the object store answers" in out and "'refused'" in out
    assert "KeyTooLongError" in out
    code = cli.main(["doctor", *flags, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["report"]["archive"]["failing"] == ["refused"]
    assert doc["report"]["archive"]["reachable"] is True


# -- what a pass reads ------------------------------------------------------------------------


def _pass_cost(saver: DurableSaver, store: SyncRefusing) -> tuple[int, int]:
    before = store.gets, store.bytes
    left = saver.drain_archive()
    assert left is not None and left.caught_up
    return store.gets - before[0], store.bytes - before[1]


def test_a_pass_reads_what_is_new_not_the_history_of_many_threads(make_saver: SaverFactory, archive_url: str) -> None:
    threads = [f"rr-{i}" for i in range(80)]
    with make_saver(FULL, archive=archive_url, archive_lag=3600.0) as saver:
        graph = loop_graph(1).compile(checkpointer=saver)
        store = refusing(saver, set())
        costs = []
        for _ in range(4):
            for thread_id in threads:  # every thread written in turn, one pass after each round
                graph.invoke({"messages": ["m"], "n": 0}, cfg(thread_id))
            costs.append(_pass_cost(saver, store)[0])
        # Each thread's own segments are never read back: what is new is in the hot tiers.
        assert costs[-1] <= costs[1], costs
        assert costs[-1] <= len(threads) // 8, costs


def test_a_pass_never_reads_a_large_thread_whole_again(make_saver: SaverFactory, archive_url: str) -> None:
    # Random text: what zlib cannot shrink, as most values with some entropy.
    big = base64.b64encode(os.urandom(450 * 1024)).decode()
    with make_saver(FULL, archive=archive_url, archive_lag=3600.0) as saver:
        graph = loop_graph(1).compile(checkpointer=saver)
        store = refusing(saver, set())
        read = []
        for i in range(8):  # ~5 MB of history after 8 passes: over the memo's old 4 MB per thread
            graph.invoke({"messages": [big[i:] + big[:i]], "n": 0}, cfg("big"))
            read.append(_pass_cost(saver, store)[1])
        assert max(read[2:]) < len(big), read
