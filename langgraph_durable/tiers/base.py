"""The surface every tier implements, and how tier failures are reported.

A tier stores rows (`records.py`) and answers simple questions about them;
it never decodes an envelope and makes no decision about other tiers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import TierUnavailable
from ..records import BlobRow, CheckpointRow, WriteRow

BlobKey = tuple[str, str]  # (channel, version)


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """A bad copy kept for forensics: never served, removed with its thread."""

    tier: str
    thread_id: str
    checkpoint_ns: str
    kind: str
    key: str
    reason: str
    record: bytes
    detected_at: float


@dataclass(frozen=True, slots=True)
class ThreadRecords:
    """Every live record of one thread in one tier."""

    checkpoints: list[CheckpointRow]
    blobs: list[BlobRow]
    writes: list[WriteRow]


class TierProtocol(Protocol):
    """What the chain calls on a tier (sync face; the async face awaits the same names)."""

    name: str

    def setup(self) -> None: ...
    def close(self) -> None: ...

    def write_checkpoint(self, row: CheckpointRow, blobs: Sequence[BlobRow]) -> None:
        """Store a checkpoint and its new blobs atomically (checkpoint upserts)."""

    def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        """Store blobs, replacing any copy under the same key (read-repair)."""

    def write_writes(self, rows: Sequence[WriteRow], upsert: bool) -> None:
        """Store pending writes: replace on `upsert`, else insert-or-ignore."""

    def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None: ...
    def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]: ...
    def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]: ...
    def latest_id(self, thread_id: str, ns: str) -> str | None: ...

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

    def quarantine(self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes) -> None:
        """Keep a bad copy for forensics, out of every read path."""

    def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]: ...
    def thread_ids(self) -> list[str]: ...
    def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        """Store (replace) one ledger entry."""

    def read_ledger(self, thread_id: str) -> dict[str, bytes]: ...
    def thread_records(self, thread_id: str) -> ThreadRecords: ...
    def delete_thread(self, thread_id: str) -> None: ...
    def delete_for_runs(self, run_ids: Sequence[str]) -> None: ...
    def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None: ...
    def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        """Delete the thread's checkpoints and writes except `keep` (ns, id),
        and its blobs except `keep_blobs` (ns, channel, version)."""


@contextmanager
def unavailable_on(tier: str, where: str, *errors: type[BaseException]) -> Iterator[None]:
    """Turn a driver's connection errors into `TierUnavailable`.

    Only the connection-level error types passed in are translated; anything
    else (a bug, a constraint violation) propagates unchanged.
    """
    try:
        yield
    except errors as exc:
        raise TierUnavailable(
            f"{tier} tier at {where} is unreachable ({type(exc).__name__}: {exc}). "
            f"Check that the server is running and the URL is right.",
            tier=tier,
        ) from exc


def redact(url: str) -> str:
    """A URL without its password, for error messages and logs."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
