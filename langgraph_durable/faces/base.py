"""The saver as a view: a runtime and a codec.

`SaverBase` is what every `DurableSaver` object is: the `Runtime` it
shares with every view made from it (``runtime.py``: the tiers, the chains,
the leases, the background tasks, closing), the codec it decodes records
with, and the resume validators. `DurableSaver.with_allowlist` copies the
view with a codec of a wider allowlist; the runtime is the same object.
The operations are written once, in ``ops_async.py``; ``saver.py`` is the
public class and its options. This module also holds the small steps of
those operations that need no I/O.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointMetadata,
)

from ..archive.archiver import Archiver
from ..archive.archiver_async import AsyncArchiver
from ..archive.reports import ArchiveReport
from ..engine.chain import TierChain
from ..engine.chain_async import AsyncTierChain
from ..engine.leases.keeper import LeaseKeeper
from ..engine.leases.keeper_async import AsyncLeaseKeeper
from ..engine.sweeper import Retains
from ..errors import ConfigError, ThreadArchived, TierUnavailable
from ..metrics import MetricsHook, MetricsSink, PlainData
from ..migrations import Migrations
from ..model.codec import RecordCodec, thread_id_of
from ..model.health import Health
from ..model.records import key_fingerprint
from ..options import Options
from ..retention import Retained, RetentionPolicy, RetentionReport, age_seconds
from ..tiers.base import QuarantinedRecord
from ..validation import RUNTIME_KEY, VERSION_KEY, ValidationHook, Validator, is_resume_of_a_run
from .runtime import Runtime

logger = logging.getLogger("langgraph_durable")

# The runtime of a run whose explicit-checkpoint get_tuple was just validated.
_PROBE_EXPECTED: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "langgraph_durable_probe_expected", default=None
)

# How often a delete of an archived thread looks again for the lease a
# bring-back of it holds (`_hold_archived`).
BRING_BACK_POLL_S = 0.2

# How often a run waiting for a replica of a newer state version to take its
# thread (``Migrations(on_newer="wait")``) looks at the thread again.
NEWER_POLL_S = 0.5


def seconds_above_zero(duration: float | timedelta) -> float:
    """`duration` in seconds; it must be above 0."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if not seconds > 0:
        raise ConfigError(f"older_than must be a duration above 0, got {duration!r}")
    return seconds


def resolve_quarantined(
    records: Sequence[QuarantinedRecord | str], listed: Sequence[QuarantinedRecord]
) -> list[QuarantinedRecord]:
    """Quarantined records, given as records or as ``"tier:id"`` strings
    (`listed`: the quarantine, listed by the caller when a string is given)."""
    if not any(isinstance(r, str) for r in records):
        return [r for r in records if isinstance(r, QuarantinedRecord)]
    known = {f"{q.tier}:{q.id}": q for q in listed}
    out = []
    for r in records:
        if isinstance(r, QuarantinedRecord):
            out.append(r)
        elif r in known:
            out.append(known[r])
        else:
            raise ConfigError(
                f"no quarantined record {r!r}: ids look like 'sqlite:12' or 'redis:<thread>/<hex>'; "
                "list them with `langgraph-durable quarantine list` or saver.quarantined()."
            )
    return out


def report_plain_data(metrics: MetricsSink | None, type_name: str, record: str) -> None:
    """A type whose values a read hands back as stored data (once per saver)."""
    logger.warning(
        "%s holds %s, whose class could not be imported under that name where it was written either (a class "
        "defined inside a function, a nested class, a model made with create_model): its values are handed back "
        "as their stored data, as LangGraph does, and a state schema that names the class rebuilds them. Define "
        "it at a module's top level to get the objects back.",
        record,
        type_name,
    )
    if metrics is not None:
        metrics(PlainData(type_name, record))


def thread_archived(thread_id: str, where: str | None, *, looking: bool = False) -> ThreadArchived:
    if looking:  # a read-only saver with the archive: it never brings a thread back
        return ThreadArchived(
            f"thread {thread_id!r} is archived: this saver only looks, and looking never brings a thread back. "
            "Any run or read of an application's saver does, and so does `langgraph-durable restore THREAD`.",
            thread_id=thread_id,
            archive=where,
        )
    archive = f"'s3://{where}'" if where else "the archive's URL"
    return ThreadArchived(
        f"thread {thread_id!r} is archived (another saver of this store moved it to its archive) and this saver "
        f"has no archive to bring it back from: pass archive={archive} (or LANGGRAPH_DURABLE_ARCHIVE_URL). "
        "Nothing was written.",
        thread_id=thread_id,
        archive=where,
    )


def undo_count(report: RetentionReport, judged: Any) -> None:
    """Take back what `report.add(judged.retained)` counted: the thread was
    not changed as judged (a run has it), or is counted again as swept hot."""
    retained = judged.retained
    report.threads -= 1
    report.threads_deleted -= retained.thread_deleted
    report.checkpoints_deleted -= retained.deleted
    report.checkpoints_kept -= retained.kept
    if judged.unconfirmed:
        report.left_alone.remove(retained.thread_id)


def left_alone(report: RetentionReport, judged: Any) -> None:
    """The thread was not changed as judged (a run or a pin has it): counted
    as looked at, everything kept."""
    if judged.acts:
        undo_count(report, judged)
        report.add(Retained(judged.retained.thread_id, kept=judged.retained.kept + judged.retained.deleted))


def settles(judged: Any) -> bool:
    """Whether a verdict of "nothing goes" is noted in the thread's flag: its
    copy was read, and could be judged whole."""
    return judged.summary is not None and not (judged.acts or judged.unconfirmed or judged.unreadable)


def idle_for(judged: Any, now: float) -> float:
    """How idle the thread was when judged: archived again after its sweep
    only if no run wrote to it since (its newest checkpoint that old)."""
    found = (judged.flag or {}).get("summary") if judged.summary is None else judged.summary
    idle = age_seconds(found.get("newest_ts"), now) if isinstance(found, dict) else None
    return max(0.0, (idle or 0.0) - 1.0)


def rearchived(thread_id: str, report: ArchiveReport) -> None:
    """A thread a sweep brought back to prune it is archived again at once;
    one that could not be (a run took it meanwhile) stays hot, and the next
    `archive_idle` moves it once it is idle."""
    for outcome in report.threads:
        if not outcome.archived:
            logger.info("thread %r stays hot after retention pruned it: %s", thread_id, outcome.skipped)


def archived_runs_unsearched(exc: TierUnavailable) -> TierUnavailable:
    """`delete_for_runs` could not look through the archived threads."""
    return TierUnavailable(
        f"delete_for_runs deleted the runs from every thread in the hot tiers, but could not look through the "
        f"archived threads ({exc}). Call delete_for_runs again with the same run ids once the archive answers: "
        "an archived thread holding one of them is brought back and loses them too.",
        tier="archive",
    )


def checked_validator(validator: Validator) -> Validator:
    """`validator`, if it can be one (callable), else `ConfigError`."""
    if not callable(validator):
        raise ConfigError(f"a validator must be callable taking a ResumeContext, not {validator!r}.")
    return validator


class SaverBase(BaseCheckpointSaver[str]):
    """One view of a saver's runtime (see the module's docstring)."""

    _runtime: Runtime
    _codec: RecordCodec

    def _build(
        self,
        options: Options,
        *,
        validators: Sequence[Validator],
        on_validation: ValidationHook | None,
        app_version: str | None,
        metrics: MetricsHook | Sequence[MetricsHook] | None,
        migrations: Migrations | None = None,
    ) -> None:
        """The view and its runtime, from the checked options. Starts nothing
        that outlives a failure: the retention sweep starts last."""
        self.options = options
        tiers, integrity = options.tiers, options.integrity
        # Without a signing key anyone who can write to Redis or Postgres can
        # plant a record that verifies; decoding it with LangGraph's default
        # msgpack would import and call whatever it names. A local-only store
        # is as trusted as the process's own disk, so it keeps the default.
        keys = integrity.signing_keys
        strict = not keys[0] and tiers.shared and not integrity.permissive_decoding
        self._codec = RecordCodec(
            self.serde, signing_keys=keys, max_record_bytes=integrity.max_record_bytes, strict=strict
        )
        self._validators: list[Validator] = [checked_validator(v) for v in validators]
        self._on_validation = on_validation
        self.app_version = app_version
        if migrations is not None and not isinstance(migrations, Migrations):
            raise ConfigError(
                f"migrations= takes a Migrations (its version and steps), not {type(migrations).__name__}: "
                "DurableSaver(..., migrations=Migrations(version=2, steps={1: step})). See concepts/migrations.md."
            )
        self.migrations = migrations
        runtime = self._runtime = Runtime(options, codec=self._codec, metrics=metrics)
        self._codec.on_plain_data = functools.partial(report_plain_data, runtime.metrics)
        # What the saver was configured with (`sqlite_path` and `write` as
        # the runtime settled them: a reader without a local file has none).
        self.sqlite_path = runtime.sqlite_path
        self.redis_url = tiers.redis
        self.postgres_url = tiers.postgres
        self.redis_key_prefix = tiers.redis_key_prefix
        self.redis_cluster = tiers.redis_cluster
        self.redis_ttl = tiers.redis_ttl
        self.postgres_pool_size = tiers.postgres_pool_size
        self.postgres_prepared_statements = tiers.postgres_prepared_statements
        self.postgres_schema = tiers.postgres_schema
        self.connect_timeout = tiers.connect_timeout
        self.read_only = runtime.read_only
        self.write = runtime.write
        self.call_timeout = runtime.call_timeout
        self.drain_timeout = runtime.drain_timeout
        self.retention = options.retention.policy
        self.archive_url = runtime.archive_url
        self.archive_key_fingerprint = runtime.archive_key_fingerprint
        # Last. Every saver has `apply_retention`: the operations (ops.py) are its class's too.
        runtime.start_sweeps(cast(Retains, self))

    @property
    def archive_restores(self) -> int:
        """Threads brought back from the archive by a read (every view of
        the saver counts in one)."""
        return self._runtime.archive_restores

    # -- the runtime, seen from this view ------------------------------------------

    def _sync_chain(self) -> TierChain:
        """The sync face's chain, decoding with this view's codec."""
        return self._runtime.sync_chain().with_codec(self._codec)

    def _async_chain(self) -> AsyncTierChain:
        """The running event loop's chain, decoding with this view's codec."""
        return self._runtime.async_chain().with_codec(self._codec)

    def _sync_leases(self) -> LeaseKeeper:
        return self._runtime.sync_leases()

    def _async_leases(self) -> AsyncLeaseKeeper:
        return self._runtime.async_leases()

    def _archiver(self) -> Archiver:
        """The sync face's archiver (the runtime's: see its docstring on codecs)."""
        return self._runtime.archiver()

    def _aarchiver(self) -> AsyncArchiver:
        return self._runtime.aarchiver()

    # -- steps of the operations ---------------------------------------------------

    def _with_fingerprint(self, health: Health) -> Health:
        """`Health.store_key_fingerprint`: what an operator keeps to rebuild
        the store from its archive (`archive_key_fingerprint`)."""
        key = self._codec.key
        if not self._runtime.store_key or not key:
            return health
        return dataclasses.replace(health, store_key_fingerprint=key_fingerprint(key, full=True))

    def _first_call_of_run(self, config: RunnableConfig) -> bool:
        """Validate once per run: the loop's first get_tuple, root graph only.

        With an explicit checkpoint_id (time travel) the loop asks a second
        time, right away and with the same runtime object, for the latest
        checkpoint ("has the thread moved on?"); that probe is not a resume.
        LangGraph's Runtime has __slots__ and no weakref, so the explicit call
        leaves a marker in the current context that the very next call reads.
        """
        if not is_resume_of_a_run(config):
            return False
        configurable = config["configurable"]
        runtime = configurable[RUNTIME_KEY]
        probe_of = _PROBE_EXPECTED.get()
        _PROBE_EXPECTED.set(None)
        if probe_of is runtime and not configurable.get("checkpoint_id"):
            return False
        if configurable.get("checkpoint_id"):
            _PROBE_EXPECTED.set(runtime)
        return True

    def _stamped(self, metadata: CheckpointMetadata) -> CheckpointMetadata:
        if self.migrations is not None:
            metadata = self.migrations.stamp(metadata)
        if self.app_version is None:
            return metadata
        return cast(CheckpointMetadata, {**metadata, VERSION_KEY: self.app_version})

    def _next_version(self, current: Any) -> Any:
        return self.get_next_version(current, None)

    def _may_purge(self) -> None:
        if self.read_only:
            raise ConfigError("this saver is read-only (read_only=True): it never purges the quarantine.")

    def _retention_policy(self, policy: RetentionPolicy | None) -> RetentionPolicy:
        chosen = policy if policy is not None else self.retention
        if not isinstance(chosen, RetentionPolicy):
            raise ConfigError("no retention policy: pass one, or give the saver retention=RetentionPolicy(...).")
        return chosen

    def _archived_thread_of(self, config: RunnableConfig) -> str | None:
        """The thread a read found nothing of, if it may live in the archive."""
        if self.archive_url is None or self.read_only:
            return None
        thread_id = (config.get("configurable") or {}).get("thread_id")
        return None if thread_id is None else str(thread_id)

    def _pin_target(self, config: RunnableConfig) -> tuple[str, str, str | None]:
        configurable = config.get("configurable") or {}
        thread_id = thread_id_of(configurable.get("thread_id"), what="pin")
        ns = str(configurable.get("checkpoint_ns") or "")
        checkpoint_id = configurable.get("checkpoint_id")
        return thread_id, ns, checkpoint_id
