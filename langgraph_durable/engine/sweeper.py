"""Retention sweeps in the background (`DurableSaver(retention=RetentionPolicy(..., every=...))`).

A daemon thread applies the saver's `RetentionPolicy` (through the saver's
own `apply_retention`, on its sync face: `Retains`) every `every` seconds,
one thread of the store at a time, at most `rate` threads a second, so a
sweep over a large store never takes the tiers from the application. A
sweep that fails (a tier down) is logged and tried again next time; `stop`
ends a sweep between two threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from .tasks import BackgroundTask

logger = logging.getLogger("langgraph_durable")


class _Stopped(Exception):
    pass


class Retains(Protocol):
    """What the sweep works for: a saver, whose retention policy it applies."""

    def apply_retention(self, *, pace: Callable[[], Any] | None = None) -> Any:
        """Apply the saver's policy to every thread; `pace()` runs before each."""


class RetentionSweeper(BackgroundTask):
    """Calls `saver.apply_retention(pace=...)` every `every` seconds on a
    daemon thread; `pace` waits 1/`rate` seconds (between two threads of
    the store)."""

    thread_name = "langgraph-durable-retention"

    def __init__(self, saver: Retains, *, every: float, rate: float | None) -> None:
        super().__init__()
        self.saver = saver
        self.every = every
        self.rate = rate
        self.sweeps = 0

    def _pace(self) -> None:
        if self._stopping.wait(1.0 / self.rate if self.rate else 0.0):
            raise _Stopped

    def _run(self) -> None:
        while not self._stopping.wait(self.every):
            try:
                report = self.saver.apply_retention(pace=self._pace)
            except _Stopped:
                return
            except Exception:  # a sweep never takes the process down; the next one tries again
                logger.exception("retention sweep failed; trying again in %.0f s", self.every)
                continue
            self.sweeps += 1
            logger.info("retention sweep: %s", report)
