"""State versions and migrations: carry a thread forward across a deploy
that changes its state. No I/O here; the resume gate (`engine/resume.py`)
writes what a plan says.

An app declares the version of its graph's state, an integer that goes up
by one with each change of the state's shape, and registers a step from
each version to the next::

    migrations = Migrations(version=2)

    @migrations.step(from_version=1)
    def topic_is_now_subject(m: Migration) -> None:
        m.rename("topic", "subject")                    # a state key (a channel)
        m.convert("count", int)                         # its value and pending writes to it
        m.rename_node("draft", "write")                 # a node, with its pending task
        m.remove_node("summarize", reroute_to="write")  # a node gone; its pending turn goes to "write"

    saver = DurableSaver(..., migrations=migrations)

The saver stamps ``state_version`` into the metadata of every checkpoint it
writes. Before a graph runs a thread, under the thread's writer lease, the
gates run in this order:

1. **The version guard.** A checkpoint stamped with a newer version than
   the saver's is never run or written from: `NewerStateVersion` (or, with
   ``on_newer="wait"``, a wait for a replica of that version to take it).
2. **Migrations.** A checkpoint of an older version (or none:
   ``unversioned``) is brought up to this version by the registered steps,
   in memory; a step that raises writes nothing (`MigrationFailed`).
3. **Resume validators**, on the migrated state.

If the run goes ahead, the migrated state is written as a new checkpoint
next to the old one (same parent, same step, ``source="fork"``), with the
old one's pending writes and interrupts carried over to the tasks they
belong to, and the old checkpoint is pinned (``saver.pins``) as the
recovery point a rolled-back deploy resumes from
(``graph.invoke(None, pin.config)``).

A subgraph that stopped inside one of the thread's tasks goes on from
where it stopped: its checkpoints, which LangGraph keeps under a namespace
named after the task (and so after the checkpoint), are copied to the
task's new namespace as they are (`carry_subgraphs`); the steps migrate
the root graph's state.

What a step sees, `Migration`: the state's values by key (what the nodes
read), the pending writes of the interrupted step and the interrupts
waiting for an answer, and the operations that keep LangGraph's bookkeeping
(channel versions, what each node has seen, task ids, interrupt ids) in
step with what it changes.
"""

from __future__ import annotations

import binascii
import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6

from .errors import ConfigError, MigrationFailed

logger = logging.getLogger("langgraph_durable")

STATE_VERSION_KEY = "state_version"
"""The metadata key every checkpoint written by a saver with `Migrations` carries."""

MIGRATED_FROM_KEY = "migrated_from"
"""Metadata of a migrated checkpoint: the id and version it was made from."""

# LangGraph's own channel and write names (langgraph._internal._constants).
_INTERRUPT = "__interrupt__"
_RESUME = "__resume__"
_TASKS = "__pregel_tasks"
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
_BRANCH = "branch:to:"
_JOIN = "join:"

F = TypeVar("F", bound=Callable[..., Any])
MigrationStep = Callable[["Migration"], None]


class Migrations:
    """The version of a graph's state and the steps that bring older
    threads up to it.

    Args:
        version: the state version this code runs (an integer from 1, one
            more with each change of the state's shape).
        unversioned: the version of a checkpoint with no stamp: written
            before the app declared versions, or imported from another
            saver. Default 1.
        on_newer: what a run does with a thread a newer version wrote:
            ``"raise"`` (default) `NewerStateVersion` at once, which the
            app can turn into a retry elsewhere; ``"wait"``: wait up to
            `newer_wait` seconds for a replica of the newer version to take
            the thread (or for the thread to come back to a version this
            one runs, after a rollback), then raise.
        newer_wait: seconds ``on_newer="wait"`` waits.
        steps: ``{from_version: step}``, as `step` registers them.
    """

    def __init__(
        self,
        version: int,
        *,
        unversioned: int = 1,
        on_newer: Literal["raise", "wait"] = "raise",
        newer_wait: float = 60.0,
        steps: Mapping[int, MigrationStep] | None = None,
    ) -> None:
        if not _is_version(version):
            raise ConfigError(f"Migrations(version={version!r}): a state version is an integer from 1.")
        if not _is_version(unversioned) or unversioned > version:
            raise ConfigError(
                f"Migrations(unversioned={unversioned!r}): the version of checkpoints with no stamp is an integer "
                f"from 1 up to version={version}."
            )
        if on_newer not in ("raise", "wait"):
            raise ConfigError(f"Migrations(on_newer={on_newer!r}): use 'raise' or 'wait'.")
        if isinstance(newer_wait, bool) or not isinstance(newer_wait, (int, float)) or newer_wait < 0:
            raise ConfigError(f"Migrations(newer_wait={newer_wait!r}): seconds, a number from 0.")
        self.version = version
        self.unversioned = unversioned
        self.on_newer = on_newer
        self.newer_wait = float(newer_wait)
        self.steps: dict[int, MigrationStep] = {}
        for from_version, fn in (steps or {}).items():
            self.add(from_version, fn)

    def __repr__(self) -> str:
        return f"Migrations(version={self.version}, steps={sorted(self.steps)})"

    def step(self, from_version: int) -> Callable[[F], F]:
        """Register the decorated function as the step from `from_version`
        to the next version."""

        def register(fn: F) -> F:
            self.add(from_version, fn)
            return fn

        return register

    def add(self, from_version: int, fn: MigrationStep) -> None:
        """Register `fn` as the step from `from_version` to the next."""
        if not _is_version(from_version) or from_version >= self.version:
            raise ConfigError(
                f"a migration step from version {from_version!r} cannot run on state version {self.version}: a "
                f"step goes from an integer version below it to the next (raise Migrations(version=...) first)."
            )
        if not callable(fn):
            raise ConfigError(f"a migration step must be a function taking a Migration, not {fn!r}.")
        if from_version in self.steps:
            raise ConfigError(
                f"two migration steps from version {from_version}: {_name(self.steps[from_version])} and "
                f"{_name(fn)}; one step per version, do both in one."
            )
        self.steps[from_version] = fn

    def version_of(self, metadata: Mapping[str, Any] | None) -> int:
        """The state version a checkpoint with this metadata was written by."""
        found = (metadata or {}).get(STATE_VERSION_KEY)
        return found if isinstance(found, int) and _is_version(found) else self.unversioned

    def missing(self, from_version: int) -> list[int]:
        """The steps a thread of `from_version` lacks to reach this version
        (none: it is reachable)."""
        return [v for v in range(from_version, self.version) if v not in self.steps]

    def stamp(self, metadata: CheckpointMetadata) -> CheckpointMetadata:
        return cast(CheckpointMetadata, {**metadata, STATE_VERSION_KEY: self.version})


def _is_version(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or repr(fn)


# -- offline: `saver.migrate` -------------------------------------------------------------


MigrationOutcome = Literal[
    "migrated", "would migrate", "current", "newer", "unreachable", "failed", "busy", "archived", "empty"
]


@dataclass(frozen=True, slots=True)
class ThreadMigration:
    """What `saver.migrate` did, or would do, with one thread."""

    thread_id: str
    outcome: MigrationOutcome
    from_version: int | None = None
    to_version: int | None = None
    detail: str = ""
    """Why it was left (failed, busy, unreachable), or, on a dry run, what would change."""
    checkpoint_id: str | None = None
    """The migrated checkpoint (``migrated``), else the thread's latest."""


@dataclass
class MigrationReport:
    """`saver.migrate` / ``langgraph-durable migrate``: one entry per thread
    looked at, in order. Running it again carries on where a killed run
    stopped: a thread already migrated is ``current``."""

    version: int
    dry_run: bool = False
    threads: list[ThreadMigration] = field(default_factory=list)

    def count(self, outcome: MigrationOutcome) -> int:
        return sum(1 for t in self.threads if t.outcome == outcome)

    @property
    def ok(self) -> bool:
        """Nothing failed, no thread is at a version no step reaches, none was busy."""
        return not any(t.outcome in ("failed", "unreachable", "busy") for t in self.threads)


def describe(migrated: MigrationPlan) -> str:
    """What a migration changes, in one line (a dry run's report)."""
    old = migrated.source.checkpoint
    before = {k for k in (old.get("channel_values") or {}) if not _internal(k)}
    after = {k for k in (migrated.checkpoint.get("channel_values") or {}) if not _internal(k)}
    changed = sorted(k for k in migrated.new_versions if not _internal(k) and k in before & after)
    renamed = {old: new for old, new in migrated.renames.items() if old in before and new in after}
    before -= set(renamed)
    after -= set(renamed.values())
    parts = []
    if renamed:
        parts.append("renames " + ", ".join(f"{old} -> {new}" for old, new in sorted(renamed.items())))
    if after - before:
        parts.append("adds " + ", ".join(sorted(after - before)))
    if before - after:
        parts.append("drops " + ", ".join(sorted(before - after)))
    if changed:
        parts.append("changes " + ", ".join(changed))
    writes = sum(len(w) for w in migrated.writes.values())
    source_writes = len(migrated.source.pending_writes or ())
    if writes or source_writes:
        parts.append(f"carries {writes} of {source_writes} pending writes")
    return "; ".join(parts) or "no change to the values"


# -- what a step sees ---------------------------------------------------------------------


@dataclass(slots=True)
class PendingWrite:
    """One pending write of the interrupted step: what task `node` wrote to
    `channel`. Change `value`; remove the write from `Migration.writes` to
    drop it."""

    node: str | None  # None: written by no task (a run's input, a resume answer to all)
    channel: str
    value: Any
    task_id: str


class PendingInterrupt:
    """An interrupt waiting for an answer, raised by `node`. Setting `value`
    changes what the person answering is shown."""

    __slots__ = ("_index", "_write", "node")

    def __init__(self, node: str | None, write: PendingWrite, index: int) -> None:
        self.node = node
        self._write = write
        self._index = index

    def _items(self) -> list[Any]:
        value = self._write.value
        return list(value) if isinstance(value, (list, tuple)) else [value]

    @property
    def value(self) -> Any:
        item = self._items()[self._index]
        return getattr(item, "value", item)

    @value.setter
    def value(self, new: Any) -> None:
        from langgraph.types import Interrupt

        items = self._items()
        item = items[self._index]
        items[self._index] = Interrupt(value=new, id=item.id) if isinstance(item, Interrupt) else new
        old = self._write.value
        self._write.value = type(old)(items) if isinstance(old, (list, tuple)) else items[0]


class Migration:
    """One checkpoint on its way from `from_version` to `to_version` (one
    step): what a registered step reads and changes."""

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        metadata: Mapping[str, Any],
        values: dict[str, Any],
        history_keys: frozenset[str],
        writes: list[PendingWrite],
        nodes: set[str],
        channels: frozenset[str] = frozenset(),
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.metadata = MappingProxyType(dict(metadata))
        self.from_version = 0
        self.to_version = 0
        self.values = values
        """The state's values by key (channel), as the nodes read them. Set,
        change or delete keys freely; `rename` and `convert` also carry the
        pending writes along."""
        self.writes = writes
        """The pending writes of the interrupted step (tasks that finished,
        interrupts, answers). Empty for a thread between steps."""
        self.history_keys = history_keys
        """Keys whose value is kept as a history of writes (DeltaChannel)
        rather than in the checkpoint: not in `values`, and a step may not
        rename or convert them."""
        self._nodes = nodes
        self._channels = channels
        self.node_renames: dict[str, str] = {}
        self.removed_nodes: dict[str, str | None] = {}
        self.key_renames: dict[str, str] = {}

    @property
    def interrupts(self) -> list[PendingInterrupt]:
        """The interrupts waiting for an answer; set `value` on one to change
        what it shows."""
        found = []
        for w in self.writes:
            if w.channel == _INTERRUPT:
                count = len(w.value) if isinstance(w.value, (list, tuple)) else 1
                found += [PendingInterrupt(w.node, w, i) for i in range(count)]
        return found

    @property
    def nodes(self) -> frozenset[str]:
        """The nodes this checkpoint knows of (that ran, or have a turn pending)."""
        return frozenset(self._nodes)

    def rename(self, old: str, new: str) -> None:
        """State key `old` is now `new`: its value, its channel's version,
        what each node has seen of it, and the pending writes to it."""
        self._refuse_history(old, "rename")
        if _internal(new) or _internal(old):
            raise ValueError(
                f"rename({old!r}, {new!r}): names starting with '__', 'branch:' or 'join:' are LangGraph's own "
                "channels; rename the state's keys only"
            )
        if new in self.values or new in self.history_keys:
            raise ValueError(f"rename({old!r}, {new!r}): the state already has a key {new!r}")
        if old in self.values:
            self.values[new] = self.values.pop(old)
        for w in self.writes:
            if w.channel == old:
                w.channel = new
        self.key_renames[old] = new
        for k, v in list(self.key_renames.items()):
            if v == old:
                self.key_renames[k] = new

    def convert(self, key: str, fn: Callable[[Any], Any]) -> None:
        """Apply `fn` to the value under `key` and to every pending write to it."""
        self._refuse_history(key, "convert")
        if key in self.values:
            self.values[key] = fn(self.values[key])
        for w in self.writes:
            if w.channel == key:
                w.value = fn(w.value)

    def rename_node(self, old: str, new: str) -> None:
        """Node `old` is now `new`: its pending turn, its finished task's
        writes and its interrupts go with it."""
        if new in self._nodes and new != old:
            raise ValueError(f"rename_node({old!r}, {new!r}): this checkpoint already knows a node {new!r}")
        for w in self.writes:
            if w.node == old:
                w.node = new
        self._nodes.discard(old)
        self._nodes.add(new)
        self.node_renames[old] = new
        for k, v in list(self.node_renames.items()):
            if v == old:
                self.node_renames[k] = new

    def remove_node(self, name: str, *, reroute_to: str | None = None) -> None:
        """Node `name` is gone from the graph. Its pending turn goes to
        `reroute_to` (which then runs next), or nowhere; what its task wrote
        before the thread stopped, and its interrupts, are dropped (logged).
        A node a join edge waits for cannot be removed: rename it."""
        joins = sorted(c for c in self._channels if c.startswith(_JOIN) and name in _join_starts(c))
        if joins:
            raise ValueError(
                f"remove_node({name!r}): a join edge waits for it ({', '.join(joins)}); the new graph's join "
                "cannot be told it ran. Rename it to the node that takes its place instead"
            )
        dropped = [w for w in self.writes if w.node == name]
        if dropped:
            logger.warning(
                "migrating thread %r: node %r removed; its %d pending write(s) (%d interrupt(s)) are dropped",
                self.thread_id, name, len(dropped), sum(1 for w in dropped if w.channel == _INTERRUPT),
            )  # fmt: skip
        self.writes[:] = [w for w in self.writes if w.node != name]
        self._nodes.discard(name)
        if reroute_to is not None:
            self._nodes.add(reroute_to)
        self.removed_nodes[name] = reroute_to

    def _refuse_history(self, key: str, what: str) -> None:
        if key in self.history_keys:
            raise ValueError(
                f"{what}({key!r}): this key's value is kept as a history of writes (a DeltaChannel), which a "
                f"migration cannot {what}; keep the key and its reducer as they are, or add a new key"
            )


# -- the plan -----------------------------------------------------------------------------


@dataclass(slots=True)
class MigrationPlan:
    """What a migration writes: the new checkpoint, its metadata and
    versions, its parent, the pending writes by task, and the checkpoint
    it replaces (pinned)."""

    source: CheckpointTuple
    from_version: int
    to_version: int
    parent_config: dict[str, Any]
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: dict[str, Any]
    writes: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    tasks: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Each task of the old checkpoint that goes on: old id -> (its new
    task namespace segment ``NODE:ID`` and the old one), for its subgraph."""
    renames: dict[str, str] = field(default_factory=dict)
    """State keys the steps renamed, old -> new."""
    subgraphs: list[CarriedCheckpoint] = field(default_factory=list)
    """The checkpoints of subgraphs its tasks ran, under their new namespaces (`carry_subgraphs`)."""

    @property
    def tuple(self) -> CheckpointTuple:
        """The migrated checkpoint as a read would return it once written."""
        configurable = self.source.config["configurable"]
        config = {
            "configurable": {
                "thread_id": configurable["thread_id"],
                "checkpoint_ns": configurable.get("checkpoint_ns", "") or "",
                "checkpoint_id": self.checkpoint["id"],
            }
        }
        pending = [(tid, ch, v) for tid, ws in self.writes.items() for ch, v in ws]
        return CheckpointTuple(config, self.checkpoint, self.metadata, self.source.parent_config, pending)  # type: ignore[arg-type]


def plan(
    tup: CheckpointTuple,
    migrations: Migrations,
    next_version: Callable[[Any], Any],
    *,
    keep_writes: bool = True,
    subgraph_tasks: Iterable[str] = (),
) -> MigrationPlan | None:
    """The migration of `tup` to `migrations.version`, or None if it is
    already there. Raises `MigrationFailed` if a step is missing or raises;
    a checkpoint of a newer version is the guard's to refuse, not this.
    `subgraph_tasks`: the ids of this checkpoint's tasks that a subgraph's
    checkpoints name (``NODE:TASK_ID``), which keep no pending write yet."""
    configurable = tup.config["configurable"]
    thread_id = str(configurable["thread_id"])
    ns = configurable.get("checkpoint_ns", "") or ""
    old_id = str(tup.checkpoint["id"])
    start = migrations.version_of(tup.metadata)
    if start >= migrations.version:
        return None
    missing = migrations.missing(start)
    if missing:
        raise MigrationFailed(
            f"thread {thread_id!r} is at state version {start} and no migration step is registered from version "
            f"{missing[0]}: register one with @migrations.step(from_version={missing[0]}) to run it on version "
            f"{migrations.version}.",
            thread_id=thread_id,
            checkpoint_id=old_id,
            from_version=start,
            step=None,
        )
    old = tup.checkpoint
    meta: dict[str, Any] = dict(tup.metadata or {})
    step_no = int(meta.get("step", -1)) + 1
    tasks = _tasks_of(old, ns, step_no, [*(w[0] for w in tup.pending_writes or ()), *subgraph_tasks])
    values, history = _state_of(old)
    writes = [
        PendingWrite(tasks[tid].name if tid in tasks else None, ch, _copy(v), tid)
        for tid, ch, v in (tup.pending_writes or ()) if keep_writes
    ]  # fmt: skip
    nodes = {t.name for t in tasks.values()} | _node_names(old)
    m = Migration(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=old_id,
        metadata=meta,
        values=values,
        history_keys=history,
        writes=writes,
        nodes=nodes,
        channels=frozenset([*(old.get("channel_versions") or {}), *(w.channel for w in writes)]),
    )
    for version in range(start, migrations.version):
        fn = migrations.steps[version]
        m.from_version, m.to_version = version, version + 1
        try:
            fn(m)
        except Exception as exc:
            raise MigrationFailed(
                f"migrating thread {thread_id!r} (checkpoint {old_id}) from state version {version} to "
                f"{version + 1} failed in step {_name(fn)}: {type(exc).__name__}: {exc}. Nothing was written; "
                "fix the step and run the thread again, or roll the deploy back.",
                thread_id=thread_id,
                checkpoint_id=old_id,
                from_version=version,
                step=_name(fn),
            ) from exc
    if internal := sorted(k for k in m.values if _internal(k)):
        raise MigrationFailed(
            f"migrating thread {thread_id!r} (checkpoint {old_id}): the steps set {', '.join(internal)} in "
            "values, which are LangGraph's own channels, not state keys. Nothing was written; set state keys only.",
            thread_id=thread_id,
            checkpoint_id=old_id,
            from_version=start,
            step=None,
        )
    return _assemble(tup, m, tasks, start, migrations.version, next_version)


# -- tasks: which pending write belongs to which task, and its id anew --------------------


@dataclass(frozen=True, slots=True)
class _Task:
    name: str
    kind: Literal["pull", "push"]
    parts: tuple[str, ...]  # the id's parts after the node's name (kind marker and triggers / index)


def _task_id_func(checkpoint: Checkpoint) -> Callable[..., str]:
    # LangGraph's own, as `prepare_single_task` picks it (pinned by a test).
    from langgraph.pregel._algo import _uuid5_str, _xxhash_str

    return _xxhash_str if checkpoint.get("v", 1) > 1 else _uuid5_str


def _task_id(checkpoint: Checkpoint, ns: str, step: int, task: _Task, name: str | None = None) -> str:
    name = task.name if name is None else name
    id_bytes = binascii.unhexlify(str(checkpoint["id"]).replace("-", ""))
    task_ns = f"{ns}|{name}" if ns else name
    return _task_id_func(checkpoint)(id_bytes, task_ns, str(step), name, *task.parts)


def _node_names(checkpoint: Checkpoint) -> set[str]:
    names = {n for n in (checkpoint.get("versions_seen") or {}) if not n.startswith("__")}
    for channel in checkpoint.get("channel_versions") or {}:
        if channel.startswith(_BRANCH):
            names.add(channel[len(_BRANCH) :])
    for send in _sends(checkpoint):
        names.add(str(getattr(send, "node", "")))
    names.discard("")
    return names


def _sends(checkpoint: Checkpoint) -> list[Any]:
    found = (checkpoint.get("channel_values") or {}).get(_TASKS)
    return list(found) if isinstance(found, (list, tuple)) else []


def _trigger_sets(checkpoint: Checkpoint, name: str) -> list[tuple[str, ...]]:
    own = sorted(
        c
        for c in (checkpoint.get("channel_versions") or {})
        if c == f"{_BRANCH}{name}" or (c.startswith(_JOIN) and c.endswith(f":{name}"))
    )
    sets = [(f"{_BRANCH}{name}",), *((c,) for c in own), tuple(own)]
    return list(dict.fromkeys(sets))


def _tasks_of(checkpoint: Checkpoint, ns: str, step: int, task_ids: Iterable[str]) -> dict[str, _Task]:
    """The task each of `task_ids` is, found by computing LangGraph's task
    ids for the tasks this checkpoint can have. Ids that match none (a
    functional API call, a graph this does not know) are left out."""
    wanted = set(task_ids) - {_NULL_TASK_ID}
    if not wanted:
        return {}
    candidates: list[_Task] = []
    for name in sorted(_node_names(checkpoint)):
        candidates += [_Task(name, "pull", ("__pregel_pull", *t)) for t in _trigger_sets(checkpoint, name)]
    for idx, send in enumerate(_sends(checkpoint)):
        candidates.append(_Task(str(getattr(send, "node", "")), "push", ("__pregel_push", str(idx))))
    found: dict[str, _Task] = {}
    for task in candidates:
        tid = _task_id(checkpoint, ns, step, task)
        if tid in wanted:
            found[tid] = task
    return found


# -- the state's values -------------------------------------------------------------------


def _internal(channel: str) -> bool:
    return channel.startswith((_BRANCH, _JOIN, "__")) or channel == "__root__"


def _state_of(checkpoint: Checkpoint) -> tuple[dict[str, Any], frozenset[str]]:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    stored = checkpoint.get("channel_values") or {}
    values: dict[str, Any] = {}
    history: set[str] = set()
    for channel, value in stored.items():
        if _internal(channel):
            continue
        if isinstance(value, _DeltaSnapshot):
            history.add(channel)
        else:
            values[channel] = _copy(value)
    counters: Mapping[str, Any] = checkpoint.get("counters_since_delta_snapshot") or {}  # type: ignore[assignment]
    for channel in counters:
        history.add(channel)
        values.pop(channel, None)
    for channel in checkpoint.get("channel_versions") or {}:
        if not _internal(channel) and channel not in stored:
            history.add(channel)  # versioned, no value: rebuilt from writes
    return values, frozenset(history)


def _copy(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception:  # an object that cannot be copied is handed over as it is
        return value


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:
        return False


def _join_starts(channel: str) -> list[str]:
    """The nodes a ``join:A+B:END`` channel waits for."""
    return channel[len(_JOIN) :].rpartition(":")[0].split("+")


def _renamed_channel(channel: str, nodes: Mapping[str, str | None]) -> str | None:
    """`channel` with the node renames applied to the node names it holds
    (``branch:to:NODE``, ``join:A+B:NODE``); None if it only led to a
    removed node."""
    if channel.startswith(_BRANCH):
        node = channel[len(_BRANCH) :]
        if node in nodes:
            target = nodes[node]
            return None if target is None else f"{_BRANCH}{target}"
        return channel
    if channel.startswith(_JOIN):
        head, _, end = channel.rpartition(":")
        starts = head[len(_JOIN) :].split("+")
        starts = [nodes.get(s) or s for s in starts]
        if end in nodes:
            if nodes[end] is None:
                return None
            end = str(nodes[end])
        return f"{_JOIN}{'+'.join(starts)}:{end}"
    return channel


def _assemble(
    tup: CheckpointTuple,
    m: Migration,
    tasks: Mapping[str, _Task],
    start: int,
    to_version: int,
    next_version: Callable[[Any], Any],
) -> MigrationPlan:
    old = tup.checkpoint
    configurable = tup.config["configurable"]
    ns = configurable.get("checkpoint_ns", "") or ""
    old_values = old.get("channel_values") or {}
    old_versions = dict(old.get("channel_versions") or {})
    # Node renames and removals as one map: name -> its new name, or None
    # (gone, its turn going nowhere); a reroute is a removal whose turn goes on.
    node_map: dict[str, str | None] = {**m.node_renames, **m.removed_nodes}

    def target(channel: str) -> str | None:
        return _renamed_channel(channel, node_map) if _internal(channel) else m.key_renames.get(channel, channel)

    values: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    # Channels whose stored value the new checkpoint must carry anew (a
    # changed value, or an unchanged one under a new name): the version
    # they had (None: a new key). Each gets a version of its own.
    changed: dict[str, Any] = {}
    for channel in dict.fromkeys([*old_versions, *old_values]):
        if not _internal(channel):
            continue
        renamed = target(channel)
        if renamed is None:
            continue
        if channel in old_versions:
            versions[renamed] = old_versions[channel]
        if channel in old_values:
            value = old_values[channel]
            if channel.startswith(_JOIN) and isinstance(value, (set, frozenset)):
                # The nodes a join has seen finish, by their new names.
                moved = {node_map.get(n, n) for n in value} - {None}
                if moved != value:
                    value = type(value)(moved)
                    changed[renamed] = old_versions.get(channel)
            values[renamed] = value
        if renamed != channel:  # stored anew under its new name, empty or not
            changed[renamed] = old_versions.get(channel)
    for channel in m.history_keys:  # kept as they are
        if channel in old_versions:
            versions[channel] = old_versions[channel]
        if channel in old_values:
            values[channel] = old_values[channel]
    was_named = {m.key_renames.get(k, k): k for k in [*old_versions, *old_values] if not _internal(k)}
    for key, value in m.values.items():
        was = was_named.get(key, key)
        values[key] = value
        if was in old_versions:
            versions[key] = old_versions[was]
            if was != key or was not in old_values or not _same(old_values[was], value):
                changed[key] = old_versions[was]
        else:
            changed[key] = None
    # Sends addressed to renamed or removed nodes.
    sends = _sends(old)
    if sends and node_map:
        kept = []
        for send in sends:
            node = getattr(send, "node", None)
            if node in node_map:
                if node_map[node] is None:
                    continue
                send = copy.copy(send)
                send.node = node_map[node]
            kept.append(send)
        values[_TASKS] = kept
        changed[_TASKS] = old_versions.get(_TASKS)
    # A removed node's pending turn, rerouted: the node it goes to runs next.
    for name, to in m.removed_nodes.items():
        if to is not None and f"{_BRANCH}{name}" in old_versions:
            branch = f"{_BRANCH}{to}"
            values[branch] = values.get(branch)
            changed[branch] = versions.get(branch)
    top = _newest([*old_versions.values(), *versions.values()])
    new_versions: dict[str, Any] = {}
    for channel in changed:
        top = next_version(top)
        versions[channel] = new_versions[channel] = top
    seen: dict[str, dict[str, Any]] = {}
    for node, channels in (old.get("versions_seen") or {}).items():
        renamed_node = node_map.get(node, node)
        if renamed_node is None or (node in m.removed_nodes):
            continue
        entry: dict[str, Any] = {}
        for channel, version in channels.items():
            renamed = target(channel)
            if renamed is None:
                continue
            # What a node had seen of a channel carried anew, it has seen of
            # it now: a migration is not a write for a node to react to.
            if renamed in changed and changed[renamed] is not None and version == changed[renamed]:
                version = versions[renamed]
            entry[renamed] = version
        seen.setdefault(renamed_node, {}).update(entry)
    fields: dict[str, Any] = {
        **{k: v for k, v in old.items() if k not in ("channel_values", "channel_versions", "versions_seen")},
        "id": str(uuid6()),
        "ts": datetime.now(UTC).isoformat(),
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": seen,
    }
    updated_before: Any = old.get("updated_channels")
    if updated_before is not None:
        fields["updated_channels"] = [c for c in map(target, updated_before) if c is not None]
    checkpoint = cast(Checkpoint, fields)
    step_no = int((tup.metadata or {}).get("step", -1)) + 1
    writes, task_ids = _carried_writes(m, tasks, checkpoint, ns, step_no, node_map)
    moved_tasks = {
        old_tid: (
            f"{node_map.get(tasks[old_tid].name) or tasks[old_tid].name}:{new_tid}",
            f"{tasks[old_tid].name}:{old_tid}",
        )
        for old_tid, new_tid in task_ids.items()
    }
    metadata = {
        **(tup.metadata or {}),
        "source": "fork",
        STATE_VERSION_KEY: to_version,
        MIGRATED_FROM_KEY: {"checkpoint_id": str(old["id"]), STATE_VERSION_KEY: start},
    }
    parent = tup.parent_config or {"configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": ns}}
    return MigrationPlan(
        source=tup,
        from_version=start,
        to_version=to_version,
        parent_config=dict(parent),
        checkpoint=checkpoint,
        metadata=metadata,  # type: ignore[arg-type]
        new_versions=new_versions,
        writes=writes,
        tasks=moved_tasks,
        renames={k: v for k, v in m.key_renames.items() if k != v},
    )


def _newest(versions: list[Any]) -> Any:
    try:
        return max(versions, default=None)
    except TypeError:  # ints and strings (an imported thread): compare their counters
        return max(versions, key=lambda v: int(str(v).split(".")[0]))


def _carried_writes(
    m: Migration,
    tasks: Mapping[str, _Task],
    new: Checkpoint,
    ns: str,
    step: int,
    node_map: Mapping[str, str | None],
) -> tuple[dict[str, list[tuple[str, Any]]], dict[str, str]]:
    """The pending writes under the tasks' ids on the new checkpoint, with
    their channels renamed and their interrupts' ids made anew; and each
    task's new id."""
    from langgraph.types import Interrupt, _interrupt_id

    new_ids: dict[str, str] = {}
    for tid, task in tasks.items():
        name = node_map.get(task.name, task.name) if task.name in node_map else task.name
        if name is None:
            continue
        parts = task.parts
        if task.kind == "pull":
            renamed = [_renamed_channel(c, node_map) for c in parts[1:]]
            parts = (parts[0], *sorted(c for c in renamed if c is not None))
        new_ids[tid] = _task_id(new, ns, step, _Task(name, task.kind, parts))
    out: dict[str, list[tuple[str, Any]]] = {}
    for w in m.writes:
        if w.task_id == _NULL_TASK_ID:
            tid = w.task_id
        elif w.task_id in new_ids:
            tid = new_ids[w.task_id]
        else:
            logger.warning(
                "migrating thread %r: pending writes of task %s match no task of checkpoint %s; they are left out "
                "and the task runs again",
                m.thread_id, w.task_id, m.checkpoint_id,
            )  # fmt: skip
            continue
        channel = w.channel  # a key `rename` moved is already under its new name
        if _internal(channel) and channel not in (_INTERRUPT, _RESUME):
            moved = _renamed_channel(channel, node_map)
            if moved is None:
                continue
            channel = moved
        value = w.value
        if channel.startswith(_JOIN) and isinstance(value, str) and value in node_map:
            if node_map[value] is None:
                continue
            value = node_map[value]  # a node telling the join it finished, by its new name
        if channel == _INTERRUPT and w.task_id in new_ids:
            old_ns = _task_ns(ns, tasks[w.task_id].name, w.task_id)
            name = w.node or tasks[w.task_id].name
            new_ns = _task_ns(ns, name, tid)
            items = value if isinstance(value, (list, tuple)) else [value]
            remade = []
            for item in items:
                if isinstance(item, Interrupt):
                    answered = next((a for a in range(256) if _interrupt_id(old_ns, a) == item.id), None)
                    new_id = item.id if answered is None else _interrupt_id(new_ns, answered)
                    item = Interrupt(value=item.value, id=new_id)
                remade.append(item)
            value = type(value)(remade) if isinstance(value, (list, tuple)) else remade[0]
        out.setdefault(tid, []).append((channel, value))
    return out, new_ids


def _task_ns(ns: str, name: str, task_id: str) -> str:
    return f"{ns}|{name}:{task_id}" if ns else f"{name}:{task_id}"


# -- a subgraph waiting inside a migrated task --------------------------------------------


@dataclass(slots=True)
class CarriedCheckpoint:
    """A checkpoint of a subgraph, copied to its task's new namespace."""

    config: dict[str, Any]  # thread, new namespace, its parent's id there
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: dict[str, Any]
    writes: dict[str, list[tuple[str, Any]]]


def subgraph_tasks(root_ns: str, namespaces: Iterable[str]) -> list[str]:
    """The task ids of a checkpoint in `root_ns` that the subgraph
    namespaces among `namespaces` were run by (``NODE:TASK_ID`` one level
    below it)."""
    depth = root_ns.count("|") + 1 if root_ns else 0
    found = []
    for ns in namespaces:
        if not ns or ns.count("|") != depth or (root_ns and not ns.startswith(root_ns + "|")):
            continue
        found.append(ns.rsplit("|", 1)[-1].partition(":")[2])
    return found


def carry_subgraphs(migrated: MigrationPlan, tuples: Iterable[CheckpointTuple]) -> list[CarriedCheckpoint]:
    """The checkpoints of the subgraphs the migrated checkpoint's tasks
    ran, under the tasks' new namespaces, oldest first, parents first.

    LangGraph names a subgraph's namespace after the task that runs it, and
    a task's id after the checkpoint it runs from: a subgraph that stopped
    inside a task (an interrupt, a crash) finds its checkpoints again only
    under the task's new id. They are copied as they are (same ids, same
    values: the steps migrate the root graph's state), with their pending
    writes moved to their own tasks' new ids, and the interrupt ids of
    every level, the root's included, made anew."""
    root_ns = migrated.source.config["configurable"].get("checkpoint_ns", "") or ""
    by_ns: dict[str, list[CheckpointTuple]] = {}
    for tup in tuples:
        ns = tup.config["configurable"].get("checkpoint_ns", "") or ""
        if ns != root_ns and (not root_ns or ns.startswith(root_ns + "|")):
            by_ns.setdefault(ns, []).append(tup)
    join = (lambda seg: f"{root_ns}|{seg}") if root_ns else (lambda seg: seg)
    ns_map = {join(old_seg): join(new_seg) for new_seg, old_seg in migrated.tasks.values()}
    interrupt_ids: dict[str, str] = {}
    carried: list[CarriedCheckpoint] = []
    root_id = str(migrated.source.checkpoint["id"])
    for ns in sorted(by_ns, key=lambda n: n.count("|")):
        new_ns = ns_map.get(ns)
        if new_ns is None:
            continue  # a subgraph of a task that does not go on
        children = subgraph_tasks(ns, by_ns)
        kept = {str(t.checkpoint["id"]) for t in by_ns[ns]}
        for tup in sorted(by_ns[ns], key=lambda t: str(t.checkpoint["id"])):
            cp = tup.checkpoint
            step = int((tup.metadata or {}).get("step", -1)) + 1
            tasks = _tasks_of(cp, ns, step, [*(w[0] for w in tup.pending_writes or ()), *children])
            new_ids = {tid: _task_id(cp, new_ns, step, task) for tid, task in tasks.items()}
            for tid, task in tasks.items():
                ns_map[f"{ns}|{task.name}:{tid}"] = f"{new_ns}|{task.name}:{new_ids[tid]}"
                _note_interrupt_ids(interrupt_ids, f"{ns}|{task.name}:{tid}", f"{new_ns}|{task.name}:{new_ids[tid]}")
            writes: dict[str, list[tuple[str, Any]]] = {}
            for tid, channel, value in tup.pending_writes or ():
                writes.setdefault(new_ids.get(tid, tid), []).append((channel, value))
            parents = dict((tup.metadata or {}).get("parents") or {})
            metadata = {
                **(tup.metadata or {}),
                "parents": {
                    ns_map.get(k, k): (str(migrated.checkpoint["id"]) if v == root_id else v)
                    for k, v in parents.items()
                },
            }
            parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            config: dict[str, Any] = {"thread_id": tup.config["configurable"]["thread_id"], "checkpoint_ns": new_ns}
            if parent in kept:
                config["checkpoint_id"] = parent
            carried.append(
                CarriedCheckpoint(
                    {"configurable": config},
                    copy.copy(cp),
                    cast(CheckpointMetadata, metadata),
                    dict(cp.get("channel_versions") or {}),
                    writes,
                )
            )
    for new_seg, old_seg in migrated.tasks.values():
        _note_interrupt_ids(interrupt_ids, join(old_seg), join(new_seg))
    for item in carried:
        item.writes = {tid: _renew_interrupts(ws, interrupt_ids) for tid, ws in item.writes.items()}
    migrated.writes = {tid: _renew_interrupts(ws, interrupt_ids) for tid, ws in migrated.writes.items()}
    return carried


def _note_interrupt_ids(ids: dict[str, str], old_task_ns: str, new_task_ns: str) -> None:
    from langgraph.types import _interrupt_id

    for answered in range(16):  # the answers one task has given so far
        ids[_interrupt_id(old_task_ns, answered)] = _interrupt_id(new_task_ns, answered)


def _renew_interrupts(writes: list[tuple[str, Any]], ids: Mapping[str, str]) -> list[tuple[str, Any]]:
    from langgraph.types import Interrupt

    out = []
    for channel, value in writes:
        if channel == _INTERRUPT:
            items = value if isinstance(value, (list, tuple)) else [value]
            items = [
                Interrupt(value=i.value, id=ids[i.id]) if isinstance(i, Interrupt) and i.id in ids else i for i in items
            ]
            value = type(value)(items) if isinstance(value, (list, tuple)) else items[0]
        out.append((channel, value))
    return out
