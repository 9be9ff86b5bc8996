"""``migrate``: bring idle threads up to the app's state version now
(`DurableSaver.migrate`), instead of as each is next run."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, get_args

from .lazy import lazy
from .output import (
    EXIT_FINDINGS,
    EXIT_OK,
    Output,
)
from .parsing import (
    Command,
    Parser,
    pause,
)
from .store import LOOK, STRICT, open_saver

# The saver, LangGraph and the drivers load when a command runs.
if TYPE_CHECKING:
    from .. import migrations
    from ..migrations import MigrationOutcome, MigrationReport, ThreadMigration
else:
    migrations = lazy("langgraph_durable.migrations")

# What to do about the outcomes that make `MigrationReport.ok` false.
_NEXT_STEP: dict[MigrationOutcome, str] = {
    "failed": "a step that raised wrote nothing: fix it and run migrate again (migrated threads are current by then)",
    "unreachable": "register the missing steps (`verify --migrations` lists these threads too)",
    "busy": "a run holds these threads and migrates them itself as it resumes; or run migrate again later",
}


def _migrate(args: argparse.Namespace, out: Output) -> int:
    # A dry run only looks: a read-only saver, which creates no store and writes nothing.
    options = {**STRICT, **(LOOK if args.dry_run else {})}
    # Steps see the values as the app's classes; what they return is written back encoded.
    with open_saver(args, rebuilds=True, needs_migrations=True, **options) as saver:
        assert saver.migrations is not None
        version = saver.migrations.version
        tiers = saver.tier_names
        out.note(
            f"{'dry run: ' if args.dry_run else ''}migrating threads of tiers {' -> '.join(tiers)} to state "
            f"version {version}"
        )
        with out.progress("migrating", unit="threads") as progress:
            report = saver.migrate(args.threads or None, dry_run=args.dry_run, pace=args.pace, progress=progress)
    counts = {outcome: report.count(outcome) for outcome in get_args(migrations.MigrationOutcome)}
    out.document(
        {
            "dry_run": report.dry_run,
            "state_version": report.version,
            "tiers": tiers,
            "pace_seconds": args.pace,
            "counts": counts,
            "threads": report.threads,
        }
    )
    shown = [t for t in report.threads if t.outcome != "current"]  # counted below: most threads, after a while
    width = max((len(t.thread_id) for t in shown), default=0)
    for t in shown:
        out.line(_thread_line(t, width))
    said = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
    out.line(
        f"{len(report.threads)} thread(s) looked at{': ' + said if said else ''}"
        + ("; dry run: nothing written" if args.dry_run else "")
    )
    return _finding(report, out)


def _thread_line(t: ThreadMigration, width: int) -> str:
    """``migrated  THREAD  1 -> 2  what changed`` (or why it was left)."""
    if t.from_version is None:
        versions = "-"
    elif t.to_version is None:
        versions = str(t.from_version)
    else:
        versions = f"{t.from_version} -> {t.to_version}"
    line = f"{t.outcome:<13}  {t.thread_id:<{width}}  {versions:<6}"
    return (f"{line}  {t.detail}" if t.detail else line).rstrip()


def _finding(report: MigrationReport, out: Output) -> int:
    """Exit 1 when a thread was left behind (failed, unreachable, busy), with what to do next."""
    if report.ok:
        return EXIT_OK
    for outcome, next_step in _NEXT_STEP.items():
        if report.count(outcome):
            out.line(f"{report.count(outcome)} {outcome}: {next_step}")
    return EXIT_FINDINGS


def _migrate_args(p: Parser) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say what each thread's migration would change; write nothing and create no store",
    )
    p.add_argument(
        "--thread",
        dest="threads",
        action="append",
        default=[],
        metavar="THREAD",
        help="only this thread (repeatable; default: every thread)",
    )
    p.add_argument(
        "--pace",
        type=pause,
        default=0.0,
        metavar="SECONDS",
        help="wait this long between threads, to spare the tiers (e.g. 0.2, 2s; default 0)",
    )


COMMANDS: list[Command] = [
    Command(
        "migrate",
        "bring idle threads up to the app's state version (--migrations MODULE:ATTR)",
        "Run the app's migration steps (its Migrations, named by --migrations MODULE:ATTR or "
        "LANGGRAPH_DURABLE_MIGRATIONS) on every idle thread of an older state version now, as a run would "
        "before resuming it: under the thread's writer lease, the migrated state written as a new checkpoint "
        "with the old one pinned. Prints a line per thread not already at the version (outcome, from -> to "
        "version, what changed or why it was left) and a count per outcome. A thread a run holds is left "
        "(busy), as is one a step fails on (failed: nothing written) or one at a version no step leaves "
        "(unreachable); a newer or archived thread is left too. Safe to stop and run again: migrated threads "
        "are then current. --dry-run writes nothing and creates no store; --pace spaces the threads. Exit 1 "
        "if a thread failed, was unreachable or busy. Needs every tier.",
        _migrate_args,
        _migrate,
    ),
]
