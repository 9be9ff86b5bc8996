"""Which tier does what: the roles of the configured tiers.

Every tier declares its `Role` (a class attribute); `Roles` takes the
configured tiers in any order and answers the questions the rest of the
package used to answer by position ("the last tier") or by name
("sqlite"): which tier is the local one, which is the authority (the system
of record, else the shared hot tier), where a writer lease is taken, and
whether a run's writes are shipped to a shared tier behind it. Pure: no I/O.

A new kind of tier picks a role and gets the behaviour of that role; it
does not become the authority or the lease tier by being configured last.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ..errors import ConfigError


class Role(enum.Enum):
    """What a tier is for, nearest the process first."""

    LOCAL = "local"
    """This process's cache and crash-safe journal (SQLite): read first,
    written with every step, never seen by another replica."""
    HOT = "hot"
    """Shared across replicas, fast, may lose data (Redis)."""
    RECORD = "record"
    """The system of record (Postgres): the authority, where leases live."""


# How much a tier's answer counts when tiers disagree, and where a lease is
# taken: the highest rank that answers.
RANK = {Role.LOCAL: 0, Role.HOT: 1, Role.RECORD: 2}


class HasRole(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def role(self) -> Role: ...


T = TypeVar("T", bound=HasRole)


@dataclass(frozen=True)
class Roles(Generic[T]):
    """The configured tiers by role. `shared` is ordered by authority,
    nearest first (the hot tier, then the system of record)."""

    local: T | None
    shared: tuple[T, ...]

    @classmethod
    def of(cls, tiers: Iterable[T]) -> Roles[T]:
        tiers = list(tiers)
        if not tiers:
            raise ConfigError("at least one tier is needed: pass sqlite=, redis= or postgres=.")
        for role in Role:
            named = [t.name for t in tiers if t.role is role]
            if len(named) > 1:
                raise ConfigError(f"two tiers have the {role.value} role ({', '.join(named)}): configure one of each.")
        local = next((t for t in tiers if t.role is Role.LOCAL), None)
        shared = tuple(sorted((t for t in tiers if t.role is not Role.LOCAL), key=lambda t: RANK[t.role]))
        return cls(local, shared)

    @property
    def tiers(self) -> tuple[T, ...]:
        """Every tier, nearest first: the order a read asks them in."""
        return ((self.local,) if self.local is not None else ()) + self.shared

    def by_authority(self) -> tuple[T, ...]:
        """Every tier, the authority first: the order an authoritative
        question falls back in when a tier is down."""
        return tuple(reversed(self.tiers))

    @property
    def authority(self) -> T | None:
        """The shared tier whose answer wins (the system of record, else the
        hot tier); None for the local tier alone."""
        return self.shared[-1] if self.shared else None

    @property
    def cache(self) -> T | None:
        """The local tier when shared tiers stand behind it: a read may
        prefer it, and a copy only it holds may be stale (with the local
        tier alone there is nothing to prefer it to)."""
        return self.local if self.shared else None

    @property
    def last_resort(self) -> T:
        """The tier asked when no other is named: the authority, else the local tier."""
        tier = self.authority or self.local
        assert tier is not None
        return tier

    def lease_candidates(self) -> tuple[T, ...]:
        """Where a writer lease may be taken, most authoritative first."""
        return tuple(reversed(self.shared))

    def named(self, name: str) -> T:
        """The tier called `name`; the last resort for a name no tier has
        (a lease taken on a tier since removed from the configuration)."""
        return next((t for t in self.tiers if t.name == name), self.last_resort)

    def ships_behind(self, write: str) -> bool:
        """Whether the replicator, not the step, writes a run's records to a
        shared tier: every shared tier with write-behind (``write="local"``);
        with ``write="shared"``, a local journal and two shared tiers, the one
        without the lease (a write is acknowledged once the lease's tier and
        the journal hold it)."""
        return ships_behind(write, self.local is not None, len(self.shared))


def ships_behind(write: str, local: bool, shared: int) -> bool:
    """`Roles.ships_behind` before the tiers exist (the saver sizes its
    replicator's pace with it)."""
    return write == "local" or (write == "shared" and local and shared > 1)
