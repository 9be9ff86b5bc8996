"""Importing threads from another checkpoint saver: the decisions, no I/O.

`DurableSaver.import_from` (`importer_async.py` and its generated sync twin)
reads a source saver through its public `list` API, one thread and namespace
at a time, oldest checkpoint first, and writes each checkpoint with `put` and
its pending writes with `put_writes`, the calls LangGraph itself makes. This
module holds what those calls need and what the import reports, plus
`open_source`, which opens a stock saver from a path or URL for the CLI.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, get_serializable_checkpoint_metadata

from .errors import ConfigError

# How many differences between a source checkpoint and its copy a report keeps.
MAX_REPORTED_DIFFERENCES = 100


@dataclass(slots=True)
class ImportReport:
    """What an import did. `differences` lists copies that did not read
    back as their source checkpoint did (empty when all is well, or when
    verification was off)."""

    threads: int = 0
    namespaces: int = 0
    checkpoints: int = 0  # written by this import
    skipped: int = 0  # already in the tiers (an import run again, or resumed)
    writes: int = 0  # pending writes written by this import
    verified: int = 0  # checkpoints read back and compared with their source
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def differ(self, what: str) -> None:
        if len(self.differences) < MAX_REPORTED_DIFFERENCES:
            self.differences.append(what)

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "namespaces": self.namespaces,
            "checkpoints": self.checkpoints,
            "skipped": self.skipped,
            "writes": self.writes,
            "verified": self.verified,
            "differences": list(self.differences),
            "ok": self.ok,
        }


def checkpoint_id(tup: CheckpointTuple) -> str:
    return str(tup.config["configurable"]["checkpoint_id"])


def parent_id(tup: CheckpointTuple) -> str | None:
    if not tup.parent_config:
        return None
    return tup.parent_config["configurable"].get("checkpoint_id")


def new_versions_for(tup: CheckpointTuple, parent_versions: Mapping[str, Any] | None) -> dict[str, Any]:
    """The channel versions to store with `tup`: those its parent does not
    hold (all of them when the parent was not imported: a source that
    pruned it). A value the source reads as absent is stored as empty."""
    versions = tup.checkpoint.get("channel_versions", {})
    if parent_versions is None:
        return dict(versions)
    return {ch: v for ch, v in versions.items() if parent_versions.get(ch) != v}


def writes_by_task(tup: CheckpointTuple) -> list[tuple[str, list[tuple[str, Any]]]]:
    """`tup`'s pending writes as `put_writes` calls: per task, in order (a
    write's index is its position, special channels aside, as LangGraph numbers them)."""
    tasks: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or []:
        tasks.setdefault(task_id, []).append((channel, value))
    return list(tasks.items())


def write_keys(tup: CheckpointTuple) -> list[tuple[str, str]]:
    return sorted((task_id, channel) for task_id, channel, _ in tup.pending_writes or [])


def differences(source: CheckpointTuple, copy: CheckpointTuple | None) -> list[str]:
    """How `copy` (read back from the tiers) differs from `source`."""
    where = f"thread {source.config['configurable']['thread_id']!r} checkpoint {checkpoint_id(source)}"
    if copy is None:
        return [f"{where}: not found after the import"]
    found = []
    if parent_id(copy) != parent_id(source):
        found.append(f"{where}: parent {parent_id(copy)} instead of {parent_id(source)}")
    a, b = source.checkpoint, copy.checkpoint
    for key in ("channel_versions", "versions_seen"):
        if a.get(key) != b.get(key):
            found.append(f"{where}: {key} differ")
    values_a, values_b = a.get("channel_values", {}), b.get("channel_values", {})
    for channel in sorted(set(values_a) | set(values_b)):
        if values_a.get(channel) != values_b.get(channel):
            found.append(f"{where}: channel {channel!r} differs")
    # As every saver stores metadata today: without LangGraph 0.2's "writes".
    if get_serializable_checkpoint_metadata({}, source.metadata) != dict(copy.metadata or {}):
        found.append(f"{where}: metadata differ")
    if _writes(source) != _writes(copy):
        found.append(f"{where}: pending writes differ")
    return found


def _writes(tup: CheckpointTuple) -> list[tuple[str, str, Any]]:
    # Stable: a task's writes keep their order.
    return sorted(tup.pending_writes or [], key=lambda w: (w[0], w[1]))


@contextlib.contextmanager
def open_source(spec: str) -> Iterator[BaseCheckpointSaver]:
    """A stock saver reading `spec`: a SqliteSaver file (a path, or
    ``sqlite:///path``) or a PostgresSaver database (``postgresql://`` URL).
    Raises ConfigError when the file is missing or the stock saver's package
    is not installed (``pip install 'langgraph-durable[import]'``)."""
    if spec.startswith(("postgresql://", "postgres://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise ConfigError(
                "importing from Postgres needs langgraph-checkpoint-postgres: pip install 'langgraph-durable[import]'"
            ) from exc
        with PostgresSaver.from_conn_string(spec) as saver:
            yield saver
        return
    path = spec.removeprefix("sqlite:///") if spec.startswith("sqlite:///") else spec
    if "://" in path:
        raise ConfigError(
            f"--from takes a SqliteSaver file (a path or sqlite:///path) or a postgresql:// URL, not {spec!r}."
        )
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise ConfigError(
            "importing from SQLite needs langgraph-checkpoint-sqlite: pip install 'langgraph-durable[import]'"
        ) from exc
    try:
        # Read-only: an import never changes its source.
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("SELECT 1 FROM checkpoints LIMIT 1")
    except sqlite3.Error as exc:
        raise ConfigError(f"{path!r} is not a SqliteSaver file that can be read ({exc}).") from exc
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()
