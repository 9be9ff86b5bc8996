"""Which tier does what comes from roles (roles.py, tiers/registry.py), not
from a tier's name or its place in the list."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

import langgraph_durable
from langgraph_durable import ConfigError
from langgraph_durable.model.roles import Role, Roles, ships_behind
from langgraph_durable.tiers.registry import POSTGRES, REDIS, SQLITE, kind_of, kinds


@dataclass(frozen=True)
class T:
    name: str
    role: Role


LOCAL, HOT, RECORD = T("sqlite", Role.LOCAL), T("redis", Role.HOT), T("postgres", Role.RECORD)


@pytest.mark.parametrize("order", list(itertools.permutations([LOCAL, HOT, RECORD])))
def test_the_order_tiers_are_given_in_changes_nothing(order: tuple[T, ...]) -> None:
    roles = Roles.of(order)
    assert roles.local is LOCAL
    assert roles.shared == (HOT, RECORD)
    assert roles.tiers == (LOCAL, HOT, RECORD)
    assert roles.by_authority() == (RECORD, HOT, LOCAL)
    assert roles.authority is RECORD
    assert roles.lease_candidates() == (RECORD, HOT)
    assert roles.cache is LOCAL


@pytest.mark.parametrize(
    "tiers, authority, last_resort, cache",
    [
        ([LOCAL], None, LOCAL, None),
        ([HOT], HOT, HOT, None),
        ([LOCAL, HOT], HOT, HOT, LOCAL),
        ([RECORD, LOCAL], RECORD, RECORD, LOCAL),
    ],
)
def test_every_subset(tiers: list[T], authority: T | None, last_resort: T, cache: T | None) -> None:
    roles = Roles.of(tiers)
    assert roles.authority is authority
    assert roles.last_resort is last_resort
    assert roles.cache is cache
    assert roles.named("nowhere") is last_resort  # a lease taken on a tier since removed
    assert roles.named("sqlite") is (LOCAL if LOCAL in tiers else last_resort)


def test_a_new_kind_of_tier_does_not_become_the_authority_by_coming_last() -> None:
    another_hot = T("memcache", Role.HOT)
    with pytest.raises(ConfigError, match="two tiers have the hot role"):
        Roles.of([LOCAL, RECORD, another_hot, HOT])
    roles = Roles.of([RECORD, T("memcache", Role.HOT)])
    assert roles.authority is RECORD
    assert roles.lease_candidates()[0] is RECORD


def test_no_tier_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="at least one tier"):
        Roles.of([])


@pytest.mark.parametrize(
    "write, local, shared, behind",
    [
        ("local", True, 1, True),
        ("shared", True, 2, True),
        ("shared", True, 1, False),
        ("shared", False, 2, False),
        ("all", True, 2, False),
    ],
)
def test_ships_behind(write: str, local: bool, shared: int, behind: bool) -> None:
    assert ships_behind(write, local, shared) is behind
    tiers = ([LOCAL] if local else []) + [HOT, RECORD][2 - shared :]
    assert Roles.of(tiers).ships_behind(write) is behind


def test_the_registry_names_each_kind_once() -> None:
    assert [k.keyword for k in kinds()] == ["sqlite", "redis", "postgres"]
    assert [k.role for k in kinds()] == [Role.LOCAL, Role.HOT, Role.RECORD]
    assert len({k.env for k in kinds()}) == len({k.flag for k in kinds()}) == 3
    assert kind_of("rediss://h:6380/0") is REDIS
    assert kind_of("postgres://u@h/db") is POSTGRES
    assert kind_of("checkpoints.sqlite") is None
    assert SQLITE.flag == "--sqlite"


def test_a_url_of_the_wrong_kind_says_what_one_looks_like() -> None:
    with pytest.raises(ConfigError, match=r"redis= got 'postgresql://u@h/db'.*redis:// or rediss://"):
        REDIS.check("postgresql://u@h/db")
    with pytest.raises(ConfigError, match="postgres= got 'int'"):
        POSTGRES.check(5432)


def test_each_tier_class_declares_the_role_of_its_kind() -> None:
    from langgraph_durable.tiers.postgres.tier import PostgresTier
    from langgraph_durable.tiers.postgres.tier_async import AsyncPostgresTier
    from langgraph_durable.tiers.redis.tier import RedisTier
    from langgraph_durable.tiers.redis.tier_async import AsyncRedisTier
    from langgraph_durable.tiers.sqlite.tier import AsyncSqliteTier, SqliteTier

    for kind, classes in {
        SQLITE: (SqliteTier, AsyncSqliteTier),
        REDIS: (RedisTier, AsyncRedisTier),
        POSTGRES: (PostgresTier, AsyncPostgresTier),
    }.items():
        for cls in classes:
            assert (cls.name, cls.role) == (kind.keyword, kind.role)


# The rooms that decide which tier does what; each tier module and the
# registry may of course name its own kind.
ROOMS = [
    "engine/chain_async.py",
    "engine/reads_async.py",
    "engine/scan_async.py",
    "engine/journal_async.py",
    "engine/leases/keeper_async.py",
    "saver.py",
    "faces/base.py",
    "faces/runtime.py",
    "faces/ops_async.py",
]


@pytest.mark.parametrize("room", ROOMS)
def test_no_room_tells_a_tier_by_its_name_or_its_place(room: str) -> None:
    """`tier.name == "sqlite"` or `tiers[-1]` is how roles used to be
    implicit; `Roles` answers those questions now."""
    tree = ast.parse((Path(langgraph_durable.__file__).parent / room).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value in {"sqlite", "redis", "postgres"} for c in node.comparators
        ):
            found.append(f"line {node.lineno}: compares with a tier's name")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr in {"tiers", "shared", "raw_shared"}
            and isinstance(node.slice, (ast.UnaryOp, ast.Constant, ast.Slice))
        ):
            found.append(f"line {node.lineno}: picks a tier by its place ({ast.unparse(node)})")
    assert not found, found


def test_the_registry_names_the_classes_of_each_kind_on_both_faces() -> None:
    from langgraph_durable.tiers.postgres.tier_async import AsyncPostgresTier
    from langgraph_durable.tiers.redis.tier import RedisTier

    assert REDIS.tier_class(asynchronous=False) is RedisTier
    assert POSTGRES.tier_class(asynchronous=True) is AsyncPostgresTier
    for kind in kinds():
        for face in (False, True):
            cls = kind.tier_class(asynchronous=face)
            assert (cls.name, cls.role) == (kind.keyword, kind.role)
