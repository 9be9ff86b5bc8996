"""What the write and read paths decide, apart from the I/O that carries it out.

Each function takes what was asked or read (and the configured roles and
write mode) and returns what to do; `chain_async.py` and `reads_async.py`
only do the I/O around them, as `breaker.py` and `lease.decide` are used.
No I/O here, no clock: the property tests call these functions directly.

The write path (a step's `put` or `put_writes`):

1. `write_order`: the lease's tier first, alone and fenced (a write the
   fence refuses reaches no tier), then the local journal naming the shared
   tiers still owed, then those shared tiers at once;
2. `acknowledged_behind`: a run's write that the lease's tier and the local
   journal hold is acknowledged there, and the replicator ships the rest;
3. `worth_probing`, `write_fails`: the acknowledgement rule, deciding when
   a write that some tiers refused must fail (and be withdrawn from every
   tier that took it) and when the failed tiers are owed it instead.

The read path:

1. `latest_attempts`: from every tier's head, which checkpoint ids to try,
   newest first, and which of them the heads already answer;
2. `choose_copy`: of one record's copies, the one to serve (the farthest
   intact copy: the system of record's when copies verify equally) and the
   tiers to repair;
3. `fall_back`: a checkpoint that cannot be read intact either raises, or is
   withdrawn and its newest intact ancestor tried instead.

The resume path (a run's first read, `resume_async.py`):

1. unconfirmed non-resumable actions in the ledger reject the run;
2. `resume_step`: what the validators' first decision on a candidate
   checkpoint means: resume from it, rewind to an earlier one (read, then
   validated in turn) or reject.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from ..errors import ConfigError, TierUnavailable
from ..validation import Reject, Rewind
from .backlog import WriteMode
from .roles import HasRole, Roles

T = TypeVar("T", bound=HasRole)
H = TypeVar("H")
C = TypeVar("C")


# -- writes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOrder(Generic[T]):
    """Which tiers a write reaches, in order: `first` (the lease's tier,
    fenced, alone), then the local journal (unless `first` is the local
    tier), then `rest` at once."""

    first: T | None
    journal: bool
    rest: tuple[T, ...]

    def owed(self) -> tuple[str, ...]:
        """The tiers the local journal entry names as still owed."""
        return tuple(t.name for t in self.rest)


def write_order(roles: Roles[T], lease_tier: str | None) -> WriteOrder[T]:
    """The order of a write under a lease on `lease_tier` (None: unfenced)."""
    first = roles.named(lease_tier) if lease_tier is not None else None
    rest = tuple(t for t in roles.shared if t is not first)
    return WriteOrder(first, roles.local is not None and roles.local is not first, rest)


def acknowledged_behind(*, fenced: bool, behind: bool, journaled: bool, ships_behind: bool) -> bool:
    """A run's write (`behind`: its lease is given back only after what its
    thread owes has shipped) that its lease's tier took, fenced, and that the
    local journal holds, owing it to the rest: acknowledged now, with
    ``write="shared"`` and a tier shipped behind (`Roles.ships_behind`)."""
    return fenced and behind and journaled and ships_behind


def worth_probing(write: WriteMode, *, failed: bool, took_shared: bool) -> bool:
    """No shared tier acknowledged a write that may succeed on one: probe the
    shared tiers their breakers skipped, once, before the write fails."""
    return failed and write != "all" and not took_shared


def write_fails(write: WriteMode, *, took_shared: bool, errors: Sequence[BaseException]) -> bool:
    """The acknowledgement rule. A write that some tiers refused fails (and
    is withdrawn from every tier that took it) when ``write="all"``, when no
    shared tier took it, or when a tier refused it for a reason other than
    being down (a fence, bad input); otherwise it succeeds and the tiers that
    were down are owed it."""
    return bool(errors) and (
        write == "all" or not took_shared or any(not isinstance(e, TierUnavailable) for e in errors)
    )


# -- reads -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt(Generic[T, H]):
    """Try checkpoint `checkpoint_id`; `heads`, when given, are every tier's
    answer for it already (no need to ask again)."""

    checkpoint_id: str
    heads: Sequence[tuple[T, H]] | None = None


def latest_attempts(
    heads: Sequence[tuple[T, H]],
    ids: Sequence[str | None],
    cache: T | None,
    only_cache_behind: Sequence[tuple[T, H]] | None,
) -> list[Attempt[T, H]]:
    """The checkpoints a latest-state read tries, in order, from every
    reachable tier's head (`ids[i]` is the id `heads[i]` names): the newest
    first. When every tier names it, or only the local cache is behind
    (`only_cache_behind`, the heads with the cache's standing for a tier
    that lacks it), those heads answer it; otherwise every named id is asked
    again, newest first: a tier that lost the newest (or was rolled back)
    is not believed over the others."""
    candidates = sorted({cid for cid in ids if cid}, reverse=True)
    if not candidates:
        return []
    if all(cid == candidates[0] for cid in ids):
        return [Attempt(candidates[0], heads)]
    if cache is not None and only_cache_behind is not None:
        return [Attempt(candidates[0], only_cache_behind)]
    return [Attempt(cid) for cid in candidates]


@dataclass(frozen=True)
class Intact(Generic[C]):
    """A copy that verified and decoded (to `value`)."""

    value: C


@dataclass(frozen=True)
class Bad:
    """A copy that failed verification (`error` says why)."""

    error: BaseException


@dataclass(frozen=True)
class Undecodable:
    """A copy that verified but that this process cannot decode (`error`):
    neither served nor damage; another tier's copy may decode."""

    error: BaseException


Verdict = Intact[C] | Bad | Undecodable | None  # None: the tier lacks it


@dataclass
class CopyChoice(Generic[T, C]):
    """What to make of one record's copies: serve `served` (its tier and
    value); the tiers in `lacking` lack it and those in `bad` hold a bad
    copy; `undecodable` is the first reason an intact copy did not decode."""

    served: tuple[T, C] | None = None
    lacking: list[T] = field(default_factory=list)
    bad: list[tuple[T, BaseException]] = field(default_factory=list)
    undecodable: BaseException | None = None


def choose_copy(copies: Sequence[tuple[T, Verdict[C]]]) -> CopyChoice[T, C]:
    """Of one record's copies (nearest tier first), the one to serve: the
    farthest intact one, so that with copies that verify equally the system
    of record's wins. Lacking and bad tiers are listed farthest first."""
    choice: CopyChoice[T, C] = CopyChoice()
    for tier, verdict in reversed(copies):
        if verdict is None:
            choice.lacking.append(tier)
        elif isinstance(verdict, Bad):
            choice.bad.append((tier, verdict.error))
        elif isinstance(verdict, Undecodable):
            choice.undecodable = choice.undecodable or verdict.error
        elif choice.served is None:
            choice.served = (tier, verdict.value)
    return choice


@dataclass(frozen=True)
class FallBack:
    """What to do with a checkpoint that cannot be read intact: raise
    `CorruptCheckpoint`, or withdraw it (unless its bad copies are kept,
    or it is missing) and try `next` instead (None: ask the tiers for the
    newest checkpoint before it, `ask_older`)."""

    raise_corrupt: bool
    withdraw: bool = False
    next: str | None = None
    ask_older: bool = False


def fall_back(checkpoint_id: str, parent_id: str | None, *, raise_on_loss: bool, missing: bool, keep: bool) -> FallBack:
    """The fallback policy. With ``on_corruption="raise"`` an unusable
    checkpoint raises (one missing everywhere, named by a parent pointer,
    does not: the read falls back past it). Otherwise it is withdrawn (not
    when it is missing, nor when its bad copies are kept: the same bytes in
    every tier) and its parent is tried, or, when the parent pointer is gone
    or does not point back in time, the newest older checkpoint any tier
    lists. Every `next` is older than `checkpoint_id`, so a read ends."""
    if raise_on_loss and not missing:
        return FallBack(raise_corrupt=True)
    usable_parent = parent_id is not None and parent_id < checkpoint_id
    return FallBack(
        raise_corrupt=False,
        withdraw=not missing and not keep,
        next=parent_id if usable_parent else None,
        ask_older=not usable_parent,
    )


# -- resumes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumeStep:
    """`resume` from the candidate; `rewind` to checkpoint `target` (resume
    from there if it can be read, else reject with `reason` and "no earlier
    checkpoint"); or `reject` with `reason`."""

    kind: Literal["resume", "rewind", "reject"]
    reason: str = ""
    target: str | None = None


def resume_step(candidate_id: str, parent_id: str | None, decision: object, validator: str) -> ResumeStep:
    """What a validator's decision on checkpoint `candidate_id` (whose parent
    is `parent_id`) means. A rewind goes only back in time: to the checkpoint
    it names, else the parent; one with nowhere earlier to go rejects."""
    if decision is None:
        return ResumeStep("resume")
    if isinstance(decision, Rewind):
        target = decision.checkpoint_id if decision.checkpoint_id is not None else parent_id
        if target is not None and target < candidate_id:
            return ResumeStep("rewind", decision.reason, target)
        return ResumeStep("reject", f"{decision.reason}; and no earlier checkpoint to rewind to")
    if isinstance(decision, Reject):
        return ResumeStep("reject", decision.reason)
    raise ConfigError(f"validator {validator} returned {decision!r}: return None, rewind(...) or reject(...).")
