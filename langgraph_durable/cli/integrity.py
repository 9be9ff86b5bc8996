"""Commands that check and repair records: ``verify``, ``repair``, and
``quarantine list|restore|purge``."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from .. import browse
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
    Parser,
    duration,
    thread_filter,
)
from .store import STRICT, open_saver

# The saver, LangGraph and the drivers load when a command runs.
if TYPE_CHECKING:
    from ..saver import DurableSaver


def _scan(args: argparse.Namespace, out: Output, *, repair: bool) -> int:
    verb = "repairing" if repair else "verifying"
    with open_saver(args, **STRICT, read_only=not repair) as saver:
        out.note(f"{verb} tiers {' -> '.join(saver.tier_names)}")
        run = saver.repair if repair else saver.verify
        with out.progress(verb, unit="threads") as progress:
            report = run(args.thread, progress=progress)
        tiers = saver.tier_names
        embedded = saver.needs_promote()
        versions = None
        if not repair and saver.migrations is not None:
            with out.progress("reading state versions", unit="threads", transient=True) as progress:
                stamps = browse.state_versions(saver, None if args.thread is None else [args.thread], progress=progress)
            versions = browse.check_state_versions(stamps, saver.migrations)
    code = EXIT_FINDINGS if (report.unrestorable if repair else report.bad or report.missing) else EXIT_OK
    if report.archive is not None and not report.archive.ok:
        code = EXIT_FINDINGS
    out.document({"tiers": tiers, **browse.jsonable(report), **({} if repair else {"state_versions": versions})})
    for copy in [*report.bad, *report.missing]:
        state = ""
        if repair:
            state = "restored  " if copy in report.restored else "NOT RESTORED  "
        out.line(f"{state}{copy}")
    out.line(
        f"{report.threads} thread(s), {report.copies_checked} record copies checked, {len(report.bad)} bad, "
        f"{len(report.missing)} missing from a shared tier"
        + (
            f", {len(report.restored)} restored, {len(report.unrestorable)} could not be restored, "
            f"{report.resealed} re-sealed with the current key"
            if repair
            else ""
        )
    )
    if embedded:
        out.line(
            "the SQLite file holds the history of a store that ran on it alone, which the shared tiers lack: "
            "`langgraph-durable promote` (the same tier flags) copies it there"
        )
        code = EXIT_FINDINGS
    if report.archive is not None:
        a = report.archive
        for key in a.bad_segments:
            out.line(f"archive: UNUSABLE segment {key} (it does not verify)")
        for thread_id in a.rolled_back:
            out.line(
                f"archive: ROLLED BACK  thread {thread_id!r}: the archive holds newer checkpoints than every hot tier, "
                "and no deletion covers them (`restore THREAD` brings them back)"
            )
        out.line(
            f"archive: {a.threads} thread(s), {a.segments} segment(s), {len(a.bad_segments)} unusable, "
            f"{len(a.rolled_back)} rolled back, {a.behind} not shipped yet"
            + ("" if a.signed else " (unsigned: checksums only)")
        )
    if versions is not None:
        _state_version_lines(versions, out)
        if versions.unreachable:  # no run of this code can resume them
            code = EXIT_FINDINGS
    if report.undecodable:
        # Intact, and left as they are: this reader lacks what decodes them.
        for line in report.undecodable[:5]:
            out.line(f"UNDECODABLE  {line}")
        out.line(
            f"{len(report.undecodable)} intact record copies cannot be decoded with this serializer (left as they "
            "are): pass the application's with --serde MODULE:ATTR or LANGGRAPH_DURABLE_SERDE"
        )
        code = code if code != EXIT_OK else EXIT_FINDINGS
    return code


def _state_version_lines(check: browse.StateVersionCheck, out: Output) -> None:
    """verify's lines about the threads' state versions. A thread at a
    version no step brings up is a finding (the caller's exit 1); one a
    newer version wrote is listed but is none: during a rolling deploy,
    that version's replicas run it."""

    def at(t: browse.ThreadAtVersion) -> str:
        return f"thread {t.thread_id!r} at state version {t.state_version}" + ("" if t.stamped else " (unstamped)")

    for t in check.unreachable:
        first = t.missing[0]
        out.line(
            f"UNREACHABLE  {at(t)}: no migration step from version {first}, so neither a run nor `migrate` of "
            f"version {check.running_version} brings it up (register @migrations.step(from_version={first}))"
        )
    for t in check.newer:
        out.line(f"NEWER  {at(t)}: this code (version {check.running_version}) neither runs nor writes it")
    counts = ", ".join(f"{v.threads} at version {v.state_version} ({v.status})" for v in check.versions)
    out.line(
        f"state versions against version {check.running_version}: {counts or 'no threads'}; "
        f"{len(check.unreachable)} unreachable, {len(check.newer)} newer"
    )


def _scan_args(p: Parser) -> None:
    thread_filter(p)


_ON_RESTORE = {"restore": "yes", "keep": "no: intact copy in place", "refuse": "no: cannot be put back"}


def _quarantined(q: Any, outcome: tuple[str, str] | None = None) -> dict[str, Any]:
    doc = {
        "id": f"{q.tier}:{q.id}",
        "tier": q.tier,
        "thread_id": q.thread_id,
        "checkpoint_ns": q.checkpoint_ns,
        "kind": q.kind,
        "key": q.key,
        "reason": q.reason,
        "detected_at": iso_utc(q.detected_at),
        "size_bytes": len(q.record),
    }
    if outcome is not None:
        # What `quarantine restore` would do with it now (`DurableSaver.restore_outcomes`).
        doc["restorable"] = outcome[0] == "restore"
        doc["on_restore"] = outcome[0]
        doc["on_restore_why"] = outcome[1]
    return doc


def _quarantine(args: argparse.Namespace, out: Output) -> int:
    if args.action == "restore" and args.ids and args.all:
        args.parser.error("give quarantine ids or --all, not both.")
    if args.action == "restore" and not (args.ids or args.all):
        args.parser.error("name the quarantined records to restore (ids from `quarantine list`), or pass --all.")
    # list only looks (a read-only saver: it never purges, restores or repairs).
    with open_saver(args, **STRICT, read_only=args.action == "list") as saver:
        if args.action == "list":
            return _quarantine_list(saver, args, out)
        if args.action == "purge":
            return _quarantine_purge(saver, args, out)
        return _quarantine_restore(saver, args, out)


def _quarantine_restore(saver: DurableSaver, args: argparse.Namespace, out: Output) -> int:
    if args.all:
        found = saver.quarantined(args.thread)
        outcomes = saver.restore_outcomes(found)
        chosen: list[Any] = [q for q, (verdict, _) in zip(found, outcomes) if verdict != "refuse"]
    else:
        chosen = list(args.ids)
    restored, kept = saver.restore_quarantined(chosen)
    out.document({"restored": [_quarantined(q) for q in restored], "kept": [_quarantined(q) for q in kept]})
    for q in restored:
        out.line(f"restored  {q.tier}:{q.id}  thread {q.thread_id!r} {q.key}")
    for q in kept:
        out.line(f"kept      {q.tier}:{q.id}  thread {q.thread_id!r} {q.key} (an intact copy is in place)")
    out.line(f"{len(restored)} restored, {len(kept)} kept; the next read verifies them again")
    return EXIT_OK


def _quarantine_list(saver: DurableSaver, args: argparse.Namespace, out: Output) -> int:
    records = saver.quarantined(args.thread)
    outcomes = saver.restore_outcomes(records)
    out.document({"records": [_quarantined(q, o) for q, o in zip(records, outcomes)]})
    t = table("id", "thread", "namespace", "record", "reason", ("age", "right"), "restorable")
    for q, (verdict, _) in zip(records, outcomes):
        t.add_row(
            f"{q.tier}:{q.id}",
            q.thread_id,
            ns_label(q.checkpoint_ns),
            q.key,
            q.reason,
            age_text(max(0.0, time.time() - q.detected_at)),
            _ON_RESTORE[verdict],
        )
    if records:
        out.table(t)
    out.line(f"{len(records)} quarantined record(s), {sum(v == 'restore' for v, _ in outcomes)} restorable")
    return EXIT_OK


def _quarantine_purge(saver: DurableSaver, args: argparse.Namespace, out: Output) -> int:
    purged = saver.purge_quarantined(args.older_than, thread_id=args.thread, dry_run=args.dry_run)
    out.document(
        {"dry_run": args.dry_run, "older_than_seconds": args.older_than, "purged": [_quarantined(q) for q in purged]}
    )
    verb = "would purge" if args.dry_run else "purged"
    for q in purged:
        out.line(
            f"{verb}  {q.tier}:{q.id}  thread {q.thread_id!r} {q.key} ({age_text(time.time() - q.detected_at)} old)"
        )
    by_tier = {name: sum(q.tier == name for q in purged) for name in saver.tier_names}
    counts = ", ".join(f"{n} in {name}" for name, n in by_tier.items())
    out.line(f"{len(purged)} quarantined record(s) {'would be ' if args.dry_run else ''}purged ({counts})")
    return EXIT_OK


def _quarantine_args(p: Parser) -> list[Parser]:
    actions = p.actions("action")
    listing = p.add_action(
        actions, "list", help="list the quarantined copies, and what `restore` would do with each now"
    )
    restore = p.add_action(actions, "restore", help="put quarantined copies back (the next read verifies them again)")
    restore.add_argument("ids", nargs="*", metavar="ID", help="ids as `quarantine list` prints them (tier:id)")
    restore.add_argument("--all", action="store_true", help="every record that can be put back (of --thread)")
    purge = p.add_action(
        actions, "purge", help="delete for good, in every tier, the copies quarantined longer ago than --older-than"
    )
    purge.add_argument(
        "--older-than",
        type=duration,
        required=True,
        metavar="DURATION",
        help="delete the copies quarantined longer ago than this (e.g. 30d, 12h)",
    )
    purge.add_argument("--dry-run", action="store_true", help="list what would be purged; delete nothing")
    for leaf in (listing, restore, purge):
        thread_filter(leaf)
    return [listing, restore, purge]


COMMANDS: list[Command] = [
    Command(
        "verify",
        "check every record copy in every tier; exit 1 if any is bad",
        "Check the checksum of every copy of every record in every tier (one thread or all), and compare "
        "the shared tiers: a record a shared tier lacks while another holds it is missing. With --migrations, "
        "also each thread's state version: a thread at a version no migration step brings up to the app's is "
        "listed (UNREACHABLE), as are threads a newer version wrote (NEWER, not a finding). Changes nothing; "
        "exit 1 if a copy is bad or missing or a thread unreachable. Needs every tier.",
        _scan_args,
        lambda args, out: _scan(args, out, repair=False),
    ),
    Command(
        "repair",
        "replace bad record copies with intact ones from other tiers; exit 1 if any cannot be",
        "`verify`, then replace each bad or missing copy with an intact copy from another tier (the bad "
        "bytes are quarantined first, see `quarantine`), and re-seal records an older signing key sealed. "
        "Exit 1 if a copy has no intact twin. Needs every tier.",
        _scan_args,
        lambda args, out: _scan(args, out, repair=True),
    ),
    Command(
        "quarantine",
        "list quarantined record copies, put them back, or purge old ones",
        "Bad copies and withdrawn checkpoints are moved into their tier's quarantine, never deleted. "
        "`list` shows them and what `restore` would do with each now (restorable: yes, or no when an intact "
        "copy is already in its place, e.g. after `repair`, or when it cannot be put back); `restore` puts "
        "them back (the next read verifies them again); `purge --older-than DURATION` deletes for good the "
        "copies quarantined longer ago than that, in every tier (--dry-run lists them). Only purge deletes.",
        _quarantine_args,
        _quarantine,
    ),
]
