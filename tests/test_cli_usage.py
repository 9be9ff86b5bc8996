"""Usage errors are one line naming the command and, for a mistyped option
or command, the likely one (exit 2; with --json the envelope too), and the
exit-status table is in the top-level help only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langgraph_durable import cli


def _usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(list(argv))
    assert info.value.code == cli.EXIT_USAGE
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["doctor", "--postgress", "X"],
            "langgraph-durable doctor: unknown option --postgress (did you mean --postgres?)",
        ),
        (
            ["doctor", "--postgress=X"],
            "langgraph-durable doctor: unknown option --postgress (did you mean --postgres?)",
        ),
        # The typo is what is reported, not the THREAD it hides.
        (
            ["actions", "--thred", "t"],
            "langgraph-durable actions: unknown option --thred "
            "(did you mean `langgraph-durable actions THREAD`? THREAD takes no flag)",
        ),
        (
            ["quarantine", "purge", "--older-then", "30d"],
            "langgraph-durable quarantine purge: unknown option --older-then (did you mean --older-than?)",
        ),
        (["quarantine", "lst"], "langgraph-durable quarantine: unknown action lst (did you mean list?)"),
        (
            ["resolve-action", "--key", "k", "--done"],
            "langgraph-durable resolve-action: name the thread: `langgraph-durable resolve-action THREAD` "
            "(see `langgraph-durable resolve-action --help`)",
        ),
        (
            ["actions", "a", "--thread", "b"],
            "langgraph-durable actions: two threads given ('a' and --thread 'b'): name one "
            "(see `langgraph-durable actions --help`)",
        ),
        (
            ["quarantine", "--bogus", "X", "list"],
            "langgraph-durable quarantine list: unknown option --bogus (see `langgraph-durable quarantine list --help`)",
        ),
        (
            ["--sqlite", "threads"],
            "langgraph-durable: no command after --sqlite threads: `langgraph-durable COMMAND [OPTIONS]` "
            "(see `langgraph-durable --help`)",
        ),
        (
            ["quarantine", "list", "--older-than", "1d"],
            "langgraph-durable quarantine list: unknown option --older-than (see `langgraph-durable quarantine "
            "list --help`)",
        ),
        # A flag spelled like an argument given without one names that argument.
        (
            ["history", "--thraed", "k4"],
            "langgraph-durable history: unknown option --thraed "
            "(did you mean `langgraph-durable history THREAD`? THREAD takes no flag)",
        ),
        (["doctr"], "langgraph-durable: unknown command doctr (did you mean doctor?)"),
        (["qurantine", "list"], "langgraph-durable: unknown command qurantine (did you mean quarantine?)"),
        (
            ["doctor", "--zzzzzz"],
            "langgraph-durable doctor: unknown option --zzzzzz (see `langgraph-durable doctor --help`)",
        ),
    ],
)
def test_a_typo_is_one_line_naming_the_likely_option(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out, err = _usage_error(capsys, *argv)
    assert err == line + "\n" and out == ""


def test_a_usage_error_with_json_also_prints_the_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = _usage_error(capsys, "doctor", "--postgress", "X", "--json")
    doc = json.loads(out)
    assert doc["command"] == "doctor" and doc["ok"] is False and doc["report"] == {}
    assert doc["error"] == {
        "type": "usage",
        "message": "unknown option --postgress (did you mean --postgres?)",
        "exit_status": 2,
    }
    assert err.count("\n") == 1


def test_a_thread_is_named_one_way_and_the_older_flag_still_works() -> None:
    # A command about one thread takes THREAD; `--thread THREAD` (the older
    # spelling of actions and resolve-action) is still taken, and not shown.
    assert cli.parse(["actions", "t1"]).thread == "t1"
    assert cli.parse(["actions", "--thread", "t1"]).thread == "t1"
    assert cli.parse(["actions", "t1", "--thread", "t1"]).thread == "t1"
    assert cli.parse(["resolve-action", "t1", "--key", "k", "--done"]).thread == "t1"
    assert cli.parse(["verify", "--thread", "t1"]).thread == "t1"  # narrowing many threads: a flag
    assert cli.parse(["quarantine", "purge", "--older-than", "2d", "--thread", "t1"]).older_than == 2 * 86400


@pytest.mark.parametrize(
    ("argv", "same_as"),
    [
        # Options given before the command or the action go where they belong.
        (["quarantine", "--json", "list"], ["quarantine", "list", "--json"]),
        (["quarantine", "--sqlite", "list", "list"], ["quarantine", "list", "--sqlite", "list"]),
        (["quarantine", "--thread=t", "purge", "--older-than", "1d"], ["quarantine", "purge", "--older-than", "1d", "--thread", "t"]),
        (["--json", "threads"], ["threads", "--json"]),
        (["--", "threads"], ["threads"]),
        (["quarantine", "--", "list"], ["quarantine", "list"]),
        # An option spelled out decides whether it takes a value (import's --allow does not make --all take one).
        (["--all", "quarantine", "restore"], ["quarantine", "restore", "--all"]),
        (["quarantine", "--al", "restore"], ["quarantine", "restore", "--all"]),
        (["quarantine", "--sql", "list", "list"], ["quarantine", "list", "--sqlite", "list"]),
        (["--f", "show", "t"], ["show", "t", "--full"]),
    ],
)  # fmt: skip
def test_options_before_the_command_or_the_action_are_taken(argv: list[str], same_as: list[str]) -> None:
    parsed, expected = vars(cli.parse(argv)), vars(cli.parse(same_as))
    assert parsed.pop("parser").prog == expected.pop("parser").prog
    assert parsed == expected


@pytest.mark.parametrize("argv", [["-h", "--json"], ["--version", "--json"], ["--help", "--bogus"]])
def test_help_and_version_answer_whatever_follows(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(("usage: langgraph-durable", "langgraph-durable "))


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["actions", ""], "langgraph-durable actions: name the thread: `langgraph-durable actions THREAD`"),
        (["quarantine", "restore", "sqlite:1", "--all"], "langgraph-durable quarantine restore: give quarantine ids or --all, not both."),
        (["quarantine", "restore"], "langgraph-durable quarantine restore: name the quarantined records to restore"),
    ],
)  # fmt: skip
def test_a_command_s_own_usage_checks_come_before_any_store_is_opened(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "no.sqlite"
    out, err = _usage_error(capsys, *argv, "--sqlite", str(missing))
    assert err.startswith(line) and err.count("\n") == 1 and out == ""
    assert not missing.exists()


def test_a_usage_error_of_an_action_names_the_command_in_its_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--json", "--js"):  # argparse takes the abbreviation: so does the envelope
        out, _ = _usage_error(capsys, "quarantine", "purge", flag)
        doc = json.loads(out)
        assert doc["command"] == "quarantine" and doc["error"]["type"] == "usage"


def test_an_abbreviation_argparse_accepts_is_not_a_typo(capsys: pytest.CaptureFixture[str]) -> None:
    # --tim is --timeout: parsed, then the command fails on its own terms (not a usage error).
    args = cli.parse(["doctor", "--tim", "2"])
    assert args.timeout == 2.0


def test_the_exit_status_table_is_in_the_top_level_help_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    assert "exit status:\n" in top and "130" in top and '"exit_status": 3' in top
    for command in cli.COMMANDS:
        if command.internal:
            continue
        with pytest.raises(SystemExit):
            cli.main([command.name, "--help"])
        own = capsys.readouterr().out
        assert " ".join(cli.SUBCOMMAND_EPILOG.split()) in " ".join(own.split()), command.name
        assert "130" not in own and "exit status:\n" not in own, command.name
        assert ("--json" in own) is command.json, command.name
