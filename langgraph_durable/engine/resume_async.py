"""Resume validation: the decision a run's first read leads to.

Before a graph resumes a thread, under its writer lease, the gates run in
this order: unconfirmed non-resumable actions reject the run; the version
guard refuses a checkpoint a newer state version wrote (`NewerStateVersion`);
migrations bring an older one up to the running version (`migrations.py`,
in memory until the run goes ahead); and the validators decide, on the
migrated state: resume, rewind to an earlier checkpoint (resumed from a
fresh fork of it, migrated too), or reject with a reason. Decisions are
plain values (`validation.py`), and what each means is decided in
`decisions.resume_step`; this room reads, writes what was decided
(a migrated checkpoint, a fork, the pin of what a migration replaced) and
reports.

This file is the async source: ``resume.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple, copy_checkpoint
from langgraph.checkpoint.base.id import uuid6

from ..errors import NewerStateVersion, ResumeRejected
from ..ledger import unconfirmed_message
from ..migrations import MigrationPlan, Migrations, carry_subgraphs, plan, subgraph_tasks
from ..model.decisions import resume_step
from ..model.pins import pin_entry, pins_of, without_pins
from ..validation import Reject, ValidationHook, ValidationOutcome, make_context, validator_name
from .concurrency import amaybe_await, refuse_awaitable

logger = logging.getLogger("langgraph_durable")


class AsyncResumeGate:
    """Validates one resume, given how to read the ledger, read a checkpoint
    and write the fork a rewind resumes from."""

    def __init__(
        self,
        ledger: Callable[..., Any],
        get: Callable[..., Any],
        put: Callable[..., Any],
        *,
        put_writes: Callable[..., Any] | None = None,
        record: Callable[..., Any] | None = None,
        migrations: Migrations | None = None,
        next_version: Callable[[Any], Any] | None = None,
        listing: Callable[..., Any] | None = None,
    ) -> None:
        """`ledger(thread_id)`, `get(config)`, `put(config, checkpoint,
        metadata, new_versions)`, `put_writes(config, writes, task_id)` and
        `record(thread_id, entry)` (awaited in the async face): the writes
        fenced by the run's lease. With `migrations`, the version guard and
        the migrations run first; `next_version(current)` gives a channel
        carried anew its version; `listing(config)` lists a thread's
        checkpoints in every namespace (a migration carries a waiting
        subgraph's along)."""
        self.ledger = ledger
        self.get = get
        self.put = put
        self.put_writes = put_writes
        self.record = record
        self.migrations = migrations
        self.next_version = next_version
        self.listing = listing

    async def validate(
        self, tup: CheckpointTuple, validators: Sequence[Any], hook: ValidationHook | None
    ) -> CheckpointTuple:
        """The checkpoint a run may resume from, given `tup`, the one it asked
        for: `tup` itself, an earlier one (rewind), or `ResumeRejected`."""
        configurable = tup.config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "") or ""
        requested = tup.checkpoint["id"]
        decisions: list[tuple[str, Any]] = []

        async def outcome(resumed_from: str | None) -> None:
            if hook is None:
                return
            try:
                done = hook(ValidationOutcome(thread_id, requested, resumed_from, tuple(decisions)))
                if True:  # ASYNC
                    await amaybe_await(done)  # an async hook is awaited
                else:
                    refuse_awaitable(done)  # the sync face cannot: it says why (logged)
            except Exception:  # a hook never breaks a run
                logger.exception("on_validation hook failed")

        entries = await self.ledger(thread_id)
        unconfirmed = sorted(k for k, e in without_pins(entries).items() if e.escalated())
        pins = pins_of(thread_id, entries)
        if unconfirmed:
            decisions.append(("unconfirmed_actions", Reject(unconfirmed_message(thread_id, unconfirmed))))
            await outcome(None)
            raise ResumeRejected(
                unconfirmed_message(thread_id, unconfirmed),
                reason="unconfirmed non-resumable action",
                checkpoint_id=requested,
                checkpoint=tup,
                validator="unconfirmed_actions",
                actions=unconfirmed,
            )
        self._guard(tup)
        candidate = tup
        while True:
            # Migrated in memory first, so validators judge the state this
            # version's code will read; written only if the run goes ahead.
            # A rewound-to checkpoint resumes from a fork, without pending writes.
            migrated = await self.upgrade(candidate, keep_writes=candidate is tup)
            context = make_context(migrated.tuple if migrated is not None else candidate, pins=pins)
            decision: Any = None
            name = ""
            for v in validators:
                name = validator_name(v)
                decision = v(context)
                if True:  # ASYNC
                    decision = await amaybe_await(decision)  # an async validator is awaited
                else:
                    refuse_awaitable(decision)  # the sync face cannot: it says so
                decisions.append((name, decision))
                if decision is not None:
                    break
            step = resume_step(candidate.checkpoint["id"], _parent_id(candidate), decision, name)
            if step.kind == "resume":
                if candidate is not tup:
                    candidate = await self._fork(candidate, requested, migrated)
                elif migrated is not None:
                    candidate = await self._migrate(migrated)
                await outcome(candidate.checkpoint["id"])
                return candidate
            reason = step.reason
            if step.kind == "rewind":
                previous = await self.get(
                    {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": step.target}}
                )
                if previous is not None:
                    logger.info("validator %s rewinds thread %r: %s", name, thread_id, step.reason)
                    self._guard(previous)
                    candidate = previous
                    continue
                reason = f"{step.reason}; and no earlier checkpoint to rewind to"
            await outcome(None)
            raise ResumeRejected(
                f"resuming thread {thread_id!r} from checkpoint {candidate.checkpoint['id']} was rejected by "
                f"{name}: {reason}",
                reason=reason,
                checkpoint_id=candidate.checkpoint["id"],
                checkpoint=candidate,
                validator=name,
            )

    def _guard(self, tup: CheckpointTuple) -> None:
        """The rolling-update guard: never run from a checkpoint a newer
        state version wrote."""
        if self.migrations is None:
            return
        written = self.migrations.version_of(tup.metadata)
        if written <= self.migrations.version:
            return
        thread_id = str(tup.config["configurable"]["thread_id"])
        raise NewerStateVersion(
            f"thread {thread_id!r} was written by state version {written} and this replica runs version "
            f"{self.migrations.version}: it neither runs nor writes it. Run it on a replica of version {written} or "
            "newer (retry the request elsewhere), or give this one Migrations(on_newer='wait') to wait for one.",
            thread_id=thread_id,
            version=written,
            running=self.migrations.version,
            checkpoint_id=str(tup.checkpoint["id"]),
            checkpoint=tup,
        )

    async def upgrade(self, tup: CheckpointTuple, *, keep_writes: bool = True) -> MigrationPlan | None:
        """`tup` brought up to the running state version, in memory (None:
        it is there). With `keep_writes`, its pending writes and the
        checkpoints of subgraphs its tasks ran go with it."""
        migrations = self.migrations
        if migrations is None or migrations.version_of(tup.metadata) >= migrations.version:
            return None
        assert self.next_version is not None
        configurable = tup.config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        tuples: list[CheckpointTuple] = []
        if keep_writes and self.listing is not None:
            tuples = list(await self.listing({"configurable": {"thread_id": configurable["thread_id"]}}))
        namespaces = {t.config["configurable"].get("checkpoint_ns", "") or "" for t in tuples}
        migrated = plan(
            tup, migrations, self.next_version, keep_writes=keep_writes, subgraph_tasks=subgraph_tasks(ns, namespaces)
        )
        if migrated is not None and len(namespaces) > 1:
            migrated.subgraphs = carry_subgraphs(migrated, tuples)
        return migrated

    async def _pin_source(self, migrated: MigrationPlan) -> None:
        """Pin the checkpoint a migration replaces: what a rolled-back
        deploy resumes from. First, so that no migrated checkpoint exists
        whose source retention could remove."""
        assert self.record is not None
        source = migrated.source.config["configurable"]
        label = f"before migration to state version {migrated.to_version}"
        entry = pin_entry(source.get("checkpoint_ns", "") or "", str(source["checkpoint_id"]), label)
        await self.record(str(source["thread_id"]), entry)

    async def _migrate(self, migrated: MigrationPlan) -> CheckpointTuple:
        """Write a migration: the pin of its source, the pending writes it
        carries over, then the checkpoint (the write that makes it the
        thread's latest). A crash part-way leaves the source the latest,
        migrated again by the next run; writes of a checkpoint never
        written are never read."""
        assert self.put_writes is not None
        configurable = migrated.source.config["configurable"]
        await self._pin_source(migrated)
        for sub in migrated.subgraphs:  # each before its children, writes before their checkpoint
            at = {"configurable": {**sub.config["configurable"], "checkpoint_id": sub.checkpoint["id"]}}
            for task_id, writes in sub.writes.items():
                await self.put_writes(at, writes, task_id)
            await self.put(sub.config, sub.checkpoint, sub.metadata, sub.new_versions)
        target = {
            "configurable": {
                "thread_id": configurable["thread_id"],
                "checkpoint_ns": configurable.get("checkpoint_ns", "") or "",
                "checkpoint_id": migrated.checkpoint["id"],
            }
        }
        for task_id, writes in migrated.writes.items():
            await self.put_writes(target, writes, task_id)
        stored = await self.put(migrated.parent_config, migrated.checkpoint, migrated.metadata, migrated.new_versions)
        logger.warning(
            "thread %r migrated from state version %s to %s (checkpoint %s, from %s, which is pinned)",
            configurable["thread_id"],
            migrated.from_version,
            migrated.to_version,
            migrated.checkpoint["id"],
            configurable["checkpoint_id"],
        )
        return CheckpointTuple(
            stored, migrated.checkpoint, migrated.metadata, migrated.source.parent_config, migrated.tuple.pending_writes
        )

    async def _fork(
        self, target: CheckpointTuple, rewound_from: str, migrated: MigrationPlan | None = None
    ) -> CheckpointTuple:
        """A rewind resumes from a fresh fork of `target`: the same state, no
        pending writes, so the tasks that ran on it run again in the world as
        it is now. The abandoned branch stays in the history. A target of an
        older state version is forked migrated (and pinned, as a migration's
        source is)."""
        configurable = target.config["configurable"]
        if migrated is not None:
            await self._pin_source(migrated)
            checkpoint = migrated.checkpoint
            new_versions: dict[str, Any] = dict(migrated.new_versions)
            base: dict[str, Any] = dict(migrated.metadata)
        else:
            checkpoint = copy_checkpoint(target.checkpoint)
            checkpoint["id"] = str(uuid6())
            new_versions = {}
            base = dict(target.metadata)
        checkpoint["ts"] = datetime.now(UTC).isoformat()
        metadata = cast(CheckpointMetadata, {**base, "source": "fork", "rewound_from": rewound_from})
        stored = await self.put(dict(target.config), checkpoint, metadata, new_versions)
        logger.warning(
            "thread %r rewound from %s to %s (resuming from fork %s)",
            configurable["thread_id"],
            rewound_from,
            target.checkpoint["id"],
            checkpoint["id"],
        )
        return CheckpointTuple(stored, checkpoint, metadata, target.config, [])


def _parent_id(tup: CheckpointTuple) -> str | None:
    return tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config is not None else None
