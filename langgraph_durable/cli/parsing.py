"""The command line's parsing: the `Command` rows, the `Parser` whose usage
errors are one line naming the likely meaning, the help texts, and the
argument types (durations, times, JSON)."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, cast

from ..option_table import environment_help
from .output import (
    EXIT_CANNOT_RUN,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Output,
    envelope,
    write_json,
)

EXIT_CODES_HELP = f"""exit status:
  {EXIT_OK:<4} ok
  {EXIT_FINDINGS:<4} findings: verify found bad or missing copies (or, with --migrations, threads at a state
       version no step brings up), repair could not restore some, doctor found a tier down,
       resolve-action refused (no such action, or one already answered without --force),
       history/show found no such thread or checkpoint, migrate left a thread (failed,
       unreachable, busy), the demo failed
  {EXIT_USAGE:<4} usage error: one line on stderr (an unknown option or command names the likely one)
  {EXIT_CANNOT_RUN:<4} could not run: a tier unreachable, a configuration error (one line on stderr
       says why)
  {EXIT_INTERRUPTED:<4} interrupted (Ctrl-C)"""


JSON_ENVELOPE_HELP = """--json: one JSON document on stdout, the same shape for every command (and for a
usage error or a failure, with the exit status below):
  {"command": "verify", "ok": true, "version": "0.1.0", "ts": "2026-11-28T08:00:00.000Z",
   "report": {...the command's own fields...},
   "error": {"type": "TierUnavailable", "message": "...", "exit_status": 3}}   (only when not ok)
  times are ISO 8601 UTC; docs/operations/json.md shows each command's report"""


ENVIRONMENT_HELP = environment_help()


# The exit-status table is in the top-level help only; a command's own says where.
SUBCOMMAND_EPILOG = "exit status: 0 ok, 1 findings, 2 usage, 3 could not run; `langgraph-durable --help` says more."


JSON_HELP = "print one JSON document on stdout instead of text (same exit status)"


@dataclass(frozen=True)
class Command:
    """One subcommand. `arguments` adds its own options; `store.tier_flags`
    and ``--json`` are added for it (``tiers`` / ``json``). A command that
    chooses an action adds a subcommand per action and returns their
    parsers, which then get those flags. `run(args, out)` returns the exit
    status. An ``internal`` command is left out of --help and only parsed
    when it is the first argument."""

    name: str
    help: str  # its line in `langgraph-durable --help`
    description: str  # its own --help
    arguments: Callable[[Parser], list[Parser] | None]
    run: Callable[[argparse.Namespace, Output], int]
    tiers: bool = True
    json: bool = True
    internal: bool = False


def wrapped(text: str) -> str:
    """Prose wrapped to the terminal, as argparse would; text that has its
    own line breaks (the environment and exit status tables) as it is."""
    if "\n" in text:
        return text
    width = max(40, min(100, shutil.get_terminal_size().columns - 2))
    return textwrap.fill(" ".join(text.split()), width)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as `wrapped` made them."""


class Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line on stderr (exit 2),
    naming the command and, for a mistyped option, command or action, the
    likely one: ``langgraph-durable doctor: unknown option --postgress (did
    you mean --postgres?)``. With ``--json`` on the command line, the
    envelope (its ``error`` of type ``usage``) goes to stdout as well.

    It keeps its own record of its options, positionals and subcommands
    (`flags`, `positionals`, `subcommands`), for `check`."""

    argv: Sequence[str] = ()  # the command line, set by `parse`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key in ("description", "epilog"):
            if kwargs.get(key):
                kwargs[key] = wrapped(kwargs[key])
        self.flags: list[str] = []
        self.valued: set[str] = set()  # the flags that take a value
        self.positionals: dict[str, str] = {}  # dest -> how --help shows it
        self.subcommands: dict[str, Parser] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        self._note(names, kwargs)
        return super().add_argument(*names, **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        return _Noted(super().add_argument_group(*args, **kwargs), self)

    def add_mutually_exclusive_group(self, **kwargs: Any) -> Any:
        return _Noted(super().add_mutually_exclusive_group(**kwargs), self)

    def actions(self, dest: str, *, metavar: str = "ACTION") -> Any:
        """Subcommands for the actions a command chooses from (`add_action` adds one)."""
        return self.add_subparsers(dest=dest, required=True, metavar=metavar, parser_class=Parser)

    def add_action(self, actions: Any, name: str, *, help: str) -> Parser:
        """One action of `actions` (`actions`), described by `help`."""
        parser = cast(
            Parser,
            actions.add_parser(name, help=help, description=help, epilog=SUBCOMMAND_EPILOG, formatter_class=Formatter),
        )
        self.subcommands[name] = parser
        return parser

    def _note(self, names: Sequence[str], kwargs: dict[str, Any]) -> None:
        if names and names[0].startswith("-"):
            self.flags.extend(names)
            if kwargs.get("action") not in _NO_VALUE:
                self.valued.update(names)
        else:
            dest = kwargs.get("dest") or (names[0] if names else "")
            self.positionals[dest] = kwargs.get("metavar") or dest.upper()

    def arranged(self, argv: Sequence[str]) -> list[str]:
        """`argv` with the options given before a command or an action moved
        after it, where its parser takes them (``quarantine --json list`` is
        ``quarantine list --json``; ``--json threads`` is ``threads --json``),
        and a ``--`` right before one left out. Unchanged where this level's
        own options (--help, --version) come first: argparse answers them."""
        tokens, parser = list(argv), self
        done: list[str] = []
        while parser.subcommands:
            before: list[str] = []
            i, found = 0, None
            while i < len(tokens):
                token = tokens[i]
                if token == "--" and i + 1 < len(tokens) and tokens[i + 1] in parser.subcommands:
                    i += 1
                    continue
                if token in parser.subcommands:
                    found = i
                    break
                if not token.startswith("-") or token == "--":
                    break  # an argument that names no command: argparse says so
                before.append(token)
                following = tokens[i + 1] if i + 1 < len(tokens) else None
                if "=" not in token and parser._takes_value(token, following) and following is not None:
                    before.append(tokens[i + 1])
                    i += 1
                i += 1
            if found is None or any(parser._own(token) for token in before):
                return done + tokens
            done.append(tokens[found])
            parser = parser.subcommands[tokens[found]]
            tokens = before + tokens[found + 1 :]
        return done + tokens

    def _own(self, token: str) -> bool:
        """Whether `token` is an option of this parser's own (not of its subcommands')."""
        name = token.split("=", 1)[0]
        return name in self.flags or (name.startswith("--") and any(f.startswith(name) for f in self.flags))

    def _takes_value(self, token: str, following: str | None) -> bool:
        """Whether the option `token`, of this parser or of one of its
        subcommands, takes the `following` token as its value. An option
        spelled out decides by itself; an abbreviation (which command's
        option it abbreviates is not known yet) takes a value unless a
        command follows it."""
        parsers = [self]
        for parser in parsers:
            parsers.extend(parser.subcommands.values())
        if any(token in parser.flags for parser in parsers):
            return any(token in parser.valued for parser in parsers)
        return following is not None and following not in self.subcommands

    def check(self, argv: Sequence[str]) -> None:
        """Before parsing (`argv` as `arranged` made it): an unknown
        command, action or option is named (with the likely one), not a
        required option it hides."""
        parser: Parser = self
        rest = list(argv)
        while parser.subcommands:
            if rest and rest[0].startswith("-"):
                if any(parser._own(token) for token in rest):
                    return  # this level's own options (--help, --version): argparse answers them
                what = "command" if parser is self else "action"
                parser.error(f"no {what} after {' '.join(rest)}: `{parser.prog} {what.upper()} [OPTIONS]`")
            if not rest:
                break
            name = rest.pop(0)
            if name not in parser.subcommands:
                what = "command" if parser is self else "action"
                public = [n for n, p in parser.subcommands.items() if not n.startswith("_")]
                parser.error(unknown(what, name, public))
            parser = parser.subcommands[name]
        problem = parser.unknown_option(rest)
        if problem is not None:
            parser.error(problem)

    def unknown_option(self, argv: Sequence[str]) -> str | None:
        """The first option in `argv` that this parser does not take, as
        `unknown` words it; None if there is none."""
        known = self.flags
        for token in argv:
            if token == "--":
                break
            if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d+(\.\d*)?|-\.\d+", token):
                continue
            name = token.split("=", 1)[0]
            if name in known or (name.startswith("--") and any(o.startswith(name) for o in known)):
                continue  # exact, or an abbreviation argparse accepts
            # Arguments given without a flag (`history THREAD`): a flag spelled
            # like one is named as that, not as the nearest other flag.
            meant = difflib.get_close_matches(name.lstrip("-"), list(self.positionals), n=1, cutoff=0.6)
            if meant:
                usage = f"{self.prog} {self.positionals[meant[0]]}"
                return f"unknown option {name} (did you mean `{usage}`? {self.positionals[meant[0]]} takes no flag)"
            return unknown("option", name, [o for o in known if o.startswith("--")] or known)
        return None

    def error(self, message: str) -> NoReturn:
        if "(did you mean " not in message:
            message += f" (see `{self.prog} --help`)"
        print(f"{self.prog}: {message}", file=sys.stderr)
        if any(len(a) > 3 and "--json".startswith(a) for a in self.argv):  # --json, or --js as argparse takes it
            # The command's name, as every envelope of the command gives it (not its action's).
            command = (self.prog.removeprefix("langgraph-durable").split() or [""])[0]
            error = {"type": "usage", "message": message, "exit_status": EXIT_USAGE}
            write_json(envelope(command, None, error=error))
        self.exit(EXIT_USAGE)


# The actions of an option that takes no value.
_NO_VALUE = {"store_true", "store_false", "store_const", "append_const", "count", "help", "version"}


class _Noted:
    """An argument group whose arguments its parser records (`Parser.flags`)."""

    def __init__(self, group: Any, parser: Parser) -> None:
        self._group = group
        self._parser = parser

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        self._parser._note(names, kwargs)
        return cast(argparse.Action, self._group.add_argument(*names, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


def thread_argument(p: Parser, help: str) -> None:
    """THREAD, for a command about one thread (a command over many narrows
    them with ``--thread``). ``--thread THREAD``, the spelling of earlier
    releases for some commands, is still taken (and not shown)."""
    p.add_argument("thread", nargs="?", metavar="THREAD", help=help)
    p.add_argument("--thread", dest="thread_flag", default=None, help=argparse.SUPPRESS)


def thread_filter(p: argparse.ArgumentParser) -> None:
    """``--thread THREAD``, for a command over many threads: only that one."""
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")


def settle_thread(args: argparse.Namespace) -> None:
    """`thread_argument`'s THREAD, however it was given (a usage error if not at all)."""
    if not hasattr(args, "thread_flag"):
        return
    if args.thread_flag is not None:
        if args.thread is not None and args.thread != args.thread_flag:
            args.parser.error(f"two threads given ({args.thread!r} and --thread {args.thread_flag!r}): name one")
        args.thread = args.thread_flag
    if not args.thread:
        args.parser.error(f"name the thread: `{args.parser.prog} THREAD`")


def unknown(what: str, given: str, known: Sequence[str]) -> str:
    """``unknown option --postgress (did you mean --postgres?)``."""
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return f"unknown {what} {given}" + (f" (did you mean {close[0]}?)" if close else "")


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def _seconds(text: str) -> float:
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use e.g. 90s, 15m, 12h, 7d or 2w") from None
    return seconds


def duration(text: str) -> float:
    """Seconds, from ``90``, ``90s``, ``15m``, ``12h``, ``7d`` or ``2w``."""
    seconds = _seconds(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be above 0, got {text!r}")
    return seconds


def pause(text: str) -> float:
    """Seconds from 0, as `duration` reads them (``0``, ``0.2``, ``2s``)."""
    seconds = _seconds(text)
    if not 0 <= seconds < math.inf:
        raise argparse.ArgumentTypeError(f"a pause is a number of seconds from 0, got {text!r}")
    return seconds


def at_least(n: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < n:
            raise argparse.ArgumentTypeError(f"must be at least {n}, got {value}")
        return value

    return parse


def json_value(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}): {text!r}") from None
    return text


def point_in_time(text: str) -> float:
    """Seconds since the epoch, from an ISO 8601 time or a number."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: use ISO 8601 (2026-11-27T18:00:00Z) or seconds since the epoch"
        ) from None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
