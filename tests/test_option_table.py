"""The option table (`langgraph_durable.option_table`) is the one place an
option is named: the constructor's keywords and defaults, `from_env`'s
variables, the command line's flags and the reference in
docs/configuration.md all agree with it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_durable import DurableSaver, cli, environment
from langgraph_durable.option_table import BY_NAME, FLAGS, OPTIONS, VARIABLES
from langgraph_durable.options import ENV_OF_KEYWORD, env_options
from langgraph_durable.tiers.registry import KINDS

ROOT = Path(__file__).resolve().parent.parent


def test_the_constructor_takes_the_table_s_keywords_with_its_defaults() -> None:
    parameters = {n: p for n, p in inspect.signature(DurableSaver.__init__).parameters.items() if n != "self"}
    assert set(parameters) == set(BY_NAME), set(parameters) ^ set(BY_NAME)
    for name, parameter in parameters.items():
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameter.default == BY_NAME[name].default, name
    assert len({o.name for o in OPTIONS}) == len(OPTIONS)


def test_every_variable_is_the_table_s() -> None:
    named = {getattr(environment, n) for n in environment.__all__ if n.startswith("ENV_")}
    assert named == {o.env for o in VARIABLES}
    for kind in KINDS:  # a tier kind's variable is its option's
        assert BY_NAME[kind.keyword].env == kind.env
    assert set(ENV_OF_KEYWORD.values()) <= named


@pytest.mark.parametrize("name", [o.name for o in VARIABLES if o.reading in ("text", "seconds", "bool")])
def test_from_env_reads_each_variable_into_its_keyword(name: str) -> None:
    o = BY_NAME[name]
    assert o.env is not None
    text = {"seconds": "12.5", "bool": "false"}.get(o.reading, "x")
    kwargs = env_options({o.env: text}, "default.sqlite")
    assert kwargs[o.name] == {"seconds": 12.5, "bool": False}.get(o.reading, "x")


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
    assert all(getattr(args, o.name) == "" for o in FLAGS)


def test_the_reference_in_the_docs_is_the_table_s() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "option_table.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, f"{done.stderr.strip()} (python tools/option_table.py rewrites it)"
    page = (ROOT / "docs" / "configuration.md").read_text()
    for option in OPTIONS:
        assert f"`{option.name}=`" in page, option.name
