"""The replicator: a background thread that catches the shared tiers up.

Whatever a shared tier is owed (`backlog.py`: it was down, or the saver
writes behind) is shipped by `journal_async.AsyncJournal.catch_up`. This
thread runs it whenever a write leaves something owed (`kick`), and every
`interval` seconds while anything is still owed, so a tier that comes back
is caught up within a backoff of its breaker. It works for the saver's
runtime (`CatchesUp`, ``faces/runtime.py``), on the sync face, whichever
face wrote: one thread, no event loop to outlive.

`drain` is the same work done in the caller's thread against a deadline:
``close()`` uses it, and so does the SIGTERM handler (`shutdown.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from ..errors import ConfigError, TierUnavailable
from ..model.backlog import Lag
from .tasks import BackgroundTask

logger = logging.getLogger("langgraph_durable")

# How often a pass runs while something is owed (a tier that is down costs
# nothing then: its breaker refuses at once).
DEFAULT_INTERVAL_S = 0.5
# With write-behind, every write kicks the replicator. Passes that close
# together would each ship a record or two, one round trip per tier each,
# and take the interpreter from the runs meanwhile; a pass at most every
# this many seconds ships a thread's records in one transaction per tier
# instead (`journal_async.GROUP`).
WRITE_BEHIND_GAP_S = 0.25


class CatchesUp(Protocol):
    """What the replicator works for (a saver's runtime)."""

    def replicate(self, background: bool = False) -> int:
        """One pass over what is owed; `background`: the replicator's own,
        which may leave some records to whoever ships them anyway."""
        ...

    def shared_lag(self) -> Lag:
        """What the shared tiers are still owed."""
        ...


class Replicator(BackgroundTask):
    """Runs `host.replicate` in the background while `host.shared_lag` says
    something is owed."""

    thread_name = "langgraph-durable-replicator"
    restartable = True  # a later `kick` starts a new thread

    def __init__(
        self,
        host: CatchesUp,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        gap: float = 0.0,
    ) -> None:
        super().__init__()
        self._host = host
        self.interval = interval
        self.gap = gap  # the least time between the starts of two background passes
        self._wake = threading.Event()
        self._urgent = threading.Event()  # a pass is wanted now, gap or not
        # One pass at a time, background or drain.
        self._pass_lock = threading.Lock()
        self.passes = 0

    def kick(self, *, now: bool = False) -> None:
        """Something is owed: run a pass soon (starting the thread if needed);
        with `now`, without waiting for the `gap` since the last pass (a run
        ended and its thread is handed on once shipped)."""
        if self.stopping:
            return
        self.start()  # in a forked child too, which has no replicator thread yet
        if now:
            self._urgent.set()
        self._wake.set()

    def _run(self) -> None:
        owed = True
        failed: Exception | None = None
        started = 0.0
        while not self._stopping.is_set():
            self._wake.wait(self.interval if owed else None)
            wait = self.gap - (time.monotonic() - started)
            if wait > 0:
                self._urgent.wait(wait)
            if self._stopping.is_set():
                return
            self._urgent.clear()
            self._wake.clear()
            started = time.monotonic()
            try:
                self._pass(background=True)
                owed = not self._host.shared_lag().caught_up
            except Exception as exc:  # keep running: the next pass retries
                _pass_failed("replicator", exc, failed)
                failed = exc
                owed = True
            else:
                failed = None

    def _pass(self, *, background: bool = False) -> int:
        """One pass; `background`: this thread's, which may leave some
        records to whoever ships them anyway (see `Runtime.replicate`)."""
        with self._pass_lock:
            self.passes += 1
            return self._host.replicate(background)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """No pass runs meanwhile (deleting or pruning: a record loaded by a
        pass must not be shipped after it was deleted)."""
        with self._pass_lock:
            yield

    @contextlib.asynccontextmanager
    async def aexclusive(self) -> AsyncIterator[None]:
        """`exclusive` for the event loop (the lock is taken in a worker thread)."""
        await asyncio.to_thread(self._pass_lock.acquire)
        try:
            yield
        finally:
            self._pass_lock.release()

    def drain(self, timeout: float | None) -> Lag:
        """Ship what is owed until nothing is or `timeout` seconds passed
        (None: one pass); returns what is still owed."""
        deadline = time.monotonic() + (timeout or 0.0)
        failed: Exception | None = None
        while True:
            try:
                self._pass()
            except ConfigError as exc:
                # A definite configuration error (a database that does not
                # exist, a wrong password): no later pass can do better, so
                # the drain ends now, not when its time is up.
                logger.warning("drain stopped: %s", exc)
                return self._host.shared_lag()
            except Exception as exc:
                _pass_failed("drain", exc, failed)
                failed = exc
            lag = self._host.shared_lag()
            if lag.caught_up or time.monotonic() >= deadline:
                return lag
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def _interrupt(self) -> None:
        self._urgent.set()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (a later `kick` starts a new one)."""
        super().stop(timeout)
        self._urgent.clear()


def _pass_failed(which: str, exc: Exception, before: Exception | None) -> None:
    """Log a failed pass once, not once per pass: a tier that is down was
    logged as such when it went down (and is again when it is back), so a
    pass it fails is not; another failure is logged when its reason changes."""
    if isinstance(exc, TierUnavailable):
        logger.debug("%s pass failed: %s", which, exc)
    elif before is None or type(before) is not type(exc) or str(before) != str(exc):
        logger.warning("%s pass failed: %s", which, exc)
