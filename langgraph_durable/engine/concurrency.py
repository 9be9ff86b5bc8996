"""Running one operation on several tiers at once, in both faces.

The chain's async source calls `arun_all`; its generated sync twin calls
`run_all`. Both return each call's result or the exception it raised, in
order, so the caller decides what a partial failure means.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from .tasks import BackgroundTask

T = TypeVar("T")

# The chain's async source creates an `ALock`; its sync twin a `Lock`.
ALock = asyncio.Lock
Lock = threading.Lock

# Shared-tier writes are network waits; a handful of threads overlaps them.
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="langgraph-durable-io")


async def arun_all(calls: Sequence[Callable[[], Awaitable[T]]], *, overlap: bool = True) -> list[T | BaseException]:
    # `overlap` is for the sync twin: tasks on one event loop always overlap.
    if len(calls) == 1:
        try:
            return [await calls[0]()]
        except Exception as exc:  # reported to the caller, who decides
            return [exc]
    return await asyncio.gather(*(c() for c in calls), return_exceptions=True)


def run_all(calls: Sequence[Callable[[], T]], *, overlap: bool = True) -> list[T | BaseException]:
    """Each call's result or exception. With `overlap`, the calls run at
    once (all but the first on worker threads); without, one after another
    (`breaker.overlap_pays` says which is faster)."""

    def capture(call: Callable[[], T]) -> Any:
        try:
            return call()
        except Exception as exc:  # reported to the caller, who decides
            return exc

    if len(calls) <= 1 or not overlap:
        return [capture(c) for c in calls]
    # The first call runs on this thread; the rest overlap with it.
    futures = [_POOL.submit(capture, c) for c in calls[1:]]
    first = capture(calls[0])
    return [first, *(f.result() for f in futures)]


# The sync face overlaps a fenced write to the lease's tier (a network round
# trip) with the local write that follows it (`Lead`). The local transaction
# waits at its commit for the lease's tier this long at most; then it rolls
# back, releases the local file and waits without it, so a stalled shared tier
# never holds the local file (and every read of it) for longer.
LEAD_WAIT_S = 0.02

_waited = threading.local()


class Abandoned(Exception):
    """A local write rolled back before its commit on purpose (`Lead`): the
    lease's tier refused it, failed, or is slow. Not the local tier's doing:
    its breaker and metrics do not count it."""


class Lead:
    """The lease's tier's fenced write, started on a worker thread so that the
    local write runs meanwhile, in a transaction that commits only once this
    write succeeded (`before_commit`): a write the fence refuses still reaches
    no tier, and the local file holds nothing the lease's tier does not."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._future: Future[Any] = _POOL.submit(call)

    def before_commit(self) -> None:
        """Called by the local write inside its transaction, just before the
        commit: returns once the lease's tier took the write; raises
        `Abandoned` (the transaction rolls back) if it failed, or if it has
        not answered within `LEAD_WAIT_S`. The time spent here is not the
        local tier's (`take_waited`)."""
        started = time.monotonic()
        try:
            wait([self._future], timeout=LEAD_WAIT_S, return_when=FIRST_EXCEPTION)
        finally:
            _waited.seconds = getattr(_waited, "seconds", 0.0) + time.monotonic() - started
        if not self._future.done():
            raise Abandoned("the lease's tier has not answered yet")
        if self._future.exception() is not None:
            raise Abandoned("the lease's tier did not take the write")

    def result(self) -> Any:
        """The lease's tier's answer, waited for: its result, or what it raised."""
        return self._future.result()


def take_waited() -> float:
    """Seconds this thread's calls spent in `Lead.before_commit` since the
    last call of this (a tier guard takes them out of the local tier's time)."""
    seconds = getattr(_waited, "seconds", 0.0)
    _waited.seconds = 0.0
    return float(seconds)


# A user's callable (validator, hook, pace) may be sync or async. The async
# face awaits what an async one returns; the sync face refuses it (the async
# sources spell the two with an `if True:  # ASYNC` block).
async def amaybe_await(value: Any) -> Any:
    """A user callable's result, awaited if the callable was async."""
    return await value if inspect.isawaitable(value) else value


def refuse_awaitable(value: object, what: str = "validator") -> None:
    """The sync face cannot wait for an async callable: say so instead of hanging."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        from ..errors import ConfigError

        if what == "validator":
            raise ConfigError(
                "an async validator was called from a sync run (graph.invoke / stream): "
                "use graph.ainvoke / astream, or make the validator a plain function."
            )
        raise ConfigError(f"an async {what} was given to a sync method: call its async twin, or pass a plain function.")


# Waiting in both faces (the async source calls `asleep`; its sync twin `sleep`).
async def asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


# A call bounded by a timeout (`TimeoutError`). The sync twin runs the call
# as it is: the sync drivers bound every call with their socket timeouts.
async def awith_timeout(call: Callable[[], Awaitable[T]], seconds: float | None) -> T:
    if seconds is None:
        return await call()
    async with asyncio.timeout(seconds):  # no task per call, unlike wait_for
        return await call()


def with_timeout(call: Callable[[], T], seconds: float | None) -> T:
    return call()


# Work handed over from inside the garbage collector (a run's end seen by a
# weakref callback, lease.py). Such a callback may interrupt any code of its
# thread, also code holding a lock of `concurrent.futures` (a thread being
# started by an executor's submit), so it must not submit to an executor:
# SimpleQueue.put is reentrant, and one worker thread runs what it is given.
_DEFERRED: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()


class _DeferredWorker(BackgroundTask):
    """The one thread (per process) that runs what `defer` was given."""

    thread_name = "langgraph-durable-deferred"

    def _run(self) -> None:
        while True:
            fn, args = _DEFERRED.get()
            with contextlib.suppress(Exception):  # the callee logs what it could not do
                fn(*args)

    def is_this_thread(self) -> bool:
        return self._thread is threading.current_thread()


_deferred_worker = _DeferredWorker()


def ensure_deferred_worker() -> None:
    """Start the worker for `defer` (call it outside the garbage collector;
    in a forked child it starts anew)."""
    _deferred_worker.start()


def defer(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` soon on the worker thread; safe inside the garbage collector."""
    _DEFERRED.put((fn, args))


def wait_deferred(timeout: float) -> bool:
    """Wait until what `defer` was given so far has run, for at most
    `timeout` seconds (a saver closing lets a run's release finish first).
    True at once on the worker itself, or when there is no worker."""
    if not _deferred_worker.running or _deferred_worker.is_this_thread():
        return True
    done = threading.Event()
    _DEFERRED.put((done.set, ()))
    return done.wait(timeout)
