"""Postgres's kind of tier: the system of record (`tiers.registry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...model.roles import Role
from ..tier_kind import TierKind, register

if TYPE_CHECKING:
    from ..supplied import Supplied


def arguments(options: Any, supplied: Supplied | None, asynchronous: bool) -> dict[str, Any]:
    """`PostgresTier`'s arguments besides its URL, from the saver's
    `options.TierOptions`: the caller's pool if it serves this face."""
    return {
        "pool": supplied.for_face(asynchronous) if supplied else None,
        "pool_size": options.postgres_pool_size,
        "connect_timeout": options.connect_timeout,
        "call_timeout": options.call_timeout,
        "prepared_statements": options.postgres_prepared_statements,
        "schema": options.postgres_schema,
    }


def ears(tier: Any, channel: str, call_timeout: float | None) -> Any:
    """A connection of its own, LISTENing on the tier's hand-off channel
    (an `engine.leases.handoff.Ears`)."""
    from .ears import PostgresEars

    return PostgresEars(tier.url, tier.connect_timeout, channel, call_timeout=call_timeout)


POSTGRES: TierKind = register(
    TierKind(
        keyword="postgres",
        role=Role.RECORD,
        env="LANGGRAPH_DURABLE_POSTGRES_URL",
        schemes=("postgresql://", "postgres://"),
        what="postgresql:// URL of the Postgres tier",
        builtin=True,
        classes=("postgres.tier:PostgresTier", "postgres.tier_async:AsyncPostgresTier"),
        arguments=arguments,
        supplied="supplied:supplied_postgres",
        ears=ears,
    )
)
