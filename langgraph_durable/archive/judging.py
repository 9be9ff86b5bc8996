"""What a retention sweep would do to an archived thread, judged on its
archive copy rather than by bringing it back.

The copy is written into a private in-memory SQLite tier and the hot
tiers' own rule (`Maintenance.retain`, dry) is asked: the same checkpoints
are kept, with the same ancestors a DeltaChannel is rebuilt from, the same
waiting and unconfirmed threads left alone. Nothing here reaches a tier of
the store or the object store; the flag's summary (`summary`) spares even
that read for a thread no rule of the policy can touch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.maintenance import Maintenance
from ..engine.reads import TierReader
from ..errors import DurableError
from ..integrity import IntegrityPolicy
from ..model.codec import RecordCodec
from ..model.pins import without_pins
from ..model.records import BadRecord, CheckpointRow
from ..retention import Retained, RetentionPolicy, age_seconds
from ..tiers.sqlite.tier import SqliteTier
from .segments import ThreadImage

# How long a verdict of "nothing goes" on an archived thread's copy stands
# for a policy with `keep_for` (checkpoints it keeps age out of it): the
# copy is read again after this long, or `keep_for` if shorter.
SETTLED_FOR_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Judged:
    """What a sweep would do to one archived thread (`Retained`), and
    whether it is left as it is for non-resumable actions nobody confirmed.
    `flag` is the archived flag it was judged under (a sweep acts only while
    the thread still has that flag); `summary`, when its copy was read, what
    the flag should say of it."""

    retained: Retained
    unconfirmed: bool = False
    unreadable: bool = False  # a segment of its copy does not verify: left as it is
    flag: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None

    @property
    def acts(self) -> bool:
        """Whether the sweep changes the thread (deletes it, or some of it)."""
        left = self.unconfirmed or self.unreadable
        return not left and (self.retained.thread_deleted or self.retained.deleted > 0)


def settled(policy: RetentionPolicy, now: float) -> dict[str, Any]:
    """What the flag's summary keeps of a verdict of "nothing goes": the
    rules it was reached under, and when."""
    return {"keep_last": policy.keep_last, "keep_for": policy.keep_for, "at": now}


def valid(found: Any) -> dict[str, Any] | None:
    """The flag's summary if it is one this module wrote (a count, the most
    in one namespace, two times), else None: read as missing."""
    if not isinstance(found, Mapping):
        return None
    counts = [found.get("checkpoints"), found.get("most")]
    times = [found.get("newest_ts"), found.get("oldest_ts")]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return None
    if not all(isinstance(t, str) for t in times):
        return None
    return dict(found)


def summary(rows: Iterable[CheckpointRow], codec: RecordCodec) -> dict[str, Any]:
    """What the archived flag keeps of a thread's checkpoints so that a sweep
    can tell, without reading the archive, that no rule touches it: how
    many there are (and most in one namespace), the newest and the oldest
    time written."""
    by_ns: dict[str, list[CheckpointRow]] = {}
    for row in rows:
        by_ns.setdefault(row.checkpoint_ns, []).append(row)
    times = [t for ns_rows in by_ns.values() for t in (_ts(ns_rows, codec, newest=True), _ts(ns_rows, codec))]
    known = [t for t in times if t]
    return {
        "checkpoints": sum(len(r) for r in by_ns.values()),
        "most": max((len(r) for r in by_ns.values()), default=0),
        "newest_ts": max(known, default=""),
        "oldest_ts": min(known, default=""),
    }


def untouched(policy: RetentionPolicy, found: Any, now: float) -> bool:
    """Whether no rule of `policy` can remove anything from a thread the
    flag's `summary` describes: what it holds, or an earlier sweep's
    verdict under the same keep rules (`settled`), which stands for
    `SETTLED_FOR_S` (or `keep_for`, if shorter) when `keep_for` is set,
    else for good. False when the summary is missing (a thread an earlier
    version archived), is not one (`valid`), or a time in it is unknown."""
    found = valid(found)
    newest = age_seconds(found.get("newest_ts"), now) if found else None
    oldest = age_seconds(found.get("oldest_ts"), now) if found else None
    if found is None or newest is None or oldest is None:
        return False
    if policy.delete_idle_after is not None and newest >= policy.delete_idle_after:
        return False
    if policy.keeps_everything():
        return True
    if policy.keep_last is not None and found["most"] <= policy.keep_last:
        return True  # the newest N of every namespace are all it has
    if policy.keep_for is not None and oldest < policy.keep_for:
        return True
    verdict = found.get("settled")
    if not isinstance(verdict, Mapping) or not isinstance(verdict.get("at"), (int, float)):
        return False
    if (verdict.get("keep_last"), verdict.get("keep_for")) != (policy.keep_last, policy.keep_for):
        return False
    return policy.keep_for is None or 0 <= now - verdict["at"] < min(policy.keep_for, SETTLED_FOR_S)


def judged(image: ThreadImage, policy: RetentionPolicy, now: float, codec: RecordCodec) -> Judged:
    """What `Maintenance.retain` would do to the thread `image` holds, were
    it hot (dry: nothing is written anywhere but a private in-memory file)."""
    tier = SqliteTier(":memory:")
    try:
        tier.setup()
        checkpoints = sorted(image.checkpoints.values(), key=lambda r: (r.checkpoint_id, r.checkpoint_ns))
        if checkpoints:
            blobs = list(image.blobs.values())
            tier.write_batch(
                [(c, blobs if i == 0 else []) for i, c in enumerate(checkpoints)], list(image.writes.values())
            )
        for key, envelope in image.ledger.items():
            tier.write_ledger(image.thread_id, key, envelope)
        reads = TierReader([tier], codec, IntegrityPolicy())
        unconfirmed = any(e.escalated() for e in without_pins(reads.ledger(image.thread_id)).values())
        found = summary(checkpoints, codec)
        if unconfirmed:
            return Judged(Retained(image.thread_id, kept=len(checkpoints)), unconfirmed=True, summary=found)
        retained = Maintenance([tier], codec, reads).retain(
            image.thread_id, policy, now, unconfirmed=False, dry_run=True
        )
        return Judged(retained, summary=found)
    finally:
        tier.close()


def _ts(rows: list[CheckpointRow], codec: RecordCodec, *, newest: bool = False) -> str:
    """The time written of the newest (or oldest) checkpoint in `rows` that
    decodes; "" if none does."""
    for row in sorted(rows, key=lambda r: r.checkpoint_id, reverse=newest):
        try:
            checkpoint, _ = codec.decode_checkpoint(row)
        except (BadRecord, DurableError):  # one that does not decode is passed over
            continue
        return str(checkpoint.get("ts") or "")
    return ""
