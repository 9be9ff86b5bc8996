"""The archive replica: ships what the hot tiers hold to the archive,
behind the steps, within a bounded lag.

The saver notes every thread it writes or deletes (`note`, a dict insert
on the step path); a daemon thread wakes every ``archive_lag / 2`` seconds
and ships each noted thread as one segment (`archiver_async.AsyncArchiver.ship`,
on the sync face). A thread noted while a pass runs waits for the next one;
one whose ship fails (the object store down) stays noted, and the lag grows
until it is back. At start, and every `RESCAN_EVERY_S` after, the replica
also walks every thread of the system of record and ships those whose head
differs from their newest segment's (a listing and one head each, at most
`RESCAN_RATE` threads a second): what a process killed before its pass
wrote reaches the archive through whichever replica runs next.

The loss bound: a record acknowledged at time t is in the archive by
t + ``archive_lag`` while the object store answers (a pass every half of
it, plus the pass's own time), and by the next rescan after a crash.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..engine.tasks import BackgroundTask
from ..errors import DurableError, TierUnavailable
from ..model.backlog import ArchiveLag

logger = logging.getLogger("langgraph_durable")

DEFAULT_ARCHIVE_LAG_S = 60.0
RESCAN_EVERY_S = 3600.0
RESCAN_RATE = 50.0  # threads a second


class ArchiveReplica(BackgroundTask):
    """Calls `ship(thread_id)` for each noted thread, every `lag / 2` seconds."""

    thread_name = "langgraph-durable-archive"

    def __init__(
        self,
        ship: Callable[[str], int],
        *,
        lag: float = DEFAULT_ARCHIVE_LAG_S,
        rescan: Callable[[Callable[[str], None], Callable[[], bool]], int] | None = None,
    ) -> None:
        super().__init__()
        self._ship = ship
        self._rescan = rescan
        self.lag_bound = lag
        self._noted: dict[str, float] = {}  # thread id -> when first noted since its last ship
        self._notes = threading.Lock()
        self._wake = threading.Event()
        self._pass = threading.Lock()  # one pass at a time, background or flush
        self._reachable = True
        self.segments = 0
        self.records = 0
        self._last_rescan = 0.0

    # -- the step path -------------------------------------------------------------

    def note(self, thread_id: str) -> None:
        """The thread changed: ship it with the next pass."""
        with self._notes:
            self._noted.setdefault(thread_id, time.monotonic())
        if not self.running:
            self.start()

    def lag(self) -> ArchiveLag:
        with self._notes:
            oldest = min(self._noted.values(), default=None)
            threads = len(self._noted)
        seconds = time.monotonic() - oldest if oldest is not None else 0.0
        return ArchiveLag(threads, seconds, self._reachable, self.segments, self.records)

    # -- passes --------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> ArchiveLag:
        """Ship every noted thread now (a drain, ``close``); at most `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.run_pass(deadline)
        return self.lag()

    def run_pass(self, deadline: float | None = None) -> int:
        """Ship each thread noted before the pass started. The threads shipped."""
        with self._pass:
            with self._notes:
                batch = dict(self._noted)
            done = 0
            for thread_id, noted_at in sorted(batch.items(), key=lambda item: item[1]):
                if deadline is not None and time.monotonic() > deadline:
                    break
                if self.stopping and deadline is None:
                    break
                try:
                    shipped = self._ship(thread_id)
                except TierUnavailable as exc:
                    if self._reachable:
                        logger.warning("archive replica: %s; the noted threads stay noted until it answers", exc)
                    self._reachable = False
                    break
                except (DurableError, ValueError) as exc:
                    logger.warning(
                        "archive replica: thread %r not shipped (%s); trying again next pass", thread_id, exc
                    )
                    continue
                if not self._reachable:
                    logger.warning("archive replica: the object store answers again")
                self._reachable = True
                with self._notes:
                    if self._noted.get(thread_id) == noted_at:
                        del self._noted[thread_id]  # not noted again meanwhile
                if shipped:
                    self.segments += 1
                    self.records += shipped
                done += 1
            return done

    def _run(self) -> None:
        if self._rescan is not None:
            self._rescan_now()
        while not self._stopping.wait(self.lag_bound / 2):
            try:
                self.run_pass()
            except Exception:  # a pass never takes the process down
                logger.exception("archive replica pass failed; trying again in %.0f s", self.lag_bound / 2)
            if self._rescan is not None and time.monotonic() - self._last_rescan > RESCAN_EVERY_S:
                self._rescan_now()

    def _rescan_now(self) -> None:
        assert self._rescan is not None
        self._last_rescan = time.monotonic()

        def paced() -> bool:
            return not self._stopping.wait(1.0 / RESCAN_RATE)

        try:
            noted = self._rescan(self.note, paced)
        except Exception as exc:  # the tiers or the store down: the next rescan tries again
            logger.warning("archive replica: rescan failed (%s); trying again in %.0f s", exc, RESCAN_EVERY_S)
            return
        if noted:
            logger.info("archive replica: rescan found %d thread(s) the archive is behind on", noted)

    def _interrupt(self) -> None:
        self._wake.set()
