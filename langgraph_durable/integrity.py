"""What happens when a stored record fails verification. No I/O here.

A read collects every bad copy it meets as an `Incident`. When the read is
settled, each incident becomes a `CorruptionEvent`: the bad bytes are moved
to the tier's quarantine, the event is logged, counted and passed to the
`on_corruption` hook. `served_instead` says what the caller got instead:
an intact copy from another tier, an ancestor checkpoint, or nothing (the
read raised `CorruptCheckpoint`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

logger = logging.getLogger("langgraph_durable")

RecordKind = Literal["checkpoint", "blob", "write", "ledger"]


@dataclass(frozen=True, slots=True)
class CorruptionEvent:
    """One bad copy of one record in one tier.

    Attributes:
        tier: ``"sqlite"``, ``"redis"`` or ``"postgres"``.
        kind: ``"checkpoint"``, ``"blob"`` (a channel value) or ``"write"``.
        thread_id, checkpoint_ns: where the record belongs.
        key: the record's key within the thread, human readable.
        reason: why the copy was refused (``checksum mismatch``, ...).
        served_instead: what the read returned in its place.
    """

    tier: str
    kind: RecordKind
    thread_id: str
    checkpoint_ns: str
    key: str
    reason: str
    served_instead: str


class CorruptionHook(Protocol):
    """Called once per `CorruptionEvent`. Exceptions it raises are logged and
    swallowed: a hook never breaks a read."""

    def __call__(self, event: CorruptionEvent, /) -> None: ...


OnCorruption = CorruptionHook | Literal["fallback", "raise"]


@dataclass(slots=True)
class Incident:
    """A bad copy met during one read, not yet reported. `tier` is None for a
    record missing from every tier (nothing to quarantine)."""

    tier: Any
    kind: RecordKind
    thread_id: str
    checkpoint_ns: str
    key: str
    reason: str
    envelope: bytes
    served: str | None = field(default=None)
    row: Any = None  # the bad copy's row, so the quarantine can put it back
    # Every tier holds these very bytes: no bit flip does that, a different
    # signing key does. Reported, never quarantined or withdrawn.
    keep: bool = False


class Unusable(Exception):
    """Internal: a checkpoint that cannot be assembled from intact records."""

    def __init__(self, thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None, what: str) -> None:
        super().__init__(what)
        self.thread_id = thread_id
        self.ns = ns
        self.checkpoint_id = checkpoint_id
        self.parent_id = parent_id
        self.what = what
        self.keep = False  # served around, but not withdrawn (see Incident.keep)


class IntegrityPolicy:
    """The `on_corruption` setting plus the running count of events."""

    def __init__(self, on_corruption: OnCorruption = "fallback") -> None:
        if on_corruption not in ("fallback", "raise") and not callable(on_corruption):
            from .errors import ConfigError

            raise ConfigError(
                f"on_corruption= must be 'fallback', 'raise' or a callable taking a CorruptionEvent, "
                f"not {on_corruption!r}."
            )
        self.raise_on_loss = on_corruption == "raise"
        self.hook: Callable[[CorruptionEvent], None] | None = on_corruption if callable(on_corruption) else None
        self.count = 0

    def report(self, event: CorruptionEvent) -> None:
        self.count += 1
        logger.error(
            "corrupt %s in %s: thread %r ns %r %s: %s; served instead: %s",
            event.kind,
            event.tier,
            event.thread_id,
            event.checkpoint_ns,
            event.key,
            event.reason,
            event.served_instead,
        )
        if self.hook is not None:
            try:
                self.hook(event)
            except Exception:  # a hook never breaks a read
                logger.exception("on_corruption hook failed for %s", event)


@dataclass(frozen=True, slots=True)
class BadCopy:
    """One bad copy found by `verify` / `repair`."""

    tier: str
    kind: RecordKind
    thread_id: str
    checkpoint_ns: str
    key: str
    reason: str

    def __str__(self) -> str:
        ns = f" ns {self.checkpoint_ns!r}" if self.checkpoint_ns else ""
        return f"{self.tier}: thread {self.thread_id!r}{ns} {self.key}: {self.reason}"


@dataclass(slots=True)
class ScanReport:
    """What `verify` or `repair` found and did."""

    threads: int = 0
    copies_checked: int = 0
    bad: list[BadCopy] = field(default_factory=list)
    restored: list[BadCopy] = field(default_factory=list)
    unrestorable: list[BadCopy] = field(default_factory=list)
    # Records a shared tier lacks while another tier holds them intact: a lost
    # copy (or a tier rolled back), not a deletion. `repair` copies them back.
    missing: list[BadCopy] = field(default_factory=list)
    # Intact records still sealed with an older signing key; `repair` re-seals them.
    resealed: int = 0


def record_label(kind: str, row: Any) -> str:
    """The human-readable key used in events, reports and the quarantine."""
    if kind == "checkpoint":
        return f"checkpoint {row.checkpoint_id}"
    if kind == "blob":
        return f"channel {row.channel} @ {row.version}"
    return f"write {row.task_id}/{row.idx} of checkpoint {row.checkpoint_id}"


def record_identity(kind: str, row: Any) -> tuple[Any, ...]:
    """What makes two tiers' copies the same record."""
    if kind == "checkpoint":
        return (kind, row.checkpoint_ns, row.checkpoint_id)
    if kind == "blob":
        return (kind, row.checkpoint_ns, row.channel, row.version)
    return (kind, row.checkpoint_ns, row.checkpoint_id, row.task_id, row.idx)
