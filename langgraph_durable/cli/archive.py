"""The archive and recovery points: ``archive``, ``restore``, ``pin``,
``unpin``, ``pins``."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from ..errors import no_archive
from .output import (
    EXIT_FINDINGS,
    EXIT_OK,
    Output,
    age_text,
    iso_utc,
    ns_label,
    table,
)
from .parsing import (
    Command,
    duration,
    point_in_time,
    thread_filter,
)
from .store import LOOK, open_saver


def _archive(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args) as saver:
        if saver.archive_url is None:
            raise no_archive()  # the one-line ConfigError, before any work
        report = saver.archive_idle(
            args.idle_after, thread_ids=[args.thread] if args.thread else None, dry_run=args.dry_run
        )
    out.document({"dry_run": report.dry_run, "threads": [dataclasses.asdict(t) for t in report.threads]})
    would = "would be " if args.dry_run else ""
    for t in report.threads:
        if t.archived:
            out.line(f"{'would archive' if args.dry_run else 'archived'}  {t.thread_id} ({t.records} records)")
        elif t.skipped not in ("not idle", "no checkpoints"):
            out.line(f"kept      {t.thread_id} ({t.skipped})")
    out.line(f"{len(report.threads)} thread(s) looked at, {len(report.archived)} {would}archived")
    return EXIT_OK


def _archive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--idle-after",
        type=duration,
        required=True,
        help="archive threads whose newest checkpoint is older than this (e.g. 30d, 12h)",
    )
    thread_filter(p)
    p.add_argument("--dry-run", action="store_true", help="list what would be archived; move nothing")


def _restore(args: argparse.Namespace, out: Output) -> int:
    if bool(args.threads) == bool(args.all):
        args.parser.error("name the threads to restore, or pass --all (not both).")
    with open_saver(args) as saver:
        if saver.archive_url is None:
            raise no_archive()
        report = saver.restore(None if args.all else args.threads, until=args.until)
    out.document(dataclasses.asdict(report))
    for key in report.bad_segments:
        out.line(f"UNUSABLE  {key} (left out: it does not verify)")
    for key in report.unrecognised:
        out.line(f"SKIPPED   {key} (not a segment: left as it is)")
    for thread_id in report.deleted:
        out.line(f"DELETED   thread {thread_id!r} (deleted since it was archived: left deleted)")
    for thread_id in report.conflicts:
        out.line(f"CONFLICT  thread {thread_id!r} (the hot tiers hold another history on this id: left as it is)")
    summary = f"{report.threads} thread(s) restored ({report.records} records)"
    if args.all:  # with every thread, those archived stay there (a named one is brought back)
        summary += f", {report.archived} archived thread(s) left in the archive"
    if report.deleted:
        summary += f", {len(report.deleted)} deleted thread(s) left deleted"
    if report.unrecognised:
        summary += f", {len(report.unrecognised)} unknown object(s) skipped"
    if report.conflicts:
        summary += f", {len(report.conflicts)} thread(s) left as they were (another history on the id)"
    out.line(summary)
    return EXIT_FINDINGS if report.bad_segments or report.conflicts else EXIT_OK


def _restore_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("threads", nargs="*", metavar="THREAD", help="the threads to restore from the archive")
    p.add_argument("--all", action="store_true", help="every thread the archive holds (after losing the hot tiers)")
    p.add_argument(
        "--until",
        type=point_in_time,
        default=None,
        metavar="TIME",
        help="as of this time (ISO 8601, e.g. 2026-11-27T18:00:00Z, or seconds since the epoch): segments the "
        "replica wrote later are left out",
    )


def _pin_dict(pin: Any) -> dict[str, Any]:
    return {
        "thread_id": pin.thread_id,
        "checkpoint_ns": pin.checkpoint_ns,
        "checkpoint_id": pin.checkpoint_id,
        "label": pin.label,
        "pinned_at": iso_utc(pin.pinned_at),
    }


def _pin(args: argparse.Namespace, out: Output) -> int:
    configurable = {"thread_id": args.thread, "checkpoint_ns": args.ns}
    if args.checkpoint:
        configurable["checkpoint_id"] = args.checkpoint
    with open_saver(args) as saver:
        if saver.get_tuple({"configurable": configurable}) is None:
            # Nothing to pin, as `history` finds nothing to list: a finding, not a failure to run.
            what = f"checkpoint {args.checkpoint!r}" if args.checkpoint else "checkpoints"
            return out.fail(f"thread {args.thread!r} has no {what} to pin", EXIT_FINDINGS)
        pin = saver.pin({"configurable": configurable}, label=args.label)
    out.document({"pin": _pin_dict(pin)})
    out.line(f"pinned  {pin.thread_id} {pin.checkpoint_id}{' (' + pin.label + ')' if pin.label else ''}")
    return EXIT_OK


def _pin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("checkpoint", nargs="?", default=None, help="a checkpoint id from `history` (default: the latest)")
    p.add_argument("--ns", default="", help="namespace of the checkpoint (default: the root graph)")
    p.add_argument("--label", default="", help="why it is pinned (shown by `pins`)")


def _unpin(args: argparse.Namespace, out: Output) -> int:
    configurable = {"thread_id": args.thread, "checkpoint_ns": args.ns, "checkpoint_id": args.checkpoint}
    with open_saver(args) as saver:
        removed = saver.unpin({"configurable": configurable})
    out.document({"removed": removed})
    if not removed:
        return out.fail(f"thread {args.thread!r} has no pin on checkpoint {args.checkpoint!r}", EXIT_FINDINGS)
    out.line(f"unpinned  {args.thread} {args.checkpoint}")
    return EXIT_OK


def _unpin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("checkpoint", help="the pinned checkpoint's id, as `pins` lists it")
    p.add_argument("--ns", default="", help="namespace of the checkpoint (default: the root graph)")


def _pins(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args, **LOOK) as saver:
        found = saver.pins(args.thread)
    out.document({"pins": [_pin_dict(p) for p in found]})
    t = table("checkpoint", "namespace", "label", ("pinned", "right"))
    for p in found:
        t.add_row(p.checkpoint_id, ns_label(p.checkpoint_ns), p.label or "-", age_text(time.time() - p.pinned_at))
    if found:
        out.table(t)
    out.line(f"{len(found)} pin(s)")
    return EXIT_OK


def _pins_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")


COMMANDS: list[Command] = [
    Command(
        "archive",
        "move idle threads to the archive (s3://...), verified first",
        "Move every thread whose newest checkpoint is older than --idle-after out of the hot tiers into the "
        "archive (--archive or $LANGGRAPH_DURABLE_ARCHIVE_URL): each is shipped, its archive copy read back "
        "and compared with every tier's records, and only then deleted from them. A pinned thread, a thread "
        "being run, or one whose copy does not check out stays. A later read or run brings a thread back. "
        "--dry-run lists what would go.",
        _archive_args,
        _archive,
    ),
    Command(
        "restore",
        "copy threads back from the archive, or rebuild every tier from it (--all)",
        "Copy the named threads back from the archive into every tier, or with --all every thread it holds: "
        "what rebuilds Redis and Postgres after they were lost. --until TIME restores as of that time (to the "
        "replica's pass, about a minute). Archived threads stay archived (their next read brings them back). "
        "Safe to run again. Exit 1 if an archive segment does not verify (it is left out).",
        _restore_args,
        _restore,
    ),
    Command(
        "pin",
        "pin a checkpoint: retention, prune and archiving never remove it",
        "Pin a checkpoint (default: the thread's latest) as a recovery point: retention, `prune`, "
        "delete_for_runs and `archive` never remove it or what it is rebuilt from. Resume from it with "
        "graph.invoke(None, config) naming its checkpoint_id.",
        _pin_args,
        _pin,
    ),
    Command(
        "unpin",
        "remove a checkpoint's pin",
        "Remove a pin `pin` made; exit 1 if the checkpoint has none.",
        _unpin_args,
        _unpin,
    ),
    Command(
        "pins",
        "list a thread's pinned checkpoints",
        "List a thread's pinned checkpoints: id, namespace, label, and when it was pinned.",
        _pins_args,
        _pins,
    ),
]
