"""What happens when a stored record fails verification. No I/O here.

A read collects every bad copy it meets as an `Incident`. When the read is
settled, each incident becomes a `CorruptionEvent`: the bad bytes are moved
to the tier's quarantine, the event is logged, counted and passed to the
`on_corruption` hook. `served_instead` says what the caller got instead:
an intact copy from another tier, an ancestor checkpoint, or nothing (the
read raised `CorruptCheckpoint`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

logger = logging.getLogger("langgraph_durable")

RecordKind = Literal["checkpoint", "blob", "write", "ledger"]
# What a read served in place of a bad copy (`served_from`).
Served = Literal["other_tier", "ancestor", "rerun", "nothing"]


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
    swallowed: a hook never breaks a read. An async hook is awaited in the
    async face; the sync face cannot wait for it and logs that it did not run."""

    def __call__(self, event: CorruptionEvent, /) -> Awaitable[None] | None: ...


OnCorruption = CorruptionHook | Literal["fallback", "raise"]


def served_from(served_instead: str) -> tuple[Served, str | None]:
    """What a `CorruptionEvent.served_instead` says was served, and from which
    tier: ``("other_tier", tier)`` for "intact copy from <tier>",
    ``("ancestor", None)`` for "ancestor checkpoint <id>", ``("rerun", None)``
    for "no write: task <id> runs again", else ``("nothing", None)`` (the
    read raised, or left the checkpoint out of a list). These are the
    phrases the reader (`reads_async.py`) writes."""
    if served_instead.startswith("intact copy from "):
        return "other_tier", served_instead.removeprefix("intact copy from ").strip() or None
    if served_instead.startswith("ancestor checkpoint"):
        return "ancestor", None
    if served_instead.startswith("no write"):
        return "rerun", None
    return "nothing", None


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


class CorruptionSink(Protocol):
    """What the policy needs of the saver's metrics (`metrics.MetricsSink`):
    somewhere to send each event. Named here so this room does not import
    the metrics room, which imports it."""

    def corruption(self, event: CorruptionEvent) -> None: ...


class IntegrityPolicy:
    """The `on_corruption` setting plus the running count of events; each
    event also goes to the saver's metrics hooks (`metrics.CorruptCopy`)."""

    def __init__(self, on_corruption: OnCorruption = "fallback", *, metrics: CorruptionSink | None = None) -> None:
        if on_corruption not in ("fallback", "raise") and not callable(on_corruption):
            from .errors import ConfigError

            raise ConfigError(
                f"Integrity(on_corruption=) must be 'fallback', 'raise' or a callable taking a CorruptionEvent, "
                f"not {on_corruption!r}."
            )
        self.raise_on_loss = on_corruption == "raise"
        self.hook: Callable[[CorruptionEvent], Any] | None = on_corruption if callable(on_corruption) else None
        self.count = 0
        self.metrics = metrics

    def report(self, event: CorruptionEvent) -> Awaitable[Any] | None:
        """Log, count and hand `event` to the hooks. An async `on_corruption`
        hook's awaitable is returned for the async face to await."""
        self.count += 1
        pending: Awaitable[Any] | None = None
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
                result = self.hook(event)
                if inspect.isawaitable(result):
                    pending = result
            except Exception:  # a hook never breaks a read
                logger.exception("on_corruption hook failed for %s", event)
        if self.metrics is not None:
            self.metrics.corruption(event)  # never raises: the sink logs a failing hook
        return pending


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
    # Intact records still sealed with an older key that `repair` left so,
    # because they do not decode as written (see `undecodable`): the store
    # keeps accepting that key while any is left.
    not_resealed: int = 0
    # Intact records (they verify) that this reader's serde cannot decode: an
    # encrypted store read without its serializer, a type the allowlist
    # blocks. Left exactly as they are; each says what it needs.
    undecodable: list[str] = field(default_factory=list)
    # With an archive (``archive=``): its segments verified and each thread's
    # hot copy held against it (`archive.reports.ArchiveCheck`).
    archive: Any = None


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
