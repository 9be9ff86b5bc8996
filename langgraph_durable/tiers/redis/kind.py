"""Redis's kind of tier: the hot one, shared by the replicas
(`tiers.registry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...model.roles import Role
from ..tier_kind import TierKind, register

if TYPE_CHECKING:
    from ..supplied import Supplied


def arguments(options: Any, supplied: Supplied | None, asynchronous: bool) -> dict[str, Any]:
    """`RedisTier`'s arguments besides its URL, from the saver's
    `options.TierOptions`: the caller's client if it serves this face."""
    return {
        "client": supplied.for_face(asynchronous) if supplied else None,
        "key_prefix": options.redis_key_prefix,
        "socket_timeout": options.call_timeout,
        "connect_timeout": options.connect_timeout,
        "cluster": options.redis_cluster,
        "ttl": options.redis_ttl,
    }


def ears(tier: Any, channel: str, call_timeout: float | None) -> Any:
    """A subscription of its own on the tier's hand-off channel (an
    `engine.leases.handoff.Ears`)."""
    from .ears import RedisEars

    tier.setup()  # connects; finds out whether it is a cluster
    return RedisEars(tier.client, tier.prefix + channel)


REDIS: TierKind = register(
    TierKind(
        keyword="redis",
        role=Role.HOT,
        env="LANGGRAPH_DURABLE_REDIS_URL",
        schemes=("redis://", "rediss://", "unix://", "redis+sentinel://"),
        what="redis:// URL of the Redis tier",
        builtin=True,
        classes=("redis.tier:RedisTier", "redis.tier_async:AsyncRedisTier"),
        arguments=arguments,
        supplied="supplied:supplied_redis",
        ears=ears,
    )
)
