"""Operating a store: ``doctor``, ``actions``, ``resolve-action``."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ..errors import DurableError, as_cli_flags
from ..model.roles import Role
from .lazy import lazy
from .output import (
    EXIT_FINDINGS,
    EXIT_OK,
    Output,
    age_text,
    iso_utc,
    preview,
    table,
)
from .parsing import (
    Command,
    Parser,
    json_value,
    thread_argument,
)
from .store import LOOK, STRICT, open_saver, saver_from_args

# The saver, LangGraph and the drivers load when a command runs.
if TYPE_CHECKING:
    from .. import ledger
else:
    ledger = lazy("langgraph_durable.ledger")


def _doctor(args: argparse.Namespace, out: Output) -> int:
    """Each tier's health (`DurableSaver.health`): exit 1 if one is down."""
    # The doctor looks: it writes nothing and does not ship the backlog at exit.
    with saver_from_args(args, **LOOK, connect_timeout=args.timeout) as saver:
        health = saver.health()
        write = saver.write
    out.document({"write": write, **{f.name: getattr(health, f.name) for f in fields(health) if f.name != "ok"}})
    t = table("tier", "reachable", ("latency", "right"), "breaker", ("owed", "right"))
    for tier in health.tiers:
        latency = f"{tier.latency_ms:.1f} ms" if tier.latency_ms is not None else "-"
        reachable = "yes" if tier.reachable else "NO"
        t.add_row(
            tier.name, reachable, latency, tier.breaker.state, "-" if tier.role == Role.LOCAL.value else str(tier.owed)
        )
    out.table(t)
    for tier in health.tiers:
        if tier.error:
            out.line(f"  {tier.name}: {as_cli_flags(' '.join(tier.error.split()))}")
    if health.archive is not None:
        a = health.archive
        state = "reachable" if a.reachable else "NOT reachable"
        out.line(f"archive: {state}; {a.threads} thread(s) not shipped yet, the oldest {a.seconds:.1f} s old")
        if health.archive_error:
            out.line(f"  archive: {as_cli_flags(' '.join(health.archive_error.split()))}")
        if a.failing:
            out.line(
                f"  archive: {len(a.failing)} thread(s) not shipped while the object store answers, retried with "
                f"backoff: {', '.join(repr(t[:60]) for t in a.failing)}"
            )
            if a.failing_error:
                out.line(f"  archive: the last refusal: {' '.join(a.failing_error.split())[:300]}")
    if health.store_key_fingerprint:
        out.line(
            f"store key fingerprint: {health.store_key_fingerprint} (keep it with your secrets: "
            "`restore` needs it to rebuild this store from its archive)"
        )
    lag = health.lag
    oldest = f", the oldest {lag.seconds:.1f} s old" if lag.records else ""
    out.line(
        f"write mode {write!r}; {lag.records} record(s) owed to the shared tiers{oldest}; "
        f"{health.local_write_failures} local write failure(s) in this check"
    )
    down = [tier.name for tier in health.tiers if not tier.reachable]
    if health.archive is not None and not health.archive.reachable:
        down.append("archive")
    if down:  # the last line: with --json, the envelope's error message
        out.line(f"DOWN: {', '.join(down)}")
    refused = health.archive is not None and bool(health.archive.failing)
    return EXIT_OK if health.ok and not refused else EXIT_FINDINGS


def _doctor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=5.0, help="seconds before a tier counts as down (default 5)")


def _entry(e: ledger.LedgerEntry) -> dict[str, Any]:
    return {
        "key": e.key,
        "state": e.state,
        "escalated": e.escalated(),
        "idempotent": e.idempotent,
        "result": e.result,
        "updated_at": iso_utc(e.updated_at) if e.updated_at else None,
        "resolved_by": e.resolved_by,
    }


def _actions(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args, **STRICT, read_only=True) as saver:
        entries = saver.actions(args.thread)
    out.document({"thread_id": args.thread, "actions": [_entry(e) for _, e in sorted(entries.items())]})
    t = table("action", "state", "idempotent", "resolved by", ("updated", "right"), "result")
    for key, e in sorted(entries.items()):
        state = "ESCALATED" if e.escalated() else e.state
        age = max(0.0, time.time() - e.updated_at) if e.updated_at else None
        result = preview(e.result, 40) if e.state == "done" else "-"
        t.add_row(key, state, "yes" if e.idempotent else "no", e.resolved_by or "-", age_text(age), result)
    if entries:
        out.table(t)
    out.line(f"{len(entries)} action(s), {sum(e.escalated() for e in entries.values())} escalated")
    return EXIT_OK


def _actions_args(p: Parser) -> None:
    thread_argument(p, "the thread whose ledger to list")


def _resolve_action(args: argparse.Namespace, out: Output) -> int:
    if args.result is not None and not args.done:
        args.parser.error("--result records what the action returned: it goes with --done.")
    result = json.loads(args.result) if args.result is not None else None
    with open_saver(args, **STRICT) as saver:
        try:
            entries = saver.actions(args.thread)
        except DurableError as exc:
            if not ledger.damaged_entry(exc, args.thread, args.key):
                raise
            before = None  # damaged in every tier: an answer is what it needs
        else:
            reason = ledger.refusal(args.thread, args.key, entries, force=args.force, force_hint="--force")
            if reason is not None:
                return out.fail(reason, EXIT_FINDINGS)
            before = entries[args.key]
        entry = saver.resolve_action(args.thread, args.key, done=args.done, result=result, force=args.force)
    out.document({"thread_id": args.thread, "previous": _entry(before) if before else None, "action": _entry(entry)})
    was = f" (was {before.state}; changed with --force)" if before is not None and before.state != "intent" else ""
    out.line(f"{args.key}: {entry.state}{was}; thread {args.thread!r} may run again")
    return EXIT_OK


def _resolve_args(p: Parser) -> None:
    thread_argument(p, "the thread the action belongs to")
    p.add_argument("--key", required=True, help="the action's key, as `actions` lists it")
    answer = p.add_mutually_exclusive_group(required=True)
    answer.add_argument("--done", action="store_true", help="it happened: later runs must not repeat it")
    answer.add_argument("--not-done", action="store_true", help="it did not happen: the next run may do it")
    p.add_argument(
        "--result",
        metavar="JSON",
        type=json_value,
        default=None,
        help="with --done: what the action returned, as JSON (later runs get it as `act.result`)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="change an action that is already answered (confirmed done, or answered by an operator)",
    )


COMMANDS: list[Command] = [
    Command(
        "doctor",
        "probe every tier: reachable, latency, breaker state, records owed; exit 1 if a tier is down",
        "Probe every tier: reachable or not, latency, circuit breaker state and records still owed to it; "
        "then the write mode and the backlog. Exit 1 if a tier is down.",
        _doctor_args,
        _doctor,
    ),
    Command(
        "actions",
        "list a thread's non-resumable actions and which are escalated",
        "List a thread's ledger of non-resumable actions (`langgraph_durable.action`): state (intent, done, "
        "not_done), ESCALATED for an intent never confirmed (the thread will not resume until "
        "`resolve-action` answers it), who resolved it and its recorded result.",
        _actions_args,
        _actions,
    ),
    Command(
        "resolve-action",
        "record whether an escalated action happened, so the thread can resume",
        "Record an operator's answer for an escalated action: --done (it happened; later runs get --result "
        "as its result and do not repeat it) or --not-done (it did not; the next run may do it). Refused "
        "(exit 1) when the thread has no such action, or when the action is already answered (confirmed "
        "done, or answered by an operator) unless --force.",
        _resolve_args,
        _resolve_action,
    ),
]
