"""The saver's options, grouped by concern, checked in one place and read
from the environment in one place.

`DurableSaver(...)` takes its keywords and option groups
(`option_groups`); their values, each by a flat name, go to
`Options.parse`, which checks every one and returns them as the groups the
rooms below read: the tiers and their connections, integrity and keys,
leases, the write mode, retention, and the limits. `env_options` reads
the ``LANGGRAPH_DURABLE_*`` variables into the same flat names
(`DurableSaver.from_env`), and an error about a value that came from a
variable names the variable.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .archive.replica import DEFAULT_ARCHIVE_LAG_S
from .archive.store_async import parse_archive_url
from .environment import ENV_OLD_SIGNING_KEYS, ENV_SIGNING_KEY
from .errors import ConfigError
from .integrity import OnCorruption
from .migrations import Migrations
from .model.backlog import WRITE_MODES, WriteMode
from .model.codec import serde_from_spec
from .model.lease import (
    DEFAULT_LEASE_LINGER_S,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEASE_WAIT_S,
    DEFAULT_ON_BUSY,
    ON_BUSY_CHOICES,
)
from .model.memory_budget import MemoryBudget
from .model.roles import Role
from .option_groups import archive_key_fingerprint_of
from .option_table import OPTIONS, VARIABLES, variables
from .retention import RetentionPolicy
from .tiers.postgres.sql import MAX_SCHEMA_BYTES
from .tiers.redis.tier_async import check_url as check_redis_url
from .tiers.registry import BUILT_IN, POSTGRES, REDIS, SQLITE, TierKind, kind_named, kinds
from .tiers.supplied import Supplied, supplied_postgres, supplied_redis
from .tiers.tier_kind import register

# The keyword arguments `env_options` fills from the environment, and the
# variables they come from (for its errors; a signing key's, a serializer's
# and a flag's errors name their variable themselves).
ENV_OF_KEYWORD = {o.flat: o.env for o in VARIABLES if o.reading in ("text", "seconds") and o.env}
SPELLED = {o.flat: o.spelled for o in VARIABLES}


def check_postgres_schema(schema: object, pool: Supplied | None) -> None:
    """``postgres_schema=``: a schema name Postgres keeps whole. A pool of
    the caller's that sets its connections up with a callback (``configure=``
    or ``reset=``, typically a ``search_path``) needs one: the other face's
    pool is the saver's own and cannot run the caller's callback (an async
    one on sync connections, or the other way round), so without a schema
    named here the two faces would read and write different tables."""
    if schema is not None and (
        not isinstance(schema, str)
        or not schema
        or "\x00" in schema
        or len(schema.encode()) > MAX_SCHEMA_BYTES
        or schema.startswith("pg_")
    ):
        raise ConfigError(
            f"Tiers(postgres_schema=) must be a schema name of 1 to {MAX_SCHEMA_BYTES} bytes not starting with pg_ "
            f"(Postgres reserves those), or None for the connections' search_path; got {schema!r}."
        )
    if schema is None and pool is not None and pool.callbacks:
        raise ConfigError(
            f"postgres= got a psycopg pool with a {' and '.join(pool.callbacks)} callback: the saver serves its "
            "other face (the sync methods for an async pool, which LangGraph calls too) from a pool of its own, "
            "which cannot run your callback, so a search_path it sets would hold on one face only and the two "
            "faces would use different tables. Name the schema: DurableSaver(postgres=pool, "
            "tiers=Tiers(postgres_schema='...')) (the saver then names its tables in that schema on both faces, creating it "
            "at setup if needed; 'public' for the default one)."
        )


@dataclass(frozen=True)
class TierOptions:
    """Which tiers, and how to reach them."""

    urls: Mapping[str, str]
    """Where each configured tier is, by its kind's keyword: the file or
    URL given, or where a given client or pool points."""
    redis_key_prefix: str
    redis_cluster: bool | None
    redis_ttl: float | None
    postgres_pool_size: int
    postgres_prepared_statements: bool
    postgres_schema: str | None
    """The schema of the saver's tables (None: the connections' search_path)."""
    sqlite_busy_timeout: float
    connect_timeout: float
    call_timeout: float | None
    drain_timeout: float
    supplied: Mapping[str, Supplied] = field(default_factory=dict)
    """The clients and pools the caller passed instead of URLs, by kind
    (theirs to close)."""

    def __post_init__(self) -> None:
        one_tier_per_role(self.urls)
        # The kinds as they are now: a kind unregistered later stays this saver's.
        object.__setattr__(self, "_kinds", tuple(kind for kind in kinds() if kind.keyword in self.urls))

    @property
    def sqlite(self) -> str | None:
        return self.urls.get(SQLITE.keyword)

    @property
    def redis(self) -> str | None:
        return self.urls.get(REDIS.keyword)

    @property
    def postgres(self) -> str | None:
        return self.urls.get(POSTGRES.keyword)

    @property
    def redis_client(self) -> Supplied | None:
        """The redis-py client the caller passed as ``redis=``."""
        return self.supplied.get(REDIS.keyword)

    @property
    def postgres_pool(self) -> Supplied | None:
        """The psycopg pool the caller passed as ``postgres=``."""
        return self.supplied.get(POSTGRES.keyword)

    @property
    def shared(self) -> bool:
        """Whether a shared tier is configured."""
        return any(kind.role is not Role.LOCAL for kind in self.configured())

    def configured(self) -> list[TierKind]:
        """The kinds of the configured tiers, nearest first, as registered
        when the options were checked."""
        return list(self._kinds)  # type: ignore[attr-defined]

    def url(self, kind: TierKind) -> str | None:
        """Where `kind`'s tier is (None: not configured)."""
        return self.urls.get(kind.keyword)

    def arguments(self, kind: TierKind, *, asynchronous: bool) -> dict[str, Any]:
        """The keyword arguments of a shared tier's class on one face, besides
        its URL (the kind's ``arguments`` hook): the caller's pool or client
        if it serves that face. One bound for a call on both faces:
        `call_timeout`."""
        make = kind.hook("arguments")
        if kind.role is Role.LOCAL or make is None:
            raise ValueError(f"{kind.keyword} is not a shared tier")
        arguments: dict[str, Any] = make(self, self.supplied.get(kind.keyword), asynchronous)
        return arguments


@dataclass(frozen=True)
class IntegrityOptions:
    """Keys, decoding and what a read does with a bad copy."""

    signing_keys: list[bytes]
    """The accepted keys, the sealing key first; b"" stands for unsigned."""
    permissive_decoding: bool
    on_corruption: OnCorruption
    max_record_bytes: int | None

    @property
    def store_key(self) -> bool:
        """No key of the user's: seal with the store's own
        (`AsyncTierChain._adopt_store_key`)."""
        return not any(self.signing_keys)


@dataclass(frozen=True)
class WriteOptions:
    """When a write returns, and how lists are stored."""

    mode: WriteMode
    list_snapshot_every: int
    # Whether each local commit is fsynced (None: with write="local" only).
    local_fsync: bool | None = None

    @property
    def fsync(self) -> bool:
        """Whether the local tier fsyncs each commit."""
        return self.mode == "local" if self.local_fsync is None else self.local_fsync


@dataclass(frozen=True)
class RetentionOptions:
    policy: RetentionPolicy | None
    every: float | None
    rate: float | None


@dataclass(frozen=True)
class Limits:
    """What the saver may hold on disk and in memory."""

    local_max_bytes: int | None
    read_cache_bytes: int | None
    memory_budget: int
    budget: MemoryBudget
    """`memory_budget` shared out among the saver's memos."""


@dataclass(frozen=True)
class LeaseOptions:
    """The writer lease of each thread (`engine.leases.book.LeaseBook`)."""

    ttl: float
    on_busy: str
    wait: float
    linger: float


@dataclass(frozen=True)
class ArchiveOptions:
    """The archive on object storage (`archive/`)."""

    url: str | None
    lag: float
    key_fingerprint: str | None


@dataclass(frozen=True)
class Options:
    tiers: TierOptions
    integrity: IntegrityOptions
    write: WriteOptions
    retention: RetentionOptions
    limits: Limits
    leases: LeaseOptions
    archive: ArchiveOptions
    read_only: bool

    @classmethod
    def parse(
        cls,
        *,
        sqlite: str | os.PathLike[str] | None,
        redis: object,
        postgres: object,
        signing_key: bytes | str | None,
        signing_keys: Sequence[bytes | str | None] | None,
        permissive_decoding: bool,
        redis_key_prefix: str,
        redis_cluster: bool | None,
        redis_ttl: float | None,
        postgres_pool_size: int,
        postgres_prepared_statements: bool,
        postgres_schema: str | None,
        sqlite_busy_timeout: float,
        connect_timeout: float,
        on_corruption: OnCorruption,
        max_record_bytes: int | None,
        write: WriteMode,
        local_fsync: bool | None,
        call_timeout: float | None,
        drain_timeout: float,
        list_snapshot_every: int,
        local_max_bytes: int | None,
        read_cache_bytes: int | None,
        memory_budget: int,
        retention: RetentionPolicy | None,
        lease_ttl: float = DEFAULT_LEASE_TTL_S,
        on_busy: str = DEFAULT_ON_BUSY,
        lease_wait: float = DEFAULT_LEASE_WAIT_S,
        lease_linger: float = DEFAULT_LEASE_LINGER_S,
        archive: str | None = None,
        archive_lag: float = DEFAULT_ARCHIVE_LAG_S,
        archive_key_fingerprint: str | None = None,
        read_only: bool,
        other_tiers: Mapping[str, object] | None = None,
    ) -> Options:
        """Every option checked, or the first that is wrong as a
        `ConfigError` that says what it takes. `other_tiers`: the tiers of
        kinds registered from outside the package, by keyword."""
        if isinstance(sqlite, (str, os.PathLike)) and not os.fspath(sqlite):
            sqlite = None  # '' names no file: no local tier, as the environment's '' does
        if write not in WRITE_MODES:
            raise ConfigError(
                f"write= must be one of {', '.join(map(repr, WRITE_MODES))}, got {write!r}: "
                '"shared" (default) waits for one shared tier, "all" for every tier, "local" for the local journal.'
            )
        others = other_tiers_of(other_tiers or {})
        shared = (
            redis is not None or postgres is not None or any(role is not Role.LOCAL for _, _, role in others.values())
        )
        if write == "local" and (sqlite is None or not shared):
            raise ConfigError(
                'write="local" (write-behind) needs a local tier (sqlite=) and a shared one (redis= or postgres=).'
            )
        if local_fsync is not None and (not isinstance(local_fsync, bool) or sqlite is None):
            raise ConfigError(
                "Tiers(local_fsync=) says whether each commit of the local SQLite file is fsynced: True, False, or None "
                f'(fsynced with write="local" only); it needs sqlite=. Got {local_fsync!r}.'
            )
        if call_timeout is not None:
            seconds_of("Tiers(call_timeout=)", call_timeout, "a positive number of seconds or None")
        seconds_of("Tiers(drain_timeout=)", drain_timeout, "0 or more seconds", zero=True)
        seconds_of("Tiers(connect_timeout=)", connect_timeout, "a positive number of seconds")
        seconds_of("Tiers(sqlite_busy_timeout=)", sqlite_busy_timeout, "0 or more seconds", zero=True)
        if not isinstance(redis_key_prefix, str) or not redis_key_prefix:
            raise ConfigError(f"Tiers(redis_key_prefix=) must be a non-empty str, got {redis_key_prefix!r}.")
        if redis_cluster is not None and not isinstance(redis_cluster, bool):
            raise ConfigError(
                f"Tiers(redis_cluster=) must be True, False or None (asked of the server), got {redis_cluster!r}."
            )
        if not isinstance(permissive_decoding, bool):
            raise ConfigError(f"Integrity(permissive_decoding=) must be True or False, got {permissive_decoding!r}.")
        if not isinstance(list_snapshot_every, int) or isinstance(list_snapshot_every, bool) or list_snapshot_every < 0:
            raise ConfigError(
                f"Memory(list_snapshot_every=) must be a whole number of versions (1 or 0: store every value whole), "
                f"got {list_snapshot_every!r}."
            )
        if sqlite is None and not shared:
            raise ConfigError("DurableSaver needs at least one tier: pass sqlite=, redis= or postgres=.")
        if local_max_bytes is not None and (
            not isinstance(local_max_bytes, int)
            or local_max_bytes < 1
            or sqlite is None
            or isinstance(local_max_bytes, bool)
            or not shared
        ):
            raise ConfigError(
                "Memory(local_max_bytes=) bounds the local SQLite cache of the shared tiers: it needs sqlite= and redis= "
                f"or postgres= (alone, the local file is the only copy), and a number of bytes; got {local_max_bytes!r}."
            )
        if read_cache_bytes is not None and (
            not isinstance(read_cache_bytes, int) or isinstance(read_cache_bytes, bool) or read_cache_bytes < 0
        ):
            raise ConfigError(
                f"Memory(read_cache_bytes=) must be a whole number of bytes (0: no read cache), got {read_cache_bytes!r}."
            )
        if sqlite is not None and not isinstance(sqlite, (str, os.PathLike)):
            raise ConfigError(f"sqlite= must be a file path, ':memory:' or None, not {type(sqlite).__name__}.")
        redis_client = supplied_redis(redis)
        redis_url: str | None = None
        if redis_client is not None:
            redis_url = redis_client.url
            if redis_cluster is None:
                redis_cluster = redis_client.cluster
            elif redis_cluster != redis_client.cluster:
                raise ConfigError(
                    f"Tiers(redis_cluster={redis_cluster}) does not match the client given as redis= (a "
                    f"{type(redis_client.obj).__name__}): leave redis_cluster unset."
                )
        elif redis is not None:
            redis_url = REDIS.check(redis)
            check_redis_url(redis_url, redis_cluster)
        postgres_pool = supplied_postgres(postgres)
        postgres_url: str | None = None
        if postgres_pool is not None:
            postgres_url = postgres_pool.url
        elif postgres is not None:
            postgres_url = POSTGRES.check(postgres)
        if isinstance(postgres_pool_size, bool) or not isinstance(postgres_pool_size, int) or postgres_pool_size < 1:
            raise ConfigError(
                f"Tiers(postgres_pool_size=) must be a whole number, at least 1, got {postgres_pool_size!r}."
            )
        if not isinstance(postgres_prepared_statements, bool):
            raise ConfigError(
                f"Tiers(postgres_prepared_statements=) must be True or False, got {postgres_prepared_statements!r}."
            )
        check_postgres_schema(postgres_schema, postgres_pool)
        keys = signing_keys_of(signing_key, signing_keys)
        if redis_ttl is not None and (
            isinstance(redis_ttl, bool)
            or not isinstance(redis_ttl, (int, float))
            or not 0 < redis_ttl < math.inf  # NaN fails this too
            or redis is None
            or postgres is None
        ):
            raise ConfigError(
                "Tiers(redis_ttl=) lets idle threads leave Redis, to be served from Postgres: it needs redis= and "
                f"postgres=, and a number of seconds above 0; got {redis_ttl!r}."
            )
        if max_record_bytes is not None and (
            isinstance(max_record_bytes, bool) or not isinstance(max_record_bytes, int) or max_record_bytes < 1
        ):
            raise ConfigError(
                f"Integrity(max_record_bytes=) must be a whole number of bytes above 0, or None, got {max_record_bytes!r}."
            )
        if not isinstance(read_only, bool):
            raise ConfigError(f"read_only must be True or False, got {read_only!r}.")
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise ConfigError(f"retention= must be a langgraph_durable.RetentionPolicy, not {retention!r}.")
        leases = lease_options(lease_ttl, on_busy, lease_wait, lease_linger)
        budget = MemoryBudget.of(memory_budget, read_cache=read_cache_bytes)
        if archive is not None:
            parse_archive_url(archive)
        seconds_of("Archive(lag=)", archive_lag, "a number of seconds above 0")
        fingerprint = archive_key_fingerprint_of(archive_key_fingerprint)
        return cls(
            tiers=TierOptions(
                urls={
                    keyword: url
                    for keyword, url in (
                        (SQLITE.keyword, os.fspath(sqlite) if sqlite is not None else None),
                        (REDIS.keyword, redis_url),
                        (POSTGRES.keyword, postgres_url),
                        *((k, url) for k, (url, _, _) in others.items()),
                    )
                    if url is not None
                },
                redis_key_prefix=redis_key_prefix,
                redis_cluster=redis_cluster,
                redis_ttl=redis_ttl,
                postgres_pool_size=postgres_pool_size,
                postgres_prepared_statements=postgres_prepared_statements,
                postgres_schema=postgres_schema,
                sqlite_busy_timeout=sqlite_busy_timeout,
                connect_timeout=connect_timeout,
                call_timeout=call_timeout,
                drain_timeout=drain_timeout,
                supplied={
                    keyword: given
                    for keyword, given in (
                        (REDIS.keyword, redis_client),
                        (POSTGRES.keyword, postgres_pool),
                        *((k, given) for k, (_, given, _) in others.items()),
                    )
                    if given is not None
                },
            ),
            integrity=IntegrityOptions(keys, permissive_decoding, on_corruption, max_record_bytes),
            write=WriteOptions(write, list_snapshot_every, local_fsync),
            retention=RetentionOptions(
                retention, retention.every if retention else None, retention.rate if retention else None
            ),
            limits=Limits(local_max_bytes, read_cache_bytes, memory_budget, budget),
            leases=leases,
            archive=ArchiveOptions(archive, float(archive_lag), fingerprint),
            read_only=read_only,
        )


def other_tiers_of(given: Mapping[str, object]) -> dict[str, tuple[str, Supplied | None, Role]]:
    """The tiers of kinds registered from outside the package, checked:
    each a URL of its kind (or a client or pool its ``supplied`` hook
    recognises), and no two tiers in one role."""
    out: dict[str, tuple[str, Supplied | None, Role]] = {}
    for keyword, value in given.items():
        kind = kind_named(keyword)
        if kind is None or keyword in BUILT_IN:
            raise unexpected_keyword(keyword)
        if value is None or value == "":
            continue
        recognise = kind.hook("supplied")
        supplied = recognise(value) if recognise is not None and not isinstance(value, str) else None
        url = supplied.url if supplied is not None else kind.check(value)
        out[keyword] = (url, supplied, kind.role)
    return out


def register_tier_kind(kind: TierKind) -> TierKind:
    """Register a kind of tier from outside the package (once per keyword;
    it is `kind`): its keyword, variable and flag must be free, a shared
    role needs a URL scheme and the hand-off hook, and its classes must
    import and hold its role. Then `DurableSaver(<keyword>=URL)`,
    ``from_env`` (its variable) and the command line (its flag) take it."""
    if kind_named(kind.keyword) is None:
        _check_new(kind)
    return register(kind)


def _check_new(kind: TierKind) -> None:
    """A kind from outside the package: its keyword, variable and flag free,
    a URL scheme and the hand-off hook for a shared role, and classes that
    import and hold its role."""
    taken = {o.keyword for o in OPTIONS} | {o.flat for o in OPTIONS} | {"other_tiers"}
    if kind.keyword in taken:
        raise ConfigError(f"a tier kind cannot be named {kind.keyword!r}: the saver has an option of that name.")
    others = [*OPTIONS, *kinds()]
    if any(getattr(o, "env", None) == kind.env for o in others):
        raise ConfigError(f"the variable {kind.env} is another option's or tier kind's: give the kind its own.")
    if any(getattr(o, "flag", None) == kind.flag for o in others):
        raise ConfigError(f"the flag {kind.flag} is another option's or tier kind's: name the kind otherwise.")
    if not kind.schemes:
        raise ConfigError(f"the {kind.keyword} kind needs its URL schemes (schemes=('{kind.keyword}://',)).")
    if kind.ears is None:
        raise ConfigError(
            f"the {kind.keyword} kind is a {kind.role.value} tier, which can hold writer leases: it needs ears= "
            "(how a replica listens on it for a kept lease asked back; see tiers/postgres/kind.py)."
        )
    for asynchronous in (False, True):
        try:
            cls = kind.tier_class(asynchronous=asynchronous)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"the {kind.keyword} kind's class cannot be imported: {exc}.") from None
        role = getattr(cls, "role", kind.role)
        if role is not kind.role:
            raise ConfigError(
                f"the {kind.keyword} kind is registered as a {kind.role.value} tier, but its class "
                f"{cls.__name__} is a {getattr(role, 'value', role)} tier."
            )


def unexpected_keyword(keyword: str) -> TypeError:
    """A keyword that is neither an option nor a registered tier kind's, as
    Python would say it, with where an option of that name went."""
    moved = next((o for o in OPTIONS if o.field and o.flat == keyword), None)
    if moved is not None:
        where = "retention=" if moved.keyword == "retention" else f"{moved.keyword}="
        hint = (
            f": it is {where}{moved.spelled.removesuffix('=)')}=...) now (see the configuration page's option groups)"
        )
    else:
        hint = f" (the tiers are {', '.join(f'{k.keyword}=' for k in kinds())})"
    return TypeError(f"DurableSaver() got an unexpected keyword argument {keyword!r}{hint}.")


def one_tier_per_role(urls: Mapping[str, str]) -> None:
    """Two tiers in one role (a record kind besides Postgres, say) would
    each take the other's place: refused."""
    seen: dict[Role, str] = {}
    for kind in kinds():
        if kind.keyword in urls:
            if kind.role in seen:
                raise ConfigError(
                    f"{seen[kind.role]}= and {kind.keyword}= are both {kind.role.value} tiers: give one of them."
                )
            seen[kind.role] = kind.keyword


def seconds_of(spelled: str, value: object, what: str, *, zero: bool = False) -> float:
    """`value`, a finite number of seconds above 0 (or 0, with `zero`), else
    a `ConfigError` saying `spelled` must be `what`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value >= 0 if zero else value > 0)  # NaN fails too
        or value == math.inf
    ):
        raise ConfigError(f"{spelled} must be {what}, got {value!r}.")
    return float(value)


def lease_options(ttl: object, on_busy: object, wait: object, linger: object) -> LeaseOptions:
    """The lease options checked (`LeaseBook` takes them as they are)."""
    ttl_s = seconds_of("Leases(ttl=)", ttl, "a positive number of seconds")
    if on_busy not in ON_BUSY_CHOICES:
        raise ConfigError(f"Leases(on_busy=) must be 'raise' or 'wait', got {on_busy!r}.")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:  # inf: wait as long as it takes
        raise ConfigError(f"Leases(wait=) must be a number of seconds (0 or more), got {wait!r}.")
    if isinstance(linger, bool) or not isinstance(linger, (int, float)) or not 0 <= linger < math.inf:
        raise ConfigError(
            f"Leases(linger=) must be a number of seconds (0 or more; 0 gives a run's lease back when it "
            f"ends), got {linger!r}."
        )
    return LeaseOptions(ttl_s, str(on_busy), float(wait), float(linger))


def signing_keys_of(signing_key: bytes | str | None, signing_keys: Sequence[bytes | str | None] | None) -> list[bytes]:
    """The accepted keys, sealing key first; b"" stands for unsigned."""
    if signing_key is not None and signing_keys is not None:
        raise ConfigError("pass signing_key= or Integrity(signing_keys=[new, old, ...]), not both.")
    if isinstance(signing_keys, (str, bytes)):
        raise ConfigError(
            "Integrity(signing_keys=) takes a list of keys, the one that seals new records first: signing_keys=[new, old]; "
            "for one key, pass signing_key= instead."
        )
    given = list(signing_keys) if signing_keys is not None else [signing_key]
    if not given:
        raise ConfigError("Integrity(signing_keys=) needs at least one key (the one that seals new records) first.")
    keys: list[bytes] = []
    for k in given:
        key = k.encode() if isinstance(k, str) else (k or b"")
        if not isinstance(key, bytes):
            raise ConfigError(f"a signing key must be bytes, str or None, not {type(k).__name__}.")
        if key and len(key) < 16:
            raise ConfigError("a signing key must be at least 16 bytes; use 32 random bytes (secrets.token_bytes(32)).")
        if key not in keys:
            keys.append(key)
    return keys


def env_flag(name: str, value: str) -> bool:
    word = value.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false (or 1/0, yes/no, on/off), got {value!r}.")


def _seconds(env: Mapping[str, str], name: str) -> float:
    try:
        return float(env[name])
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {env[name]!r}.") from None


def env_options(env: Mapping[str, str], default_sqlite: str) -> dict[str, Any]:
    """The options the ``LANGGRAPH_DURABLE_*`` variables in `env` give
    (`DurableSaver.from_env`; the variables are the option table's,
    `option_table.VARIABLES`), by their flat names (`option_groups.grouped`
    makes the saver's keywords of them), each checked as far as its variable
    alone can be (the rest is checked with the other options)."""
    # Every tier is named, None for off: a keyword given to from_env overrides it.
    kwargs: dict[str, Any] = {kind.keyword: env.get(kind.env) or None for kind in kinds()}
    kwargs[SQLITE.keyword] = env.get(SQLITE.env, default_sqlite) or None
    for option in variables():
        assert option.env is not None
        text = env.get(option.env)
        if option.flat in kwargs or option.reading == "keys" or not text:
            continue
        if option.reading == "seconds":
            kwargs[option.flat] = _seconds(env, option.env)
        elif option.reading == "bool":
            kwargs[option.flat] = env_flag(option.env, text)
        elif option.reading == "serde":
            kwargs[option.flat] = serde_from_spec(text, what=option.env)
        elif option.reading == "migrations":
            kwargs[option.flat] = migrations_from_spec(text, what=option.env)
        else:
            kwargs[option.flat] = text
    if env.get(ENV_SIGNING_KEY) or env.get(ENV_OLD_SIGNING_KEYS):
        old = [k.strip() for k in env.get(ENV_OLD_SIGNING_KEYS, "").split(",") if k.strip()]
        # Checked here, one variable at a time, so the error names it (never the key).
        for name, key in [(ENV_SIGNING_KEY, env.get(ENV_SIGNING_KEY))] + [(ENV_OLD_SIGNING_KEYS, k) for k in old]:
            try:
                signing_keys_of(None if key == "unsigned" else key or None, None)
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        kwargs["signing_keys"] = [env.get(ENV_SIGNING_KEY) or None] + [None if k == "unsigned" else k for k in old]
    return kwargs


def migrations_from_spec(spec: str, *, what: str) -> Migrations:
    """The application's `Migrations` that ``module:attr`` names: the object,
    or a function returning it when called with no arguments. `ConfigError`
    saying what is wrong and how to name it otherwise (`what` names the
    option: ``--migrations``, ``LANGGRAPH_DURABLE_MIGRATIONS``). Importing
    the module runs it, as the app would: the steps are the app's code."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(
            f"{what} takes MODULE:ATTR, the app's Migrations (for example myapp.graph:migrations), got {spec!r}."
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raises as it loads
        raise ConfigError(
            f"{what} {spec!r}: cannot import it ({type(exc).__name__}: {exc}); check the module is importable "
            "here (the current directory is searched too)."
        ) from exc
    if not isinstance(target, Migrations) and callable(target):
        try:
            target = target()
        except Exception as exc:  # whatever the factory raises, say which option named it
            raise ConfigError(
                f"{what} {spec!r}: calling it with no arguments failed ({type(exc).__name__}: {exc}); name the "
                "app's Migrations, or a function that returns them."
            ) from exc
    if not isinstance(target, Migrations):
        raise ConfigError(
            f"{what} {spec!r} is a {type(target).__name__}, not a langgraph_durable.Migrations (the state version "
            "and steps the app passes as DurableSaver(migrations=...)): name that object."
        )
    return target


def naming_the_variable(exc: ConfigError, from_env: Mapping[str, Any], given: Mapping[str, Any]) -> ConfigError:
    """`exc`, about an option that came from the environment (in `from_env`,
    not overridden in `given`), with its variable's name in front."""
    message = str(exc)
    for flat, name in ENV_OF_KEYWORD.items():
        if flat in from_env and flat not in given and message.startswith(SPELLED[flat].rstrip(")")):
            return ConfigError(f"{name}: {message}")
    return exc
