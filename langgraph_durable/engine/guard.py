# WARNING: this file is generated from langgraph_durable/engine/guard_async.py; edit that file and run tools/async_to_sync.py. DO NOT EDIT.
"""A tier behind its circuit breaker (`breaker.py`) and a timeout.

`GuardedTier` stands in for a tier everywhere the chain and its rooms
use one. Each call first asks the tier's breaker: while the tier is known to
be down the call raises `TierUnavailable` at once, without touching the
network; otherwise it goes through (the async face bounded by the call
timeout; the sync drivers bound themselves with their socket timeouts), and
its outcome is reported to the breaker. Only `TierUnavailable` (or no answer
in time) counts as a failure: a refused lease, a constraint or a bad record
means the tier answered.

With the saver's ``metrics=`` hooks (`metrics.py`), each call is timed here
and reported as a `metrics.TierCall`; without them the cost is one ``if``.

A tier that was down when the saver started is set up (schema, key check)
by the first call that reaches it, before that call runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import TierUnavailable
from ..metrics import MetricsSink, Outcome, TierCall, is_miss
from ..model.breaker import Breaker, overlap_pays
from .concurrency import Lock, with_timeout

logger = logging.getLogger("langgraph_durable")

# Calls that walk a whole thread or every thread (verify, repair, prune,
# schema migrations) may take long on a healthy tier: no call timeout.
_UNTIMED = frozenset(
    {"setup", "thread_ids", "thread_records", "list_quarantine", "prune", "delete_thread", "delete_for_runs"}
)
# Not calls to the tier.
_PASSTHROUGH = frozenset({"close", "name"})


def overlap(tiers: Any) -> bool:
    """Whether calls to these (guarded) tiers should overlap in the sync face
    (`breaker.overlap_pays`, from each tier's last answer time)."""
    return overlap_pays([t.breaker.latency if isinstance(t, GuardedTier) else None for t in tiers])


class GuardedTier:
    """`tier`, called through `breaker`. `admit(tier)` runs before the first
    call that reaches a tier not yet set up (its setup failed: it was down).
    `metrics` receives a `TierCall` for every call (probes included)."""

    def __init__(
        self,
        tier: Any,
        breaker: Breaker,
        *,
        timeout: float | None,
        admit: Callable[[Any], Any] | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.tier = tier
        self.name: str = tier.name
        self.breaker = breaker
        self.timeout = timeout
        self.admit = admit
        self.admitted = admit is None
        self.metrics = metrics
        # Concurrent first calls must set the tier up once (psycopg_pool's
        # open() is not reentrant).
        self._admit_lock = Lock()

    def __getattr__(self, method: str) -> Any:
        fn = getattr(self.tier, method)
        if method in _PASSTHROUGH or not callable(fn):
            return fn
        timeout = None if method in _UNTIMED else self.timeout

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(method, lambda: fn(*args, **kwargs), timeout, args)

        return call

    def call(self, what: str, run: Callable[[], Any], timeout: float | None, args: Sequence[Any] = ()) -> Any:
        """Run tier operation `what` (`run`; `args`, its positional arguments,
        tell `metrics.is_miss` what was asked)."""
        if not self.breaker.allow(time.monotonic()):
            if self.metrics is not None:
                self.metrics(TierCall(self.name, what, 0.0, "unavailable"))
            stats = self.breaker.stats(time.monotonic())
            raise TierUnavailable(
                f"{self.name} tier skipped: it is down ({stats.last_error}); next try in {stats.retry_in_s or 0:.1f} s",
                tier=self.name,
                skipped=True,
            )
        return self._timed(what, run, timeout, admit=what != "setup", args=args)

    def probe(self, run: Callable[[], Any]) -> Any:
        """Call the tier whatever its breaker says (`saver.health()`), and let
        the breaker learn the outcome: a tier that answers is closed again."""
        return self._timed("probe", run, self.timeout, admit=True)

    def _timed(
        self, op: str, run: Callable[[], Any], timeout: float | None, *, admit: bool, args: Sequence[Any] = ()
    ) -> Any:
        """Run one call, bounded by `timeout`, and tell the breaker (and the
        metrics hooks) how it went."""
        started = time.monotonic()
        # Stays None if the call is cancelled: not the tier's doing, not reported.
        outcome: Outcome | None = None
        try:
            if admit:
                self._admitted()
            result = with_timeout(run, timeout)
        except TierUnavailable as exc:
            outcome = "unavailable"
            self._failed(str(exc))
            raise
        except TimeoutError as exc:
            outcome = "unavailable"
            what = "a probe" if op == "probe" else op
            self._failed(f"no answer to {what} within {timeout} s")
            raise TierUnavailable(
                f"{self.name} tier did not answer {what} within {timeout} s; it is skipped for now", tier=self.name
            ) from exc
        except Exception:
            outcome = "error"
            self._answered(started)  # a refused lease, a bad record...: the tier did answer
            raise
        else:
            outcome = "ok"
            self._answered(started)
        finally:
            if self.metrics is not None and outcome is not None:
                if outcome == "ok" and is_miss(op, result, args):
                    outcome = "miss"
                self.metrics(TierCall(self.name, op, time.monotonic() - started, outcome))
        return result

    def _answered(self, started: float) -> None:
        now = time.monotonic()
        if self.breaker.succeeded(now, now - started):
            logger.warning("%s tier is reachable again", self.name)

    def _admitted(self) -> None:
        if self.admitted or self.admit is None:
            return
        with self._admit_lock:
            if not self.admitted:
                self.admit(self.tier)
                self.admitted = True

    def _failed(self, error: str) -> None:
        if self.breaker.failed(time.monotonic(), error):
            logger.warning("%s tier is down (%s): skipped, and caught up when it is back", self.name, error)

    def close(self) -> None:
        self.tier.close()
