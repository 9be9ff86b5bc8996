"""Command line: ``langgraph-durable`` (also ``python -m langgraph_durable``).

One module per group of commands (``browsing``: threads, history, show;
``integrity``: verify, repair, quarantine; ``maintenance``: import, prune,
promote; ``migrate``; ``archive``: archive, restore, pin, unpin, pins;
``operations``: doctor, actions, resolve-action; ``demo_commands``), each ending with its rows
of `COMMANDS`: a `parsing.Command` names its arguments and a
``run(args, out)`` that returns an exit status. Shared pieces a new command
reuses: `store.tier_flags` (the tier options, added for it when
``tiers=True``), ``--json`` (added to every public command),
`output.Output` (where a command writes: rich tables and lines for people,
one JSON document with ``--json``), `output.progress_bar` (a rich progress
bar fed ``(done, total)``), `store.open_saver` (the saver the tier flags
and the environment name, set up). A command that chooses an action
(``quarantine list|restore|purge``) has a subcommand per action.

To add a command: write its ``run`` and its arguments in the module of its
group (or a new one) and add its row to that module's ``COMMANDS``, and
its name to `HELP_ORDER` (where it stands in ``--help``); a new module also
goes into `GROUPS`.

With ``--json`` every command prints exactly one JSON document on stdout,
the envelope (`envelope`)::

    {
      "command": "verify",              # the subcommand
      "ok": true,                       # true exactly when the exit status is 0
      "version": "0.1.0",               # langgraph-durable's version
      "ts": "2026-11-28T08:00:00.000Z", # when it was written, ISO 8601 UTC
      "report": {...},                  # the command's own fields ({} if none)
      "error": {                        # only when ok is false
        "type": "TierUnavailable",      # the DurableError's class, else findings,
                                        # usage, cannot_run or interrupted
        "message": "...",               # the line stderr shows (findings: the summary)
        "exit_status": 3
      }
    }

A command calls ``out.document(report)``; `Output.finish` and `Output.fail`
write the envelope once. Every time in a report is ISO 8601 UTC (`iso_utc`).
Usage errors are one line on stderr (exit 2), an unknown option or command
with the likely one (`parsing.Parser`); with ``--json`` the envelope too. Only light
modules are imported before the arguments are parsed: ``--help`` and
``--version`` do not load LangGraph or a tier driver.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ..errors import DurableError
from . import archive, browsing, demo_commands, integrity, maintenance, migrate, operations
from .output import (
    EXIT_CANNOT_RUN as EXIT_CANNOT_RUN,
)
from .output import (
    EXIT_FINDINGS as EXIT_FINDINGS,
)
from .output import (
    EXIT_INTERRUPTED as EXIT_INTERRUPTED,
)
from .output import (
    EXIT_OK as EXIT_OK,
)
from .output import (
    EXIT_USAGE as EXIT_USAGE,
)
from .output import (
    Output,
)
from .output import (
    envelope as envelope,
)
from .output import (
    progress_bar as progress_bar,
)
from .parsing import (
    ENVIRONMENT_HELP,
    EXIT_CODES_HELP,
    JSON_ENVELOPE_HELP,
    JSON_HELP,
    Command,
    Formatter,
    Parser,
    settle_thread,
    wrapped,
)
from .parsing import (
    SUBCOMMAND_EPILOG as SUBCOMMAND_EPILOG,
)
from .store import tier_flags

# The groups of commands.
GROUPS = (demo_commands, browsing, integrity, operations, maintenance, migrate, archive)
# The order of `langgraph-durable --help`: the first hour's commands first.
HELP_ORDER = [
    "demo",
    "threads",
    "history",
    "show",
    "verify",
    "repair",
    "doctor",
    "actions",
    "resolve-action",
    "quarantine",
    "import",
    "migrate",
    "prune",
    "archive",
    "restore",
    "promote",
    "pin",
    "unpin",
    "pins",
]
COMMANDS: list[Command] = sorted(
    (command for group in GROUPS for command in group.COMMANDS),
    key=lambda c: HELP_ORDER.index(c.name) if c.name in HELP_ORDER else len(HELP_ORDER),
)


class _Version(argparse._VersionAction):
    """``--version``: the installed distribution's version, read (through
    `importlib.metadata`) when it is asked for, not by every command."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .._version import __version__

        self.version = f"langgraph-durable {__version__}"
        super().__call__(parser, *args, **kwargs)


def build_parser(*, internal: str | None = None, argv: Sequence[str] = ()) -> Parser:
    """The parser of every public command (and of the `internal` one, if
    named); `argv` is the command line it is for (its usage errors answer
    in JSON when it has ``--json``)."""
    Parser.argv = list(argv)
    parser = Parser(
        prog="langgraph-durable",
        description="Tiered (SQLite -> Redis -> Postgres), checksummed LangGraph checkpoints: inspect, "
        "check, repair and operate the store of a DurableSaver. Every command takes --json (one JSON document "
        "on stdout) and the tier flags --sqlite, --redis, --postgres (default: the environment, below).",
        epilog=f"{ENVIRONMENT_HELP}\n\n{JSON_ENVELOPE_HELP}\n\n{EXIT_CODES_HELP}\n\n"
        "`langgraph-durable COMMAND --help` describes a command.",
        formatter_class=Formatter,
    )
    parser.register("action", "version", _Version)
    parser.add_argument("--version", action="version", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        if cmd.internal and cmd.name != internal:
            continue
        extra: dict[str, Any] = {} if cmd.internal else {"help": cmd.help}
        p = commands.add_parser(
            cmd.name,
            description=cmd.description,
            epilog=SUBCOMMAND_EPILOG,
            formatter_class=Formatter,
            **extra,
        )
        parser.subcommands[cmd.name] = p
        # A command that chooses an action returns the parser of each; the
        # common flags go to each of them.
        leaves = cmd.arguments(p)
        if leaves:
            p.epilog = wrapped(
                f"Each action takes {'--json and ' if cmd.json else ''}the tier flags: "
                f"`langgraph-durable {cmd.name} ACTION --help`. {SUBCOMMAND_EPILOG}"
            )
        for leaf in leaves or [p]:
            if cmd.json:
                leaf.add_argument("--json", action="store_true", help=JSON_HELP)
            if cmd.tiers:
                tier_flags(leaf)
            leaf.set_defaults(spec=cmd, parser=leaf)
    return parser


def parse(argv: Sequence[str]) -> Any:
    """`argv` parsed (usage errors exit 2, `parsing.Parser`)."""
    argv = list(argv)
    internal = argv[0] if argv and any(c.internal and c.name == argv[0] for c in COMMANDS) else None
    parser = build_parser(internal=internal, argv=argv)
    argv = parser.arranged(argv)
    parser.check(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's parser, which names the command
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    settle_thread(args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    # The application's modules (--serde, --allow, the classes in its state)
    # are found in the current directory as ``python -m`` finds them; after
    # everything installed, so a file there never shadows a library.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    # The command's own output says what went wrong, in one line; the saver's
    # warnings (a tier down, a degraded read) would repeat it on stderr
    # through logging's last-resort handler. An app that set up logging keeps them.
    package_logger = logging.getLogger("langgraph_durable")
    if not logging.getLogger().handlers and package_logger.level == logging.NOTSET:
        package_logger.setLevel(logging.ERROR)
    out = Output(getattr(args, "json", False), args.command)
    # A tier that cannot be reached or a wrong setting is the user's to fix,
    # not a bug: one line saying what is wrong, not a driver's traceback.
    try:
        return out.finish(args.spec.run(args, out))
    except DurableError as exc:
        return out.fail(str(exc), EXIT_CANNOT_RUN)
    except KeyboardInterrupt:
        return out.fail("interrupted", EXIT_INTERRUPTED, prefix="")


def run() -> NoReturn:
    """The program (``langgraph-durable``, ``python -m langgraph_durable``):
    `main` on the process's command line, then exit with its status.

    Before exiting, every object still alive is frozen out of the garbage
    collector (`gc.freeze`). Python's finalization would otherwise run full
    collections over all of them (what LangGraph, LangChain and the drivers
    loaded) as it tears the modules down, which took 0.1-0.3 s of a command
    that ends in well under a second. The commands close their files and
    connections themselves; atexit handlers still run, and what reference
    counting frees is finalized as before; objects in reference cycles are
    left to the operating system, as Python allows at exit. Only the
    program does this: `main` called in a process of the caller's leaves
    its garbage collector alone."""
    status = main()
    gc.freeze()
    sys.exit(status)
