"""The saver's rarely changed options, in typed groups.

`DurableSaver` takes the options most applications set as keywords of its
own (the tiers, the serializer and key, the write mode, validators, the
app's version, retention, metrics, the archive). The knobs few need are
grouped by concern, each group a frozen dataclass whose fields have the
defaults::

    DurableSaver(
        sqlite="agents.sqlite",
        postgres=url,
        leases=Leases(on_busy="wait", linger=0),
        tiers=Tiers(postgres_schema="agents", connect_timeout=2),
    )

A group's values are checked with the other options when the saver is
made (`options.Options.parse`), so an error can say which other option a
value conflicts with. The environment variables and command-line flags
are unchanged: `DurableSaver.from_env` fills the groups from them.

A light module: the option table (`option_table`) reads its defaults
for the command line's ``--help`` without loading the saver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from .environment import DEFAULT_KEY_PREFIX

if TYPE_CHECKING:
    from .integrity import OnCorruption

MIB = 1024 * 1024


@dataclass(frozen=True)
class Tiers:
    """How the saver reaches and uses its tiers (``tiers=``).

    Args:
        redis_key_prefix: prefix of every Redis key this saver writes, for
            deployments sharing one Redis database. Also
            ``LANGGRAPH_DURABLE_REDIS_KEY_PREFIX``.
        redis_cluster: None (default) asks the server at setup whether it is
            a Redis Cluster node (``INFO cluster``) and, if so, uses redis-py's
            cluster client; True or False says so without asking. Each
            thread's keys share one hash slot, so every per-thread step is
            one transaction or script on one primary; ``list(None)``,
            ``delete_for_runs``, ``verify`` and ``repair`` scan every primary.
            A primary that is down (or a cluster answering CLUSTERDOWN)
            counts as the Redis tier being down. True with a
            ``redis+sentinel://`` URL raises `ConfigError`.
        redis_ttl: seconds after which a thread nobody used leaves Redis
            (every key a write touches expires that long after, and a thread
            in use has its keys' expiry pushed back, at most every tenth of
            it). Its next read is served from Postgres and copies it back.
            Needs ``postgres=``. None (default): keys never expire. Also
            ``LANGGRAPH_DURABLE_REDIS_TTL``.
        postgres_pool_size: maximum connections in each of the saver's own
            psycopg pools (one per face).
        postgres_prepared_statements: let psycopg prepare statements on the
            server (its ``prepare_threshold``), saving a parse and a plan per
            call. Pass False when a pooler in transaction mode sits in front
            of Postgres (PgBouncer ``pool_mode = transaction``) and does not
            track prepared statements (below 1.21, or ``max_prepared_statements
            = 0``): it runs each transaction in any server session, where a
            prepared statement is missing or another replica's, so calls fail
            with `ConfigError` saying so (or, worse, run the other statement).
            The tier keeps no other session state, so nothing else needs
            changing. Also
            ``LANGGRAPH_DURABLE_POSTGRES_PREPARED_STATEMENTS=false``.
        postgres_schema: the Postgres schema of the saver's tables, created
            by ``setup()`` if missing (looked up first, so a role that may
            not create schemas can use one made for it). Every statement
            names its tables in it, so two applications can share one
            database in two schemas, behind PgBouncer too, whatever their
            connections' ``search_path``. None (default): the tables are
            wherever the connections' ``search_path`` finds them (``public``
            unless you set it). Also ``LANGGRAPH_DURABLE_POSTGRES_SCHEMA``.
        sqlite_busy_timeout: seconds to wait for another process's SQLite lock.
        local_fsync: whether each commit of the local SQLite file is
            fsynced. None (default): with ``write="local"`` only, where the
            local journal is the only copy of an acknowledged checkpoint
            until it ships, so that it survives a power loss too. False with
            ``write="local"``: a step costs less (no fsync per commit), and an
            acknowledged checkpoint still survives the process being killed
            (an OOM kill, a deploy, a crash: SQLite's WAL is in the OS's
            page cache), but not the machine losing power or its kernel
            crashing before it ships (within ``lag()``). True: fsync in
            every write mode.
        connect_timeout: seconds before Redis or Postgres counts as unreachable
            when connecting (and waiting for a pooled Postgres connection);
            a refused connection fails at once. Each call after that is
            bounded by ``call_timeout``.
        call_timeout: seconds a call to Redis or Postgres may take before
            the tier counts as down, on both faces: the async face cancels
            the call; on the sync face it is Redis's socket timeout, and a
            Postgres call still waiting has its connection's socket shut down
            (a stalled server keeps the connection open and never answers),
            so the call raises and the connection is dropped. The tier is
            then skipped by its breaker; the run goes on with another shared
            tier, or fails with `TierUnavailable` if none answers. Calls that
            may take long on a healthy server (setup's migration, and those
            that walk a whole thread or every thread: verify, repair, prune,
            delete) get six times as long, and at least 60 s. None: no limit.
        drain_timeout: seconds ``close()`` / ``aclose()`` keep shipping what
            the shared tiers are owed before they give up (it stays in the
            local journal and is shipped at the next start). 0: close at once.
    """

    redis_key_prefix: str = DEFAULT_KEY_PREFIX
    redis_cluster: bool | None = None
    redis_ttl: float | None = None
    postgres_pool_size: int = 10
    postgres_prepared_statements: bool = True
    postgres_schema: str | None = None
    sqlite_busy_timeout: float = 30.0
    local_fsync: bool | None = None
    connect_timeout: float = 5.0
    call_timeout: float | None = 10.0
    drain_timeout: float = 10.0


@dataclass(frozen=True)
class Integrity:
    """Keys, decoding, and what a read does with a record bad everywhere
    (``integrity=``).

    Args:
        signing_keys: for key rotation, instead of the saver's
            ``signing_key=``: the new key first, then older keys still
            accepted when verifying (None accepts unsigned records, to start
            signing an existing store). `repair` re-seals old records under
            the new key. Also ``LANGGRAPH_DURABLE_OLD_SIGNING_KEYS`` (the
            older keys, comma-separated, after ``LANGGRAPH_DURABLE_SIGNING_KEY``).
        permissive_decoding: decode records that verify WITHOUT a key (those
            of a store written before it had one) with ``serde`` as given. By
            default such records, when read through a shared tier, are
            decoded with LangGraph's strict msgpack allowlist, so one planted
            in a shared tier cannot construct arbitrary objects; a type the
            allowlist blocks raises `UndecodableRecord` (never a plain dict).
            `repair` re-seals with the key only the unsigned records that
            decode strictly; to re-seal the others, once, when you know the
            store's unsigned records were written by your application alone,
            run ``repair()`` on a saver with ``permissive_decoding=True``.
        on_corruption: what to do when a record is bad in every tier:
            ``"fallback"`` (default) serves the newest intact ancestor
            checkpoint, ``"raise"`` raises `CorruptCheckpoint`, a callable
            does the fallback and receives each `CorruptionEvent` (an async
            one is awaited in the async face). Every bad copy is
            quarantined, logged and counted in any case.
        max_record_bytes: largest serialized channel value, pending write or
            checkpoint accepted by ``put`` / ``put_writes``; a larger one raises
            `RecordTooLarge` naming the channel, and nothing is written.
            None for no limit.
    """

    signing_keys: Sequence[bytes | str | None] | None = None
    permissive_decoding: bool = False
    on_corruption: OnCorruption = "fallback"
    max_record_bytes: int | None = 64 * MIB


@dataclass(frozen=True)
class Leases:
    """One writer per thread (``leases=``; `langgraph_durable.model.lease`).

    A run takes its thread's writer lease in the most authoritative tier
    before it reads the thread; each write checks and renews it in the same
    transaction; the run gives it back when it ends (the sync face before
    ``invoke`` returns, the async face just after), or keeps it for
    ``linger`` seconds. Direct ``put`` / ``put_writes`` calls (and
    ``update_state``) use this saver's lease if it holds one, else take one
    for the single write.

    Args:
        on_busy: when another writer is running the thread: ``"raise"``
            (default) raises `ThreadBusy` naming the holder (after looking
            again for up to a second, in case its run has just ended),
            ``"wait"`` waits for it to be released or to expire.
        ttl: seconds a graph run keeps its thread's writer lease after its
            last write. It only matters for a holder that crashed or hangs:
            another writer may take the lease over once it expired; the
            first run then gets `LeaseLost` at its next write, which is not
            stored.
        wait: longest wait with ``on_busy="wait"``, then `ThreadBusy`.
        linger: seconds a run's lease is kept after the run ends (default
            30; 0: given back at once). Meanwhile nobody else can write the
            thread, so this saver reads its latest state from the local cache
            alone, with no round trip to Redis or Postgres (with a local tier
            in front of a shared one; otherwise it does nothing). Another
            replica that wants to run the thread asks for the lease on the
            lease's tier (Postgres NOTIFY, else Redis PUBLISH) and this
            saver, listening on a connection of its own, gives it back at
            once (`langgraph_durable.engine.leases.handoff`); while it cannot
            hear that channel it keeps no lease. A request not heard costs
            the other replica a wait (``on_busy="wait"``) or `ThreadBusy`,
            never a fork. A kept lease expires in its tier 1.5 s after the
            listener last renewed it (every 0.5 s), so a replica that dies
            keeping leases holds them 1.5 s at most; another replica, even
            with ``on_busy="raise"``, waits that out and takes the thread
            over. ``delete_thread``, ``copy_thread`` (into the thread),
            ``delete_for_runs``, ``prune`` and ``apply_retention`` ask for a
            kept lease the same way first. A lease taken in a lower tier
            during an outage is not kept. ``release_thread`` and ``close``
            give kept leases back. Also ``LANGGRAPH_DURABLE_LEASE_LINGER``.
    """

    on_busy: Literal["raise", "wait"] = "raise"
    ttl: float = 30.0
    wait: float = 60.0
    linger: float = 30.0


@dataclass(frozen=True)
class Memory:
    """What the saver may hold in memory and in the local file (``memory=``).

    Args:
        budget: about how many bytes of memory this saver's memos of the
            threads it served may hold together (64 MiB by default): the
            lists it stored last, channel versions, its own latest writes
            under each lease, the read cache, records still to ship, kept
            leases, each with its share (`langgraph_durable.model.memory_budget`),
            least recently used out first. Forgetting only costs speed (a
            miss reads the tiers, a list is stored whole once), so a process
            serving any number of threads stays within it. Records owed to a
            tier that is down with no local journal, and the leases of runs
            going on, are not counted: forgetting them would lose writes.
            At least 1 MiB, else `ConfigError`.
        read_cache_bytes: reads from the local SQLite file are kept,
            serialized, up to about this many bytes, and served again while
            nothing has been committed to the file, by this process or
            another (`langgraph_durable.model.read_cache`). With SQLite alone,
            every ``get_tuple`` and page of ``list``; with shared tiers, only
            a thread's latest state read back under this saver's lease of
            it (see `Leases.linger`). What is served is what was verified
            when it was read; damage to the file without a commit is found
            by the next real read or by `verify`. 0: read the file every
            time. None (default): its share of ``budget`` (a quarter).
        local_max_bytes: bound the local SQLite file to about this many
            bytes in use: past it, the least recently used threads' local
            copies are evicted (never one the journal still owes a shared
            tier, nor one this saver is running); a read copies an evicted
            thread back from the shared tiers. Needs a shared tier. None
            (default): unbounded.
        list_snapshot_every: a list channel whose new value extends the
            previous one (a message list under ``add_messages`` or
            ``operator.add``) is stored as what it appended, with a whole copy
            at least every this many versions, so a read of it touches at most
            this many records (`langgraph_durable.model.deltas`). 1 (or 0) stores
            every value whole, as the stock savers do.
    """

    budget: int = 64 * MIB
    read_cache_bytes: int | None = None
    local_max_bytes: int | None = None
    list_snapshot_every: int = 16


@dataclass(frozen=True)
class Archive:
    """The archive on object storage, with its options (``archive=``; a
    plain ``s3://`` URL takes the defaults).

    Args:
        url: ``s3://BUCKET/PREFIX`` of an S3-compatible object store (AWS
            S3, MinIO, Cloudflare R2, GCS's S3 interface; the ``s3`` extra).
            Credentials, region and endpoint come from the standard
            ``AWS_*`` variables (an ``http://`` ``AWS_ENDPOINT_URL`` is
            allowed). Also ``LANGGRAPH_DURABLE_ARCHIVE_URL``.
        lag: seconds within which a record written reaches the archive
            while the object store answers (default 60): the replica ships
            every thread written since its last pass every half of it.
        key_fingerprint: the full fingerprint of the store's key
            (``hmac-sha256:`` and 64 hex digits), as `health` and
            ``langgraph-durable doctor`` print it: needed only to rebuild a
            store from its archive after losing every hot tier (the copy of
            the key the archive keeps is taken on that word alone, never on
            the bucket's). Also ``LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT``.
    """

    url: str
    lag: float = 60.0
    key_fingerprint: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            from .errors import ConfigError

            raise ConfigError(
                f"Archive(url=) takes the archive's s3://BUCKET/PREFIX, not {self.url!r}; for no archive, "
                "pass archive=None."
            )


# The groups by keyword, and the name each field has inside the checks
# (`Options.parse`), where every option is one flat name.
GROUPS: dict[str, type[Any]] = {"tiers": Tiers, "integrity": Integrity, "leases": Leases, "memory": Memory}
_PREFIXED = {"leases": "lease_", "archive": "archive_", "retention": "retention_"}
_RENAMED = {("memory", "budget"): "memory_budget", ("leases", "on_busy"): "on_busy"}


def checked_name(keyword: str, field: str) -> str:
    """The flat name `Options.parse` knows a group's field by."""
    return _RENAMED.get((keyword, field)) or _PREFIXED.get(keyword, "") + field


def spelled(keyword: str, field: str | None = None) -> str:
    """How a user writes an option, for errors: ``write=``,
    ``Leases(linger=)``."""
    if field is None:
        return f"{keyword}="
    cls = {**GROUPS, "archive": Archive}[keyword]
    return f"{cls.__name__}({field}=)"


def group_defaults(cls: type[Any]) -> dict[str, Any]:
    """A group's fields and their defaults."""
    return {f.name: f.default for f in fields(cls)}


def flattened(given: Mapping[str, Any], *, set_only: bool = False) -> dict[str, Any]:
    """The saver's keywords as `Options.parse` takes them: each group's
    fields under their flat names, an `Archive` as its URL and options.
    With `set_only`, a group's fields left at their default are left out
    (`from_env`: the environment fills them)."""
    out: dict[str, Any] = {}
    for keyword, value in given.items():
        cls = GROUPS.get(keyword)
        if cls is not None and value is not None:
            if not isinstance(value, cls):
                from .errors import ConfigError

                raise ConfigError(
                    f"{keyword}= takes a langgraph_durable.{cls.__name__}(...), not {type(value).__name__}: "
                    f"for example {keyword}={cls.__name__}(...) with the fields to change."
                )
            defaults = group_defaults(cls)
            for name, default in defaults.items():
                field = getattr(value, name)
                if not set_only or field != default:
                    out[checked_name(keyword, name)] = field
        elif keyword == "archive" and isinstance(value, Archive):
            out["archive"] = value.url
            for name, default in group_defaults(Archive).items():
                if name != "url" and (not set_only or getattr(value, name) != default):
                    out[checked_name("archive", name)] = getattr(value, name)
        elif cls is None:
            out[keyword] = value
    return out


def grouped(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of `flattened`: flat names (the environment's, the
    command line's) as the saver's keywords, each group built from the
    fields it has. An archive's options without its URL are dropped, as
    they mean nothing without an archive; a wrong key fingerprint among
    them is still said."""
    out: dict[str, Any] = {}
    fields_of: dict[str, dict[str, Any]] = {}
    by_flat = {checked_name(k, f): (k, f) for k, cls in GROUPS.items() for f in group_defaults(cls)}
    by_flat.update({checked_name("archive", f): ("archive", f) for f in group_defaults(Archive) if f != "url"})
    for name, value in flat.items():
        if name in by_flat:
            keyword, field = by_flat[name]
            fields_of.setdefault(keyword, {})[field] = value
        else:
            out[name] = value
    for keyword, values in fields_of.items():
        if keyword == "archive":
            url = out.get("archive")
            if isinstance(url, str) and url:
                out["archive"] = Archive(url, **values)
            elif values.get("key_fingerprint") is not None:
                archive_key_fingerprint_of(values["key_fingerprint"])  # a wrong one is said, even unused
            continue
        out[keyword] = GROUPS[keyword](**values)
    return out


FINGERPRINT_SCHEME = "hmac-sha256:"


def archive_key_fingerprint_of(value: object) -> str | None:
    """``Archive(key_fingerprint=)`` checked: the full fingerprint of a key
    (``hmac-sha256:`` and 64 hex digits, as `doctor` prints it), or None."""
    if value is None:
        return None
    text = value.strip().lower() if isinstance(value, str) else ""
    digits = text.removeprefix(FINGERPRINT_SCHEME)
    if len(digits) == 64 and all(c in "0123456789abcdef" for c in digits):
        return FINGERPRINT_SCHEME + digits
    shown = value if isinstance(value, str) else type(value).__name__
    short = " (the 16-digit form the tiers record is not enough to vouch for a key)" if len(digits) == 16 else ""
    from .errors import ConfigError

    raise ConfigError(
        f"Archive(key_fingerprint=) got {shown!r}{short}: give the store key's full fingerprint, "
        "hmac-sha256: and 64 hex digits, as `langgraph-durable doctor` prints it."
    )
