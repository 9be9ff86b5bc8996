"""The option table (`langgraph_durable.option_table`) is the one place an
option is named: the constructor's keywords and defaults, `from_env`'s
variables, the command line's flags and the reference in
docs/configuration.md all agree with it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import Archive, DurableSaver, Integrity, Leases, Memory, RetentionPolicy, Tiers, cli, environment
from langgraph_durable.option_groups import GROUPS, group_defaults
from langgraph_durable.option_table import BY_NAME, FLAGS, OPTIONS, VARIABLES
from langgraph_durable.options import ENV_OF_KEYWORD, Options, env_options
from langgraph_durable.tiers.registry import kinds

ROOT = Path(__file__).resolve().parent.parent


def test_the_constructor_takes_the_table_s_keywords_with_its_defaults() -> None:
    signature = inspect.signature(DurableSaver.__init__).parameters.items()
    parameters = {n: p for n, p in signature if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}
    # A tier kind registered from outside the package comes as its own keyword (tests/test_tier_kinds.py).
    assert [n for n, p in signature if p.kind is inspect.Parameter.VAR_KEYWORD] == ["other_tiers"]
    assert set(parameters) == {o.keyword for o in OPTIONS}, set(parameters) ^ {o.keyword for o in OPTIONS}
    assert len(parameters) <= 18  # the rarely used knobs are in groups
    for name, parameter in parameters.items():
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, name
        if name in GROUPS:
            assert parameter.default is None, name  # None: the group's defaults
        else:
            assert parameter.default == BY_NAME[name].default, name
    assert len({o.name for o in OPTIONS}) == len(OPTIONS)


@pytest.mark.parametrize("group", [*GROUPS.values(), Archive, RetentionPolicy], ids=lambda cls: cls.__name__)
def test_each_group_s_fields_are_the_table_s_with_its_defaults(group: type[Any]) -> None:
    keyword = {cls: k for k, cls in GROUPS.items()}.get(group) or {Archive: "archive"}.get(group, "retention")
    in_table = {o.field: o for o in OPTIONS if o.keyword == keyword and o.field}
    defaults = group_defaults(group)
    if group is Archive:
        defaults.pop("url")  # the archive= keyword's own row
    if group is RetentionPolicy:
        defaults = {k: v for k, v in defaults.items() if k in ("every", "rate")}  # the rules are the policy's
    assert set(defaults) == set(in_table), set(defaults) ^ set(in_table)
    for field, default in defaults.items():
        assert in_table[field].default == default, field


def test_every_option_reaches_the_checks_by_its_flat_name() -> None:
    checked = set(inspect.signature(Options.parse).parameters) - {"cls"}
    for option in OPTIONS:
        if option.keyword in (
            "validators",
            "on_validation",
            "app_version",
            "migrations",
            "metrics",
            "serde",
            "retention",
        ):
            continue  # not checked there: given to the saver as they are (a policy checks itself)
        assert option.flat in checked, option.name


def test_the_groups_defaults_are_the_rooms_defaults() -> None:
    from langgraph_durable.archive.replica import DEFAULT_ARCHIVE_LAG_S
    from langgraph_durable.model.backlog import DEFAULT_CALL_TIMEOUT_S
    from langgraph_durable.model.codec import DEFAULT_MAX_RECORD_BYTES
    from langgraph_durable.model.deltas import DEFAULT_SNAPSHOT_EVERY
    from langgraph_durable.model.lease import (
        DEFAULT_LEASE_LINGER_S,
        DEFAULT_LEASE_TTL_S,
        DEFAULT_LEASE_WAIT_S,
        DEFAULT_ON_BUSY,
    )
    from langgraph_durable.model.memory_budget import DEFAULT_MEMORY_BUDGET
    from langgraph_durable.tiers.postgres.tier_async import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_POOL_SIZE
    from langgraph_durable.tiers.sqlite.tier import DEFAULT_BUSY_TIMEOUT_S

    assert Tiers() == Tiers(
        postgres_pool_size=DEFAULT_POOL_SIZE,
        sqlite_busy_timeout=DEFAULT_BUSY_TIMEOUT_S,
        connect_timeout=DEFAULT_CONNECT_TIMEOUT_S,
        call_timeout=DEFAULT_CALL_TIMEOUT_S,
    )
    assert Integrity() == Integrity(max_record_bytes=DEFAULT_MAX_RECORD_BYTES)
    assert Leases() == Leases(
        on_busy=DEFAULT_ON_BUSY, ttl=DEFAULT_LEASE_TTL_S, wait=DEFAULT_LEASE_WAIT_S, linger=DEFAULT_LEASE_LINGER_S
    )
    assert Memory() == Memory(budget=DEFAULT_MEMORY_BUDGET, list_snapshot_every=DEFAULT_SNAPSHOT_EVERY)
    assert Archive("s3://b/p").lag == DEFAULT_ARCHIVE_LAG_S


def test_every_variable_is_the_table_s() -> None:
    named = {getattr(environment, n) for n in environment.__all__ if n.startswith("ENV_")}
    assert named == {o.env for o in VARIABLES}
    for kind in kinds():  # a tier kind's variable is its option's
        assert BY_NAME[kind.keyword].env == kind.env
    assert set(ENV_OF_KEYWORD.values()) <= named


@pytest.mark.parametrize("name", [o.name for o in VARIABLES if o.reading in ("text", "seconds", "bool")])
def test_from_env_reads_each_variable_into_its_keyword(name: str) -> None:
    o = BY_NAME[name]
    assert o.env is not None
    text = {"seconds": "12.5", "bool": "false"}.get(o.reading, "x")
    kwargs = env_options({o.env: text}, "default.sqlite")
    assert kwargs[o.flat] == {"seconds": 12.5, "bool": False}.get(o.reading, "x")


def test_the_command_line_takes_the_table_s_flags() -> None:
    parser = cli.build_parser()
    for command in cli.COMMANDS:
        if command.internal or not command.tiers:
            continue
        sub = parser.subcommands[command.name]
        for leaf in sub.subcommands.values() or [sub]:
            for option in FLAGS:
                assert option.flag in leaf.flags, (command.name, option.flag)
    args = cli.parse(["doctor", *[a for o in FLAGS for a in (o.flag, "")]])
    assert all(getattr(args, o.flat) == "" for o in FLAGS)


def test_the_reference_in_the_docs_is_the_table_s() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "option_table.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, f"{done.stderr.strip()} (python tools/option_table.py rewrites it)"
    page = (ROOT / "docs" / "configuration.md").read_text()
    for option in OPTIONS:
        assert f"`{option.spelled}`" in page, option.name
