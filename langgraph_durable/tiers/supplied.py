"""Connections the application passes in instead of URLs: a psycopg pool
as ``postgres=``, a redis-py client as ``redis=``.

The caller owns such an object: the saver uses it on its own face (a sync
pool or client for the sync methods, an async one for the ``a*`` methods)
and never closes it. The other face gets a pool or client of its own,
opened from the same address and credentials (`Supplied.url`) and closed
with the saver, so a sync call on a saver given only an async pool (the
LangGraph server and ``get_state`` call sync methods too) still works.

No I/O here: only what kind of object was passed and where it points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import quote

from ..errors import ConfigError

if TYPE_CHECKING:
    import psycopg_pool
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

    PostgresPool: TypeAlias = psycopg_pool.ConnectionPool[Any] | psycopg_pool.AsyncConnectionPool[Any]
    RedisClient: TypeAlias = (
        redis.Redis | redis.asyncio.Redis | redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster
    )

__all__ = ["PostgresPool", "RedisClient", "Supplied", "supplied_postgres", "supplied_redis"]

# psycopg connection attributes a pool's `kwargs` may set that are not libpq
# connection parameters: the tier sets its own per connection (see
# `AsyncPostgresTier._connection`), so the derived pool drops them.
_PSYCOPG_ATTRIBUTES = frozenset({"autocommit", "row_factory", "prepare_threshold", "cursor_factory", "context"})


@dataclass(frozen=True)
class Supplied:
    """A pool or client the caller passed for one tier."""

    obj: Any
    asynchronous: bool
    """Which face it serves: True for an asyncio pool or client."""
    url: str
    """Where it points, credentials included: what the other face's own pool
    or client is opened from (a libpq conninfo string or a redis URL)."""
    cluster: bool = False
    """A Redis Cluster client."""
    callbacks: tuple[str, ...] = ()
    """The pool's connection callbacks (``configure``, ``reset``): they run
    on its own connections only, never on the other face's."""

    def for_face(self, asynchronous: bool) -> Any:
        """The caller's object if it serves this face, else None."""
        return self.obj if asynchronous == self.asynchronous else None


def supplied_postgres(value: object) -> Supplied | None:
    """`value` as a caller's psycopg pool, None if it is not one."""
    try:
        from psycopg_pool import AsyncConnectionPool, ConnectionPool
    except ImportError:  # pragma: no cover - psycopg_pool is a dependency
        return None
    if not isinstance(value, (ConnectionPool, AsyncConnectionPool)):
        return None
    from psycopg import ProgrammingError
    from psycopg.conninfo import make_conninfo

    kwargs = value.kwargs or {}
    if not isinstance(value.conninfo, str) or not isinstance(kwargs, dict):
        raise ConfigError(
            "postgres= got a psycopg pool whose conninfo or kwargs is a function: the saver opens a pool of its "
            "own for its other face from them, so give the pool a conninfo string and a kwargs dict, or pass a URL."
        )
    params = {k: v for k, v in kwargs.items() if k not in _PSYCOPG_ATTRIBUTES}
    try:
        conninfo = make_conninfo(value.conninfo, **params)
    except ProgrammingError as exc:
        raise ConfigError(
            f"postgres= got a psycopg pool whose connection settings are not libpq parameters ({exc}): "
            "give the pool a conninfo string or URL and only libpq parameters (plus autocommit, row_factory, "
            "prepare_threshold) in kwargs=."
        ) from exc
    callbacks = tuple(name for name in ("configure", "reset") if getattr(value, f"_{name}", None) is not None)
    return Supplied(value, isinstance(value, AsyncConnectionPool), conninfo, callbacks=callbacks)


def supplied_redis(value: object) -> Supplied | None:
    """`value` as a caller's redis-py client, None if it is not one.
    `ConfigError` for a client that decodes replies (the tier stores bytes)."""
    if value is None or isinstance(value, str):
        return None  # a URL, or no Redis tier: redis-py is not loaded for it
    import redis
    import redis.asyncio
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster

    if isinstance(value, (RedisCluster, AsyncRedisCluster)):
        node = value.get_default_node()
        kwargs = dict(value.get_connection_kwargs() if isinstance(value, RedisCluster) else value.connection_kwargs)
        kwargs.update(host=node.host, port=node.port, db=0)
        scheme = "rediss" if kwargs.get("ssl") or "ssl_cert_reqs" in kwargs else "redis"
    elif isinstance(value, (redis.Redis, redis.asyncio.Redis)):
        pool = value.connection_pool
        kwargs = dict(pool.connection_kwargs)
        connection = pool.connection_class.__name__
        scheme = "unix" if "UnixDomain" in connection else "rediss" if "SSL" in connection else "redis"
    else:
        return None
    if kwargs.get("decode_responses"):
        raise ConfigError(
            "redis= got a redis-py client made with decode_responses=True; the saver stores bytes. Pass a "
            "client made with decode_responses=False (the default), or a URL."
        )
    return Supplied(
        value,
        isinstance(value, (redis.asyncio.Redis, AsyncRedisCluster)),
        _redis_url(scheme, kwargs),
        cluster=isinstance(value, (RedisCluster, AsyncRedisCluster)),
    )


def _redis_url(scheme: str, kwargs: dict[str, Any]) -> str:
    """A redis URL saying what `kwargs` (a connection's keyword arguments) say."""
    user, password = kwargs.get("username"), kwargs.get("password")
    creds = ""
    if user or password:
        creds = f"{quote(str(user or ''), safe='')}" + (f":{quote(str(password), safe='')}" if password else "") + "@"
    db = int(kwargs.get("db") or 0)
    if scheme == "unix":
        return f"unix://{creds}{kwargs.get('path', '')}?db={db}"
    host = str(kwargs.get("host") or "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{creds}{host}:{int(kwargs.get('port') or 6379)}/{db}"
