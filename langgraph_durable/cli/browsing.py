"""Commands that read threads: ``threads``, ``history``, ``show``."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .. import browse
from .output import (
    EXIT_FINDINGS,
    EXIT_OK,
    PREVIEW_CHARS,
    Output,
    age_text,
    ns_label,
    preview,
    size_text,
    table,
    whole,
)
from .parsing import (
    Command,
    at_least,
)
from .store import LOOK, open_saver

if TYPE_CHECKING:
    from ..migrations import Migrations


def _threads(args: argparse.Namespace, out: Output) -> int:
    if args.archived:
        with open_saver(args, **LOOK) as saver:
            archived = saver.archived_threads()
        out.document({"archived": archived})
        for thread_id in archived:
            out.line(thread_id)
        out.line(f"{len(archived)} archived thread(s): a read or run brings one back (or `restore THREAD`)")
        return EXIT_OK
    with open_saver(args, **LOOK) as saver, out.progress("reading", unit="threads", transient=True) as progress:
        found = browse.threads(saver, progress=progress)
        migrations = saver.migrations
    versions = browse.by_state_version((s.state_version for s in found), migrations)
    out.document(
        {
            "threads": found,
            "size": browse.SIZE_MEANING,
            "state_versions": versions,
            "running_version": None if migrations is None else migrations.version,
        }
    )
    # The state versions are shown once there is something to say: a store
    # no app stamped, looked at without --migrations, reads as before.
    with_versions = migrations is not None or any(s.state_version is not None for s in found)
    t = table(
        "thread", "namespaces", ("checkpoints", "right"), ("last step", "right"), "interrupt", ("age", "right"),
        ("size", "right"), *([("version", "right")] if with_versions else []),
    )  # fmt: skip
    for s in found:
        t.add_row(
            s.thread_id,
            ", ".join(dict.fromkeys(ns_label(ns) for ns in s.namespaces)) or "-",
            str(s.checkpoints),
            "-" if s.last_step is None else str(s.last_step),
            "yes" if s.interrupted else "-",
            age_text(s.age_seconds),
            size_text(s.size_bytes),
            *([_version_text(s.state_version)] if with_versions else []),
        )
    if found:
        out.table(t)
    if with_versions:
        for v in versions:
            out.line(_version_line(v, migrations))
    out.line(f"{len(found)} thread(s), {size_text(sum(s.size_bytes for s in found))} serialized")
    return EXIT_OK


def _version_text(stamp: int | None) -> str:
    return "none" if stamp is None else str(stamp)


def _version_line(v: browse.StateVersionCount, migrations: Migrations | None) -> str:
    """One state version's count, and with the app's migrations what they make of it."""
    if v.state_version is None:
        return f"state version none: {v.threads} thread(s) unstamped (--migrations says which version that is)"
    unstamped = f", {v.unstamped} of them unstamped" if v.unstamped else ""
    line = f"state version {v.state_version}: {v.threads} thread(s){unstamped}"
    if migrations is None:
        return line
    assert v.status is not None  # every version has one against the migrations
    said = {
        "current": "this code's version",
        "older": "`migrate` brings them up",
        "unreachable": f"no step from version {', '.join(map(str, v.missing))}: nothing brings them up",
        "newer": f"newer than this code's version {migrations.version}: it neither runs nor writes them",
    }
    return f"{line} ({said[v.status]})"


def _threads_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archived", action="store_true", help="list the threads that live only in the archive")


def _history(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args, **LOOK) as saver:
        found = browse.history(saver, args.thread, checkpoint_ns=args.ns, limit=args.limit)
    if not found:
        where = f" in namespace {args.ns!r}" if args.ns is not None else ""
        return out.fail(f"thread {args.thread!r} has no checkpoints{where}", EXIT_FINDINGS)
    out.document({"thread_id": args.thread, "checkpoints": found})
    with_ns = any(s.checkpoint_ns for s in found)
    t = table(
        "checkpoint", *(["namespace"] if with_ns else []), ("step", "right"), "source", ("writes", "right"),
        "interrupts", ("age", "right"),
    )  # fmt: skip
    for s in found:
        interrupts = ""
        if s.interrupts:
            interrupts = f"{len(s.interrupts)}: {preview(s.interrupts[0].value, 60)}"
        t.add_row(
            s.checkpoint_id,
            *([ns_label(s.checkpoint_ns)] if with_ns else []),
            "-" if s.step is None else str(s.step),
            s.source or "-",
            str(s.pending_writes),
            interrupts,
            age_text(browse.age_seconds(s.ts)),
        )
    out.table(t)
    out.line(f"{len(found)} checkpoint(s), newest first")
    return EXIT_OK


def _history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("--ns", default=None, help="only this namespace ('' for the root graph; default: every namespace)")
    p.add_argument("--limit", type=at_least(1), default=None, help="at most this many checkpoints (the newest)")


def _show(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args, **LOOK) as saver:
        detail = browse.show(saver, args.thread, args.checkpoint, checkpoint_ns=args.ns)
    if detail is None:
        what = f"checkpoint {args.checkpoint!r}" if args.checkpoint else "checkpoint"
        where = f" in namespace {args.ns!r}" if args.ns is not None else ""
        return out.fail(f"thread {args.thread!r} has no {what}{where}", EXIT_FINDINGS)
    s = detail.summary
    out.document(
        {
            **{f.name: getattr(s, f.name) for f in fields(s)},
            "metadata": detail.metadata,
            "channel_values": detail.channel_values,
            "channel_versions": detail.channel_versions,
            "writes": detail.writes,
        }
    )
    ns = "root graph" if not s.checkpoint_ns else f"namespace {s.checkpoint_ns!r}"
    out.line(f"thread {s.thread_id!r}  checkpoint {s.checkpoint_id}  ({ns})", style="bold")
    out.line(
        f"step {'-' if s.step is None else s.step}, source {s.source or '-'}, {s.ts or 'no timestamp'} "
        f"({age_text(browse.age_seconds(s.ts))} ago), parent {s.parent_checkpoint_id or '-'}"
    )
    sections: list[tuple[str, list[str], list[tuple[list[str], Any]]]] = [
        (
            f"waiting on {len(s.interrupts)} interrupt(s)",
            ["task", "id", "value"],
            [([i.task_id, i.id or "-"], i.value) for i in s.interrupts],
        ),
        (
            f"channel values ({len(detail.channel_values)})",
            ["channel", "value"],
            [([channel], value) for channel, value in sorted(detail.channel_values.items())],
        ),
        (
            f"pending writes ({len(detail.writes)})",
            ["task", "channel", "value"],
            [([w.task_id, w.channel], w.value) for w in detail.writes],
        ),
    ]
    for title, columns, rows in sections:
        if not rows and title.startswith("waiting"):
            continue
        out.line(f"\n{title}", style="bold")
        if args.full:
            # Whole values, not folded into a table column: a block each.
            for names, value in rows:
                out.line("  ".join(names) + ":")
                out.line("\n".join("    " + line for line in whole(value).splitlines()))
        elif rows:
            t = table(*columns)
            for names, value in rows:
                shown = [n[:8] if col == "task" else n for col, n in zip(columns, names)]
                t.add_row(*shown, preview(value))
            out.table(t)
    if not args.full:
        out.line(f"\n(long values are shortened to {PREVIEW_CHARS} characters; --full prints them whole)")
    return EXIT_OK


def _show_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("checkpoint", nargs="?", default=None, help="a checkpoint id from `history` (default: the latest)")
    p.add_argument(
        "--ns",
        default=None,
        help="namespace of the checkpoint ('' for the root graph; default: the root graph, or with a checkpoint "
        "id, whichever namespace holds it)",
    )
    p.add_argument("--full", action="store_true", help="print values whole instead of shortened")


COMMANDS: list[Command] = [
    Command(
        "threads",
        "list the threads: namespaces, checkpoints, last step, age, size",
        "One row per thread the tiers hold: its id, its namespaces ((root) and the subgraphs' nodes), number "
        "of checkpoints (all namespaces), last step of the root graph, whether it waits on an interrupt(), "
        f"age of its latest checkpoint and its size. Size: {browse.SIZE_MEANING}. Once a thread carries a "
        "state version (an app with Migrations stamps it), or with --migrations, also each thread's version "
        "(of its latest root checkpoint; none: unstamped) and how many threads each version holds; "
        "--migrations counts the unstamped as its unversioned version and says which versions `migrate` "
        "brings up. Reads every checkpoint of every thread.",
        _threads_args,
        _threads,
    ),
    Command(
        "history",
        "a thread's checkpoints, newest first",
        "A thread's checkpoints, newest first: id, namespace (when the thread has subgraphs), step, source "
        "(input, loop, update, fork), number of pending writes, the interrupts it waits on, and age.",
        _history_args,
        _history,
    ),
    Command(
        "show",
        "a checkpoint's channel values and pending writes",
        "One checkpoint's channel values, pending writes and interrupts (default: the thread's latest "
        "checkpoint of the root graph). Long values are shortened; --full prints them whole. --json always "
        "carries whole values (as plain JSON data: objects, messages and dataclasses as objects).",
        _show_args,
        _show,
    ),
]
