# WARNING: generated from importer_async.py by langgraph_durable/_codegen.py. DO NOT EDIT.
# Edit the async source and run `python -m langgraph_durable._codegen`.
"""`DurableSaver.import_from`: copy every thread of another checkpoint saver.

Threads are read from the source through its public `list` only, one
(thread, namespace) at a time, oldest checkpoint first so that a parent is
in place before its children, and written with the calls LangGraph makes
(`put` with the versions the parent does not hold, `put_writes` per task).
Running it again skips every checkpoint already in the tiers and adds
pending writes a copy lacks, so an interrupted import is resumed by running
it again. Afterwards each checkpoint is read back and compared with its
source (`importing.differences`).

This is the async source; ``importer.py`` is generated from it by
``python -m langgraph_durable._codegen``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from .errors import ConfigError
from .importing import (
    ImportReport,
    checkpoint_id,
    differences,
    new_versions_for,
    parent_id,
    write_keys,
    writes_by_task,
)

Progress = Callable[[int, int], None]


class Importer:
    """One import of `source` into a saver, through the saver's `list`,
    `put` and `put_writes` (passed in, so the saver decides how they write)."""

    def __init__(
        self,
        source: BaseCheckpointSaver,
        *,
        list_target: Callable[[RunnableConfig], Any],
        put: Callable[..., Any],
        put_writes: Callable[..., Any],
        verify: bool = True,
        progress: Progress | None = None,
    ) -> None:
        self.source = source
        self.list_target = list_target
        self.put = put
        self.put_writes = put_writes
        self.verify = verify
        self.progress = progress
        self.report = ImportReport()

    def run(self) -> ImportReport:
        threads = self._threads()
        self.report.threads = len(threads)
        self.report.namespaces = sum(len(nss) for nss in threads.values())
        if self.progress is not None:
            self.progress(0, len(threads))
        for done, (thread_id, namespaces) in enumerate(sorted(threads.items()), start=1):
            for ns in sorted(namespaces):
                self._thread(thread_id, ns)
            if self.progress is not None:
                self.progress(done, len(threads))
        return self.report

    def _threads(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        try:
            for tup in self.source.list(None):
                c = tup.config["configurable"]
                found.setdefault(str(c["thread_id"]), set()).add(c.get("checkpoint_ns", "") or "")
        except NotImplementedError as exc:
            raise ConfigError(
                f"the source {type(self.source).__name__} cannot list threads on this face ({exc}); "
                "use import_from for a sync-only saver, import_from for an async one."
            ) from exc
        return found

    def _thread(self, thread_id: str, ns: str) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        source = sorted([t for t in self.source.list(config)], key=checkpoint_id)
        have = {checkpoint_id(t): t for t in self.list_target(config)}
        versions: dict[str, Any] = {}
        for tup in source:
            cid, pid = checkpoint_id(tup), parent_id(tup)
            versions[cid] = tup.checkpoint.get("channel_versions", {})
            copy = have.get(cid)
            if copy is None:
                parent_versions = versions.get(pid) if pid is not None else {}
                parent: RunnableConfig = {
                    "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": pid}
                }
                self.put(parent, tup.checkpoint, tup.metadata, new_versions_for(tup, parent_versions))
                self.report.checkpoints += 1
            else:
                self.report.skipped += 1
            if copy is None or write_keys(copy) != write_keys(tup):
                # Idempotent: a write already stored is kept as it is.
                for task_id, writes in writes_by_task(tup):
                    self.put_writes(tup.config, writes, task_id)
                    self.report.writes += len(writes)
        if self.verify:
            copies = {checkpoint_id(t): t for t in self.list_target(config)}
            for tup in source:
                for difference in differences(tup, copies.get(checkpoint_id(tup))):
                    self.report.differ(difference)
                self.report.verified += 1
