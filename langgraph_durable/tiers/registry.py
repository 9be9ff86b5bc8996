"""The kinds of tier, in one table: the keyword that configures each, its
role, the URL schemes it takes, its environment variable and CLI flag.

`DurableSaver` checks its arguments and reads the environment from this
table, and the CLI builds its tier flags and its environment help from it,
the way it builds its subcommands from `cli.COMMANDS`. A new kind of tier
is a row here (and a class with the capabilities its role needs,
`tiers.protocol_async`); the rooms that ask which tier does what go by its
role (`roles.Roles`), never by its name or its place in the list.
"""

from __future__ import annotations

from dataclasses import dataclass

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
)
REDIS = TierKind(
    keyword="redis",
    role=Role.HOT,
    env="LANGGRAPH_DURABLE_REDIS_URL",
    schemes=("redis://", "rediss://", "unix://", "redis+sentinel://"),
    what="redis:// URL of the Redis tier",
)
POSTGRES = TierKind(
    keyword="postgres",
    role=Role.RECORD,
    env="LANGGRAPH_DURABLE_POSTGRES_URL",
    schemes=("postgresql://", "postgres://"),
    what="postgresql:// URL of the Postgres tier",
)

# Nearest first.
KINDS: tuple[TierKind, ...] = (SQLITE, REDIS, POSTGRES)


def kind_of(url: str) -> TierKind | None:
    """The kind of tier a URL names, by its scheme (None for a path)."""
    return next((k for k in KINDS if k.schemes and url.startswith(k.schemes)), None)
