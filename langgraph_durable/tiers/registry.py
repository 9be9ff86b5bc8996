"""The kinds of tier, in one table: the keyword that configures each, its
role, the URL schemes it takes, its environment variable and CLI flag, and
the classes that implement it (sync and async faces).

`DurableSaver` checks its arguments and reads the environment from this
table, and the CLI builds its tier flags and its environment help from it,
the way it builds its subcommands from `cli.COMMANDS`. A new kind of tier
is a row here (and a class with the capabilities its role needs,
`tiers.protocol_async`); the rooms that ask which tier does what go by its
role (`roles.Roles`), never by its name or its place in the list.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..model.roles import Role
from .base import redact

DEFAULT_SQLITE_PATH = ".langgraph_durable/checkpoints.sqlite"


@dataclass(frozen=True)
class TierKind:
    """One kind of tier."""

    keyword: str
    """Its keyword on `DurableSaver` and `from_urls` (and its tier name)."""
    role: Role
    env: str
    """The environment variable `from_env` and the CLI read it from."""
    schemes: tuple[str, ...]
    """The URL prefixes it takes; empty for a file path."""
    what: str
    """What its value is, for help and errors."""
    classes: tuple[str, str]
    """Its sync and async classes, as ``module:Class`` inside `tiers`
    (imported when first asked for)."""

    def tier_class(self, *, asynchronous: bool) -> type[Any]:
        """The class of this kind's tiers on one face."""
        module, _, name = self.classes[1 if asynchronous else 0].partition(":")
        cls: type[Any] = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        return cls

    @property
    def flag(self) -> str:
        """Its CLI flag."""
        return f"--{self.keyword.replace('_', '-')}"

    def check(self, value: object) -> str:
        """`value` if it is a URL of this kind; else a `ConfigError` that says
        what one looks like."""
        if not self.schemes:
            raise TypeError(f"{self.keyword} takes a path, not a URL")
        if not isinstance(value, str) or not value.startswith(self.schemes):
            shown = redact(value) if isinstance(value, str) else type(value).__name__
            raise ConfigError(
                f"{self.keyword}= got {shown!r}, which is not a {self.keyword} URL: it must start with "
                f"{' or '.join(self.schemes)} (for example {self.schemes[0]}127.0.0.1/...)."
            )
        return value


SQLITE = TierKind(
    keyword="sqlite",
    role=Role.LOCAL,
    env="LANGGRAPH_DURABLE_SQLITE",
    schemes=(),
    what="local SQLite file, ':memory:', or '' for none",
    classes=("sqlite.tier:SqliteTier", "sqlite.tier:AsyncSqliteTier"),
)
REDIS = TierKind(
    keyword="redis",
    role=Role.HOT,
    env="LANGGRAPH_DURABLE_REDIS_URL",
    schemes=("redis://", "rediss://", "unix://", "redis+sentinel://"),
    what="redis:// URL of the Redis tier",
    classes=("redis.tier:RedisTier", "redis.tier_async:AsyncRedisTier"),
)
POSTGRES = TierKind(
    keyword="postgres",
    role=Role.RECORD,
    env="LANGGRAPH_DURABLE_POSTGRES_URL",
    schemes=("postgresql://", "postgres://"),
    what="postgresql:// URL of the Postgres tier",
    classes=("postgres.tier:PostgresTier", "postgres.tier_async:AsyncPostgresTier"),
)

# Nearest first.
KINDS: tuple[TierKind, ...] = (SQLITE, REDIS, POSTGRES)


def kind_of(url: str) -> TierKind | None:
    """The kind of tier a URL names, by its scheme (None for a path)."""
    return next((k for k in KINDS if k.schemes and url.startswith(k.schemes)), None)
