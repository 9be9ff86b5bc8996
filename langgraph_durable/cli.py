"""Command line: ``langgraph-durable`` (also ``python -m langgraph_durable``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

from . import demo


def _tier_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sqlite", default=None, help="local SQLite file ('' for none; default from LANGGRAPH_DURABLE_SQLITE)"
    )
    p.add_argument("--redis", default=None, help="redis:// URL (default from LANGGRAPH_DURABLE_REDIS_URL)")
    p.add_argument("--postgres", default=None, help="postgresql:// URL (default from LANGGRAPH_DURABLE_POSTGRES_URL)")
    p.add_argument("--redis-key-prefix", default=None, help="prefix of the saver's Redis keys")


def _progress(out: TextIO) -> Callable[[int, int], None]:
    tty = out.isatty()
    step = 1

    def show(done: int, total: int) -> None:
        # On a terminal: one bar redrawn in place; in a log: a line every 10%.
        nonlocal step
        if tty:
            filled = int(30 * done / total) if total else 30
            out.write(f"\r  threads [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
            if done == total:
                out.write("\n")
        elif done == total or done >= step * max(1, total // 10):
            step += 1
            out.write(f"  checked {done}/{total} threads\n")
        out.flush()

    return show


def _scan(args: argparse.Namespace, *, repair: bool) -> int:
    with demo.saver_from_args(args) as saver:
        print(f"{'repairing' if repair else 'verifying'} tiers {' -> '.join(saver.tier_names)}", file=sys.stderr)
        run = saver.repair if repair else saver.verify
        report = run(args.thread, progress=_progress(sys.stderr))
    for copy in report.bad:
        state = ""
        if repair:
            state = "restored  " if copy in report.restored else "NOT RESTORED  "
        print(f"{state}{copy}")
    print(
        f"{report.threads} thread(s), {report.copies_checked} record copies checked, {len(report.bad)} bad"
        + (f", {len(report.restored)} restored, {len(report.unrestorable)} could not be restored" if repair else "")
    )
    if repair:
        return 1 if report.unrestorable else 0
    return 1 if report.bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="langgraph-durable", description="Tiered, checksummed LangGraph checkpoints.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("demo", help="kill a running graph with SIGKILL and resume it from its last checkpoint")
    _tier_flags(p)
    p.add_argument("--steps", type=int, default=12, help="super-steps in the demo graph (default 12)")
    p.add_argument("--kill-after", type=int, default=5, help="kill the worker once this step is checkpointed")
    p.add_argument("--thread", default=None, help="thread id (default: a new one)")

    for name, what in (
        ("verify", "check every record copy in every tier; exit 1 if any is bad"),
        ("repair", "replace bad record copies with intact ones from other tiers; exit 1 if any cannot be"),
    ):
        c = commands.add_parser(name, help=what)
        _tier_flags(c)
        c.add_argument("--thread", default=None, help="only this thread (default: every thread)")

    a = commands.add_parser("actions", help="list a thread's non-resumable actions and which are escalated")
    _tier_flags(a)
    a.add_argument("--thread", required=True)
    r = commands.add_parser(
        "resolve-action", help="record whether an escalated action happened, so the thread can resume"
    )
    _tier_flags(r)
    r.add_argument("--thread", required=True)
    r.add_argument("--key", required=True)
    answer = r.add_mutually_exclusive_group(required=True)
    answer.add_argument("--done", action="store_true", help="it happened: later runs must not repeat it")
    answer.add_argument("--not-done", action="store_true", help="it did not happen: the next run may do it")

    w = commands.add_parser("_demo-worker")  # internal: the process the demo kills
    _tier_flags(w)
    w.add_argument("--thread", required=True)
    w.add_argument("--steps", type=int, required=True)
    w.add_argument("--executions", required=True)
    w.add_argument("--resume", action="store_true")

    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.steps < 2:
            parser.error("--steps must be at least 2")
        return demo.run(args)
    if args.command == "actions":
        with demo.saver_from_args(args) as saver:
            entries = saver.actions(args.thread)
        for key, e in sorted(entries.items()):
            flag = "ESCALATED  " if e.escalated() else ""
            by = f" (by {e.resolved_by})" if e.resolved_by else ""
            print(f"{flag}{key}: {e.state}{by}{' idempotent' if e.idempotent else ''}")
        print(f"{len(entries)} action(s), {sum(e.escalated() for e in entries.values())} escalated")
        return 0
    if args.command == "resolve-action":
        with demo.saver_from_args(args) as saver:
            entry = saver.resolve_action(args.thread, args.key, done=args.done)
        print(f"{args.key}: {entry.state}; thread {args.thread!r} may run again")
        return 0
    if args.command in ("verify", "repair"):
        return _scan(args, repair=args.command == "repair")
    return demo.worker(args)


if __name__ == "__main__":
    sys.exit(main())
