# WARNING: this file is generated from langgraph_durable/tiers/protocol_async.py; edit that file and run tools/async_to_sync.py. DO NOT EDIT.
"""What the rooms call on a tier, split by capability.

A tier implements the capabilities its role needs (`roles.Role`): records
and settings (`Records`), the quarantine (`Quarantine`), the
side-effect ledger (`LedgerStore`) and writer leases (`Leases`).
The local, hot and record roles need all four (`Tier`); a tier for
another role can implement fewer. Each tier module checks statically that
it conforms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..model.lease import Fence, Lease
from ..model.records import BlobRow, CheckpointRow, Row, WriteRow
from ..model.roles import Role
from .base import BlobKey, Head, QuarantinedRecord, ThreadRecords


class Records(Protocol):
    """Checkpoints, their blobs and pending writes, deletion marks and
    store-wide settings: what every tier holds."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> Role: ...

    def setup(self) -> None: ...

    def close(self) -> None: ...

    def write_checkpoint(self, row: CheckpointRow, blobs: Sequence[BlobRow], *, fence: Fence | None = None) -> Any:
        """Store a checkpoint and its new blobs atomically (checkpoint upserts).
        With a `fence`, only if the thread's lease still matches it, checked
        and renewed in the same transaction; else `LeaseLost`, nothing stored."""

    def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        """Store blobs, replacing any copy under the same key (read-repair)."""

    def write_writes(self, rows: Sequence[WriteRow], upsert: bool, *, fence: Fence | None = None) -> Any:
        """Store pending writes: replace on `upsert`, else insert-or-ignore.
        `fence` as for `write_checkpoint`."""

    def write_batch(
        self,
        checkpoints: Sequence[tuple[CheckpointRow, Sequence[BlobRow]]],
        writes: Sequence[WriteRow],
        *,
        fence: Fence | None = None,
    ) -> Any:
        """Store several checkpoints (each with its new blobs) and pending
        writes (insert-or-ignore) of one thread in one transaction: what
        catch-up ships of a thread at once. `fence` as for `write_checkpoint`:
        everything or nothing."""

    def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None: ...

    def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]: ...

    def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]: ...

    def head(self, thread_id: str, ns: str) -> Head:
        """The newest checkpoint of (thread, ns), the thread's deletion
        marker and the newest checkpoint's row and pending writes, in one
        round trip."""

    def list_page(
        self, thread_id: str, ns: str, before: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[WriteRow]]:
        """The newest `limit` checkpoints of (thread, ns) older than `before`
        (if given), newest first, and their pending writes, in one round trip:
        a page of history, as `list_checkpoints` then `read_writes` give it."""

    def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        """Newest first. `filter` may be applied loosely (the chain re-checks
        it exactly); `limit` is only passed when there is no filter."""

    def thread_ids(self) -> list[str]: ...

    def thread_records(self, thread_id: str) -> ThreadRecords: ...

    def delete_thread(self, thread_id: str) -> None: ...

    def delete_for_runs(self, run_ids: Sequence[str], retain: Sequence[tuple[str, str, str]] = ()) -> None:
        """Delete these runs' checkpoints and writes, except (thread, ns, id) in `retain`."""

    def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None: ...

    def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        """Delete the thread's checkpoints and writes except `keep` (ns, id),
        and its blobs except `keep_blobs` (ns, channel, version)."""

    def read_meta(self, key: str) -> str | None: ...

    def write_meta(self, key: str, value: str | None) -> None: ...

    def create_meta(self, key: str, value: str) -> str:
        """Set a store-wide setting unless one is set; the value that holds."""
        ...

    def mark_gone(self, thread_id: str, checkpoints: Sequence[tuple[str, str]]) -> None:
        """Record that these (ns, checkpoint id) were deleted."""

    def gone(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> set[str]:
        """Which of these checkpoint ids were recorded as deleted."""

    def mark_deleted(self, thread_id: str, marker: str | None) -> None:
        """Record that the thread's checkpoints up to `marker` were deleted (None clears it)."""


class Quarantine(Protocol):
    """Copies that failed verification, kept out of every read path."""

    def quarantine(
        self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes, fields: bytes = b""
    ) -> None:
        """Keep a copy (and its row's `fields`, to restore it) out of every read path."""

    def remove_copy(self, kind: str, row: Row) -> None:
        """Delete this exact copy from the live table (not another one under its key)."""

    def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]: ...

    def drop_quarantined(self, ids: Sequence[str]) -> None: ...


class LedgerStore(Protocol):
    """The side-effect ledger (ledger.py): one sealed entry per key and thread."""

    def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        """Store (replace) one ledger entry."""

    def swap_ledger(self, thread_id: str, key: str, old: bytes | None, new: bytes) -> None:
        """Replace one ledger entry only if it still holds `old` (None: only if absent)."""

    def read_ledger(self, thread_id: str) -> dict[str, bytes]: ...


class Leases(Protocol):
    """Writer leases (lease.py): taken on the most authoritative tier that
    answers (`roles.Roles.lease_candidates`)."""

    def read_lease(self, thread_id: str) -> tuple[Lease | None, float]:
        """The thread's lease record (None if it never had one) and the
        tier's clock now, in seconds since the epoch."""

    def swap_lease(self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float) -> Lease | None:
        """Atomically replace the lease record, if it still equals `expected`
        (or is still absent), by (`holder`, `token`) expiring `ttl` seconds
        from the tier's now. The new record, or None if it had changed."""

    def keep_lease(self, thread_id: str, holder: str, token: int, ttl: float) -> bool:
        """Make the lease expire `ttl` seconds from the tier's now, if it is
        still `holder`'s with `token` and was not released (``lease_linger``:
        an ended run's lease kept a while). Whether it was."""

    def renew_leases(self, holder: str, leases: Sequence[tuple[str, int]], ttl: float) -> set[str]:
        """`keep_lease` for many (thread id, token) pairs at once, in as few
        round trips as the tier allows (the hand-off listener renews the
        leases it keeps). The thread ids whose lease was renewed."""

    def release_lease(self, thread_id: str, holder: str, token: int | None) -> None:
        """Clear the holder (keeping the token), if the lease is `holder`'s
        (with `token`, unless None)."""

    def ask_hand_off(self, thread_id: str, holder: str) -> None:
        """Ask `holder`, wherever it runs, to give back the lease of
        `thread_id` it keeps after a run (``lease_linger``, `handoff.py`):
        a message on `holder`'s own channel (`lease.hand_off_channel`),
        heard by its listener. Nothing is stored; nothing happens if no one
        hears."""


class Tier(Records, Quarantine, LedgerStore, Leases, Protocol):
    """Everything: what a tier in the local, hot or record role implements.
    Redis and Postgres implement it (their sync twins implement the
    generated `Tier`); the SQLite tier implements the sync `Tier`, and its
    async face runs those same methods on a worker thread."""
