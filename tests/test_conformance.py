"""langgraph-checkpoint-conformance, base and extended, for every tier
configuration, through the async face and (via an adapter) the sync face.

The suite only awaits a* methods. `SyncFace` answers them with the sync
methods, each called in a worker thread with no running event loop, the way
``graph.invoke`` calls them from a plain thread; `LoopGuard` records the
thread of every sync call and fails the case if any ran on the event loop's
thread."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, spec, validate
from langgraph.checkpoint.conformance.capabilities import Capability, DetectedCapabilities

from langgraph_durable import DurableSaver

from .conftest import CONFIGS

ALL_CAPABILITIES = {c.value for c in Capability}
# Counted from the installed suite (81 in 0.0.2 today), so an upgrade that
# adds cases is noticed rather than silently passing a stale number.
EXPECTED_CASES = sum(
    len(getattr(module, name))
    for module in vars(spec).values()
    if isinstance(module, ModuleType)
    for name in dir(module)
    if name.startswith("ALL_") and name.endswith("_TESTS")
)


# The sync methods an application calls from a plain thread (graph.invoke's
# thread or its executor's), and that SyncFace drives.
SYNC_METHODS = (
    "setup",
    "close",
    "get",
    "get_tuple",
    "list",
    "put",
    "put_writes",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
)


@dataclass
class SyncCall:
    method: str
    thread: int
    loop_running: bool


class LoopGuard:
    """Records the thread of every call (every step, for `list`) of a
    DurableSaver's sync methods, and whether an event loop was running in it.

    Installed on the instance, so it also sees a sync call the adapter did
    not route (the suite or the saver itself calling one), not just the
    adapter's own."""

    def __init__(self) -> None:
        self.calls: list[SyncCall] = []
        self._lock = threading.Lock()

    def _note(self, method: str) -> None:
        try:
            asyncio.get_running_loop()
            running = True
        except RuntimeError:
            running = False
        with self._lock:
            self.calls.append(SyncCall(method, threading.get_ident(), running))

    def install(self, saver: DurableSaver) -> DurableSaver:
        for name in SYNC_METHODS:
            original = getattr(saver, name)
            wrapper = self._stepped(name, original) if name == "list" else self._called(name, original)
            setattr(saver, name, functools.wraps(original)(wrapper))
        return saver

    def _called(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._note(name)
            return original(*args, **kwargs)

        return call

    def _stepped(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        # A generator does its work as it is stepped, not when it is made.
        def steps(*args: Any, **kwargs: Any) -> Iterator[Any]:
            items = original(*args, **kwargs)
            while True:
                self._note(name)
                try:
                    item = next(items)
                except StopIteration:
                    return
                yield item

        return steps

    def check(self, loop_thread: int) -> None:
        assert self.calls, "no sync call was recorded: the guard saw nothing"
        wrong = [c for c in self.calls if c.loop_running or c.thread == loop_thread]
        assert not wrong, f"{len(wrong)} of {len(self.calls)} sync calls ran on the event loop's thread: {wrong[:5]}"


class SyncFace(BaseCheckpointSaver[str]):
    """Routes the suite's a* calls to DurableSaver's *sync* methods, each run
    in a plain thread (no running event loop), as graph.invoke calls them.

    The conformance suite only calls the async face; this adapter puts the
    sync face through the same cases. It adds no behaviour of its own: a
    `list` is stepped to its end inside one worker thread (as an app's
    ``for`` loop would step it in its own), then handed over.
    """

    def __init__(self, inner: DurableSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: list(self.inner.list(config, **kwargs)))
        for item in items:
            yield item

    def list(self, config: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, **kwargs)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(functools.partial(self.inner.prune, thread_ids, strategy=strategy))

    def get_next_version(self, current: Any, channel: None) -> str:
        # Pure (no I/O, no saver state): the suite may call it where it likes.
        return self.inner.get_next_version(current, channel)


async def _run_suite(make_saver: Any, tiers: str, face: str, **options: Any) -> None:
    counter = iter(range(1000))
    guard = LoopGuard()

    @checkpointer_test(name=f"DurableSaver[{tiers}, {face}, {options}]")
    async def factory() -> AsyncIterator[BaseCheckpointSaver]:
        # A fresh local file per capability suite; shared tiers are shared,
        # as they would be between replicas. With SQLite alone each suite is
        # a store of its own, so it gets an archive prefix of its own: a
        # prefix belongs to one store, and a second one is refused.
        n = next(counter)
        own = {"archive": f"{options['archive']}-{n}"} if tiers == "sqlite" and "archive" in options else {}
        saver = make_saver(tiers, sqlite_name=f"suite-{n}.sqlite", **(options | own))
        if face == "async":
            await saver.asetup()
            yield saver
            await saver.aclose()
        else:
            guard.install(saver)
            await asyncio.to_thread(saver.setup)
            yield SyncFace(saver)
            await asyncio.to_thread(saver.close)

    report = await validate(factory)
    async with factory.create() as probe:
        detected = {c.value for c in DetectedCapabilities.from_instance(probe).detected}
    assert detected == ALL_CAPABILITIES, f"capabilities not detected: {ALL_CAPABILITIES - detected}"
    results = report.to_dict()
    failures = {
        cap: r["failures"]
        for cap, r in results.get("results", results).items()
        if isinstance(r, dict) and r.get("failures")
    }
    assert report.passed_all(), failures or results
    assert report.passed_all_base()
    ran = sum(r.tests_passed for r in report.results.values())
    assert ran == EXPECTED_CASES, f"expected all {EXPECTED_CASES} cases of the suite to pass, {ran} did"
    if face == "sync":
        guard.check(loop_thread=threading.get_ident())


@pytest.mark.parametrize("tiers", CONFIGS)
async def test_conformance_async_face(make_saver: Any, tiers: str) -> None:
    await _run_suite(make_saver, tiers, "async")


@pytest.mark.parametrize("tiers", CONFIGS)
async def test_conformance_sync_face(make_saver: Any, tiers: str) -> None:
    await _run_suite(make_saver, tiers, "sync")


# The write modes other than the default, on every tier (write="local" needs a
# local and a shared tier): what put returns before must not change what the
# saver then serves.
@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("write", ["all", "local"])
async def test_conformance_write_modes(make_saver: Any, write: str, face: str) -> None:
    await _run_suite(make_saver, "sqlite+redis+postgres", face, write=write)


@pytest.mark.parametrize("face", ["async", "sync"])
async def test_conformance_write_behind_without_redis(make_saver: Any, face: str) -> None:
    await _run_suite(make_saver, "sqlite+postgres", face, write="local")


# The bounds of running at scale: a size-bounded local cache (small enough to
# evict during the suite) and expiring Redis keys.
@pytest.mark.parametrize("face", ["async", "sync"])
async def test_conformance_bounded_tiers(make_saver: Any, face: str) -> None:
    await _run_suite(make_saver, "sqlite+redis+postgres", face, local_max_bytes=64 * 1024, redis_ttl=60)


# With an archive whose replica ships every 0.1 s while the suite runs (and
# every saver's close ships the rest): deletes, copies and prunes meet it.
@pytest.mark.s3
@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
async def test_conformance_with_an_archive(make_saver: Any, archive_url: str, tiers: str, face: str) -> None:
    await _run_suite(make_saver, tiers, face, archive=archive_url, archive_lag=0.2)


# Connections the application owns: a psycopg pool and a redis-py client of
# the face under test, made the way an app sharing them with a PostgresStore
# would (dict rows, no autocommit), given as postgres= and redis=.
@pytest.mark.parametrize("face", ["async", "sync"])
async def test_conformance_with_your_own_connections(make_saver: Any, postgres_url: str, face: str) -> None:
    import redis as redis_lib
    import redis.asyncio as aredis
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from .conftest import REDIS_URL

    if face == "async":
        apool = AsyncConnectionPool(postgres_url, kwargs={"row_factory": dict_row}, open=False)
        aclient = aredis.Redis.from_url(REDIS_URL)
        async with apool:
            await _run_suite(make_saver, "sqlite+redis+postgres", face, postgres=apool, redis=aclient)
            assert not apool.closed
            await aclient.ping()
        await aclient.aclose()
    else:
        with ConnectionPool(postgres_url, kwargs={"row_factory": dict_row}) as pool:
            client = redis_lib.Redis.from_url(REDIS_URL)
            await _run_suite(make_saver, "sqlite+redis+postgres", face, postgres=pool, redis=client)
            assert not pool.closed
            client.ping()
            client.close()
