"""`DurableSaver.aimport_from`: copy every thread of another checkpoint saver.

A stock saver's tables (`sources.TableAccess`) are read directly, every
value decoded by `sources.SafeDecoder` (nothing the source names is run;
a row that cannot be read safely is reported and skipped); any other saver
is read through its public `alist`, which decodes with its own serializer.
Threads are imported one (thread, namespace) at a time, oldest checkpoint
first so that a parent is in place before its children, and written with
the calls LangGraph makes (`put` with the versions the parent does not
hold, `put_writes` per task).

Before anything is written, every source thread is looked up in the tiers:
one that already holds checkpoints the source does not have is a different
history, and the import is refused (`sources.ImportConflict`) unless asked
to merge or to import under a thread prefix. Running it again skips every
checkpoint already in the tiers and adds pending writes a copy lacks, so an
interrupted import is resumed by running it again. Afterwards each checkpoint
is read back through the saver's own `list`, and the latest through its
`get_tuple`, and compared with its source (`sources.differences`).

This file is the async source: ``importer.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from ...errors import ConfigError, SerializationError
from .sources import (
    Allowed,
    ImportConflict,
    ImportReport,
    Rejected,
    SafeDecoder,
    SourceIds,
    SourceThread,
    TableAccess,
    allowed_types,
    checkpoint_id,
    conflicts,
    differences,
    new_versions_for,
    parent_id,
    renamed,
    source_ids,
    source_thread,
    write_keys,
    writes_by_task,
)

Progress = Callable[[int, int], None]

# How many conflicting threads an ImportConflict names.
NAMED_CONFLICTS = 5


class AsyncImporter:
    """One import of `source` into a saver, through the saver's `list`,
    `get_tuple`, `put` and `put_writes` (passed in, so the saver decides how
    they read and write). `tables`: direct access to a stock saver's tables
    (`sources.async_tables`), None to read `source` through its API."""

    def __init__(
        self,
        source: BaseCheckpointSaver,
        *,
        list_target: Callable[[RunnableConfig], Any],
        put: Callable[..., Any],
        put_writes: Callable[..., Any],
        get_target: Callable[[RunnableConfig], Any] | None = None,
        tables: TableAccess | None = None,
        allow: Iterable[Allowed | str | type] = (),
        merge: bool = False,
        thread_prefix: str = "",
        verify: bool = True,
        progress: Progress | None = None,
    ) -> None:
        if not isinstance(thread_prefix, str):
            raise ConfigError(f"thread_prefix must be a str, not {type(thread_prefix).__name__}.")
        self.source = source
        self.list_target = list_target
        self.get_target = get_target
        self.put = put
        self.put_writes = put_writes
        self.tables = tables
        self.decoder = SafeDecoder(allowed_types(allow), cipher=tables.cipher if tables is not None else None)
        self.merge = merge
        self.thread_prefix = thread_prefix
        self.verify = verify
        self.progress = progress
        self.report = ImportReport()
        self._writes_table: str | None = None
        self._task_path = False

    async def run(self) -> ImportReport:
        ids, bad_threads = await self._ids()
        for row in bad_threads:
            self.report.reject(row)
        plan = await self._plan(ids)
        self.report.threads = len(plan)
        self.report.namespaces = sum(len(ids[thread_id]) for thread_id, _ in plan)
        if self.progress is not None:
            self.progress(0, len(plan))
        for done, (thread_id, target) in enumerate(plan, start=1):
            for ns in sorted(ids[thread_id]):
                await self._thread(thread_id, target, ns)
            if self.progress is not None:
                self.progress(done, len(plan))
        return self.report

    # -- reading the source ---------------------------------------------------------

    async def _ids(self) -> tuple[SourceIds, list[Rejected]]:
        """Every thread, namespace and checkpoint id of the source."""
        if self.tables is None:
            if type(self.source).alist is BaseCheckpointSaver.alist:
                raise ConfigError(
                    f"the source {type(self.source).__name__} cannot be listed on this face of the import: "
                    "use import_from for a sync-only saver (SqliteSaver, PostgresSaver) and the async face "
                    "for an async-only one (AsyncSqliteSaver, AsyncPostgresSaver)."
                )
            found: SourceIds = {}
            async for tup in self.source.alist(None):
                c = tup.config["configurable"]
                namespaces = found.setdefault(str(c["thread_id"]), {})
                namespaces.setdefault(c.get("checkpoint_ns", "") or "", set()).add(checkpoint_id(tup))
            return found, []
        tables = self.tables.tables
        columns = await self.tables.fetch(tables.columns, ())
        has_checkpoints, self._writes_table, self._task_path = tables.layout(columns)
        if not has_checkpoints:
            raise ConfigError(
                f"the source {type(self.source).__name__} has no checkpoints table: check that it is the "
                "SqliteSaver file or PostgresSaver database your application wrote (and set up)."
            )
        return source_ids(await self.tables.fetch(tables.ids, ()))

    async def _read(self, thread_id: str, ns: str) -> SourceThread:
        """One thread and namespace of the source, oldest checkpoint first."""
        if self.tables is None:
            config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            return SourceThread(sorted([t async for t in self.source.alist(config)], key=checkpoint_id))
        tables, params = self.tables.tables, (thread_id, ns)
        checkpoints = await self.tables.fetch(tables.checkpoints, params)
        blobs = await self.tables.fetch(tables.blobs, params) if tables.kind == "postgres" else []
        writes = await self.tables.fetch(tables.writes(self._task_path), params) if self._writes_table else []
        return source_thread(tables, self.decoder, thread_id, ns, checkpoints, blobs, writes)

    # -- deciding what to import ----------------------------------------------------

    async def _plan(self, ids: SourceIds) -> list[tuple[str, str]]:
        """(source thread, thread in the tiers) for every thread to import.
        Raises ImportConflict, before anything is written, when a thread in
        the tiers already holds a different history and merge is off."""
        plan: list[tuple[str, str]] = []
        conflicting: list[tuple[str, int]] = []
        for thread_id in sorted(ids):
            target = self.thread_prefix + thread_id
            have: dict[str, set[str]] = {}
            try:
                async for tup in self.list_target({"configurable": {"thread_id": target}}):
                    c = tup.config["configurable"]
                    have.setdefault(c.get("checkpoint_ns", "") or "", set()).add(checkpoint_id(tup))
            except ConfigError as exc:  # an id the tiers cannot store (a NUL, too long, ...)
                self.report.reject(Rejected(thread_id, "", None, "thread", str(exc)))
                continue
            extra = conflicts(ids[thread_id], have)
            if extra and not self.merge:
                conflicting.append((target, extra))
            plan.append((thread_id, target))
        if conflicting:
            named = ", ".join(
                f"{t!r} ({n} checkpoint(s) the source does not have)" for t, n in conflicting[:NAMED_CONFLICTS]
            )
            if len(conflicting) > NAMED_CONFLICTS:
                named += f" and {len(conflicting) - NAMED_CONFLICTS} more"
            raise ImportConflict(
                f"{len(conflicting)} thread(s) of the source already hold a different history in the tiers: "
                f"{named}. Nothing was imported. Import the source's threads under new ids with "
                "thread_prefix='imported-' (command line: --thread-prefix imported-), or add the source's "
                "checkpoints to the existing threads with merge=True (--merge).",
                threads=[t for t, _ in conflicting],
            )
        return plan

    # -- one thread -----------------------------------------------------------------

    async def _thread(self, thread_id: str, target: str, ns: str) -> None:
        read = await self._read(thread_id, ns)
        for row in read.rejected:
            self.report.reject(row)
        source = [renamed(t, target) for t in read.tuples] if target != thread_id else read.tuples
        config: RunnableConfig = {"configurable": {"thread_id": target, "checkpoint_ns": ns}}
        try:
            have = {checkpoint_id(t): t async for t in self.list_target(config)}
        except ConfigError as exc:  # a namespace the tiers cannot store
            self.report.reject(Rejected(thread_id, ns, None, "namespace", str(exc)))
            return
        versions: dict[str, Any] = {}
        imported = []
        for tup in source:
            cid, pid = checkpoint_id(tup), parent_id(tup)
            copy = have.get(cid)
            if copy is None:
                # A parent that was not imported (pruned or rejected at the
                # source): this checkpoint stores every channel it lists.
                parent_versions = versions.get(pid) if pid is not None else {}
                parent: RunnableConfig = {
                    "configurable": {"thread_id": target, "checkpoint_ns": ns, "checkpoint_id": pid}
                }
                try:
                    await self.put(parent, tup.checkpoint, tup.metadata, new_versions_for(tup, parent_versions))
                except (ConfigError, SerializationError) as exc:  # this record only; nothing of it was written
                    self.report.reject(Rejected(thread_id, ns, cid, "checkpoint", f"the tiers refused it: {exc}"))
                    continue
                self.report.checkpoints += 1
            else:
                self.report.skipped += 1
            versions[cid] = tup.checkpoint.get("channel_versions", {})
            imported.append(tup)
            if copy is None or write_keys(copy) != write_keys(tup):
                # Idempotent: a write already stored is kept as it is.
                for task_id, writes in writes_by_task(tup):
                    try:
                        await self.put_writes(tup.config, writes, task_id, read.task_paths.get((cid, task_id), ""))
                    except (ConfigError, SerializationError) as exc:
                        what = f"pending writes of task {task_id!r}"
                        self.report.reject(Rejected(thread_id, ns, cid, what, f"the tiers refused them: {exc}"))
                        continue
                    self.report.writes += len(writes)
        if self.verify and imported:
            await self._verify(config, imported)

    async def _verify(self, config: RunnableConfig, imported: list[Any]) -> None:
        """Read the copies back as the application will (`list`, and
        `get_tuple` for the latest) and report every difference."""
        copies = {checkpoint_id(t): t async for t in self.list_target(config)}
        for tup in imported:
            for difference in differences(tup, copies.get(checkpoint_id(tup))):
                self.report.differ(difference)
            self.report.verified += 1
        if self.get_target is None:
            return
        latest = await self.get_target(config)
        newest = max([*copies, *(checkpoint_id(t) for t in imported)])
        c = config["configurable"]
        where = f"thread {c['thread_id']!r} namespace {c['checkpoint_ns']!r}"
        if latest is None:
            self.report.differ(f"{where}: reads as empty after the import (its latest checkpoint is {newest})")
            return
        if checkpoint_id(latest) != newest:
            self.report.differ(f"{where}: reads its latest checkpoint as {checkpoint_id(latest)}, not {newest}")
            return
        source = next((t for t in imported if checkpoint_id(t) == newest), None)
        if source is not None:
            for difference in differences(source, latest):
                self.report.differ(f"{difference} (as its latest checkpoint)")
