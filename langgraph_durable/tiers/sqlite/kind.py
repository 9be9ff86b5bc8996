"""The SQLite file's kind of tier: the local one (`tiers.registry`)."""

from __future__ import annotations

from ...model.roles import Role
from ..tier_kind import TierKind, register

SQLITE: TierKind = register(
    TierKind(
        keyword="sqlite",
        role=Role.LOCAL,
        env="LANGGRAPH_DURABLE_SQLITE",
        schemes=(),
        what="local SQLite file, ':memory:', or '' for none",
        builtin=True,
        classes=("sqlite.tier:SqliteTier", "sqlite.tier:AsyncSqliteTier"),
    )
)
