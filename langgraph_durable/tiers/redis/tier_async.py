"""The Redis tier: the hot tier shared by every replica.

Plain Redis 6+ or Valkey, no modules. Every key of one thread carries the
hash tag ``{thread_id}``, so on Redis Cluster a thread lives on one slot and
its multi-key transactions stay legal. Layout, under the key prefix ``P``::

    P:{T}:cp              hash  "ns\\0id"          -> [parent, run_id, metadata json, envelope]
    P:{T}:ids:<ns>        zset  checkpoint ids (score 0, ordered by id)
    P:{T}:nss             set   namespaces of the thread
    P:{T}:blob            hash  "ns\\0channel\\0ver" -> envelope
    P:{T}:w:<ns>\\0<id>    hash  "task\\0idx"       -> [channel, task_path, envelope]
    P:{T}:wkeys           set   the thread's write hashes (for deletes)
    P:{T}:quarantined     hash  id -> a quarantined copy and its row fields (restorable)
    P:{T}:deleted         str   deletion marker: checkpoints up to this id were deleted
    P:{T}:gone            set   "ns\\0id" of checkpoints delete_for_runs deleted
    P:meta                hash  store-wide settings (the signing key's fingerprint)
    P:{T}:ledger          hash  action key -> envelope (non-resumable actions)
    P:{T}:lease           hash  holder, token, expires_at: the thread's writer lease (lease.py)

Every id in a key name (``P``, ``T``, ``<ns>``, ``<id>``) is written
through `key_part`: letters, digits and the other printable ASCII stay as
they are, and ``% : { } * ? [ ] \\``, whitespace, control characters and
non-ASCII become ``%XX`` (UTF-8 bytes, upper-case hex). So no id can make a
``:`` or a brace of a key, the first ``:`` of a key ends its prefix (one
prefix's keys never look like another's, nested or not), and the
``{...}`` hash tag is the encoded thread id. A key read back (SCAN, the
``wkeys`` set) counts as this tier's only if it parses exactly, its parts
decoding and encoding back to the same text (`parse_key_part`); anything
else under the prefix is left alone. Hash fields and set members hold the
ids as they are (``\\0``-separated: ids hold no NUL, codec.check_key_part).
Stores written before this layout are moved to it once at `setup`
(`_migrate_layout`, recorded as ``key_layout`` in ``P:meta``).

With a TTL (``redis_ttl=``) every write sets the keys it touches to expire
that many seconds later, and a thread in use has all its keys' expiry pushed
back (`_keep_alive`, at most every tenth of the TTL), so an idle thread
leaves Redis whole, apart from its lease and quarantine. Reads then find it
in Postgres and copy it back, as they do for anything Redis lacks.

Every write touches one thread's keys only, so it is one atomic step on one
slot: a write of records is one script call (`_WRITE`, `_FENCED_WRITE`)
whatever the deployment, one command however many records it carries.
There is deliberately no global index (it would put a second slot in
every transaction): the rare whole-store operations (``list(None)``,
``delete_for_runs``, ``verify`` / ``repair``, listing the quarantine) find
threads by SCAN over ``P:{*}:nss`` instead, which redis-py's cluster client
runs on every primary. ``P:meta`` is the one key outside every thread's
slot, and it is always read or written alone.

Three deployments, one layout:

- a single server (``redis://``, ``rediss://``, ``unix://``): the plain client;
- Redis Cluster: a ``redis://`` URL of any node. `setup` asks that node
  (``INFO cluster``) and, if cluster mode is on, talks to the whole cluster
  through redis-py's `RedisCluster` (``cluster=True`` / ``False`` skips the
  question). Every per-thread step stays on the thread's slot. A primary
  that cannot be reached, CLUSTERDOWN and TRYAGAIN count as the tier being
  down (`TierUnavailable`), as a single server that is down does. redis-py's
  (8.1) async cluster pipeline runs each command after a WATCH on a thread
  of its own while the event loop waits (no cancellation, no `call_timeout`), and
  its cluster pipelines refuse TIME (and, sync, EVAL) inside a transaction;
  so on a cluster the few compare-and-set steps (reading a lease, swapping a
  ledger entry, removing a bad copy) are Lua scripts on the thread's keys
  instead of WATCH ... MULTI/EXEC (writes of records are scripts
  everywhere). Plain MULTI/EXEC transactions stay transactions. The
  single-server path is otherwise unchanged;
- Redis Sentinel: ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``
  (sentinel port 26379 if omitted): the primary is looked up from the
  sentinels and again after a failover (redis-py's `Sentinel`). The
  credentials are the primary's; the sentinels are asked without them.

This file is the async source: ``tier.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import ormsgpack

from ...environment import DEFAULT_KEY_PREFIX
from ...errors import ConfigError, TierUnavailable
from ...model.lease import Fence, Lease, hand_off_channel, hand_off_message, lease_lost
from ...model.records import BlobRow, CheckpointRow, Row, WriteRow, metadata_matches
from ...model.roles import Role
from ..base import BlobKey, Head, QuarantinedRecord, ThreadRecords, _fields, aclose_redis, redact

DEFAULT_SOCKET_TIMEOUT_S = 5.0
# Threads whose last keep-alive (`_keep_alive`) a tier remembers.
KEEP_ALIVE_MEMO = 10_000
SENTINEL_SCHEME = "redis+sentinel://"
DEFAULT_SENTINEL_PORT = 26379
# redis-py is imported where a tier uses it (making its client, telling its
# errors apart), not with this module: the saver imports this module
# whatever its tiers, and a command or a saver without a Redis tier never
# loads redis-py (or the OpenTelemetry modules it loads when installed).
#
# The cluster client reports a slot map it could not build (no node answered,
# or some slot has no primary) as a bare RedisClusterException; these are the
# beginnings of those messages. Any other RedisClusterException (keys on two
# slots in one transaction) is a bug and must not pass for an outage.
_TOPOLOGY_LOST = ("Redis Cluster cannot be connected", "All slots are not covered")
_SEP = "\x00"
logger = logging.getLogger("langgraph_durable")

# What an id keeps as it is in a key name (`key_part`): printable ASCII but
# the escape itself, the key separator, hash tag braces and glob characters.
_UNSAFE_CHARS = "%:{}*?[]\\"
_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in _UNSAFE_CHARS)
_UNSAFE = re.compile("[^" + re.escape(_SAFE) + "]")
# The layout `key_part` gives (`P:meta`'s ``key_layout``); stores without it
# were written when ids went into keys as they are (`_migrate_layout`).
KEY_LAYOUT = "2"


def _escape(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group().encode("utf-8"))


def key_part(text: str) -> str:
    """`text` as it goes into a Redis key name: itself if it is printable
    ASCII without ``% : { } * ? [ ] \\`` (ordinary ids, uuids), else with
    each other character percent-encoded (its UTF-8 bytes, ``%XX``)."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def parse_key_part(text: str) -> str | None:
    """The id `key_part` made `text` from, or None if it made no such text
    (a stray character, a bad or needless escape, lower-case hex, bytes
    that are not UTF-8): such a key is not this layout's."""
    if "%" not in text:
        return text if _UNSAFE.search(text) is None else None
    try:
        value = unquote(text, errors="strict")
    except UnicodeDecodeError:
        return None
    return value if key_part(value) == text else None


# `key_part` in the scripts that build key names from ids they read (a
# checkpoint id from an index, a namespace from a set).
_LUA_KEY_PART = (
    """
local function key_part(s)
  return (string.gsub(s, '.', function(c)
    local b = string.byte(c)
    if b < 33 or b > 126 or """
    + " or ".join(f"b == {ord(c)}" for c in _UNSAFE_CHARS)
    + """ then
      return string.format('%%%02X', b)
    end
  end))
end
"""
)


def _pack(*parts: Any) -> bytes:
    return ormsgpack.packb(list(parts))


def _unpack(data: bytes, n: int) -> list[Any]:
    """A stored frame: n-1 optional strings and an envelope. A damaged frame
    (undecodable, wrong shape or wrong types; msgpack ignores trailing bytes,
    so a flipped header byte can still decode) comes back with an empty
    envelope, which then fails verification like any corrupt copy."""
    try:
        parts = ormsgpack.unpackb(data)
    except ormsgpack.MsgpackDecodeError:
        parts = None
    if (
        isinstance(parts, list)
        and len(parts) == n
        and isinstance(parts[-1], bytes)
        and all(p is None or isinstance(p, (str, float, int)) for p in parts[:-1])
    ):
        return parts
    return [None] * (n - 1) + [b""]


# `head` in one round trip: the newest id, the deletion marker, and that
# checkpoint's record and writes (whose keys depend on the id). The keys it
# builds carry the thread's hash tag, so they are on the declared keys' slot.
_HEAD_SCRIPT = (
    _LUA_KEY_PART
    + """
local ids = redis.call('ZREVRANGEBYLEX', KEYS[1], '+', '-', 'LIMIT', 0, 1)
local marker = redis.call('GET', KEYS[2])
if not ids[1] then return {false, marker, false, {}} end
local cp = redis.call('HGET', KEYS[3], ARGV[1] .. ids[1])
return {ids[1], marker, cp, redis.call('HGETALL', ARGV[2] .. key_part(ids[1]))}
"""
)

# `list_checkpoints` of one (thread, namespace) in one round trip: the ids,
# newest first, then their records.
_LIST_SCRIPT = """
local ids = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[1], '-', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i, id in ipairs(ids) do
  out[2 * i - 1] = id
  out[2 * i] = redis.call('HGET', KEYS[2], ARGV[3] .. id)
end
return out
"""

# `list_page` in one round trip: as `_LIST_SCRIPT`, each id followed by its
# record and its writes (`_HEAD_SCRIPT`'s keys: on the thread's slot).
_PAGE_SCRIPT = (
    _LUA_KEY_PART
    + """
local ids = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[1], '-', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i, id in ipairs(ids) do
  out[3 * i - 2] = id
  out[3 * i - 1] = redis.call('HGET', KEYS[2], ARGV[3] .. id)
  out[3 * i] = redis.call('HGETALL', ARGV[4] .. key_part(id))
end
return out
"""
)

# Retries of a command whose connection broke (each on a new connection).
RETRIES = 2
HEALTH_CHECK_INTERVAL_S = 15


@dataclasses.dataclass(frozen=True)
class SentinelAddress:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)


def sentinel_address(url: str) -> SentinelAddress:
    """Parse ``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]``.

    Raises `ConfigError`, saying what a valid URL looks like, for anything else."""
    example = f"{SENTINEL_SCHEME}10.0.0.1:26379,10.0.0.2:26379/mymaster/0"
    if not url.startswith(SENTINEL_SCHEME):
        raise ConfigError(f"a Sentinel URL starts with {SENTINEL_SCHEME} (for example {example}).")
    rest = url[len(SENTINEL_SCHEME) :]
    if "?" in rest:
        raise ConfigError(f"a Sentinel URL takes no query string ({redact(url)!r}); for example {example}.")
    netloc, _, path = rest.partition("/")
    creds, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = creds.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = []
    for part in hosts.split(","):
        host, port = part.strip(), str(DEFAULT_SENTINEL_PORT)
        if host.startswith("["):  # [::1]:26379
            inner, _, tail = host[1:].partition("]")
            host, port = inner, tail[1:] if tail.startswith(":") else port
        elif host.count(":") == 1:
            host, port = host.split(":")
        if not host or not port.isdigit():
            raise ConfigError(f"bad sentinel address {part!r} in {redact(url)!r}; for example {example}.")
        sentinels.append((host, int(port)))
    service, _, db = path.strip("/").partition("/")
    if not service or (db and not db.isdigit()):
        raise ConfigError(
            f"{redact(url)!r} needs the monitored service's name and optionally a database number "
            f"after the sentinels; for example {example}."
        )
    return SentinelAddress(sentinels, service, int(db or 0), username, password)


def check_url(url: str, cluster: bool | None) -> None:
    """Refuse, before anything connects, a Redis URL and `cluster` setting that
    cannot work together (`ConfigError`)."""
    if url.startswith(SENTINEL_SCHEME):
        sentinel_address(url)
        if cluster:
            raise ConfigError(
                "Tiers(redis_cluster=True) does not go with a redis+sentinel:// URL: Sentinel watches a single "
                "primary. Give the URL of any node of the cluster (redis://host:port) instead."
            )


def _unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the server, or the part of the cluster holding the
    key, cannot be reached."""
    from redis.exceptions import (
        ClusterError,
        CrossSlotTransactionError,
        RedisClusterException,
        SlotNotCoveredError,
        TryAgainError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    # A connection refused, dropped or timed out; and how Redis Cluster says
    # that the part of it holding a key is down: CLUSTERDOWN and MASTERDOWN
    # (ClusterError), TRYAGAIN (a slot half moved), a slot map without the
    # slot. A single server never answers these.
    down = (RedisConnectionError, RedisTimeoutError, OSError, ClusterError, TryAgainError, SlotNotCoveredError)
    if isinstance(exc, down):
        return True
    return isinstance(exc, RedisClusterException) and (
        not isinstance(exc, CrossSlotTransactionError)
        and (str(exc).startswith(_TOPOLOGY_LOST) or isinstance(exc.__cause__, down))
    )


class _Unreachable:
    """``with tier._io:`` turns what says the server (or the part of the
    cluster holding the key) cannot be reached into `TierUnavailable`;
    anything else (a bug, a wrong type) propagates unchanged. A class rather
    than a generator context manager: it wraps every call."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None:
            return
        if _unreachable(exc):
            raise TierUnavailable(
                f"redis tier at {self.where} is unreachable ({type(exc).__name__}: {exc}). "
                f"Check that the server is running and the URL is right.",
                tier="redis",
            ) from exc


class _Ops:
    """The commands of one write, recorded (the pipeline methods the writes
    use) to run inside one script call (`_WRITE`, or `_FENCED_WRITE` after
    its lease check): `keys` follow the lease key; `args()` is the ops
    packed into one msgpack argument (four items an op), followed by the
    values that hash fields are set to, one argument each (the script's
    msgpack reads no binary strings). A command's arguments cost the
    client one encoding each: a run's records in hundreds of them took
    longer to pack than to send."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.ops: list[Any] = []
        self.values: list[bytes] = []
        self._index: dict[str, int] = {}

    def _op(self, name: str, key: str, a: Any, b: Any) -> None:
        if key not in self._index:
            self.keys.append(key)
            self._index[key] = len(self.keys) + 1  # KEYS[1] is the lease
        self.ops += [name, self._index[key], a, b]

    def args(self) -> list[Any]:
        return [ormsgpack.packb(self.ops), *self.values]

    def _value(self, value: bytes) -> int:
        self.values.append(value)
        return len(self.values)

    def hset(self, key: str, field: str, value: bytes) -> None:
        self._op("HSET", key, field, self._value(value))

    def hsetnx(self, key: str, field: str, value: bytes) -> None:
        self._op("HSETNX", key, field, self._value(value))

    def zadd(self, key: str, mapping: dict[str, float]) -> None:
        for member, score in mapping.items():
            self._op("ZADD", key, score, member)

    def sadd(self, key: str, *members: str) -> None:
        for member in members:
            self._op("SADD", key, member, "")

    def expire(self, key: str, seconds: int) -> None:
        self._op("EXPIRE", key, seconds, "")


class AsyncRedisTier:
    """Checkpoints in Redis, one hash-tagged key family per thread.

    `url` is a single server's, any cluster node's or a ``redis+sentinel://``
    one (see the module docstring). `cluster`: None finds out at `setup`
    whether the server is a Redis Cluster node; True or False says so.
    `socket_timeout` bounds each command on both faces (the saver passes its
    ``call_timeout``: a stalled server raises, and the tier counts as
    down); `connect_timeout` (default: `socket_timeout`) bounds connecting.

    `client`: the application's own client for this face (`url` then says
    where it points, see `tiers.supplied`; `cluster` whether it is a
    cluster client). The tier uses it as given, timeouts included, and
    never closes it."""

    name = "redis"
    # Set by a read-only saver: setup moves no keys of an older layout.
    read_only = False
    role = Role.HOT

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT_S,
        cluster: bool | None = None,
        ttl: float | None = None,
        connect_timeout: float | None = None,
        client: Any = None,
    ) -> None:
        from redis.asyncio import Redis
        from redis.asyncio.cluster import RedisCluster
        from redis.asyncio.retry import Retry
        from redis.asyncio.sentinel import Sentinel
        from redis.backoff import ExponentialBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError

        connect_timeout = socket_timeout if connect_timeout is None else connect_timeout
        check_url(url, cluster)
        self.url = url
        # Idle threads leave Redis after `ttl` seconds (`_expire`, `_keep_alive`).
        self.ttl = max(1, math.ceil(ttl)) if ttl is not None else None
        self._kept_alive: OrderedDict[str, float] = OrderedDict()
        self.where = redact(url)
        self.prefix = key_prefix
        self._p = key_part(key_prefix)  # the prefix as it starts every key
        self._layout_checked = False  # `_migrate_layout` ran (or found it done)
        self._io = _Unreachable(self.where)
        self._options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "decode_responses": False,
            # A pooled connection the server dropped (it restarted) fails on
            # first use: retry at once on a fresh one, so the first call after
            # a restart succeeds. Only connection errors: a server that does
            # not answer in time is given up on at once (its breaker opens),
            # not waited for again, and redis-py's default backoff (up to
            # seconds) would hold every call while a server is down. The
            # cluster client retries the same way, refreshing its slot map.
            "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), RETRIES),
            "retry_on_error": [RedisConnectionError],
            # PING a connection idle this long before using it.
            "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        }
        self._sentinel: Any = None
        # Typed Any: redis-py types replies as bytes | str whatever
        # decode_responses says; with False they are always bytes.
        self.client: Any
        # The application's client is theirs: used, never closed here.
        self.owns_client = client is None
        if client is not None:
            self.client = client
            cluster = isinstance(client, RedisCluster)
        elif url.startswith(SENTINEL_SCHEME):
            cluster = False
            address = sentinel_address(url)
            self._sentinel = Sentinel(
                address.sentinels,
                sentinel_kwargs={"socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout},
            )
            self.client = self._sentinel.master_for(
                address.service,
                redis_class=Redis,
                db=address.db,
                username=address.username,
                password=address.password,
                **self._options,
            )
        else:
            # The plain client, also for a cluster until `setup` has asked
            # (building a sync cluster client connects at once).
            self.client = Redis.from_url(url, **self._options)
        # None until `setup` has found out.
        self.cluster: bool | None = cluster
        self.clustered = bool(client is not None and cluster)  # talking through the cluster client
        self._register_scripts()

    def _register_scripts(self) -> None:
        self._head_script = self.client.register_script(_HEAD_SCRIPT)
        self._list_script = self.client.register_script(_LIST_SCRIPT)
        self._page_script = self.client.register_script(_PAGE_SCRIPT)
        self._fenced_write = self.client.register_script(_FENCED_WRITE)
        self._write = self.client.register_script(_WRITE)
        self._read_lease = self.client.register_script(_READ_LEASE)
        self._swap_field = self.client.register_script(_SWAP_FIELD)
        self._drop_field = self.client.register_script(_DROP_FIELD)
        self._keep_alive_script = self.client.register_script(_KEEP_ALIVE)

    # -- keys -----------------------------------------------------------------

    def _k(self, thread_id: str, part: str) -> str:
        """The key of one part of a thread: ``P:{T}:part``, `P` and `T`
        encoded (`key_part`); `part` is a fixed name or `_ids` / `_wkey`'s."""
        return f"{self._p}:{{{key_part(thread_id)}}}:{part}"

    def _ids(self, thread_id: str, ns: str) -> str:
        return self._k(thread_id, f"ids:{key_part(ns)}")

    def _wkey(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return self._k(thread_id, f"w:{key_part(ns)}{_SEP}{key_part(checkpoint_id)}")

    def _parse_wkey(self, thread_id: str, key: str) -> tuple[str, str] | None:
        """(ns, checkpoint id) of one of the thread's write hashes, or None
        for a name that is not exactly one (left alone)."""
        head = self._k(thread_id, "w:")
        if not key.startswith(head):
            return None
        parts = key[len(head) :].split(_SEP)
        if len(parts) != 2:
            return None
        ns, cid = parse_key_part(parts[0]), parse_key_part(parts[1])
        return (ns, cid) if ns is not None and cid is not None else None

    def _own_wkeys(self, thread_id: str, members: Any) -> list[str]:
        """The members of a thread's ``wkeys`` set that are its write hashes
        (`_parse_wkey`): nothing else is read or deleted through the set."""
        names = []
        for raw in members:
            try:
                name = raw.decode()
            except UnicodeDecodeError:
                continue
            if self._parse_wkey(thread_id, name) is not None:
                names.append(name)
        return names

    async def _all_threads(self) -> list[str]:
        """Every thread with a ``P:{T}:nss`` key whose name parses exactly:
        SCAN's glob is only a first cut (it cannot say "no brace in T")."""
        head = f"{self._p}:{{"
        tail = "}:nss"
        pattern = _glob_escape(head) + "*" + _glob_escape(tail)
        found = set()
        async for key in self.client.scan_iter(match=pattern, count=1000):
            try:
                name = key.decode()
            except UnicodeDecodeError:
                continue
            if name.startswith(head) and name.endswith(tail) and len(name) >= len(head) + len(tail):
                thread_id = parse_key_part(name[len(head) : -len(tail)])
                if thread_id is not None:
                    found.add(thread_id)
        return sorted(found)

    # -- lifecycle --------------------------------------------------------------

    async def setup(self) -> None:
        """Connect, and the first time find out whether this is a cluster.
        `TierUnavailable` if the server (or the cluster) cannot be reached;
        a later call tries again. `ConfigError` if the URL names a database
        the server does not have."""
        from redis.exceptions import ResponseError

        try:
            await self._setup()
        except ResponseError as exc:
            if "DB index is out of range" not in str(exc):
                raise
            raise ConfigError(
                f"redis= {self.where} names a database this Redis server does not have (DB index is out of "
                "range): use one of its databases (0 to 15 unless its `databases` setting says otherwise), "
                "e.g. /0."
            ) from None

    async def _setup(self) -> None:
        with self._io:
            answered = False  # asking (INFO) already showed the server answers
            if self.cluster is None:
                self.cluster = await self._cluster_enabled()
                answered = True
            if self.cluster and not self.clustered:
                await self._use_cluster()
                answered = False
            if not answered:
                await self.client.ping()
            if self.read_only:
                await self.client.hget(self._meta, "key_layout")  # a read: the database is one the server has
            elif not self._layout_checked:
                await self._migrate_layout()
                self._layout_checked = True

    async def _migrate_layout(self) -> None:
        """Move the keys an older version named with ids as they are (one
        ``:`` or brace in an id could make them another thread's, or another
        prefix's) to their `key_part` names, once per store: ``key_layout``
        in ``P:meta`` says it is done. Keys whose names the two layouts share
        (ordinary ids) stay. A key moves by merging into its new name
        without overwriting anything there (HSETNX, SADD, ZADD NX, SET NX),
        then deleting the old name; so two replicas running this at once,
        or a run interrupted and started again, come to the same keys. A key
        that is not exactly one thread's under the old layout (a nested
        prefix's, or one whose reading its type does not settle) is left as
        it is, and counted in a warning. `TierUnavailable` if Redis goes
        away meanwhile; the next `setup` carries on."""
        from redis.exceptions import ResponseError

        if await self.client.hget(self._meta, "key_layout") == KEY_LAYOUT.encode():
            return
        left = 0
        if self._p != self.prefix:
            raw_meta = f"{self.prefix}:meta"
            if await self.client.hget(raw_meta, "key_layout") == KEY_LAYOUT.encode():
                # The prefix as written is another prefix's name in this layout
                # (``a:`` is written ``a%3A``): that store and its keys are not
                # this one's older keys. Nothing to move.
                await self.client.hset(self._meta, "key_layout", KEY_LAYOUT)
                return
            await self._merge_into(raw_meta, self._meta, "hash", None)
        pattern = _glob_escape(f"{self.prefix}:{{") + "*"
        async for raw in self.client.scan_iter(match=pattern, count=1000):
            try:
                name = raw.decode()
            except UnicodeDecodeError:
                continue
            if self._is_own_key(name):
                continue  # already in this layout (or the same in both)
            readings = _old_readings(name[len(self.prefix) + 2 :])
            if not readings:
                continue  # not a key of this prefix's threads at all
            kind = (await self.client.type(raw)).decode()
            if kind == "none":
                continue  # moved meanwhile (another replica), or SCAN's repeat of a moved key
            fits = [r for r in readings if _OLD_TYPES[r[1]] == kind]
            if len(fits) != 1:
                left += 1
                continue
            thread_id, part, args = fits[0]
            try:
                await self._merge_into(name, self._old_key_name(thread_id, part, args), kind, thread_id)
            except ResponseError:  # the new name holds another type: keep both
                left += 1
        await self.client.hset(self._meta, "key_layout", KEY_LAYOUT)
        if left:
            logger.warning(
                "redis tier at %s: %d key(s) under prefix %r are in the key layout of an older version "
                "but could not be read as exactly one thread's; they were left as they are",
                self.where,
                left,
                self.prefix,
            )

    def _old_key_name(self, thread_id: str, part: str, args: tuple[str, ...]) -> str:
        """The name in this layout of a key read under the older one."""
        if part == "ids":
            return self._ids(thread_id, args[0])
        if part == "w":
            return self._wkey(thread_id, args[0], args[1])
        return self._k(thread_id, part)

    async def _merge_into(self, old: str, new: str, kind: str, thread_id: str | None) -> None:
        """Copy key `old` into `new` without overwriting what `new` holds,
        keep its expiry, delete `old` (`_migrate_layout`)."""
        c = self.client
        async with c.pipeline(transaction=False) as pipe:
            if kind == "hash":
                for field, value in (await c.hgetall(old)).items():
                    pipe.hsetnx(new, field, value)
            elif kind == "set":
                members = await c.smembers(old)
                if thread_id is not None and old.endswith("}:wkeys"):
                    members = {self._renamed_wkey(thread_id, m) for m in members} - {None}
                if members:
                    pipe.sadd(new, *members)
            elif kind == "zset":
                scored = await c.zrange(old, 0, -1, withscores=True)
                if scored:
                    pipe.zadd(new, dict(scored), nx=True)
            elif kind == "string":
                value = await c.get(old)
                if value is not None:
                    pipe.set(new, value, nx=True)
            await pipe.execute()
        ttl = await c.pttl(old)
        if ttl > 0 and await c.pttl(new) == -1:
            await c.pexpire(new, ttl)
        await c.delete(old)

    def _renamed_wkey(self, thread_id: str, member: bytes) -> str | None:
        """A ``wkeys`` member (a write hash's name) in this layout, or None
        if it names no write hash of the thread in either layout."""
        try:
            name = member.decode()
        except UnicodeDecodeError:
            return None
        if self._parse_wkey(thread_id, name) is not None:
            return name
        head = f"{self.prefix}:{{{thread_id}}}:w:"
        if name.startswith(head) and name.count(_SEP) == 1:
            ns, cid = name[len(head) :].split(_SEP)
            return self._wkey(thread_id, ns, cid)
        return None

    def _is_own_key(self, name: str) -> bool:
        """Whether `name` is exactly a key of this layout under this prefix."""
        head = f"{self._p}:{{"
        if not name.startswith(head):
            return False
        encoded, brace, part = name[len(head) :].partition("}:")
        if not brace:
            return False
        thread_id = parse_key_part(encoded)
        if thread_id is None:
            return False
        if part in _OLD_TYPES and part not in ("ids", "w"):
            return True
        if part.startswith("ids:"):
            return parse_key_part(part[4:]) is not None
        return part.startswith("w:") and self._parse_wkey(thread_id, name) is not None

    async def _cluster_enabled(self) -> bool:
        from redis.exceptions import ResponseError

        try:
            info = await self.client.info("cluster")
        except ResponseError as exc:
            if "cluster mode" in str(exc):  # the URL's SELECT <db> refused
                raise self._only_database_0() from exc
            # INFO renamed or forbidden: CLUSTER INFO only works on a cluster node.
            try:
                await self.client.execute_command("CLUSTER INFO")
            except ResponseError:
                return False
            return True
        return bool(info.get("cluster_enabled"))

    async def _use_cluster(self) -> None:
        """Talk to the whole cluster through redis-py's cluster client, which
        follows the slot map from the node the URL names."""
        from redis.asyncio.cluster import RedisCluster
        from redis.exceptions import RedisClusterException

        if not self.owns_client:
            raise ConfigError(
                f"the Redis client given as redis= ({self.where}) talks to one node of a Redis Cluster: "
                "pass a RedisCluster client (redis.cluster.RedisCluster, or redis.asyncio.cluster.RedisCluster "
                "for an async one) or the node's URL."
            )
        try:
            client = RedisCluster.from_url(self.url, **self._options)
        except RedisClusterException as exc:
            if "'db'" in str(exc):
                raise self._only_database_0() from exc
            raise
        plain, self.client = self.client, client
        self.clustered = True
        self._register_scripts()
        await plain.aclose()

    @property
    def _meta(self) -> str:
        return f"{self._p}:meta"

    def _only_database_0(self) -> ConfigError:
        return ConfigError(
            f"{self.where} is a Redis Cluster node, and a cluster has only database 0: "
            "drop the database number from the URL (or make it /0)."
        )

    async def close(self) -> None:
        if self.owns_client:
            await aclose_redis(self.client)
        if self._sentinel is not None:
            for sentinel in self._sentinel.sentinels:
                await sentinel.aclose()

    # -- writes -------------------------------------------------------------------

    async def write_checkpoint(
        self, row: CheckpointRow, blobs: Sequence[BlobRow], *, fence: Fence | None = None
    ) -> None:
        await self._transaction(fence, lambda pipe: self._queue_checkpoint(pipe, row, blobs))
        await self._keep_alive(row.thread_id)

    async def write_batch(
        self,
        checkpoints: Sequence[tuple[CheckpointRow, Sequence[BlobRow]]],
        writes: Sequence[WriteRow],
        *,
        fence: Fence | None = None,
    ) -> None:
        """One script call (one thread: one slot on a cluster) for all of them."""
        if not checkpoints and not writes:
            return

        def queue(pipe: Any) -> None:
            for row, blobs in checkpoints:
                self._queue_checkpoint(pipe, row, blobs)
            if writes:
                self._queue_writes(pipe, writes, False)

        await self._transaction(fence, queue)
        await self._keep_alive(checkpoints[0][0].thread_id if checkpoints else writes[0].thread_id)

    async def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        if not blobs:
            return
        with self._io:
            for group in self._per_slot(blobs):
                async with self.client.pipeline(transaction=True) as pipe:
                    for b in group:
                        pipe.hset(
                            self._k(b.thread_id, "blob"),
                            f"{b.checkpoint_ns}{_SEP}{b.channel}{_SEP}{b.version}",
                            b.envelope,
                        )
                    self._expire(pipe, sorted({self._k(b.thread_id, "blob") for b in group}))
                    await pipe.execute()

    async def write_writes(self, rows: Sequence[WriteRow], upsert: bool, *, fence: Fence | None = None) -> None:
        if not rows:
            return
        for group in self._per_slot(rows):
            await self._transaction(fence, lambda pipe, group=group: self._queue_writes(pipe, group, upsert))

    def _per_slot(self, rows: Sequence[Any]) -> list[Sequence[Any]]:
        """One transaction's rows: all of them on a single server; per thread
        (one slot each) on a cluster, where a transaction spans one slot."""
        if not self.clustered or len({r.thread_id for r in rows}) < 2:
            return [rows]
        threads: dict[str, list[Any]] = {}
        for r in rows:
            threads.setdefault(r.thread_id, []).append(r)
        return list(threads.values())

    # -- reads ----------------------------------------------------------------------

    def _cp_row(self, thread_id: str, ns: str, cid: str, data: bytes) -> CheckpointRow:
        parent, run_id, md, envelope = _unpack(data, 4)
        return CheckpointRow(thread_id, ns, cid, parent, run_id, md or "{}", envelope)

    async def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        await self._keep_alive(thread_id)
        with self._io:
            data = await self.client.hget(self._k(thread_id, "cp"), f"{ns}{_SEP}{checkpoint_id}")
        return self._cp_row(thread_id, ns, checkpoint_id, data) if data is not None else None

    async def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        if not keys:
            return {}
        with self._io:
            values = await self.client.hmget(self._k(thread_id, "blob"), [f"{ns}{_SEP}{c}{_SEP}{v}" for c, v in keys])
        return {(c, v): BlobRow(thread_id, ns, c, v, data) for (c, v), data in zip(keys, values) if data is not None}

    async def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        if not checkpoint_ids:
            return []
        with self._io:
            async with self.client.pipeline(transaction=False) as pipe:
                for cid in checkpoint_ids:
                    pipe.hgetall(self._wkey(thread_id, ns, cid))
                results = await pipe.execute()
        out = []
        for cid, fields in zip(checkpoint_ids, results):
            for field, data in fields.items():
                task_id, idx = field.decode().rsplit(_SEP, 1)
                channel, task_path, envelope = _unpack(data, 3)
                out.append(WriteRow(thread_id, ns, cid, task_id, int(idx), channel or "", task_path or "", envelope))
        return out

    async def list_page(
        self, thread_id: str, ns: str, before: str | None, limit: int
    ) -> tuple[list[CheckpointRow], list[WriteRow]]:
        """`list_checkpoints` and `read_writes` of one page, in one script call."""
        keys = [self._ids(thread_id, ns), self._k(thread_id, "cp")]
        top = f"({before}" if before is not None else "+"
        await self._keep_alive(thread_id)
        with self._io:
            flat = await self._page_script(keys, [top, limit, f"{ns}{_SEP}", self._wkey(thread_id, ns, "")])
        rows: list[CheckpointRow] = []
        writes: list[WriteRow] = []
        for raw, data, fields in zip(flat[::3], flat[1::3], flat[2::3]):
            if data is None:
                continue  # an index entry without its record: as `list_checkpoints`
            cid = raw.decode()
            rows.append(self._cp_row(thread_id, ns, cid, data))
            for field, value in zip(fields[::2], fields[1::2]):
                task_id, idx = field.decode().rsplit(_SEP, 1)
                channel, task_path, envelope = _unpack(value, 3)
                writes.append(WriteRow(thread_id, ns, cid, task_id, int(idx), channel or "", task_path or "", envelope))
        return rows, writes

    async def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        per_key_limit = None if filter else limit
        rows: list[CheckpointRow] = []
        if thread_id is not None and ns is not None and checkpoint_id is None:
            # The common case (a thread's history): one round trip.
            keys = [self._ids(thread_id, ns), self._k(thread_id, "cp")]
            top = f"({before}" if before is not None else "+"
            with self._io:
                flat = await self._list_script(
                    keys, [top, -1 if per_key_limit is None else per_key_limit, f"{ns}{_SEP}"]
                )
            for cid, data in zip(flat[::2], flat[1::2]):
                if data is not None:
                    rows.append(self._cp_row(thread_id, ns, cid.decode(), data))
            if filter:
                rows = [r for r in rows if metadata_matches(_loads(r.metadata_json), filter)]
            return rows[:limit] if limit is not None else rows
        with self._io:
            threads = [thread_id] if thread_id is not None else await self._all_threads()
            for t in threads:
                if ns is not None:
                    namespaces = [ns]
                else:
                    namespaces = sorted(n.decode() for n in await self.client.smembers(self._k(t, "nss")))
                for n in namespaces:
                    if checkpoint_id is not None:
                        if before is not None and not checkpoint_id < before:
                            continue
                        ids = [checkpoint_id]
                    else:
                        top = f"({before}" if before is not None else "+"
                        if per_key_limit is None:
                            raw = await self.client.zrevrangebylex(self._ids(t, n), top, "-")
                        else:
                            raw = await self.client.zrevrangebylex(
                                self._ids(t, n), top, "-", start=0, num=per_key_limit
                            )
                        ids = [i.decode() for i in raw]
                    if not ids:
                        continue
                    datas = await self.client.hmget(self._k(t, "cp"), [f"{n}{_SEP}{i}" for i in ids])
                    rows.extend(self._cp_row(t, n, i, d) for i, d in zip(ids, datas) if d is not None)
        rows.sort(key=lambda r: r.checkpoint_id, reverse=True)
        if filter:
            rows = [r for r in rows if metadata_matches(_loads(r.metadata_json), filter)]
        return rows[:limit] if limit is not None else rows

    # -- deletes ----------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> None:
        t = thread_id
        with self._io:
            nss = await self.client.smembers(self._k(t, "nss"))
            wkeys = await self.client.smembers(self._k(t, "wkeys"))
            async with self.client.pipeline(transaction=True) as pipe:
                keys = [
                    self._k(t, p) for p in ("cp", "nss", "blob", "wkeys", "quarantine", "quarantined", "ledger", "gone")
                ]
                keys += [self._ids(t, n.decode()) for n in nss]
                keys += self._own_wkeys(t, wkeys)
                pipe.delete(*keys)
                await pipe.execute()

    async def delete_for_runs(self, run_ids: Sequence[str], retain: Sequence[tuple[str, str, str]] = ()) -> None:
        """Delete the checkpoints (and their writes) of these runs, except
        the `retain` ones, (thread, ns, checkpoint id): still needed by a
        surviving checkpoint's delta channels."""
        wanted = set(run_ids)
        if not wanted:
            return
        kept = set(retain)
        with self._io:
            for t in await self._all_threads():
                stored = await self.client.hgetall(self._k(t, "cp"))
                doomed = []
                for field, data in stored.items():
                    if _unpack(data, 4)[1] in wanted:
                        ns, cid = field.decode().split(_SEP)
                        if (t, ns, cid) not in kept:
                            doomed.append((ns, cid))
                if not doomed:
                    continue
                async with self.client.pipeline(transaction=True) as pipe:
                    for ns, cid in doomed:
                        self._drop(pipe, t, ns, cid)
                    await pipe.execute()

    def _drop(self, pipe: Any, t: str, ns: str, cid: str) -> None:
        pipe.hdel(self._k(t, "cp"), f"{ns}{_SEP}{cid}")
        pipe.zrem(self._ids(t, ns), cid)
        pipe.delete(self._wkey(t, ns, cid))
        pipe.srem(self._k(t, "wkeys"), self._wkey(t, ns, cid))

    async def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with self._io:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hdel(self._k(thread_id, "cp"), f"{ns}{_SEP}{checkpoint_id}")
                pipe.zrem(self._ids(thread_id, ns), checkpoint_id)
                await pipe.execute()

    async def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        with self._io:
            await self.client.hset(self._k(thread_id, "ledger"), key, envelope)

    async def swap_ledger(self, thread_id: str, key: str, old: bytes | None, new: bytes) -> None:
        """Replace one ledger entry only if it still holds `old` (None: only
        if there is none); WATCH makes the compare and the write one step."""
        from redis.exceptions import WatchError

        ledger = self._k(thread_id, "ledger")
        with self._io:
            if old is None:
                await self.client.hsetnx(ledger, key, new)
                return
            if self.clustered:
                await self._swap_field([ledger], [key, old, new])
                return
            async with self.client.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(ledger)
                    if await pipe.hget(ledger, key) != old:
                        return
                    pipe.multi()
                    pipe.hset(ledger, key, new)
                    await pipe.execute()
                except WatchError:
                    return  # written meanwhile: that state is newer than ours

    async def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        with self._io:
            fields = await self.client.hgetall(self._k(thread_id, "ledger"))
        return {k.decode(): v for k, v in fields.items()}

    async def thread_ids(self) -> list[str]:
        with self._io:
            return await self._all_threads()

    async def thread_records(self, thread_id: str) -> ThreadRecords:
        """Every live record of one thread, for `verify` and `repair`."""
        t = thread_id
        with self._io:
            cps = await self.client.hgetall(self._k(t, "cp"))
            blobs = await self.client.hgetall(self._k(t, "blob"))
            wkeys = sorted(self._own_wkeys(t, await self.client.smembers(self._k(t, "wkeys"))))
            whashes = [await self.client.hgetall(k) for k in wkeys]
        checkpoints = []
        for field, data in cps.items():
            ns, cid = field.decode().split(_SEP)
            checkpoints.append(self._cp_row(t, ns, cid, data))
        blob_rows = []
        for field, data in blobs.items():
            ns, channel, version = field.decode().split(_SEP)
            blob_rows.append(BlobRow(t, ns, channel, version, data))
        writes = []
        for key, fields in zip(wkeys, whashes):
            ns, cid = self._parse_wkey(t, key) or ("", "")  # parses: `_own_wkeys`
            for field, data in fields.items():
                task_id, idx = field.decode().rsplit(_SEP, 1)
                channel, task_path, envelope = _unpack(data, 3)
                writes.append(WriteRow(t, ns, cid, task_id, int(idx), channel or "", task_path or "", envelope))
        return ThreadRecords(checkpoints, blob_rows, writes)

    async def quarantine(
        self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes, fields: bytes = b""
    ) -> None:
        """Keep a copy for forensics and for `restore`, out of every read path."""
        with self._io:
            await self.client.hset(
                self._k(thread_id, "quarantined"),
                uuid.uuid4().hex,
                _pack(ns, kind, key, reason, fields.hex() if fields else None, time.time(), envelope),
            )

    async def remove_copy(self, kind: str, row: Row) -> None:
        """Delete this exact copy from the live hash; a different copy under
        the same key (one repaired meanwhile) stays. WATCH makes the compare
        and the delete one step."""
        from redis.exceptions import WatchError

        t = row.thread_id
        if isinstance(row, CheckpointRow):
            key, field = self._k(t, "cp"), f"{row.checkpoint_ns}{_SEP}{row.checkpoint_id}"
        elif isinstance(row, BlobRow):
            key, field = self._k(t, "blob"), f"{row.checkpoint_ns}{_SEP}{row.channel}{_SEP}{row.version}"
        else:
            key, field = self._wkey(t, row.checkpoint_ns, row.checkpoint_id), f"{row.task_id}{_SEP}{row.idx}"
        if self.clustered:
            # The same compare and delete as a script: the field must still
            # hold the frame read (see the module docstring for why not WATCH).
            with self._io:
                current = await self.client.hget(key, field)
                if current is None or _stored_envelope(kind, row, current) != row.envelope:
                    return
                if isinstance(row, CheckpointRow):
                    ids = self._ids(t, row.checkpoint_ns)
                    await self._drop_field([key, ids], [field, current, row.checkpoint_id])
                else:
                    await self._drop_field([key], [field, current])
            return
        with self._io:
            async with self.client.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(key)
                    current = await pipe.hget(key, field)
                    if current is None:
                        return
                    if _stored_envelope(kind, row, current) != row.envelope:
                        return
                    pipe.multi()
                    pipe.hdel(key, field)
                    if isinstance(row, CheckpointRow):
                        pipe.zrem(self._ids(t, row.checkpoint_ns), row.checkpoint_id)
                    await pipe.execute()
                except WatchError:
                    return  # rewritten meanwhile: that copy is not ours to remove

    async def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        out = []
        with self._io:
            threads = [thread_id] if thread_id is not None else await self._all_threads()
            for t in threads:
                for qid, item in sorted((await self.client.hgetall(self._k(t, "quarantined"))).items()):
                    ns, kind, key, reason, fields_hex, at, envelope = _unpack(item, 7)
                    try:
                        fields = bytes.fromhex(fields_hex) if isinstance(fields_hex, str) else None
                    except ValueError:  # a damaged entry: listed, not restorable
                        fields = None
                    out.append(
                        QuarantinedRecord(
                            "redis",
                            t,
                            ns or "",
                            kind or "",
                            key or "",
                            reason or "",
                            envelope,
                            at or 0.0,
                            f"{t}/{qid.decode()}",
                            _fields(fields),
                        )
                    )
        out.sort(key=lambda q: q.detected_at)
        return out

    async def drop_quarantined(self, ids: Sequence[str]) -> None:
        with self._io:
            for qid in ids:
                t, field = qid.rsplit("/", 1)
                await self.client.hdel(self._k(t, "quarantined"), field)

    async def read_meta(self, key: str) -> str | None:
        with self._io:
            value = await self.client.hget(self._meta, key)
        return value.decode() if value is not None else None

    async def write_meta(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one store-wide setting."""
        with self._io:
            if value is None:
                await self.client.hdel(self._meta, key)
            else:
                await self.client.hset(self._meta, key, value)

    async def create_meta(self, key: str, value: str) -> str:
        """Set a store-wide setting unless one is set (HSETNX); the value that holds."""
        with self._io:
            await self.client.hsetnx(self._meta, key, value)
            stored = await self.client.hget(self._meta, key)
        return stored.decode() if stored is not None else value

    async def head(self, thread_id: str, ns: str) -> Head:
        """The newest checkpoint of (thread, ns), the thread's deletion
        marker (`mark_deleted`), and the newest checkpoint's row and pending
        writes, in one round trip (a script)."""
        keys = [self._ids(thread_id, ns), self._k(thread_id, "deleted"), self._k(thread_id, "cp")]
        await self._keep_alive(thread_id)
        with self._io:
            cid, marker, data, fields = await self._head_script(keys, [f"{ns}{_SEP}", self._wkey(thread_id, ns, "")])
        if cid is None:
            return Head(None, marker.decode() if marker is not None else None)
        checkpoint_id = cid.decode()
        writes = []
        for field, value in zip(fields[::2], fields[1::2]):
            task_id, idx = field.decode().rsplit(_SEP, 1)
            channel, task_path, envelope = _unpack(value, 3)
            writes.append(
                WriteRow(thread_id, ns, checkpoint_id, task_id, int(idx), channel or "", task_path or "", envelope)
            )
        return Head(
            checkpoint_id,
            marker.decode() if marker is not None else None,
            self._cp_row(thread_id, ns, checkpoint_id, data) if data is not None else None,
            tuple(writes),
        )

    async def mark_gone(self, thread_id: str, checkpoints: Sequence[tuple[str, str]]) -> None:
        """Record that these (ns, checkpoint id) were deleted (`delete_for_runs`)."""
        if not checkpoints:
            return
        with self._io:
            await self.client.sadd(self._k(thread_id, "gone"), *[f"{ns}{_SEP}{c}" for ns, c in checkpoints])

    async def gone(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> set[str]:
        """Which of these checkpoint ids `mark_gone` recorded."""
        if not checkpoint_ids:
            return set()
        with self._io:
            flags = await self.client.smismember(self._k(thread_id, "gone"), [f"{ns}{_SEP}{c}" for c in checkpoint_ids])
        return {c for c, flag in zip(checkpoint_ids, flags) if flag}

    async def mark_deleted(self, thread_id: str, marker: str | None) -> None:
        """Record that every checkpoint of the thread up to `marker` was
        deleted (None clears it). Kept on the thread's slot, apart from its
        other keys, so `delete_thread` does not remove it."""
        with self._io:
            if marker is None:
                await self.client.delete(self._k(thread_id, "deleted"))
            else:
                await self.client.set(self._k(thread_id, "deleted"), marker)

    async def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        t = thread_id
        with self._io:
            fields = await self.client.hkeys(self._k(t, "cp"))
            wkeys = set(self._own_wkeys(t, await self.client.smembers(self._k(t, "wkeys"))))
            blob_fields = await self.client.hkeys(self._k(t, "blob"))
            kept_wkeys = {self._wkey(t, ns, cid) for ns, cid in keep}
            async with self.client.pipeline(transaction=True) as pipe:
                for f in fields:
                    ns, cid = f.decode().split(_SEP)
                    if (ns, cid) not in keep:
                        self._drop(pipe, t, ns, cid)
                for k in wkeys - kept_wkeys:
                    pipe.delete(k)
                    pipe.srem(self._k(t, "wkeys"), k)
                for f in blob_fields:
                    ns, ch, ver = f.decode().split(_SEP)
                    if (ns, ch, ver) not in keep_blobs:
                        pipe.hdel(self._k(t, "blob"), f)
                await pipe.execute()

    # -- transactions that write records (optionally fenced) ------------------------

    def _queue_checkpoint(self, pipe: Any, row: CheckpointRow, blobs: Sequence[BlobRow]) -> None:
        t, ns, cid = row.thread_id, row.checkpoint_ns, row.checkpoint_id
        pipe.hset(
            self._k(t, "cp"), f"{ns}{_SEP}{cid}", _pack(row.parent_id, row.run_id, row.metadata_json, row.envelope)
        )
        pipe.zadd(self._ids(t, ns), {cid: 0})
        pipe.sadd(self._k(t, "nss"), ns)
        for b in blobs:
            pipe.hsetnx(self._k(t, "blob"), f"{b.checkpoint_ns}{_SEP}{b.channel}{_SEP}{b.version}", b.envelope)
        self._expire(pipe, [self._k(t, "cp"), self._ids(t, ns), self._k(t, "nss"), self._k(t, "blob")])

    def _queue_writes(self, pipe: Any, rows: Sequence[WriteRow], upsert: bool) -> None:
        for w in rows:
            key = self._wkey(w.thread_id, w.checkpoint_ns, w.checkpoint_id)
            field = f"{w.task_id}{_SEP}{w.idx}"
            value = _pack(w.channel, w.task_path, w.envelope)
            if upsert:
                pipe.hset(key, field, value)
            else:
                pipe.hsetnx(key, field, value)
            pipe.sadd(self._k(w.thread_id, "wkeys"), key)
        self._expire(pipe, sorted({self._wkey(w.thread_id, w.checkpoint_ns, w.checkpoint_id) for w in rows}))
        self._expire(pipe, sorted({self._k(w.thread_id, "wkeys") for w in rows}))

    def _expire(self, pipe: Any, keys: Sequence[str]) -> None:
        """With a TTL, the keys a write touched expire `ttl` seconds from now:
        a key never outlives its thread's last use by more than that."""
        if self.ttl is not None:
            for key in keys:
                pipe.expire(key, self.ttl)

    async def _keep_alive(self, thread_id: str) -> None:
        """With a TTL, push back the expiry of every key of a thread in use
        (at most every tenth of the TTL per thread and process): a thread in
        use stays; one idle for `ttl` seconds leaves Redis, and is served from
        the other tiers and copied back when it returns."""
        if self.ttl is None:
            return
        now = time.monotonic()
        last = self._kept_alive.get(thread_id)
        if last is not None and now - last < self.ttl / 10:
            return
        self._kept_alive[thread_id] = now
        self._kept_alive.move_to_end(thread_id)
        while len(self._kept_alive) > KEEP_ALIVE_MEMO:
            self._kept_alive.popitem(last=False)
        keys = [self._k(thread_id, part) for part in ("cp", "nss", "blob", "wkeys", "gone", "deleted", "ledger")]
        with self._io:
            await self._keep_alive_script(keys, [self.ttl, self._k(thread_id, "ids:"), self._k(thread_id, "w:")])

    async def _transaction(self, fence: Fence | None, queue: Any) -> None:
        """What `queue(ops)` records, written atomically by one script call
        on the thread's slot (`_WRITE`): one command to send and one reply
        to read however many records it holds (a batch of a run's records
        was hundreds of queued commands, each packed and answered on its
        own). With a `fence`, the script first checks the thread's lease
        and renews it, and writes nothing if the lease moved
        (`_FENCED_WRITE`: `LeaseLost`); no WATCH round trip before it."""
        ops = _Ops()
        queue(ops)
        if not ops.ops:
            return
        if fence is None:
            with self._io:
                await self._write([ops.keys[0], *ops.keys], ops.args())
            return
        lease_key = self._k(fence.thread_id, "lease")
        args = [fence.holder, str(fence.token), "1" if fence.late else "0", repr(float(fence.ttl)), *ops.args()]
        with self._io:
            result = await self._fenced_write([lease_key, *ops.keys], args)
        if not result[0]:
            holder, token, expires = result[1:4]
            raise lease_lost(fence, _lease(fence.thread_id, holder, token, expires), "redis")

    # -- writer leases (lease.py): Redis's clock (TIME), so replicas' skew does not matter --

    async def read_lease(self, thread_id: str) -> tuple[Lease | None, float]:
        if self.clustered:
            # A cluster transaction refuses TIME (it has no key): a script reads both.
            with self._io:
                holder, token, expires, sec, usec = await self._read_lease([self._k(thread_id, "lease")])
            return _lease(thread_id, holder, token, expires), int(sec) + int(usec) / 1e6
        with self._io:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hmget(self._k(thread_id, "lease"), ["holder", "token", "expires_at"])
                pipe.time()
                (holder, token, expires), (sec, usec) = await pipe.execute()
        return _lease(thread_id, holder, token, expires), sec + usec / 1e6

    async def swap_lease(
        self, thread_id: str, expected: Lease | None, holder: str, token: int, ttl: float
    ) -> Lease | None:
        if expected is None:
            want = ["0", "", "", ""]
        else:
            want = ["1", expected.holder, str(expected.token), _ts(expected.expires_at)]
        with self._io:
            expires = await self.client.eval(
                _SWAP_LEASE, 1, self._k(thread_id, "lease"), *want, holder, str(token), repr(float(ttl))
            )
        return Lease(thread_id, holder, token, float(expires)) if expires else None

    async def keep_lease(self, thread_id: str, holder: str, token: int, ttl: float) -> bool:
        with self._io:
            kept = await self.client.eval(
                _KEEP_LEASE, 1, self._k(thread_id, "lease"), holder, str(token), repr(float(ttl))
            )
        return bool(kept)

    async def renew_leases(self, holder: str, leases: Sequence[tuple[str, int]], ttl: float) -> set[str]:
        if not leases:
            return set()
        args = [(self._k(thread_id, "lease"), holder, str(token), repr(float(ttl))) for thread_id, token in leases]
        with self._io:
            if self.clustered:
                # A cluster's sync pipeline runs no script: one call per lease.
                kept = [await self.client.eval(_KEEP_LEASE, 1, *arg) for arg in args]
            else:
                async with self.client.pipeline(transaction=False) as pipe:
                    for arg in args:
                        pipe.eval(_KEEP_LEASE, 1, *arg)
                    kept = await pipe.execute()
        return {thread_id for (thread_id, _), ok in zip(leases, kept) if ok}

    async def release_lease(self, thread_id: str, holder: str, token: int | None) -> None:
        with self._io:
            await self.client.eval(
                _RELEASE_LEASE, 1, self._k(thread_id, "lease"), holder, "" if token is None else str(token)
            )

    async def ask_hand_off(self, thread_id: str, holder: str) -> None:
        with self._io:
            await self.client.publish(self.prefix + hand_off_channel(holder), hand_off_message(holder, thread_id))


def _stored_envelope(kind: str, row: Row, current: bytes) -> bytes:
    """The envelope in a stored frame (a blob is stored bare)."""
    if isinstance(row, BlobRow):
        return current
    envelope: bytes = _unpack(current, 4 if kind == "checkpoint" else 3)[-1]
    return envelope


# The parts of a thread's keys in both layouts, with the type each holds.
_OLD_TYPES = {
    "cp": "hash",
    "nss": "set",
    "blob": "hash",
    "wkeys": "set",
    "quarantined": "hash",
    "deleted": "string",
    "gone": "set",
    "ledger": "hash",
    "lease": "hash",
    "ids": "zset",
    "w": "hash",
}


def _old_readings(rest: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Every (thread id, part, part's ids) the older layout could have
    written as ``P:{`` + `rest` (ids went in as they were, so a ``}:`` in
    one makes several readings). A thread id holding ``}:{`` is taken for a
    nested prefix's key (``P:{x}`` + ``:{T}:...``) and not read at all."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    at = rest.find("}:")
    while at >= 0:
        thread_id, part = rest[:at], rest[at + 2 :]
        if "}:{" not in thread_id:
            if part in _OLD_TYPES and part not in ("ids", "w"):
                out.append((thread_id, part, ()))
            elif part.startswith("ids:"):
                out.append((thread_id, "ids", (part[4:],)))
            elif part.startswith("w:") and part.count(_SEP) == 1:
                ns, cid = part[2:].split(_SEP)
                out.append((thread_id, "w", (ns, cid)))
        at = rest.find("}:", at + 1)
    return out


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _loads(metadata_json: str) -> dict[str, Any]:
    try:
        value = json.loads(metadata_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _ts(seconds: float) -> str:
    """A lease time as stored: fixed microseconds, so it compares as a string."""
    return f"{seconds:.6f}"


def _lease(thread_id: str, holder: bytes | None, token: bytes | None, expires: bytes | None) -> Lease | None:
    if token is None:
        return None
    return Lease(thread_id, (holder or b"").decode(), int(token), float(expires or 0))


# Compare-and-swap of a lease hash; the expiry comes from the server's clock.
_SWAP_LEASE = """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires_at')
if ARGV[1] == '0' then
  if cur[2] then return false end
elseif cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] or cur[3] ~= ARGV[4] then
  return false
end
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local expires = string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[7]))
redis.call('HSET', KEYS[1], 'holder', ARGV[5], 'token', ARGV[6], 'expires_at', expires)
return expires
"""

# Extend the lease to ARGV[3] seconds from the server's now, if it is still
# ARGV[1]'s with token ARGV[2] and not released.
_KEEP_LEASE = """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires_at')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or not cur[3] or tonumber(cur[3]) <= 0 then return 0 end
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local expires = string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'expires_at', expires)
return 1
"""

# Clear the holder if it is ARGV[1] (with token ARGV[2], unless empty); the token stays.
_RELEASE_LEASE = """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token')
if cur[1] ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and cur[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'expires_at', '0.000000')
return 1
"""


# Writes of records (`_transaction`), in every deployment: scripts on the
# keys of one thread, so on one slot. The ops of one write (`_Ops`) are
# ARGV[FIRST], msgpack, four items an op: the command, the index of its key
# in KEYS, and up to two arguments; a hash field's value is ARGV[FIRST + n].
_RUN_OPS = """
local ops = cmsgpack.unpack(ARGV[FIRST])
for i = 1, #ops, 4 do
  local name, key = ops[i], KEYS[ops[i + 1]]
  if name == 'ZADD' then
    redis.call('ZADD', key, ops[i + 2], ops[i + 3])
  elseif name == 'SADD' then
    redis.call('SADD', key, ops[i + 2])
  elseif name == 'HSET' or name == 'HSETNX' then
    redis.call(name, key, ops[i + 2], ARGV[FIRST + ops[i + 3]])
  elseif name == 'EXPIRE' then
    redis.call('EXPIRE', key, ops[i + 2])
  end
end
"""

# A fenced write: KEYS[1] the lease, ARGV[1..4] holder, token, late (1/0),
# ttl, then the ops. The lease must be the fence's (with `late`, see
# lease.Fence.late: not taken over since); a live one is renewed from the
# server's clock. Returns {1}, or {0, holder, token, expires_at} when the
# lease is not the fence's (nothing written).
_FENCED_WRITE = (
    """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires_at')
local token = tonumber(cur[2])
local want = tonumber(ARGV[2])
local live = token ~= nil and token == want and (tonumber(cur[3] or '0') or 0) > 0
local holds
if not cur[2] or cur[1] ~= ARGV[1] then
  holds = false
elseif ARGV[3] == '1' then
  holds = token ~= nil and token >= want
else
  holds = live
end
if not holds then return {0, cur[1], cur[2], cur[3]} end
if redis.replicate_commands then redis.replicate_commands() end
if live then
  local t = redis.call('TIME')
  local expires = string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[4]))
  redis.call('HSET', KEYS[1], 'expires_at', expires)
end
"""
    + _RUN_OPS.replace("FIRST", "5")
    + """
return {1}
"""
)

# An unfenced write: the ops alone (KEYS[1] stands where the lease key is in
# `_FENCED_WRITE`, a key of the same slot, so both read the same `_Ops`).
_WRITE = (
    _RUN_OPS.replace("FIRST", "1")
    + """
return 1
"""
)

# Push back the expiry of every key of one thread (`_keep_alive`): its fixed
# keys (KEYS), each namespace's id index (ARGV[2] .. its encoded name) and
# each write hash (the members of KEYS[4], the thread's set of them, named
# ARGV[3] .. something: no other key is touched). All on the thread's slot.
_KEEP_ALIVE = (
    _LUA_KEY_PART
    + """
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
for _, ns in ipairs(redis.call('SMEMBERS', KEYS[2])) do redis.call('EXPIRE', ARGV[2] .. key_part(ns), ARGV[1]) end
for _, key in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if string.sub(key, 1, #ARGV[3]) == ARGV[3] then redis.call('EXPIRE', key, ARGV[1]) end
end
return 1
"""
)

# The lease hash and the server's clock, at one instant.
_READ_LEASE = """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires_at')
local t = redis.call('TIME')
return {cur[1], cur[2], cur[3], t[1], t[2]}
"""

# HSET field ARGV[1] of KEYS[1] to ARGV[3] if it still holds ARGV[2].
_SWAP_FIELD = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""

# HDEL field ARGV[1] of KEYS[1] if it still holds ARGV[2]; then ZREM ARGV[3]
# from KEYS[2], if given (a checkpoint's id from its namespace's index).
_DROP_FIELD = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[3]) end
return 1
"""


if TYPE_CHECKING:
    from ..protocol_async import AsyncTier

    def _conforms(tier: AsyncRedisTier) -> AsyncTier:
        """mypy checks here that the class implements the Protocol the rooms use."""
        return tier
