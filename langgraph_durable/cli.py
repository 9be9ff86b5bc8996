"""Command line: ``langgraph-durable`` (also ``python -m langgraph_durable``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

from . import demo
from .errors import ConfigError, DurableError

# Exit status, documented in --help.
EXIT_OK = 0
EXIT_FINDINGS = 1  # verify found bad copies, repair could not restore some, doctor found a tier down
EXIT_USAGE = 2  # bad command line (argparse exits with 2 itself)
EXIT_CANNOT_RUN = 3  # a tier is unreachable or the configuration is wrong
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_CODES_HELP = (
    f"exit status: {EXIT_OK} ok; {EXIT_FINDINGS} verify found bad copies, repair could not restore "
    f"some, or doctor found a tier down; {EXIT_USAGE} usage error; {EXIT_CANNOT_RUN} could not run (a tier unreachable, a configuration "
    f"error; one line on stderr says why); {EXIT_INTERRUPTED} interrupted."
)


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


# Maintenance needs every tier: write="all" makes setup fail on one that is down.
STRICT = {"write": "all"}


def _scan(args: argparse.Namespace, *, repair: bool) -> int:
    with demo.saver_from_args(args, **STRICT) as saver:
        saver.setup()  # an unreachable tier fails here, before any output
        print(f"{'repairing' if repair else 'verifying'} tiers {' -> '.join(saver.tier_names)}", file=sys.stderr)
        run = saver.repair if repair else saver.verify
        report = run(args.thread, progress=_progress(sys.stderr))
    for copy in [*report.bad, *report.missing]:
        state = ""
        if repair:
            state = "restored  " if copy in report.restored else "NOT RESTORED  "
        print(f"{state}{copy}")
    print(
        f"{report.threads} thread(s), {report.copies_checked} record copies checked, {len(report.bad)} bad, "
        f"{len(report.missing)} missing from a shared tier"
        + (
            f", {len(report.restored)} restored, {len(report.unrestorable)} could not be restored, "
            f"{report.resealed} re-sealed with the current key"
            if repair
            else ""
        )
    )
    if repair:
        return EXIT_FINDINGS if report.unrestorable else EXIT_OK
    return EXIT_FINDINGS if report.bad or report.missing else EXIT_OK


def _quarantine(args: argparse.Namespace) -> int:
    with demo.saver_from_args(args, **STRICT) as saver:
        if args.action == "list":
            records = saver.quarantined(args.thread)
            for q in records:
                ns = f" ns {q.checkpoint_ns!r}" if q.checkpoint_ns else ""
                restorable = "" if q.fields is not None else "  (not restorable)"
                print(f"{q.tier}:{q.id}  thread {q.thread_id!r}{ns} {q.key}: {q.reason}{restorable}")
            print(f"{len(records)} quarantined record(s)")
            return EXIT_OK
        if args.all:
            if args.ids:
                raise ConfigError("give quarantine ids or --all, not both.")
            chosen: list[Any] = [q for q in saver.quarantined(args.thread) if q.fields is not None]
        elif args.ids:
            chosen = list(args.ids)
        else:
            raise ConfigError("name the quarantined records to restore (ids from `quarantine list`), or pass --all.")
        restored, kept = saver.restore_quarantined(chosen)
    for q in restored:
        print(f"restored  {q.tier}:{q.id}  thread {q.thread_id!r} {q.key}")
    for q in kept:
        print(f"kept      {q.tier}:{q.id}  thread {q.thread_id!r} {q.key} (an intact copy is in place)")
    print(f"{len(restored)} restored, {len(kept)} kept; the next read verifies them again")
    return EXIT_OK


def _doctor(args: argparse.Namespace) -> int:
    """Each tier's health (`DurableSaver.health`): exit 1 if one is down."""
    # drain_timeout=0: the doctor looks; it does not ship the backlog at exit.
    with demo.saver_from_args(args, drain_timeout=0, connect_timeout=args.timeout) as saver:
        health = saver.health()
        write = saver.write
    print(f"{'tier':<10}{'reachable':<11}{'latency':>10}  {'breaker':<10}{'owed':>6}")
    for t in health.tiers:
        latency = f"{t.latency_ms:.1f} ms" if t.latency_ms is not None else "-"
        owed = "-" if t.name == "sqlite" else str(t.owed)
        print(f"{t.name:<10}{'yes' if t.reachable else 'NO':<11}{latency:>10}  {t.breaker.state:<10}{owed:>6}")
        if t.error:
            print(f"  {t.name}: {' '.join(t.error.split())}")
    lag = health.lag
    oldest = f", the oldest {lag.seconds:.1f} s old" if lag.records else ""
    print(
        f"write mode {write!r}; {lag.records} record(s) owed to the shared tiers{oldest}; "
        f"{health.local_write_failures} local write failure(s) in this check"
    )
    return EXIT_OK if health.ok else EXIT_FINDINGS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="langgraph-durable", description="Tiered, checksummed LangGraph checkpoints.", epilog=EXIT_CODES_HELP
    )
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
        c = commands.add_parser(name, help=what, epilog=EXIT_CODES_HELP)
        _tier_flags(c)
        c.add_argument("--thread", default=None, help="only this thread (default: every thread)")

    d = commands.add_parser(
        "doctor",
        help="probe every tier: reachable, latency, breaker state, records owed; exit 1 if a tier is down",
        epilog=EXIT_CODES_HELP,
    )
    _tier_flags(d)
    d.add_argument("--timeout", type=float, default=5.0, help="seconds before a tier counts as down (default 5)")

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

    q = commands.add_parser(
        "quarantine",
        help="list quarantined record copies, or put them back",
        description="Bad copies and withdrawn checkpoints are moved into their tier's quarantine, never "
        "deleted. `list` shows them; `restore` puts them back (the next read verifies them again).",
        epilog=EXIT_CODES_HELP,
    )
    _tier_flags(q)
    q.add_argument("action", choices=("list", "restore"))
    q.add_argument("ids", nargs="*", help="with restore: ids as `list` prints them (tier:id)")
    q.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    q.add_argument("--all", action="store_true", help="with restore: every restorable record (of --thread)")

    w = commands.add_parser("_demo-worker")  # internal: the process the demo kills
    _tier_flags(w)
    w.add_argument("--thread", required=True)
    w.add_argument("--steps", type=int, required=True)
    w.add_argument("--executions", required=True)
    w.add_argument("--resume", action="store_true")

    args = parser.parse_args(argv)
    # The command's own output says what went wrong, in one line; the saver's
    # warnings (a tier down, a degraded read) would repeat it on stderr
    # through logging's last-resort handler. An app that set up logging keeps them.
    package_logger = logging.getLogger("langgraph_durable")
    if not logging.getLogger().handlers and package_logger.level == logging.NOTSET:
        package_logger.setLevel(logging.ERROR)
    # A tier that cannot be reached or a wrong setting is the user's to fix,
    # not a bug: one line saying what is wrong, not a driver's traceback.
    try:
        return _run(parser, args)
    except DurableError as exc:
        print(f"langgraph-durable: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print("langgraph-durable: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "demo":
        if args.steps < 2:
            parser.error("--steps must be at least 2")
        return demo.run(args)
    if args.command == "actions":
        with demo.saver_from_args(args, **STRICT) as saver:
            entries = saver.actions(args.thread)
        for key, e in sorted(entries.items()):
            flag = "ESCALATED  " if e.escalated() else ""
            by = f" (by {e.resolved_by})" if e.resolved_by else ""
            print(f"{flag}{key}: {e.state}{by}{' idempotent' if e.idempotent else ''}")
        print(f"{len(entries)} action(s), {sum(e.escalated() for e in entries.values())} escalated")
        return EXIT_OK
    if args.command == "resolve-action":
        with demo.saver_from_args(args, **STRICT) as saver:
            entry = saver.resolve_action(args.thread, args.key, done=args.done)
        print(f"{args.key}: {entry.state}; thread {args.thread!r} may run again")
        return EXIT_OK
    if args.command in ("verify", "repair"):
        return _scan(args, repair=args.command == "repair")
    if args.command == "quarantine":
        return _quarantine(args)
    if args.command == "doctor":
        return _doctor(args)
    return demo.worker(args)


if __name__ == "__main__":
    sys.exit(main())
