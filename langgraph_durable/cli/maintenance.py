"""Commands that move or remove checkpoints: ``import``, ``prune``, ``promote``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..errors import printable
from ..retention import RetentionPolicy
from .lazy import lazy
from .output import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    Output,
)
from .parsing import (
    Command,
    at_least,
    duration,
    thread_filter,
)
from .store import STRICT, open_saver, saver_from_args

# The saver, LangGraph and the drivers load when a command runs.
if TYPE_CHECKING:
    from ..engine.imports import sources
else:
    sources = lazy("langgraph_durable.engine.imports.sources")


def _import(args: argparse.Namespace, out: Output) -> int:
    allow = [sources.parse_allow(text) for text in args.allow]
    with sources.open_source(args.source) as source, open_saver(args, rebuilds=True, **STRICT) as saver:
        out.note(f"importing {type(source).__name__} into tiers {' -> '.join(saver.tier_names)}")
        with out.progress("importing", unit="threads") as progress:
            report = saver.import_from(
                source,
                verify=not args.no_verify,
                progress=progress,
                allow=allow,
                merge=args.merge,
                thread_prefix=args.thread_prefix,
            )
    out.document(report.as_dict())
    # Ids and reasons come from the source: printed escaped (`printable`).
    for rejected in report.rejected:
        out.line(f"REJECTED  {rejected}")
    if report.rejected_count > len(report.rejected):
        out.line(f"REJECTED  ... and {report.rejected_count - len(report.rejected)} more")
    for difference in report.differences:
        out.line(f"DIFFERS  {printable(difference)}")
    out.line(
        f"{report.threads} thread(s), {report.namespaces} namespace(s): {report.checkpoints} checkpoint(s) and "
        f"{report.writes} pending write(s) imported, {report.skipped} checkpoint(s) already there"
        + (f", {report.verified} verified" if not args.no_verify else " (not verified)")
        + (f", {len(report.differences)} differ" if report.differences else "")
        + (f", {report.rejected_count} source row(s) rejected (not imported)" if report.rejected_count else "")
    )
    return EXIT_OK if report.ok else EXIT_FINDINGS


def _import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="SOURCE",
        help="a SqliteSaver file (a path or sqlite:///path) or a PostgresSaver database (postgresql:// URL); "
        "opened read-only",
    )
    p.add_argument("--no-verify", action="store_true", help="skip reading every copy back and comparing it")
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="also rebuild this type of your application's from the source (repeatable); a value of a type "
        "outside LangGraph's allowlist and these is not read: its row is skipped and reported",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="add the source's checkpoints to threads of the same id that already hold another history",
    )
    p.add_argument(
        "--thread-prefix",
        default="",
        metavar="PREFIX",
        help="import each thread T as PREFIX + T (e.g. old-), next to threads of the same id",
    )


def _prune(args: argparse.Namespace, out: Output) -> int:
    if args.keep_last is None and args.keep_for is None and args.delete_idle_after is None:
        return out.fail("give --keep-last, --keep-for or --delete-idle-after (or several)", EXIT_USAGE)
    policy = RetentionPolicy(keep_last=args.keep_last, keep_for=args.keep_for, delete_idle_after=args.delete_idle_after)
    with open_saver(args, **STRICT) as saver:
        out.note(f"{'dry run: ' if args.dry_run else ''}applying {policy} to tiers {' -> '.join(saver.tier_names)}")
        with out.progress("sweeping", unit="threads") as progress:
            report = saver.apply_retention(
                policy, thread_ids=[args.thread] if args.thread else None, dry_run=args.dry_run, progress=progress
            )
    out.document({"policy": policy, **report.as_dict()})
    for thread_id in report.left_alone:
        out.line(f"left alone  {thread_id} (unconfirmed non-resumable actions: see `actions`)")
    would = "would be " if args.dry_run else ""
    out.line(
        f"{report.threads} thread(s): {report.checkpoints_deleted} checkpoint(s) {would}deleted, "
        f"{report.checkpoints_kept} kept, {report.threads_deleted} idle thread(s) {would}deleted"
    )
    return EXIT_OK


def _prune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-last", type=at_least(1), default=None, help="keep the newest N checkpoints per namespace")
    p.add_argument("--keep-for", type=duration, default=None, help="keep checkpoints younger than this (e.g. 7d, 12h)")
    p.add_argument(
        "--delete-idle-after",
        type=duration,
        default=None,
        help="delete whole threads whose newest checkpoint is older than this (e.g. 30d)",
    )
    thread_filter(p)
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")


def _promote(args: argparse.Namespace, out: Output) -> int:
    saver = saver_from_args(args, **STRICT)  # not set up first: setup refuses the file until promoted
    try:
        saver.unbuildable_as_data = True
        out.note(f"copying {saver.sqlite_path} into tiers {' -> '.join(saver.tier_names[1:])}")
        with out.progress("copying", unit="threads") as progress:
            threads = saver.promote_local(progress=progress)
    finally:
        saver.close()
    out.document({"threads": threads})
    out.line(f"{threads} thread(s) copied: start the app with these tiers")
    return EXIT_OK


COMMANDS: list[Command] = [
    Command(
        "import",
        "copy every thread of a SqliteSaver file or PostgresSaver database into the tiers",
        "Copy every thread, namespace, checkpoint and pending write of a stock SqliteSaver file or PostgresSaver "
        "database into the tiers, then read each copy back and compare it with its source. Run it again to "
        "resume an interrupted import: what is already there is skipped. Nothing the source's records name is "
        "run: a pickled value or a type outside LangGraph's allowlist (plus --allow) is not read, and its row "
        "is skipped and listed (SKIPPED). A thread that already holds another history in the tiers is refused "
        "(exit 3) unless --merge or --thread-prefix. Needs every tier; the stock savers come with "
        "`pip install 'langgraph-durable[import]'`. Exit 1 if a source row was skipped or a copy differs from "
        "its source (the rest is imported).",
        _import_args,
        _import,
    ),
    Command(
        "prune",
        "apply a retention policy: keep the newest N / the young checkpoints, delete idle threads",
        "Delete old checkpoints by policy, per thread and namespace: --keep-last N, --keep-for DURATION "
        "(either keeps a checkpoint), --delete-idle-after DURATION (whole threads). Never removes a "
        "namespace's newest checkpoint, a checkpoint waiting at an interrupt(), a thread with unconfirmed "
        "actions, or what a kept checkpoint needs (its values, list pieces, pending writes, DeltaChannel "
        "ancestors). --dry-run only counts. Needs every tier.",
        _prune_args,
        _prune,
    ),
    Command(
        "promote",
        "copy a store that ran on SQLite alone into its new Redis/Postgres tiers",
        "Give a store that ran on its SQLite file alone its shared tiers: copy every thread the file holds "
        "(checkpoints, channel values, pending writes, actions and pins) into Redis and Postgres, sealed with the "
        "store's key. Until it has, a saver given both the file and shared tiers refuses to start, so no replica "
        "serves part of a thread's history. Run it once with the same --sqlite, --redis and --postgres the app "
        "will use, before starting the app with them. Safe to run again.",
        lambda p: None,
        _promote,
    ),
]
