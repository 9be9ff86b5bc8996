"""Circuit breakers: when to stop calling a tier that is down, and when to
try it again. Decisions only, no I/O.

One `Breaker` per tier, shared by the saver's sync and async faces (and its
replicator). A tier call that raises `TierUnavailable` (it could not connect,
or did not answer within its timeout) opens the breaker: for a while every
call to that tier is refused at once, without touching the network, so a
dead or hung server costs one timeout, not one per write. When the backoff
has passed, the breaker is *half-open*: exactly one call goes through as a
probe; its success closes the breaker, its failure opens it again for twice
as long (up to `BACKOFF_MAX_S`, with jitter so replicas do not probe in
lockstep).

A caller about to fail because no shared tier answers may also ask for one
*early* probe (`allow_early`) before the backoff has passed: a tier that
came back meanwhile then takes the call. One such probe per opening (other
such callers may join it while it is out), so a tier that stays down or
stalls still costs the runs one failed call each at most, not one per call.

Everything takes the time as an argument, so it is tested without servers
and without sleeping (like `lease.py`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

State = Literal["closed", "open", "half_open"]

# The first pause after a failure, and the longest. A tier that blinked is
# tried again within a second; one that stays down is probed every half minute.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
# A probe that has not reported back after this long is taken as lost (its
# caller was cancelled), and another call may probe.
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class BreakerStats:
    """What `saver.health()` shows of one tier's breaker."""

    state: State
    failures: int  # consecutive failed calls (0 when closed)
    last_latency_s: float | None  # of the last call that answered
    last_error: str | None  # of the last call that did not
    retry_in_s: float | None  # until the next probe may go (open only)


@dataclass(frozen=True)
class Outage:
    """One outage of a tier, from its breaker opening to its closing:
    `seconds` long, with `reads` and `writes` that went without it."""

    seconds: float
    reads: int
    writes: int

    def describe(self, tier: str) -> str:
        return (
            f"{tier} tier is back after {self.seconds:.1f} s; meanwhile {self.reads} read(s) and {self.writes} "
            "write(s) went without it (what it is owed is shipped to it now)"
        )


class Breaker:
    """The circuit breaker of one tier. Thread-safe."""

    def __init__(
        self,
        tier: str,
        *,
        backoff_first: float = BACKOFF_FIRST_S,
        backoff_max: float = BACKOFF_MAX_S,
        probe_timeout: float = PROBE_TIMEOUT_S,
        jitter: random.Random | None = None,
    ) -> None:
        self.tier = tier
        self.backoff_first = backoff_first
        self.backoff_max = backoff_max
        self.probe_timeout = probe_timeout
        self._random = jitter or random.Random()
        self._lock = threading.Lock()
        self._state: State = "closed"
        self._failures = 0
        self._retry_at = 0.0
        self._probe_since: float | None = None
        self._early_used = False  # the early probe of this opening was made
        self._latency: float | None = None
        self._typical: float | None = None  # moving average of the answer times
        self._error: str | None = None
        # The outage under way (since the breaker opened): when it began and
        # the calls that went without the tier meanwhile (see `missed`).
        self._down_since: float | None = None
        self._missed_reads = 0
        self._missed_writes = 0
        self._last_outage: Outage | None = None

    @property
    def state(self) -> State:
        return self._state

    def available(self, now: float) -> bool:
        """Would a call be let through now? (Asking does not start a probe.)"""
        with self._lock:
            return self._state == "closed" or (self._state == "open" and now >= self._retry_at)

    def allow(self, now: float) -> bool:
        """May a call go to the tier now? In the half-open state only one
        call (the probe) is let through until it reports."""
        with self._lock:
            if self._state == "closed":
                return True
            if self._state == "open":
                if now < self._retry_at:
                    return False
                self._state = "half_open"
                self._probe_since = now
                return True
            # half-open: a probe is out
            if self._probe_since is not None and now - self._probe_since >= self.probe_timeout:
                self._probe_since = now
                return True
            return False

    def allow_early(self, now: float) -> bool:
        """May one call go now as a probe, though the backoff has not passed?
        Yes once per opening of the breaker (`failed` after `succeeded`),
        for a caller that has no other tier left (see the module); and while
        a probe is out, since such a caller would fail otherwise (the
        replicator's thread may be probing while a run sets up). No while
        the breaker is closed."""
        with self._lock:
            if self._state == "half_open":
                return True
            if self._state != "open" or self._early_used:
                return False
            self._early_used = True
            self._state = "half_open"
            self._probe_since = now
            return True

    def succeeded(self, now: float, latency: float) -> bool:
        """A call answered. True if this closed the breaker (the tier is back)."""
        with self._lock:
            reopened = self._state != "closed"
            if reopened:
                self._last_outage = Outage(
                    now - (self._down_since if self._down_since is not None else now),
                    self._missed_reads,
                    self._missed_writes,
                )
                self._down_since = None
                self._missed_reads = self._missed_writes = 0
            self._state = "closed"
            self._early_used = False
            self._failures = 0
            self._probe_since = None
            self._latency = latency
            self._typical = (
                latency if self._typical is None else (1 - LATENCY_WEIGHT) * self._typical + LATENCY_WEIGHT * latency
            )
            return reopened

    def answers_within(self, seconds: float) -> bool:
        """Closed, and its last call answered within `seconds` (or none has
        answered yet): the tier answers as usual."""
        with self._lock:
            return self._state == "closed" and (self._latency is None or self._latency <= seconds)

    def failed(self, now: float, error: str) -> bool:
        """A call could not reach the tier. True if this opened the breaker."""
        with self._lock:
            opened = self._state == "closed"
            if opened:
                self._down_since = now
                self._missed_reads = self._missed_writes = 0
            self._failures += 1
            self._error = error
            pause = min(self.backoff_max, self.backoff_first * 2 ** (self._failures - 1))
            pause *= 0.8 + 0.4 * self._random.random()
            self._state = "open"
            self._retry_at = now + pause
            self._probe_since = None
            return opened

    def missed(self, *, write: bool) -> None:
        """A call went without this tier while it was down (skipped by the
        breaker, or answered by the other tiers): counted for the line
        logged when the tier is back (`last_outage`)."""
        with self._lock:
            if write:
                self._missed_writes += 1
            else:
                self._missed_reads += 1

    @property
    def last_outage(self) -> Outage | None:
        """The outage `succeeded` just ended (None before the first)."""
        return self._last_outage

    @property
    def latency(self) -> float | None:
        """Seconds a call that answers typically takes: a moving average, so
        that one slow call does not flip decisions made on it (None before
        the first answer)."""
        return self._typical

    def stats(self, now: float) -> BreakerStats:
        with self._lock:
            return BreakerStats(
                state=self._state,
                failures=self._failures,
                last_latency_s=self._latency,
                last_error=self._error,
                retry_in_s=max(0.0, self._retry_at - now) if self._state == "open" else None,
            )


# Weight of the newest answer time in `Breaker.latency`'s moving average.
LATENCY_WEIGHT = 0.2
# What handing a call to a worker thread costs the sync face: the wake-up and
# the GIL changing hands, about 0.1-0.3 ms on a busy 2-core machine, as long
# as a whole loopback round trip to Redis.
THREAD_HOP_S = 0.0002
# What overlapping a run's local write with its lease's tier's write costs
# (`concurrency.Lead`): besides the hand-off, the local transaction and the
# worker's statement compete for the interpreter with LangGraph's loop. On 2
# cores, with both writes taking 0.2-0.3 ms (Postgres on loopback), a step
# took 0.1-0.2 ms longer with the overlap than without, and at a threshold of
# 0.5 ms a fifth of the writes still overlapped (a local write's time counts
# its wait for the step's other write): it pays only when the shorter of the
# two writes takes longer than this.
LEAD_HOP_S = 0.001


def overlap_pays(latencies: Sequence[float | None], *, lead: bool = False) -> bool:
    """Whether the sync face should run calls to these tiers at once, on
    worker threads, rather than one after another: only if what overlapping
    saves (all but the slowest call) outweighs the hand-offs (`THREAD_HOP_S`
    each; `LEAD_HOP_S` for a `Lead`). Calls whose time is not known yet
    overlap."""
    if len(latencies) < 2 or any(t is None for t in latencies):
        return True
    known = [t for t in latencies if t is not None]
    return sum(known) - max(known) > (LEAD_HOP_S if lead else THREAD_HOP_S) * (len(known) - 1)


class Breakers:
    """The breakers of one saver's tiers, by tier name, made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, Breaker] = {}

    def __getitem__(self, name: str) -> Breaker:
        with self._lock:
            if name not in self._by_name:
                self._by_name[name] = Breaker(name)
            return self._by_name[name]
