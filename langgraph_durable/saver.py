"""`DurableSaver`: one checkpointer object, sync and async, over 1-3 tiers.

The public class and its options. Its operations are written once, async,
in ``faces/ops_async.py`` (the sync face, ``faces/ops.py``, is generated from
it); a saver is a view (``faces/base.py``) of a runtime that holds the
tiers, the leases and the background work (``faces/runtime.py``).
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

# The variables, named with the options, are also importable from here.
from .environment import (
    ENV_LEASE_LINGER as ENV_LEASE_LINGER,
)
from .environment import (
    ENV_OLD_SIGNING_KEYS as ENV_OLD_SIGNING_KEYS,
)
from .environment import (
    ENV_POSTGRES_PREPARED_STATEMENTS as ENV_POSTGRES_PREPARED_STATEMENTS,
)
from .environment import (
    ENV_POSTGRES_URL as ENV_POSTGRES_URL,
)
from .environment import (
    ENV_REDIS_KEY_PREFIX as ENV_REDIS_KEY_PREFIX,
)
from .environment import (
    ENV_REDIS_TTL as ENV_REDIS_TTL,
)
from .environment import (
    ENV_REDIS_URL as ENV_REDIS_URL,
)
from .environment import (
    ENV_SERDE as ENV_SERDE,
)
from .environment import (
    ENV_SIGNING_KEY as ENV_SIGNING_KEY,
)
from .environment import (
    ENV_SQLITE as ENV_SQLITE,
)
from .environment import (
    ENV_WRITE as ENV_WRITE,
)
from .errors import ConfigError
from .metrics import MetricsHook
from .migrations import Migrations
from .model.backlog import WriteMode
from .model.roles import Role
from .option_groups import Archive, Integrity, Leases, Memory, Tiers, flattened, grouped
from .options import (
    Options,
    env_options,
    naming_the_variable,
)
from .retention import RetentionPolicy
from .tiers.registry import DEFAULT_SQLITE_PATH

if TYPE_CHECKING:
    from .tiers.supplied import PostgresPool, RedisClient
from .faces.base import checked_validator
from .faces.ops import SaverOps
from .faces.ops_async import AsyncSaverOps
from .validation import ValidationHook, Validator


class DurableSaver(SaverOps, AsyncSaverOps):
    """A LangGraph checkpointer that writes through SQLite -> Redis -> Postgres.

    Pass any non-empty subset of tiers. The same object serves ``graph.invoke``
    and ``graph.ainvoke``: sync methods use sync drivers, async methods use
    async drivers, and both share the local SQLite file.

    ``put`` returns when the tiers `write` names hold the checkpoint. A shared
    tier that is down is skipped behind a circuit breaker and caught up when
    it is back; if the write cannot be acknowledged, the checkpoint is
    withdrawn from the tiers that took it and `TierUnavailable` is raised. A
    value that cannot be serialized raises `SerializationError` before
    anything is written.

    Args:
        sqlite: path of the local SQLite file, ``":memory:"``, or None for no
            local tier.
        redis: a ``redis://`` URL, or None. A URL of any node of a Redis
            Cluster works as is (see `Tiers.redis_cluster`); for Redis Sentinel,
            ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``
            names the sentinels and the monitored primary's service name
            (the credentials are the primary's; sentinel port 26379 if
            omitted), and the primary is found again after a failover.
            Or a redis-py client of your own (``redis.Redis``,
            ``redis.asyncio.Redis`` or either ``RedisCluster``, made with
            ``decode_responses=False``, the default): the saver uses it on
            its face (sync or async methods) and opens a client of its own,
            to the same server, for the other. Yours is left open on close;
            its timeouts and retries are yours, so give it a
            ``socket_timeout`` if a stalled server must not hold a sync call.
        postgres: a ``postgresql://`` URL, or None. Or a psycopg pool of
            your own (``psycopg_pool.ConnectionPool`` or
            ``AsyncConnectionPool``), opened before the saver first uses it,
            for instance shared with a ``PostgresStore``::

                pool = AsyncConnectionPool(url, kwargs={"autocommit": True, "row_factory": dict_row})
                await pool.open()
                store = AsyncPostgresStore(pool)
                saver = DurableSaver(postgres=pool)
                graph = builder.compile(checkpointer=saver, store=store)

            The saver sets what it needs on each connection it borrows
            (autocommit, tuple rows, and no prepared statements if
            ``Tiers(postgres_prepared_statements=False)``) and puts the
            connection's own settings back when it returns it. The other
            face (the sync methods, for an async pool) gets a pool of its
            own to the same server. Yours is left open on close. A pool
            with a ``configure=`` or ``reset=`` callback needs
            ``Tiers(postgres_schema=)``: the other face's pool cannot run it, so
            a ``search_path`` it sets would hold on one face only
            (`ConfigError` otherwise).
        archive: ``s3://BUCKET/PREFIX`` of an S3-compatible object store, or
            an `Archive` with that URL and its options, or None. Every thread
            this saver writes is shipped there behind the steps, within
            `Archive.lag` seconds; `archive_idle` moves idle threads out of
            the hot tiers into it (their next read brings them back), and
            `restore` rebuilds the hot tiers from it. Never asked on a
            step's path, but for a thread that lives only there. Also
            ``LANGGRAPH_DURABLE_ARCHIVE_URL``.
        serde: the serializer (default: LangGraph's JsonPlusSerializer).
        signing_key: bytes or str (16 bytes or more). Makes each record's
            checksum an HMAC, so records planted without the key are rejected.
            Each tier records the key's fingerprint (never the key); a saver
            whose key does not match raises `ConfigError` at setup, before it
            reads anything. To rotate keys, give `Integrity.signing_keys`
            instead. Without either, and with a shared tier, every record is
            sealed with the store's own key: the first saver's ``setup()``
            creates a random one in the system of record (Postgres, else
            Redis), every replica reads it from there, and the local tier
            keeps a copy. A record planted by someone who cannot read that
            key fails verification; records that verify are decoded with
            ``serde`` as is, so the application's own types come back as
            themselves. Also ``LANGGRAPH_DURABLE_SIGNING_KEY``.
        write: which tiers must hold a record before ``put`` / ``put_writes``
            return. ``"shared"`` (default): the local journal (if there is a
            local tier) and at least one shared tier; a shared tier that is
            down or slow is skipped and caught up later, so no run fails
            while one shared tier answers. With all three tiers a run's
            write waits for Postgres (fenced) and the journal; Redis gets it
            shipped behind: a run's end ships what its thread owes before
            the lease is given back, and the replicator what a run still
            going wrote more than a second ago. ``"all"``: every tier, else
            `TierUnavailable` and nothing half-written. ``"local"``
            (write-behind): the local journal only, fsynced; a background
            replicator ships to Redis and Postgres in order (`lag` tells how
            far behind they are). Also ``LANGGRAPH_DURABLE_WRITE``.
        validators: resume validators (see `langgraph_durable.validation`),
            run in order before a graph resumes a thread; `add_validator`
            adds more. Unconfirmed non-resumable actions are always checked.
        on_validation: called with a `ValidationOutcome` after each validation;
            an async function is awaited in the async face (the sync face
            cannot wait for one: it logs that it did not run).
        app_version: stamped into every checkpoint's metadata (``app_version``)
            so `validation.pin_version` can tell which version wrote it.
        migrations: a `Migrations`: the version of the graph's state this
            code runs, stamped into every checkpoint (``state_version``),
            and the steps that bring a thread of an older version up to it
            before it resumes (written as a new checkpoint; the old one is
            pinned). A thread a newer version wrote is never run or written
            here (`NewerStateVersion`). See ``concepts/migrations.md``.
        retention: a `RetentionPolicy` (keep the newest N checkpoints per
            thread and namespace, those younger than T, delete or archive
            threads idle longer than T) that `apply_retention` applies by
            default; with ``every=``, the saver also sweeps in the background.
        metrics: a `langgraph_durable.metrics.MetricsHook` (or a list of
            them) called with a `TierCall` for every call to a tier (tier,
            operation, seconds, ok / miss / error / unavailable) and a
            `CorruptCopy` for every bad copy a read met (what was served
            instead, whether it was repaired). Ready-made: `TierStats` (counts
            and latency percentiles to read) and `OpenTelemetryMetrics` (the
            ``otel`` extra); both also report the journal backlog (`lag`). A
            hook that raises is logged once and never breaks a call.
        read_only: only look (what the command line's read commands use):
            a bad copy a read meets is reported, logged and counted, but
            nothing is repaired, withdrawn or quarantined, setup records
            nothing, nothing owed is shipped, and no store key is created;
            ``put`` / ``put_writes`` raise `ConfigError`. No SQLite file is
            created: a missing one is a `ConfigError` ("no store at PATH")
            without a shared tier, and left out with one.
        tiers: a `Tiers`: Redis's key prefix, cluster mode and TTL, the
            Postgres pool, schema and prepared statements, SQLite's lock wait
            and fsync, and the connect, call and drain timeouts.
        integrity: an `Integrity`: rotated signing keys, permissive
            decoding of unsigned records, what a read does with a record bad
            in every tier, and the largest record accepted.
        leases: a `Leases`: what a run does when another writer holds its
            thread (``on_busy``), the lease's TTL, and how long a run's lease
            is kept after it ends so reads stay local (``linger``).
        memory: a `Memory`: the memory budget, the read cache's share, a
            bound on the local file, and how often a growing list is stored
            whole.
        **other_tiers: the tier of a kind registered from outside the
            package (`langgraph_durable.tiers.registry`), by its keyword:
            a URL of its kind.
    """

    def __init__(
        self,
        *,
        sqlite: str | None = DEFAULT_SQLITE_PATH,
        redis: str | RedisClient | None = None,
        postgres: str | PostgresPool | None = None,
        archive: str | Archive | None = None,
        serde: SerializerProtocol | None = None,
        signing_key: bytes | str | None = None,
        write: WriteMode = "shared",
        validators: Sequence[Validator] = (),
        on_validation: ValidationHook | None = None,
        app_version: str | None = None,
        migrations: Migrations | None = None,
        retention: RetentionPolicy | None = None,
        metrics: MetricsHook | Sequence[MetricsHook] | None = None,
        read_only: bool = False,
        tiers: Tiers | None = None,
        integrity: Integrity | None = None,
        leases: Leases | None = None,
        memory: Memory | None = None,
        **other_tiers: Any,
    ) -> None:
        super().__init__(serde=serde)
        # Every option checked in one place (options.py), kept by concern,
        # before anything is made.
        options = Options.parse(
            **flattened(
                {
                    "sqlite": sqlite,
                    "redis": redis,
                    "postgres": postgres,
                    "archive": archive,
                    "signing_key": signing_key,
                    "write": write,
                    "retention": retention,
                    "read_only": read_only,
                    "tiers": Tiers() if tiers is None else tiers,
                    "integrity": Integrity() if integrity is None else integrity,
                    "leases": Leases() if leases is None else leases,
                    "memory": Memory() if memory is None else memory,
                }
            ),
            other_tiers=other_tiers,
        )
        # Nothing starts before every option has been checked (the retention
        # sweep last), so a constructor that raises leaves no thread behind.
        self._build(
            options,
            validators=validators,
            on_validation=on_validation,
            app_version=app_version,
            metrics=metrics,
            migrations=migrations,
        )

    # -- construction -----------------------------------------------------------

    @classmethod
    def from_urls(
        cls,
        *,
        sqlite: str | None = DEFAULT_SQLITE_PATH,
        redis: str | RedisClient | None = None,
        postgres: str | PostgresPool | None = None,
        **options: Any,
    ) -> DurableSaver:
        """Same as the constructor; reads well as ``with DurableSaver.from_urls(...) as saver``."""
        return cls(sqlite=sqlite, redis=redis, postgres=postgres, **options)

    @classmethod
    def from_env(cls, **options: Any) -> DurableSaver:
        """A saver from the ``LANGGRAPH_DURABLE_*`` environment variables:
        the tiers (``LANGGRAPH_DURABLE_SQLITE``, a path, ``:memory:`` or empty
        for none, default ``.langgraph_durable/checkpoints.sqlite``;
        ``LANGGRAPH_DURABLE_REDIS_URL``; ``LANGGRAPH_DURABLE_POSTGRES_URL``),
        the signing keys, the serializer (``module:attr``), the write mode,
        the archive and the rest of the option table's variables (the
        configuration page lists each with its keyword). Keyword options
        override them, a group's fields one by one: with
        ``LANGGRAPH_DURABLE_LEASE_LINGER=0``, ``from_env(leases=Leases(on_busy="wait"))``
        keeps the linger of 0 (a field left at its default takes the
        variable's value). An option may also be given by its flat name, as
        `options.env_options` reads the variables (``lease_linger=0``): the
        command line passes its flags so. An error about a value that came
        from a variable names the variable."""
        from_env = env_options(os.environ, DEFAULT_SQLITE_PATH)
        given = flattened(options, set_only=True)
        try:
            return cls(**grouped({**from_env, **given}))
        except ConfigError as exc:
            # Name the variable a value came from, where the message names its keyword.
            raise naming_the_variable(exc, from_env, given) from exc

    @property
    def tier_names(self) -> list[str]:
        """The configured tiers, nearest first."""
        tiers = self.options.tiers
        return [kind.keyword for kind in tiers.configured() if kind.role is not Role.LOCAL or self.sqlite_path]

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> DurableSaver:
        """A view of this saver that also rebuilds `extra_allowlist` types.

        LangGraph's ``compile()`` calls this with the types of the graph's
        state (under ``LANGGRAPH_STRICT_MSGPACK=true``). The clone shares this
        saver's runtime, so its connections, leases, background work and
        counters; only its decoding differs, including the strict decoding
        of unsigned shared-tier records. Closing either closes both."""
        clone = cast(DurableSaver, super().with_allowlist(extra_allowlist))
        if clone is self:
            if not self._codec.strict:
                return self
            clone = copy.copy(self)
        clone._codec = self._codec.with_allowlist(clone.serde, extra_allowlist)
        return clone

    def add_validator(self, validator: Validator) -> None:
        """Run `validator` (after those already registered) before every resume."""
        self._validators.append(checked_validator(validator))

    @property
    def unbuildable_as_data(self) -> bool:
        """Whether a value whose class this process cannot import is handed
        back as its stored data (as LangGraph hands back a class that was
        never importable) instead of refusing the read: for tools that read
        or move a store without the application's classes, such as the
        command line. Off by default: an application's reads rebuild its
        objects or say which class is missing."""
        return self._codec.plain_when_unbuildable

    @unbuildable_as_data.setter
    def unbuildable_as_data(self, value: bool) -> None:
        self._codec.plain_when_unbuildable = bool(value)

    @property
    def corruptions_detected(self) -> int:
        """Bad copies met by reads of this saver since it was created."""
        return self._runtime.policy.count

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Same format as the stock savers: zero-padded counter + random
        suffix, so versions compare correctly as strings."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"
