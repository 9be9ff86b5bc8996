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

The guard has one method per method of the tier Protocols
(`protocol.Tier`, checked by mypy at the bottom of this file),
plus the local tier's own (journal, eviction, version), each a one-line
`_call` of the tier's method of the same name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import TierUnavailable
from ..metrics import MetricsSink, Outcome, TierCall, is_miss
from ..model.backlog import JournalEntry, Owed
from ..model.breaker import Breaker, overlap_pays
from ..model.lease import Fence, Lease
from ..model.records import BlobRow, CheckpointRow, Row, WriteRow
from ..model.roles import Role
from ..tiers.base import BlobKey, Head, QuarantinedRecord, ThreadRecords
from .concurrency import Abandoned, Lock, take_waited, with_timeout

logger = logging.getLogger("langgraph_durable")

# Calls that walk a whole thread or every thread (verify, repair, prune,
# schema migrations) may take long on a healthy tier: no call timeout.
_UNTIMED = frozenset(
    {"setup", "thread_ids", "thread_records", "list_quarantine", "prune", "delete_thread", "delete_for_runs"}
)
# Not calls to the tier: read (or, for `close`, called) as they are, without
# the breaker, the timeout or metrics.
_PASSTHROUGH = frozenset({"close", "name", "role"})

# The calls that change what a tier holds (the rest read it): counted apart
# while the tier is down, for the line logged when it is back.
_READS = "read_", "head", "list_", "thread_", "gone", "pending_journal", "journal_lag", "version", "probe"


def is_write(what: str) -> bool:
    """Whether tier call `what` writes (as opposed to reading)."""
    return not what.startswith(_READS)


def missed_read(tier: Any) -> None:
    """A read went without `tier` (a guarded tier that is down): counted,
    not logged (the tier's going down and coming back are)."""
    breaker = getattr(tier, "breaker", None)
    if isinstance(breaker, Breaker):
        breaker.missed(write=False)


def overlap(tiers: Any, *, lead: bool = False) -> bool:
    """Whether calls to these (guarded) tiers should overlap in the sync face
    (`breaker.overlap_pays`, from each tier's last answer time; `lead`: a
    `concurrency.Lead`)."""
    return overlap_pays([t.breaker.latency if isinstance(t, GuardedTier) else None for t in tiers], lead=lead)


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

    def call(self, what: str, run: Callable[[], Any], timeout: float | None, args: Sequence[Any] = ()) -> Any:
        """Run tier operation `what` (`run`; `args`, its positional arguments,
        tell `metrics.is_miss` what was asked)."""
        if not self.breaker.allow(time.monotonic()):
            if self.metrics is not None:
                self.metrics(TierCall(self.name, what, 0.0, "unavailable"))
            if what != "setup":
                self.breaker.missed(write=is_write(what))
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
        # Time the call spent waiting for another tier (`Lead`): not this tier's.
        take_waited()  # left by a call that did not come through here
        waited = 0.0
        # Stays None if the call is cancelled or abandoned: not the tier's
        # doing, not reported.
        outcome: Outcome | None = None
        try:
            if admit:
                self._admitted()
            result = with_timeout(run, timeout)
        except Abandoned:
            take_waited()
            raise
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
            waited = take_waited()
            self._answered(started + waited)  # a refused lease, a bad record...: the tier did answer
            raise
        else:
            outcome = "ok"
            waited = take_waited()
            self._answered(started + waited)
        finally:
            if self.metrics is not None and outcome is not None:
                if outcome == "ok" and is_miss(op, result, args):
                    outcome = "miss"
                self.metrics(TierCall(self.name, op, time.monotonic() - started - waited, outcome))
        return result

    def _answered(self, started: float) -> None:
        """The tier answered a call made at `started` (moved on by the time
        it spent waiting for another tier)."""
        now = time.monotonic()
        if self.breaker.succeeded(now, now - started):
            outage = self.breaker.last_outage
            logger.info("%s", outage.describe(self.name) if outage else f"{self.name} tier is back")

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

    # -- the tier's methods -----------------------------------------------------

    @property
    def role(self) -> Role:
        return self.tier.role

    def close(self) -> None:
        self.tier.close()

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The tier's `method`, through `call` (untimed if in `_UNTIMED`);
        the positional `args` go to the metrics' miss check."""
        fn = getattr(self.tier, method)
        timeout = None if method in _UNTIMED else self.timeout
        return self.call(method, lambda: fn(*args, **kwargs), timeout, args)

    # Records

    def setup(self) -> None:
        return self._call("setup")

    def write_checkpoint(
        self,
        row: CheckpointRow,
        blobs: Sequence[BlobRow],
        *,
        fence: Fence | None = None,
        journal: Owed | bool | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> Any:
        """`journal` and `before_commit`: the local tier only
        (`SqliteTier.write_checkpoint`); passed on only if given."""
        return self._call("write_checkpoint", row, blobs, fence=fence, **_local_only(journal, before_commit))

    def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        return self._call("write_blobs", blobs)

    def write_writes(
        self,
        rows: Sequence[WriteRow],
        upsert: bool,
        *,
        fence: Fence | None = None,
        journal: Owed | bool | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> Any:
        """`journal` and `before_commit`: as for `write_checkpoint`."""
        return self._call("write_writes", rows, upsert, fence=fence, **_local_only(journal, before_commit))

    def write_batch(
        self,
        checkpoints: Sequence[tuple[CheckpointRow, Sequence[BlobRow]]],
        writes: Sequence[WriteRow],
        *,
        fence: Fence | None = None,
    ) -> Any:
        return self._call("write_batch", checkpoints, writes, fence=fence)

    def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        return self._call("read_checkpoint", thread_id, ns, checkpoint_id)

    def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        return self._call("read_blobs", thread_id, ns, keys)

    def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        return self._call("read_writes", thread_id, ns, checkpoint_ids)

    def head(self, thread_id: str, ns: str) -> Head:
        return self._call("head", thread_id, ns)

    def list_page(
        self, thread_id: str, ns: str, before: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[WriteRow]]:
        return self._call("list_page", thread_id, ns, before, limit)

    def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        return self._call("list_checkpoints", thread_id, ns, checkpoint_id, before, filter, limit)

    def thread_ids(self) -> list[str]:
        return self._call("thread_ids")

    def thread_records(self, thread_id: str) -> ThreadRecords:
        return self._call("thread_records", thread_id)

    def delete_thread(self, thread_id: str) -> None:
        return self._call("delete_thread", thread_id)

    def delete_for_runs(self, run_ids: Sequence[str], retain: Sequence[tuple[str, str, str]] = ()) -> None:
        return self._call("delete_for_runs", run_ids, retain)

    def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        return self._call("delete_checkpoint", thread_id, ns, checkpoint_id)

    def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        return self._call("prune", thread_id, keep, keep_blobs)

    def read_meta(self, key: str) -> str | None:
        return self._call("read_meta", key)

    def write_meta(self, key: str, value: str | None) -> None:
        return self._call("write_meta", key, value)

    def create_meta(self, key: str, value: str) -> str:
        return self._call("create_meta", key, value)

    def mark_gone(self, thread_id: str, checkpoints: Sequence[tuple[str, str]]) -> None:
        return self._call("mark_gone", thread_id, checkpoints)

    def gone(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> set[str]:
        return self._call("gone", thread_id, ns, checkpoint_ids)

    def mark_deleted(self, thread_id: str, marker: str | None) -> None:
        return self._call("mark_deleted", thread_id, marker)

    # Quarantine

    def quarantine(
        self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes, fields: bytes = b""
    ) -> None:
        return self._call("quarantine", thread_id, ns, kind, key, reason, envelope, fields)

    def remove_copy(self, kind: str, row: Row) -> None:
        return self._call("remove_copy", kind, row)

    def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        return self._call("list_quarantine", thread_id)

    def drop_quarantined(self, ids: Sequence[str]) -> None:
        return self._call("drop_quarantined", ids)

    # LedgerStore

    def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        return self._call("write_ledger", thread_id, key, envelope)

    def swap_ledger(self, thread_id: str, key: str, old: bytes | None, new: bytes) -> None:
        return self._call("swap_ledger", thread_id, key, old, new)

    def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        return self._call("read_ledger", thread_id)

    # Leases

    def read_lease(self, thread_id: str) -> tuple[Lease | None, float]:
        return self._call("read_lease", thread_id)

    def swap_lease(self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float) -> Lease | None:
        return self._call("swap_lease", thread_id, expected, holder, token, ttl)

    def keep_lease(self, thread_id: str, holder: str, token: int, ttl: float) -> bool:
        return self._call("keep_lease", thread_id, holder, token, ttl)

    def renew_leases(self, holder: str, leases: Sequence[tuple[str, int]], ttl: float) -> set[str]:
        return self._call("renew_leases", holder, leases, ttl)

    def release_lease(self, thread_id: str, holder: str, token: int | None) -> None:
        return self._call("release_lease", thread_id, holder, token)

    def ask_hand_off(self, thread_id: str, holder: str) -> None:
        return self._call("ask_hand_off", thread_id, holder)

    # The local tier only (`SqliteTier`): its journal, eviction and version.

    def version(self) -> tuple[int, int]:
        return self._call("version")

    def journal_acked(self, seq: int | None, tiers: Sequence[str], *, everyone: Sequence[str] = ()) -> None:
        return self._call("journal_acked", seq, tiers, everyone=everyone)

    def journal_acked_many(self, acks: Sequence[tuple[int, Sequence[str]]], *, everyone: Sequence[str] = ()) -> None:
        return self._call("journal_acked_many", acks, everyone=everyone)

    def journal_drop(self, seq: int) -> None:
        return self._call("journal_drop", seq)

    def pending_journal(
        self, limit: int | None = None, after: int = 0, *, thread_id: str | None = None
    ) -> list[JournalEntry]:
        return self._call("pending_journal", limit, after, thread_id=thread_id)

    def journal_lag(self, shared: Sequence[str]) -> tuple[int, float | None, dict[str, int]]:
        return self._call("journal_lag", shared)

    def evict(self, protect: Collection[str] = (), *, force: bool = False) -> list[str]:
        return self._call("evict", protect, force=force)


def _local_only(journal: Owed | bool | None, before_commit: Callable[[], None] | None) -> dict[str, Any]:
    """``journal=`` and ``before_commit=`` for the local tier's writes, each
    left out when not given (the other tiers take no such argument)."""
    kwargs: dict[str, Any] = {}
    if journal is not None:
        kwargs["journal"] = journal
    if before_commit is not None:
        kwargs["before_commit"] = before_commit
    return kwargs


if TYPE_CHECKING:
    from ..tiers.protocol import Tier

    def _conforms(tier: GuardedTier) -> Tier:
        """mypy checks here that the guard stands in for a whole tier."""
        return tier
