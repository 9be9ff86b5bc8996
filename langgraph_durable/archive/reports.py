"""What the archive's operations report. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.records import BlobRow, CheckpointRow, WriteRow


class NotYet(Exception):
    """Internal: the thread cannot be shipped whole yet (the local journal
    still owes the shared tiers some of it); the replica keeps it noted."""


class ArchiveRefused(Exception):
    """Internal: the object store answers, but refused this thread's objects
    (a name or an object it will not take): the thread's failure, not the
    store's, so the others go on."""

    def __init__(self, thread_id: str, cause: Exception) -> None:
        super().__init__(str(cause))
        self.thread_id = thread_id


@dataclass
class HotCopy:
    """Every verified record of one thread that the asked tiers hold."""

    checkpoints: dict[tuple[str, str], CheckpointRow] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], BlobRow] = field(default_factory=dict)
    writes: dict[tuple[str, str, str, int], WriteRow] = field(default_factory=dict)
    ledger: dict[str, bytes] = field(default_factory=dict)
    deleted_through: str | None = None
    seen: set[tuple[str, str]] = field(default_factory=set)
    """(ns, checkpoint id) of every checkpoint some tier holds, intact or
    not: one held only as a bad copy is damaged, not deleted."""

    @property
    def records(self) -> int:
        return len(self.checkpoints) + len(self.blobs) + len(self.writes) + len(self.ledger)


@dataclass
class ArchiveOutcome:
    """What `archive_idle` did with one thread."""

    thread_id: str
    archived: bool = False
    records: int = 0
    skipped: str = ""  # why it was left in the hot tiers, if it was


@dataclass
class ArchiveReport:
    """`archive_idle` / ``langgraph-durable archive``: one line per thread looked at."""

    dry_run: bool
    threads: list[ArchiveOutcome] = field(default_factory=list)

    @property
    def archived(self) -> list[str]:
        return [t.thread_id for t in self.threads if t.archived]


@dataclass
class RestoreReport:
    """`restore` / ``langgraph-durable restore``."""

    threads: int = 0
    records: int = 0
    archived: int = 0  # threads left in the archive, marked in the hot tiers
    bad_segments: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    """Threads the archive holds that the hot tiers record as deleted since
    (the deletion had not reached the archive yet): left deleted."""
    unrecognised: list[str] = field(default_factory=list)
    """Objects in a thread's folder that are no segment this library writes: skipped."""
    conflicts: list[str] = field(default_factory=list)
    """Threads whose hot tiers hold another history on the same id than the
    archive copy (a saver without the archive started one): left as they
    are, never merged into one thread with two roots."""


@dataclass
class ArchiveCheck:
    """What `verify` found in the archive (``archive=``)."""

    threads: int = 0
    segments: int = 0
    bad_segments: list[str] = field(default_factory=list)
    """Segments that do not verify: damaged, planted, or sealed by another store."""
    rolled_back: list[str] = field(default_factory=list)
    """Threads whose hot tiers lack checkpoints newer than those they hold
    that the archive holds, with no deletion recorded: every hot tier lost
    them, or was restored from an older backup (or ``restore --until``).
    With a key (the store's own or the user's) the archive's segments
    cannot be forged, so its word stands."""
    behind: int = 0
    """Threads whose archive copy lacks records the hot tiers hold: the
    replica's lag (a finding only if it lasts)."""
    signed: bool = True
    """Whether the segments are sealed with a key (else they are only checksummed)."""

    @property
    def ok(self) -> bool:
        return not self.bad_segments and not self.rolled_back
