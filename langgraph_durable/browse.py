"""Looking at what a saver holds: its threads, a thread's history, one
checkpoint's values. ``langgraph-durable threads | history | show`` print
these; they are plain functions over any `DurableSaver`, returning small
frozen dataclasses, so a script or a notebook can use them too::

    from langgraph_durable import DurableSaver, browse

    with DurableSaver.from_env() as saver:
        for t in browse.threads(saver):
            print(t.thread_id, t.checkpoints, t.size_bytes)

Everything is read through the saver's public API (`DurableSaver.thread_ids`,
``list``, ``get_tuple``), so what is shown is what a graph would read:
verified, reconciled across the tiers, with list channels stored as deltas
put back together. Nothing is written.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as dt_time
from decimal import Decimal
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from .retention import age_seconds

if TYPE_CHECKING:
    # Types only: the command line's help imports this module for
    # SIZE_MEANING without loading LangGraph.
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import CheckpointTuple

    from .migrations import Migrations
    from .saver import DurableSaver

__all__ = [
    "CheckpointDetail",
    "CheckpointSummary",
    "InterruptInfo",
    "PendingWrite",
    "StateVersionCheck",
    "StateVersionCount",
    "ThreadAtVersion",
    "ThreadSummary",
    "SIZE_MEANING",
    "age_seconds",
    "by_state_version",
    "check_state_versions",
    "history",
    "jsonable",
    "show",
    "stamped_version",
    "state_versions",
    "threads",
    "version_status",
]

# What `ThreadSummary.size_bytes` counts (the CLI's help repeats it).
SIZE_MEANING = (
    "serialized size in bytes of the thread's checkpoints, their metadata, each version of each channel value "
    "(once) and the pending writes, as the saver's serializer writes them; the tiers store a little more per "
    "record (envelope, checksum), or less for list channels stored as deltas"
)


@dataclass(frozen=True, slots=True)
class InterruptInfo:
    """One ``interrupt()`` a checkpoint is waiting on."""

    task_id: str
    id: str | None
    value: Any


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A write a task made after its checkpoint, not yet in the channel values."""

    task_id: str
    channel: str
    value: Any


@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    """One checkpoint, as `history` lists it."""

    thread_id: str
    checkpoint_ns: str  # "" for the root graph, else the subgraph's namespace
    checkpoint_id: str
    parent_checkpoint_id: str | None
    step: int | None
    source: str | None  # "input", "loop", "update" or "fork"
    ts: str | None  # ISO 8601, as the checkpoint records it
    pending_writes: int
    interrupts: tuple[InterruptInfo, ...]


@dataclass(frozen=True, slots=True)
class CheckpointDetail:
    """One checkpoint with its values, as `show` reads it."""

    summary: CheckpointSummary
    channel_values: Mapping[str, Any]
    channel_versions: Mapping[str, Any]
    metadata: Mapping[str, Any]
    writes: tuple[PendingWrite, ...]


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread, as `threads` lists it."""

    thread_id: str
    namespaces: tuple[str, ...]  # "" (the root graph) first, then subgraph namespaces
    checkpoints: int  # in every namespace
    last_step: int | None  # of the latest root checkpoint (else the latest of any namespace)
    latest_checkpoint_id: str | None  # the newest checkpoint of any namespace
    latest_ts: str | None
    age_seconds: float | None  # of that checkpoint, when the summary was made
    size_bytes: int  # see SIZE_MEANING
    interrupted: bool  # the latest root checkpoint waits on an interrupt()
    state_version: int | None = None  # the latest root checkpoint's stamp (`Migrations`); None: unstamped


VersionStatus = Literal["current", "older", "unreachable", "newer"]


@dataclass(frozen=True, slots=True)
class StateVersionCount:
    """How many threads one state version holds (`by_state_version`)."""

    state_version: int | None  # None: unstamped, with no Migrations to say which version that is
    threads: int
    unstamped: int  # of them, those with no stamp (counted as the Migrations' `unversioned`)
    status: VersionStatus | None  # against the Migrations given (`version_status`); None without
    missing: tuple[int, ...] = ()  # "unreachable": the versions no step leaves (`Migrations.missing`)


@dataclass(frozen=True, slots=True)
class ThreadAtVersion:
    """A thread whose state version this code cannot run as it is."""

    thread_id: str
    state_version: int
    stamped: bool  # False: unstamped, taken as the Migrations' `unversioned`
    missing: tuple[int, ...] = ()  # the versions no step leaves (unreachable), else empty


@dataclass(frozen=True, slots=True)
class StateVersionCheck:
    """The threads' state versions against an app's `Migrations`, as
    ``verify --migrations`` reports them (`check_state_versions`)."""

    running_version: int  # the Migrations' version
    versions: list[StateVersionCount]
    unreachable: list[ThreadAtVersion]  # older, with a step missing on the way: no run or `migrate` brings them up
    newer: list[ThreadAtVersion]  # written by a newer version: this one neither runs nor writes them


def _thread_config(
    thread_id: str, checkpoint_ns: str | None = None, checkpoint_id: str | None = None
) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        configurable["checkpoint_ns"] = checkpoint_ns
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _interrupts(writes: Iterable[tuple[str, str, Any]]) -> tuple[InterruptInfo, ...]:
    from langgraph.checkpoint.serde.types import INTERRUPT

    found = []
    for task_id, channel, value in writes:
        if channel != INTERRUPT:
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            found.append(InterruptInfo(task_id, getattr(item, "id", None), getattr(item, "value", item)))
    return tuple(found)


def summary(tup: CheckpointTuple) -> CheckpointSummary:
    """The `CheckpointSummary` of a checkpoint tuple from ``list`` / ``get_tuple``."""
    configurable = tup.config["configurable"]
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    metadata = tup.metadata or {}
    step = metadata.get("step")
    return CheckpointSummary(
        thread_id=str(configurable["thread_id"]),
        checkpoint_ns=configurable.get("checkpoint_ns", "") or "",
        checkpoint_id=str(configurable["checkpoint_id"]),
        parent_checkpoint_id=parent,
        step=step if isinstance(step, int) else None,
        source=metadata.get("source"),
        ts=tup.checkpoint.get("ts"),
        pending_writes=len(tup.pending_writes or []),
        interrupts=_interrupts(tup.pending_writes or []),
    )


def _size(saver: DurableSaver, tuples: Iterable[CheckpointTuple]) -> int:
    """See SIZE_MEANING. A value the serializer refuses (it came out of it,
    so it should not) counts as 0."""

    def size(value: Any) -> int:
        try:
            return len(saver.serde.dumps_typed(value)[1])
        except Exception:
            return 0

    seen: set[tuple[str, str, Any]] = set()
    total = 0
    for tup in tuples:
        cp = tup.checkpoint
        ns = tup.config["configurable"].get("checkpoint_ns", "") or ""
        total += size({k: v for k, v in cp.items() if k != "channel_values"}) + size(tup.metadata)
        versions = cp.get("channel_versions", {})
        for channel, value in cp.get("channel_values", {}).items():
            key = (ns, channel, versions.get(channel))
            if key not in seen:
                seen.add(key)
                total += size(value)
        total += sum(size(value) for _, _, value in tup.pending_writes or [])
    return total


def thread_summary(saver: DurableSaver, thread_id: str, *, now: float | None = None) -> ThreadSummary:
    """One thread's `ThreadSummary` (reads every checkpoint of the thread)."""
    tuples = list(saver.list(_thread_config(thread_id)))
    summaries = [summary(t) for t in tuples]
    namespaces = sorted({s.checkpoint_ns for s in summaries}, key=lambda ns: (ns != "", ns))
    latest = max(summaries, key=lambda s: s.checkpoint_id, default=None)
    root_index = max(
        (i for i, s in enumerate(summaries) if s.checkpoint_ns == ""),
        key=lambda i: summaries[i].checkpoint_id,
        default=None,
    )
    root = None if root_index is None else summaries[root_index]
    step_of = root or latest
    return ThreadSummary(
        thread_id=thread_id,
        namespaces=tuple(namespaces),
        checkpoints=len(summaries),
        last_step=step_of.step if step_of is not None else None,
        latest_checkpoint_id=latest.checkpoint_id if latest is not None else None,
        latest_ts=latest.ts if latest is not None else None,
        age_seconds=age_seconds(latest.ts, now) if latest is not None else None,
        size_bytes=_size(saver, tuples),
        interrupted=bool(root is not None and root.interrupts),
        state_version=None if root_index is None else stamped_version(tuples[root_index].metadata),
    )


def threads(
    saver: DurableSaver,
    thread_ids: Iterable[str] | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[ThreadSummary]:
    """A `ThreadSummary` of each thread (default: every thread,
    `DurableSaver.thread_ids`), in thread id order. `progress(done, total)`
    is called after each thread."""
    ids = sorted(saver.thread_ids() if thread_ids is None else {str(t) for t in thread_ids})
    now = time.time()
    out = []
    for done, thread_id in enumerate(ids, 1):
        out.append(thread_summary(saver, thread_id, now=now))
        if progress is not None:
            progress(done, len(ids))
    return out


def stamped_version(metadata: Mapping[str, Any] | None) -> int | None:
    """The state version a checkpoint's metadata is stamped with (a saver
    given `Migrations` stamps every checkpoint it writes); None if it has
    no stamp (`Migrations.version_of` takes that as its ``unversioned``)."""
    from .migrations import STATE_VERSION_KEY

    found = (metadata or {}).get(STATE_VERSION_KEY)
    return found if isinstance(found, int) and not isinstance(found, bool) and found >= 1 else None


def state_versions(
    saver: DurableSaver,
    thread_ids: Iterable[str] | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int | None]:
    """The stamp of each thread's latest root checkpoint (`stamped_version`;
    default: every thread), in thread id order; a thread with no root
    checkpoint is left out. Reads one checkpoint per thread."""
    ids = sorted(saver.thread_ids() if thread_ids is None else {str(t) for t in thread_ids})
    out: dict[str, int | None] = {}
    for done, thread_id in enumerate(ids, 1):
        tup = saver.get_tuple(_thread_config(thread_id, ""))
        if tup is not None:
            out[thread_id] = stamped_version(tup.metadata)
        if progress is not None:
            progress(done, len(ids))
    return out


def version_status(version: int, migrations: Migrations) -> tuple[VersionStatus, tuple[int, ...]]:
    """What code running `migrations` makes of a thread at `version`, and
    the versions no step leaves on its way up (for ``unreachable``)."""
    if version > migrations.version:
        return "newer", ()
    if version == migrations.version:
        return "current", ()
    missing = tuple(migrations.missing(version))
    return ("unreachable", missing) if missing else ("older", ())


def by_state_version(stamps: Iterable[int | None], migrations: Migrations | None = None) -> list[StateVersionCount]:
    """How many of the threads with these stamps each state version holds,
    newest first. Without `migrations` the unstamped are a version of their
    own (None, last); with them they count as its ``unversioned`` version,
    and each version gets its `version_status`."""
    counts: dict[int | None, list[int]] = {}  # version -> [threads, unstamped]
    for stamp in stamps:
        version = stamp if stamp is not None or migrations is None else migrations.unversioned
        entry = counts.setdefault(version, [0, 0])
        entry[0] += 1
        entry[1] += stamp is None
    out = []
    for version in sorted(counts, key=lambda v: (v is None, -(v or 0))):
        status, missing = (None, ()) if migrations is None or version is None else version_status(version, migrations)
        out.append(StateVersionCount(version, counts[version][0], counts[version][1], status, missing))
    return out


def check_state_versions(stamps: Mapping[str, int | None], migrations: Migrations) -> StateVersionCheck:
    """The threads (`state_versions`' stamps) against `migrations`: the
    count per version, and the threads this code cannot run as they are."""
    unreachable: list[ThreadAtVersion] = []
    newer: list[ThreadAtVersion] = []
    for thread_id, stamp in stamps.items():
        version = migrations.unversioned if stamp is None else stamp
        status, missing = version_status(version, migrations)
        if status == "unreachable":
            unreachable.append(ThreadAtVersion(thread_id, version, stamp is not None, missing))
        elif status == "newer":
            newer.append(ThreadAtVersion(thread_id, version, stamp is not None))
    return StateVersionCheck(migrations.version, by_state_version(stamps.values(), migrations), unreachable, newer)


def history(
    saver: DurableSaver, thread_id: str, *, checkpoint_ns: str | None = None, limit: int | None = None
) -> list[CheckpointSummary]:
    """The thread's checkpoints, newest first: every namespace, or only
    `checkpoint_ns` ("" for the root graph); at most `limit`."""
    tuples = saver.list(_thread_config(thread_id, checkpoint_ns), limit=limit)
    return sorted((summary(t) for t in tuples), key=lambda s: s.checkpoint_id, reverse=True)


def show(
    saver: DurableSaver, thread_id: str, checkpoint_id: str | None = None, *, checkpoint_ns: str | None = None
) -> CheckpointDetail | None:
    """One checkpoint with its channel values and pending writes: the
    latest of namespace `checkpoint_ns` (default the root graph), or the
    checkpoint `checkpoint_id` (of any namespace unless `checkpoint_ns` is
    given). None if there is no such checkpoint."""
    if checkpoint_id is None or checkpoint_ns is not None:
        tup = saver.get_tuple(_thread_config(thread_id, checkpoint_ns or "", checkpoint_id))
    else:
        tup = next(iter(saver.list(_thread_config(thread_id, None, checkpoint_id), limit=1)), None)
    if tup is None:
        return None
    return CheckpointDetail(
        summary=summary(tup),
        channel_values=dict(tup.checkpoint.get("channel_values", {})),
        channel_versions=dict(tup.checkpoint.get("channel_versions", {})),
        metadata=dict(tup.metadata or {}),
        writes=tuple(PendingWrite(task, channel, value) for task, channel, value in tup.pending_writes or []),
    )


def jsonable(value: Any, *, _depth: int = 0) -> Any:
    """`value` as plain JSON data: dataclasses, pydantic models (LangChain
    messages) and mappings become objects, sequences and sets arrays,
    datetimes ISO strings, bytes ``{"base64": ...}``; anything else its repr."""
    if _depth > 64:
        return repr(value)
    d = _depth + 1
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, _depth=d)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth=d) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, _depth=d) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (datetime, date, dt_time)):
        return value.isoformat()
    if isinstance(value, (UUID, Decimal, PurePath)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name), _depth=d) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return jsonable(dump(), _depth=d)
        except Exception:
            pass
    return repr(value)
