"""Resume validation: decide, before a thread runs again, whether the world
its checkpoint describes still exists. No I/O here except what validators do.

Validators run when a compiled graph is about to *run* a thread that already
has a checkpoint (Pregel's loop passes its config with the internal key
``__pregel_runtime``), once per run, on the root graph only; not when the
state is merely inspected (`get_state`, `get_state_history`). A test pins
this on the installed LangGraph, so an upgrade that changes it fails loudly.

A validator takes a frozen `ResumeContext` and returns a decision:
``None`` (resume), `rewind(...)` or `reject(...)`. Sync validators work with
both faces; async ones only with ``ainvoke`` / ``astream``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from langgraph.checkpoint.base import CheckpointTuple, PendingWrite

logger = logging.getLogger("langgraph_durable")

RUNTIME_KEY = "__pregel_runtime"  # set by Pregel's loop, absent on inspection
VERSION_KEY = "app_version"  # metadata key DurableSaver(app_version=...) stamps


@dataclass(frozen=True, slots=True)
class ResumeContext:
    """What a validator sees: the checkpoint a run is about to resume from."""

    thread_id: str
    checkpoint_ns: str
    checkpoint: CheckpointTuple
    values: Mapping[str, Any]  # the state's keys (the root channel unwrapped)
    metadata: Mapping[str, Any]
    pending_writes: tuple[PendingWrite, ...]
    age: timedelta
    pins: tuple[Any, ...] = ()
    """The thread's pinned checkpoints (`model.pins.Pin`), oldest pin first."""

    @property
    def checkpoint_id(self) -> str:
        return str(self.checkpoint.checkpoint["id"])

    def rewind_to_pin(self, reason: str) -> Decision:
        """A decision for a validator: resume from the newest pinned
        checkpoint of this namespace at or before this one (``saver.pin``,
        ``pin_here``); this one itself if it is pinned (resume). Rejects,
        saying so, when the thread has none."""
        pinned = sorted(
            p.checkpoint_id
            for p in self.pins
            if p.checkpoint_ns == self.checkpoint_ns and p.checkpoint_id <= self.checkpoint_id
        )
        if not pinned:
            return reject(f"{reason}; and no pinned checkpoint to rewind to")
        if pinned[-1] == self.checkpoint_id:
            return None
        return rewind(reason, to=pinned[-1])


@dataclass(frozen=True, slots=True)
class Rewind:
    """Resume from an earlier checkpoint: `checkpoint_id`, or (None) the
    newest ancestor that every validator accepts."""

    reason: str
    checkpoint_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """Refuse to resume: `invoke` raises `ResumeRejected` and nothing is written."""

    reason: str


Decision = Rewind | Reject | None


def rewind(reason: str, *, to: str | None = None) -> Rewind:
    return Rewind(reason, to)


def reject(reason: str) -> Reject:
    return Reject(reason)


class Validator(Protocol):
    def __call__(self, context: ResumeContext, /) -> Decision | Awaitable[Decision]: ...


@dataclass(frozen=True, slots=True)
class ValidationOutcome:
    """Passed to the ``on_validation`` hook after every validated resume."""

    thread_id: str
    checkpoint_id: str  # the checkpoint the run asked for
    resumed_from: str | None  # what it got (None: rejected)
    decisions: tuple[tuple[str, Decision], ...]  # (validator name, decision), in order


# A plain function, or (awaited in the async face) an async one.
ValidationHook = Callable[[ValidationOutcome], Awaitable[None] | None]


def validator_name(v: Any) -> str:
    return getattr(v, "__name__", None) or type(v).__name__


def make_context(tup: CheckpointTuple, now: datetime | None = None, pins: Iterable[Any] = ()) -> ResumeContext:
    configurable = tup.config["configurable"]
    try:
        written = datetime.fromisoformat(tup.checkpoint["ts"])
    except (KeyError, ValueError):
        written = now or datetime.now(UTC)
    if written.tzinfo is None:
        written = written.replace(tzinfo=UTC)
    return ResumeContext(
        thread_id=str(configurable["thread_id"]),
        checkpoint_ns=configurable.get("checkpoint_ns", "") or "",
        checkpoint=tup,
        values=_state_values(tup.checkpoint.get("channel_values", {})),
        metadata=dict(tup.metadata or {}),
        pending_writes=tuple(tup.pending_writes or ()),
        age=(now or datetime.now(UTC)) - written,
        pins=tuple(pins),
    )


def _state_values(channel_values: Mapping[str, Any]) -> dict[str, Any]:
    """The state as the graph's nodes see it: a graph over a plain dict or a
    single-value state keeps it all in one root channel."""
    root = channel_values.get("__root__")
    if isinstance(root, Mapping):
        return dict(root)
    return {k: v for k, v in channel_values.items() if not k.startswith("branch:")}


def is_resume_of_a_run(config: Mapping[str, Any]) -> bool:
    """Pregel's loop is about to run from this checkpoint (root graph only)."""
    configurable = config.get("configurable") or {}
    return RUNTIME_KEY in configurable and not configurable.get("checkpoint_ns")


# -- built-in validators ------------------------------------------------------------


def paths_exist(*state_keys: str, on_missing: Literal["reject", "rewind"] = "reject") -> Validator:
    """The file paths stored under `state_keys` (a path or a list of paths)
    must exist. Absent keys pass."""

    def paths_exist(ctx: ResumeContext) -> Decision:
        missing = []
        for key in state_keys:
            value = ctx.values.get(key)
            paths: Iterable[Any] = [value] if isinstance(value, (str, os.PathLike)) else (value or [])
            missing += [str(p) for p in paths if not os.path.exists(p)]
        if not missing:
            return None
        reason = f"paths named in the state no longer exist: {', '.join(missing)}"
        return rewind(reason) if on_missing == "rewind" else reject(reason)

    return paths_exist


def max_age(limit: timedelta | float, *, on_expired: Literal["reject", "rewind"] = "reject") -> Validator:
    """The checkpoint must be younger than `limit` (seconds or a timedelta)."""
    limit_td = limit if isinstance(limit, timedelta) else timedelta(seconds=limit)

    def max_age(ctx: ResumeContext) -> Decision:
        if ctx.age <= limit_td:
            return None
        reason = f"checkpoint is {ctx.age} old, over the limit of {limit_td}"
        return rewind(reason) if on_expired == "rewind" else reject(reason)

    return max_age


def pin_version(current: str, *, on_mismatch: Literal["reject", "rewind"] = "reject") -> Validator:
    """The checkpoint must have been written by app/graph version `current`
    (stamped by ``DurableSaver(app_version=...)`` into its metadata). With
    ``on_mismatch="rewind"`` the run resumes from the newest checkpoint that
    this version wrote; checkpoints without a stamp count as a mismatch."""

    def pin_version(ctx: ResumeContext) -> Decision:
        written_by = ctx.metadata.get(VERSION_KEY)
        if written_by == current:
            return None
        reason = f"checkpoint was written by version {written_by!r}, this is {current!r}"
        return rewind(reason) if on_mismatch == "rewind" else reject(reason)

    return pin_version


def check(
    state_key: str,
    predicate: Callable[[Any], bool],
    reason: str,
    *,
    on_fail: Literal["reject", "rewind"] = "reject",
) -> Validator:
    """Any check over one state key, e.g. that a git branch still exists:
    ``check("branch", branch_exists, "the branch was deleted")``. Absent keys pass."""

    def check(ctx: ResumeContext) -> Decision:
        if state_key not in ctx.values or predicate(ctx.values[state_key]):
            return None
        message = f"{state_key}={ctx.values[state_key]!r}: {reason}"
        return rewind(message) if on_fail == "rewind" else reject(message)

    check.__name__ = f"check[{state_key}]"
    return check
