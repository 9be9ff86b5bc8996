"""What `saver.health()` reports: each tier's reachability, latency,
breaker state and backlog. ``langgraph-durable doctor`` prints it."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .backlog import ArchiveLag, Lag
from .breaker import BreakerStats


@dataclass(frozen=True, slots=True)
class TierHealth:
    """One tier, as `saver.health()` reports it."""

    name: str
    reachable: bool
    latency_ms: float | None  # of the probe just made (None if it failed)
    breaker: BreakerStats
    owed: int  # records this tier has not acknowledged yet (0 for the local tier)
    error: str | None
    role: str = ""  # its `Role`'s value: "local", "hot" or "record"


@dataclass(frozen=True, slots=True)
class Health:
    """Every tier's health, and what the shared tiers are owed (`Lag`)."""

    tiers: list[TierHealth]
    lag: Lag
    local_write_failures: int  # local writes that failed (disk full, unwritable) since start
    archive: ArchiveLag | None = None  # the archive (``archive=``): probed, with its lag
    archive_error: str | None = None
    # The full fingerprint of the store's own key (none with signing_key=):
    # keep it with your secrets, `archive_key_fingerprint=` needs it to
    # rebuild the store from its archive.
    store_key_fingerprint: str | None = None

    @property
    def ok(self) -> bool:
        return all(t.reachable for t in self.tiers) and (self.archive is None or self.archive.reachable)


class Counters:
    """What went wrong since the saver started, counted across both faces."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.local_write_failures = 0

    def local_write_failed(self) -> None:
        with self._lock:
            self.local_write_failures += 1
