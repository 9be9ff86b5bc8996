"""The archive replica: ships what the hot tiers hold to the archive,
behind the steps, within a bounded lag.

The saver notes every thread it writes or deletes (`note`, a dict insert
on the step path); a daemon thread wakes every ``archive_lag / 2`` seconds
and has the saver's runtime (`Ships`, ``faces/runtime.py``) ship each
noted thread as one segment (`archiver_async.AsyncArchiver.ship`, on the
sync face). A thread noted while a pass runs waits for the next one;
one whose ship fails stays noted. A failure is the thread's own (a name or
object the store refuses) when the store still answers a call that names
no thread (`ArchiveRefused`, the ship's caller tells them apart): the pass
goes on with the other threads and that one is tried again with backoff
(`RETRY_FIRST_S` doubling to `RETRY_MAX_S`), reported by `lag().failing`.
Otherwise the object store is down: the pass stops, and the
lag grows until it is back. At start, and every `RESCAN_EVERY_S` after, the replica
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
from typing import Protocol

from ..engine.tasks import BackgroundTask
from ..errors import DurableError, TierUnavailable
from ..model.backlog import ArchiveLag
from .reports import ArchiveRefused, NotYet

logger = logging.getLogger("langgraph_durable")

DEFAULT_ARCHIVE_LAG_S = 60.0
RESCAN_EVERY_S = 3600.0
RESCAN_RATE = 50.0  # threads a second
# A thread the object store refuses is tried again after this long, twice
# as long each time after: it never holds the others back, and a refusal
# that lasts costs one call per hour.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 3600.0
FAILING_SHOWN = 10  # thread ids `lag().failing` names at most
# Meta key (the system of record): the threads the replica could not ship
# while the object store answered, as JSON {thread id: error}, so that a
# `doctor` in another process reports them too.
FAILING_META = "archive_failing"


class Ships(Protocol):
    """What the replica works for (a saver's runtime), on its thread."""

    def ship_to_archive(self, thread_id: str) -> int:
        """Ship the thread as one segment; the records shipped. Raises
        `ArchiveRefused` when the store answers but refuses this thread,
        `NotYet` while the shared tiers are still owed part of it,
        `TierUnavailable` when the store is down."""

    def rescan_archive(self, note: Callable[[str], None], paced: Callable[[], bool]) -> int:
        """`note` every thread the archive is behind on (asking `paced()`
        before each, and stopping when it says False); how many."""

    def archive_failing(self, failing: dict[str, str]) -> None:
        """Record the threads the replica cannot ship ({thread id: error})
        where another process's `doctor` finds them."""


class ArchiveReplica(BackgroundTask):
    """Has `host` ship each noted thread, every `lag / 2` seconds, and
    rescan what the archive is behind on at start and every
    `RESCAN_EVERY_S`."""

    thread_name = "langgraph-durable-archive"

    def __init__(self, host: Ships, *, lag: float = DEFAULT_ARCHIVE_LAG_S) -> None:
        super().__init__()
        self._host = host
        self._failing: dict[str, tuple[float, float, str]] = {}  # thread id -> (retry at, backoff, error)
        self.lag_bound = lag
        self._noted: dict[str, float] = {}  # thread id -> when first noted since its last ship
        self._notes_seen: dict[str, int] = {}  # thread id -> notes so far: one noted during its ship stays
        self._notes = threading.Lock()
        self._wake = threading.Event()
        self._pass = threading.Lock()  # one pass at a time, background or flush
        self._reachable = True
        self.segments = 0
        self.records = 0
        self._last_rescan = 0.0
        self._last_pass = time.monotonic()
        self._rescanned = threading.Event()  # the first rescan is over (or failed)
        self._hurry = threading.Event()  # a flush waits for the rescan: no more pacing

    # -- the step path -------------------------------------------------------------

    def note(self, thread_id: str) -> None:
        """The thread changed: ship it with the next pass."""
        with self._notes:
            self._noted.setdefault(thread_id, time.monotonic())
            self._notes_seen[thread_id] = self._notes_seen.get(thread_id, 0) + 1
        if not self.running:
            self.start()

    def lag(self) -> ArchiveLag:
        with self._notes:
            oldest = min(self._noted.values(), default=None)
            threads = len(self._noted)
            failing = sorted(self._failing)
            error = max(self._failing.values(), default=(0.0, 0.0, ""))[2]
        seconds = time.monotonic() - oldest if oldest is not None else 0.0
        return ArchiveLag(
            threads, seconds, self._reachable, self.segments, self.records, tuple(failing[:FAILING_SHOWN]), error
        )

    # -- passes --------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> ArchiveLag:
        """Ship every noted thread now (a drain, ``close``); at most `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.running:
            # What a killed process left is noted by the first rescan: wait
            # for it (a small store's takes a moment), within the deadline.
            self._hurry.set()
            self._rescanned.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.run_pass(deadline, retry=True)
        return self.lag()

    def run_pass(self, deadline: float | None = None, *, retry: bool = False) -> int:
        """Ship each thread noted before the pass started. The threads shipped.
        `retry`: a thread the store refused is tried now, backing off or not."""
        with self._pass:
            with self._notes:
                batch = {t: (at, self._notes_seen[t]) for t, at in self._noted.items()}
            done = 0
            for thread_id, (_, seen) in sorted(batch.items(), key=lambda item: item[1][0]):
                if deadline is not None and time.monotonic() > deadline:
                    break
                if self.stopping and deadline is None:
                    break
                with self._notes:
                    failing = self._failing.get(thread_id)
                if failing is not None and not retry and time.monotonic() < failing[0]:
                    continue  # backing off (a drain tries it now)
                try:
                    shipped = self._host.ship_to_archive(thread_id)
                except NotYet:
                    continue  # the local journal still owes the shared tiers some of it
                except ArchiveRefused as exc:
                    self._refused(thread_id, exc)
                    continue  # this thread's failure: the others are shipped
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
                    recovered = self._failing.pop(thread_id, None) is not None
                if recovered:
                    logger.warning("archive replica: thread %r shipped again", thread_id)
                    self._tell_failing()
                with self._notes:
                    if self._notes_seen.get(thread_id) == seen:
                        # Not noted again while it shipped (what a write
                        # during the ship added waits for the next pass).
                        del self._noted[thread_id]
                        del self._notes_seen[thread_id]
                if shipped:
                    self.segments += 1
                    self.records += shipped
                done += 1
            return done

    def _refused(self, thread_id: str, exc: ArchiveRefused) -> None:
        with self._notes:
            _, backoff, _ = self._failing.get(thread_id, (0.0, 0.0, ""))
            backoff = min(RETRY_MAX_S, backoff * 2 if backoff else RETRY_FIRST_S)
            self._failing[thread_id] = (time.monotonic() + backoff, backoff, str(exc))
        logger.warning(
            "archive replica: thread %r not shipped while the object store answers (%s); the other threads "
            "are shipped, this one is tried again in %.0f s",
            thread_id,
            exc,
            backoff,
        )
        self._tell_failing()

    def _tell_failing(self) -> None:
        with self._notes:
            failing = {t: error for t, (_, _, error) in self._failing.items()}
        try:
            self._host.archive_failing(failing)
        except Exception as exc:  # a report never stops a pass
            logger.warning("archive replica: could not record the threads it cannot ship (%s)", exc)

    def _run(self) -> None:
        self._rescan_now()
        while not self._stopping.wait(max(0.0, self.lag_bound / 2 - (time.monotonic() - self._last_pass))):
            self._pass_now()
            if time.monotonic() - self._last_rescan > RESCAN_EVERY_S:
                self._rescan_now()

    def _pass_now(self) -> None:
        self._last_pass = time.monotonic()
        try:
            self.run_pass()
        except Exception:  # a pass never takes the process down
            logger.exception("archive replica pass failed; trying again in %.0f s", self.lag_bound / 2)

    def _rescan_now(self) -> None:
        self._last_rescan = time.monotonic()

        def paced() -> bool:
            if time.monotonic() - self._last_pass > self.lag_bound / 2:
                self._pass_now()  # a long rescan keeps the passes on time
            if self._hurry.is_set():
                return not self.stopping
            return not self._stopping.wait(1.0 / RESCAN_RATE)

        try:
            noted = self._host.rescan_archive(self.note, paced)
        except Exception as exc:  # the tiers or the store down: the next rescan tries again
            logger.warning("archive replica: rescan failed (%s); trying again in %.0f s", exc, RESCAN_EVERY_S)
            return
        finally:
            self._rescanned.set()
        if noted:
            logger.info("archive replica: rescan found %d thread(s) the archive is behind on", noted)

    def _interrupt(self) -> None:
        self._wake.set()
