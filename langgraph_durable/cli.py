"""Command line: ``langgraph-durable`` (also ``python -m langgraph_durable``).

The commands are rows of `COMMANDS`: each names its arguments and a
``run(args, out)`` that returns an exit status. Shared pieces a new command
reuses: `tier_flags` (the tier options, added for it when ``tiers=True``),
``--json`` (added to every public command), `Output` (where a command
writes: rich tables and lines for people, one JSON document with
``--json``), `progress_bar` (a rich progress bar fed ``(done, total)``) and
`demo.saver_from_args` (a saver from the tier flags and the environment).

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
with the likely one (`_Parser`); with ``--json`` the envelope too. Only light
modules are imported before the arguments are parsed: ``--help`` and
``--version`` do not load LangGraph or a tier driver.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib.util
import json
import logging
import os
import pprint
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, cast

from rich.console import Console, JustifyMethod
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__, browse
from .environment import (
    DEFAULT_KEY_PREFIX,
    ENV_ARCHIVE_KEY_FINGERPRINT,
    ENV_ARCHIVE_URL,
    ENV_LEASE_LINGER,
    ENV_OLD_SIGNING_KEYS,
    ENV_POSTGRES_PREPARED_STATEMENTS,
    ENV_POSTGRES_SCHEMA,
    ENV_REDIS_KEY_PREFIX,
    ENV_REDIS_TTL,
    ENV_SERDE,
    ENV_SIGNING_KEY,
    ENV_WRITE,
)
from .errors import DurableError, as_cli_flags, no_store_at, printable
from .model.roles import Role
from .retention import RetentionPolicy
from .tiers.registry import DEFAULT_SQLITE_PATH, KINDS, POSTGRES, REDIS, SQLITE


def _lazy(name: str) -> Any:
    """Module `name`, loaded when one of its attributes is first used."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# The saver, LangGraph and the drivers load when a command runs, not for
# --help, --version or a usage error.
if TYPE_CHECKING:
    from . import demo, ledger
    from .engine import importing
    from .saver import DurableSaver
else:
    demo = _lazy(f"{__package__}.demo")
    ledger = _lazy(f"{__package__}.ledger")
    importing = _lazy(f"{__package__}.engine.importing")

# Exit status, documented in --help.
EXIT_OK = 0
# verify found bad copies, repair could not restore some, doctor found a tier
# down, resolve-action refused, history/show found nothing, the demo failed
EXIT_FINDINGS = 1
EXIT_USAGE = 2  # bad command line (argparse exits with 2 itself)
EXIT_CANNOT_RUN = 3  # a tier is unreachable or the configuration is wrong
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_CODES_HELP = f"""exit status:
  {EXIT_OK:<4} ok
  {EXIT_FINDINGS:<4} findings: verify found bad or missing copies, repair could not restore some, doctor
       found a tier down, resolve-action refused (no such action, or one already answered
       without --force), history/show found no such thread or checkpoint, the demo failed
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

ENVIRONMENT_HELP = f"""environment (the tier flags override it; a flag given as '' switches its tier off):
  {SQLITE.env:<36} {SQLITE.what}
  {"":<36} (default {DEFAULT_SQLITE_PATH})
  {REDIS.env:<36} {REDIS.what}
  {ENV_REDIS_KEY_PREFIX:<36} prefix of the saver's Redis keys (default {DEFAULT_KEY_PREFIX!r})
  {ENV_REDIS_TTL:<36} seconds after which an idle thread leaves Redis
  {POSTGRES.env:<36} {POSTGRES.what}
  {ENV_POSTGRES_PREPARED_STATEMENTS:<36} false behind PgBouncer in transaction mode
  {ENV_POSTGRES_SCHEMA:<36} the Postgres schema of the saver's tables
  {ENV_SIGNING_KEY:<36} the key that signs every record (HMAC); it must be
  {"":<36} the key the store was written with
  {ENV_OLD_SIGNING_KEYS:<36} older keys still accepted during a rotation,
  {"":<36} comma-separated ('unsigned' accepts unsigned records)
  {ENV_WRITE:<36} which tiers hold a write before it returns:
  {"":<36} shared (default), all or local
  {ENV_LEASE_LINGER:<36} seconds a run's lease is kept after it ends (default 30)
  {ENV_ARCHIVE_URL:<36} s3://BUCKET/PREFIX of the archive (object storage);
  {"":<36} its endpoint and credentials from the AWS_* variables
  {ENV_ARCHIVE_KEY_FINGERPRINT:<36} the store key's full fingerprint (doctor prints
  {"":<36} it), to rebuild a store from its archive"""

# The exit-status table is in the top-level help only; a command's own says where.
SUBCOMMAND_EPILOG = "exit status: 0 ok, 1 findings, 2 usage, 3 could not run; `langgraph-durable --help` says more."

JSON_HELP = "print one JSON document on stdout instead of text (same exit status)"

# Maintenance needs every tier: write="all" makes setup fail on one that is down.
STRICT: dict[str, Any] = {"write": "all"}
# The read commands only look: nothing is repaired, quarantined, shipped or
# recorded in any tier while they run (`DurableSaver(read_only=True)`), and
# nothing owed is shipped at exit either.
LOOK: dict[str, Any] = {"drain_timeout": 0, "read_only": True}


# -- output -------------------------------------------------------------------------------


def make_console(file: TextIO) -> Console:
    """A rich console on `file`. Not a terminal (a pipe, a log, CI): no ANSI
    codes, and wide enough that lines are not folded at 80 columns. Strings
    are printed as they are (no markup, emoji codes or highlighting): thread
    ids and values may contain brackets and colons."""
    console = Console(file=file, markup=False, emoji=False, highlight=False, force_jupyter=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


@contextmanager
def progress_bar(
    label: str, *, unit: str = "", file: TextIO | None = None, transient: bool = False
) -> Iterator[Callable[[int, int], None]]:
    """A progress display for a long task, fed ``show(done, total)``::

        with progress_bar("importing", unit="checkpoints") as show:
            for done, item in enumerate(items, 1):
                ...
                show(done, len(items))

    On a terminal: a rich bar redrawn in place (label, bar, done/total, unit,
    elapsed time), left on screen when the block ends, or erased if
    `transient`. Elsewhere (a log, CI): a plain line such as ``  importing
    40/400 checkpoints`` at the start, at each tenth of the way and at the
    end. Writes to `file` (default stderr: stdout stays clean for the
    command's output, JSON included).
    """
    console = make_console(file if file is not None else sys.stderr)
    if console.is_terminal:
        columns = [TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn()]
        if unit:
            columns.append(TextColumn(unit))
        bar = Progress(*columns, TimeElapsedColumn(), console=console, transient=transient)
        task = bar.add_task(label, total=None)
        with bar:
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    printed: list[tuple[int, int]] = []
    seen: list[tuple[int, int]] = []

    def line(done: int, total: int) -> None:
        printed.append((done, total))
        console.out(f"  {label} {done}/{total}{' ' + unit if unit else ''}")

    def show(done: int, total: int) -> None:
        seen[:] = [(done, total)]
        step = max(1, total // 10)
        last = printed[-1] if printed else (0, total)
        if printed and last == (done, total):
            return
        starting = not printed and done == 0
        if starting or done >= total or last[1] != total or done // step > last[0] // step:
            line(done, total)

    try:
        yield show
    finally:
        if seen and (not printed or printed[-1] != seen[0]):
            line(*seen[0])


# The envelope's error type when no exception names it, by exit status.
_ERROR_TYPES = {1: "findings", 2: "usage", 3: "cannot_run", 130: "interrupted"}


def iso_utc(seconds: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 UTC (``2026-11-28T08:03:59.123Z``); None stays None."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def envelope(command: str, report: Any, *, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one JSON document every command prints with ``--json`` (see the
    module docstring): ``ok`` is true when the exit status is 0. `report` is
    made plain JSON data by `browse.jsonable`."""
    if report is not None:
        report = browse.jsonable(report)
    doc: dict[str, Any] = {
        "command": command,
        "ok": error is None,
        "version": __version__,
        "ts": iso_utc(time.time()),
        "report": {} if report is None else report,
    }
    if error is not None:
        doc["error"] = error
    return doc


def _write_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()


class Output:
    """Where a command writes. Without ``--json``: lines and rich tables on
    stdout. With it: nothing on stdout but the one JSON document
    (`document`). Progress and notes go to stderr either way."""

    def __init__(self, json_mode: bool = False, command: str = "") -> None:
        self.json = json_mode
        self.command = command
        self.out = make_console(sys.stdout)
        self.err = make_console(sys.stderr)
        self._report: Any = None
        self._summary = ""  # the last line of human output: the message of a failing envelope
        self._sent = False

    def line(self, text: str = "", *, style: str | None = None) -> None:
        """A line of human output (nothing with --json), control characters
        escaped (`printable`): ids and values are anyone's text."""
        if text.strip():
            self._summary = " ".join(text.split())
        if not self.json:
            self.out.out(printable(text, newlines=True), style=style)

    def table(self, table: Table) -> None:
        """A table of human output (nothing with --json)."""
        if self.json:
            return
        if self.out.is_terminal:
            self.out.print(table)
            return
        # In a log, without the padding rich leaves after the last column.
        with self.out.capture() as captured:
            self.out.print(table)
        self.out.out("\n".join(line.rstrip() for line in captured.get().splitlines()))

    def note(self, text: str) -> None:
        """A line on stderr, with or without --json."""
        self.err.out(printable(text, newlines=True))

    def document(self, report: Any) -> None:
        """The command's report: with --json, the ``report`` of the envelope
        (`envelope`) written when the command ends (`finish`) or fails (`fail`)."""
        self._report = report

    def finish(self, code: int) -> int:
        """Write the envelope (with --json, once) for a command that ended
        with exit status `code`; returns `code`. A non-zero status without a
        `fail` carries the command's last line as its message (``findings``)."""
        if code != EXIT_OK and not self._sent:
            return self._send(code, self._summary or f"exit status {code}", _ERROR_TYPES.get(code, "error"))
        if self.json and not self._sent:
            self._sent = True
            _write_json(envelope(self.command, self._report))
        return code

    def fail(self, message: str, code: int, *, prefix: str = "error: ") -> int:
        """Report a failure in one line on stderr (and with --json as the
        envelope's ``error``); returns `code`. Its ``type`` is the class of the
        `DurableError` being handled (ConfigError, TierUnavailable...), else
        what the exit status says (findings, usage, interrupted). The saver's
        keywords in it (``postgres=``) are named by their flags (``--postgres``)."""
        message = as_cli_flags(" ".join(message.split()))
        print(f"langgraph-durable: {prefix}{printable(message)}", file=sys.stderr)
        handled = sys.exc_info()[1]
        kind = type(handled).__name__ if isinstance(handled, DurableError) else _ERROR_TYPES.get(code, "error")
        return self._send(code, message, kind)

    def _send(self, code: int, message: str, kind: str) -> int:
        if self.json and not self._sent:
            self._sent = True
            error = {"type": kind, "message": message, "exit_status": code}
            _write_json(envelope(self.command, self._report, error=error))
        return code

    def progress(
        self, label: str, *, unit: str = "", transient: bool = False
    ) -> AbstractContextManager[Callable[[int, int], None]]:
        """`progress_bar` on stderr."""
        return progress_bar(label, unit=unit, file=sys.stderr, transient=transient)


class _PrintableTable(Table):
    """A rich table whose text cells are shown with control characters escaped."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(printable(r) if isinstance(r, str) else r for r in renderables), **kwargs)


def table(*columns: str | tuple[str, str]) -> Table:
    """A borderless table; a column given as ``(name, "right")`` is right-aligned.
    Text cells are escaped (`printable`)."""
    t = _PrintableTable(box=None, pad_edge=False, show_edge=False, header_style="bold", highlight=False)
    for column in columns:
        name, justify = column if isinstance(column, tuple) else (column, "left")
        t.add_column(name, justify=cast(JustifyMethod, justify))
    return t


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size, limit in (("s", 1, 90), ("m", 60, 90 * 60), ("h", 3600, 36 * 3600)):
        if seconds < limit:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds / 86400:.0f}d"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _ns_label(ns: str) -> str:
    """A namespace as people read it: the root graph, or the path of subgraph nodes."""
    if not ns:
        return "(root)"
    return "|".join(part.split(":", 1)[0] for part in ns.split("|"))


# -- short previews of values ----------------------------------------------------------

PREVIEW_CHARS = 160
_ITEMS = 6
_STRING = 60


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """`value` in at most `limit` characters: long strings, collections and
    nested structures are cut, saying how much was left out."""
    text = _compact(value, 0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _compact(value: Any, depth: int) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= _STRING else f"{value[:_STRING]!r}... ({len(value)} chars)"
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value)) if len(value) <= _STRING else f"<{len(value)} bytes>"
    if isinstance(value, dict):
        if depth > 2 and value:
            return f"{{... {len(value)} keys}}"
        items = [f"{_compact(k, depth + 1)}: {_compact(v, depth + 1)}" for k, v in list(value.items())[:_ITEMS]]
        return "{" + ", ".join(items + _more(len(value))) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        seq = list(value)
        open_, close = ("[", "]") if isinstance(value, list) else ("(", ")") if isinstance(value, tuple) else ("{", "}")
        if depth > 2 and seq:
            return f"{open_}... {len(seq)} items{close}"
        return open_ + ", ".join([_compact(v, depth + 1) for v in seq[:_ITEMS]] + _more(len(seq))) + close
    kind, content = getattr(value, "type", None), getattr(value, "content", None)
    if isinstance(kind, str) and content is not None:  # a LangChain message
        return f"{kind}({_compact(content, depth + 1)})"
    if is_dataclass(value) and not isinstance(value, type):
        shown = {f.name: getattr(value, f.name) for f in fields(value) if getattr(value, f.name) is not None}
        return f"{type(value).__name__}({', '.join(f'{k}={_compact(v, depth + 1)}' for k, v in shown.items())})"
    text = repr(value)
    return text if len(text) <= 2 * _STRING else text[: 2 * _STRING] + "..."


def _more(n: int) -> list[str]:
    return [f"... +{n - _ITEMS} more"] if n > _ITEMS else []


def _full(value: Any) -> str:
    """`value` whole: a string as it is (its lines kept), anything else pretty-printed."""
    if isinstance(value, str):
        return value
    return pprint.pformat(value, width=100, sort_dicts=False)


# -- tier flags and the saver ------------------------------------------------------------


def tier_flags(p: argparse.ArgumentParser) -> None:
    """The options naming the tiers (default: the environment)."""
    g = p.add_argument_group(
        "tiers",
        f"default: the environment (`langgraph-durable --help` lists it, and {ENV_SIGNING_KEY} for signed "
        "stores); '' switches a tier off",
    )
    for kind in KINDS:
        default = f"${kind.env}, else {DEFAULT_SQLITE_PATH}" if kind is SQLITE else f"${kind.env}"
        off = "" if kind is SQLITE else ", or '' for none"
        g.add_argument(
            kind.flag,
            metavar="URL" if kind.schemes else "PATH",
            default=None,
            help=f"{kind.what}{off} (default {default})",
        )
    g.add_argument(
        "--archive",
        metavar="URL",
        default=None,
        help=f"s3://BUCKET/PREFIX of the archive, or '' for none (default ${ENV_ARCHIVE_URL}); endpoint and "
        "credentials from the AWS_* variables",
    )
    g.add_argument(
        "--archive-key-fingerprint",
        metavar="FINGERPRINT",
        default=None,
        help="the full fingerprint of the store's key (hmac-sha256:<64 hex digits>, as `doctor` printed it), "
        "to rebuild a store that lost every hot tier from its archive: the key the archive keeps is taken on "
        f"this word alone (default ${ENV_ARCHIVE_KEY_FINGERPRINT})",
    )
    g.add_argument(
        "--serde",
        metavar="MODULE:ATTR",
        default=None,
        help="the application's serializer, for a store it wrote with its own (an EncryptedSerializer, say): "
        "a serializer object, or a function returning one, importable as MODULE:ATTR "
        f"(default ${ENV_SERDE}; without it, records another serializer wrote are reported, never moved)",
    )
    g.add_argument(
        "--redis-key-prefix",
        metavar="PREFIX",
        default=None,
        help=f"prefix of the saver's Redis keys (default ${ENV_REDIS_KEY_PREFIX}, else {DEFAULT_KEY_PREFIX!r})",
    )


def open_saver(args: argparse.Namespace, *, rebuilds: bool = False, **options: Any) -> DurableSaver:
    """The saver the tier flags and the environment name, set up (an
    unreachable tier fails here, before any output).

    Every command but `rebuilds` ones (``import``, which encodes the values
    it reads) works on records, ids and checksums, never writing a decoded
    value back: a class of the application this process cannot import is
    read as its stored data, as LangGraph would hand it back, so showing,
    pinning, pruning, repairing, archiving and restoring need none of the
    application's classes."""
    if options.get("read_only"):
        missing = _missing_local_store(args)
        if missing is not None:
            raise no_store_at(missing)  # before loading the saver: a wrong path answers at once
    saver = demo.saver_from_args(args, **options)
    if not rebuilds:
        saver._codec.plain_when_unbuildable = True
    try:
        saver.setup()
    except BaseException:
        saver.close()
        raise
    return saver


def _missing_local_store(args: argparse.Namespace) -> str | None:
    """The local file a command that only looks would read, if it is not
    there and no shared tier is named (the flags, else the environment, as
    `demo.saver_from_args` takes them): what the read-only saver refuses
    with `no_store_at`, told without loading it."""

    def named(flag: str, env: str, default: str | None = None) -> str | None:
        value = getattr(args, flag, None)
        return (value or None) if value is not None else (os.environ.get(env, default or "") or None)

    sqlite = named("sqlite", SQLITE.env, DEFAULT_SQLITE_PATH)
    if sqlite is None or sqlite == ":memory:" or named("redis", REDIS.env) or named("postgres", POSTGRES.env):
        return None
    return None if os.path.exists(sqlite) else sqlite


# -- inspection: threads, history, show --------------------------------------------------


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
    out.document({"threads": found, "size": browse.SIZE_MEANING})
    t = table(
        "thread", "namespaces", ("checkpoints", "right"), ("last step", "right"), "interrupt", ("age", "right"),
        ("size", "right"),
    )  # fmt: skip
    for s in found:
        t.add_row(
            s.thread_id,
            ", ".join(dict.fromkeys(_ns_label(ns) for ns in s.namespaces)) or "-",
            str(s.checkpoints),
            "-" if s.last_step is None else str(s.last_step),
            "yes" if s.interrupted else "-",
            _age(s.age_seconds),
            _bytes(s.size_bytes),
        )
    if found:
        out.table(t)
    out.line(f"{len(found)} thread(s), {_bytes(sum(s.size_bytes for s in found))} serialized")
    return EXIT_OK


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
            *([_ns_label(s.checkpoint_ns)] if with_ns else []),
            "-" if s.step is None else str(s.step),
            s.source or "-",
            str(s.pending_writes),
            interrupts,
            _age(browse.age_seconds(s.ts)),
        )
    out.table(t)
    out.line(f"{len(found)} checkpoint(s), newest first")
    return EXIT_OK


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
        f"({_age(browse.age_seconds(s.ts))} ago), parent {s.parent_checkpoint_id or '-'}"
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
                out.line("\n".join("    " + line for line in _full(value).splitlines()))
        elif rows:
            t = table(*columns)
            for names, value in rows:
                shown = [n[:8] if col == "task" else n for col, n in zip(columns, names)]
                t.add_row(*shown, preview(value))
            out.table(t)
    if not args.full:
        out.line(f"\n(long values are shortened to {PREVIEW_CHARS} characters; --full prints them whole)")
    return EXIT_OK


# -- integrity: verify, repair, quarantine -------------------------------------------------


def _scan(args: argparse.Namespace, out: Output, *, repair: bool) -> int:
    verb = "repairing" if repair else "verifying"
    with open_saver(args, **STRICT, read_only=not repair) as saver:
        out.note(f"{verb} tiers {' -> '.join(saver.tier_names)}")
        run = saver.repair if repair else saver.verify
        with out.progress(verb, unit="threads") as progress:
            report = run(args.thread, progress=progress)
        tiers = saver.tier_names
        embedded = saver._holds_embedded_history()
    code = EXIT_FINDINGS if (report.unrestorable if repair else report.bad or report.missing) else EXIT_OK
    if report.archive is not None and not report.archive.ok:
        code = EXIT_FINDINGS
    out.document({"tiers": tiers, **browse.jsonable(report)})
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


# -- import, prune ------------------------------------------------------------------------


def _import(args: argparse.Namespace, out: Output) -> int:
    allow = [importing.parse_allow(text) for text in args.allow]
    with importing.open_source(args.source) as source, open_saver(args, rebuilds=True, **STRICT) as saver:
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


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def _duration(text: str) -> float:
    """Seconds, from ``90``, ``90s``, ``15m``, ``12h``, ``7d`` or ``2w``."""
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use e.g. 90s, 15m, 12h, 7d or 2w") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be above 0, got {text!r}")
    return seconds


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


def _prune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-last", type=_at_least(1), default=None, help="keep the newest N checkpoints per namespace")
    p.add_argument("--keep-for", type=_duration, default=None, help="keep checkpoints younger than this (e.g. 7d, 12h)")
    p.add_argument(
        "--delete-idle-after",
        type=_duration,
        default=None,
        help="delete whole threads whose newest checkpoint is older than this (e.g. 30d)",
    )
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")


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
    if args.action != "purge" and (args.older_than is not None or args.dry_run):
        args.parser.error("--older-than and --dry-run are for `quarantine purge`.")
    if args.action != "restore" and (args.ids or args.all):
        args.parser.error(f"`quarantine {args.action}` takes neither ids nor --all (they are for restore).")
    if args.action == "purge" and args.older_than is None:
        args.parser.error("`quarantine purge` needs --older-than DURATION (e.g. 30d, 12h).")
    # list only looks (a read-only saver: it never purges, restores or repairs).
    with open_saver(args, **STRICT, read_only=args.action == "list") as saver:
        if args.action == "list":
            return _quarantine_list(saver, args, out)
        if args.action == "purge":
            return _quarantine_purge(saver, args, out)
        if args.all:
            if args.ids:
                args.parser.error("give quarantine ids or --all, not both.")
            found = saver.quarantined(args.thread)
            outcomes = saver.restore_outcomes(found)
            chosen: list[Any] = [q for q, (verdict, _) in zip(found, outcomes) if verdict != "refuse"]
        elif args.ids:
            chosen = list(args.ids)
        else:
            args.parser.error("name the quarantined records to restore (ids from `quarantine list`), or pass --all.")
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
            _ns_label(q.checkpoint_ns),
            q.key,
            q.reason,
            _age(max(0.0, time.time() - q.detected_at)),
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
        out.line(f"{verb}  {q.tier}:{q.id}  thread {q.thread_id!r} {q.key} ({_age(time.time() - q.detected_at)} old)")
    by_tier = {name: sum(q.tier == name for q in purged) for name in saver.tier_names}
    counts = ", ".join(f"{n} in {name}" for name, n in by_tier.items())
    out.line(f"{len(purged)} quarantined record(s) {'would be ' if args.dry_run else ''}purged ({counts})")
    return EXIT_OK


# -- the archive: archive, restore, pin, unpin, pins ------------------------------------


def _point_in_time(text: str) -> float:
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


def _archive(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args) as saver:
        saver._archiver()  # no archive configured: the one-line ConfigError, before any work
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


def _restore(args: argparse.Namespace, out: Output) -> int:
    if bool(args.threads) == bool(args.all):
        args.parser.error("name the threads to restore, or pass --all (not both).")
    with open_saver(args) as saver:
        saver._archiver()
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


def _promote(args: argparse.Namespace, out: Output) -> int:
    saver = demo.saver_from_args(args, **STRICT)  # not set up first: setup refuses the file until promoted
    try:
        saver._codec.plain_when_unbuildable = True
        out.note(f"copying {saver.sqlite_path} into tiers {' -> '.join(saver.tier_names[1:])}")
        with out.progress("copying", unit="threads") as progress:
            threads = saver.promote_local(progress=progress)
    finally:
        saver.close()
    out.document({"threads": threads})
    out.line(f"{threads} thread(s) copied: start the app with these tiers")
    return EXIT_OK


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


def _unpin(args: argparse.Namespace, out: Output) -> int:
    configurable = {"thread_id": args.thread, "checkpoint_ns": args.ns, "checkpoint_id": args.checkpoint}
    with open_saver(args) as saver:
        removed = saver.unpin({"configurable": configurable})
    out.document({"removed": removed})
    if not removed:
        return out.fail(f"thread {args.thread!r} has no pin on checkpoint {args.checkpoint!r}", EXIT_FINDINGS)
    out.line(f"unpinned  {args.thread} {args.checkpoint}")
    return EXIT_OK


def _pins(args: argparse.Namespace, out: Output) -> int:
    with open_saver(args, **LOOK) as saver:
        found = saver.pins(args.thread)
    out.document({"pins": [_pin_dict(p) for p in found]})
    t = table("checkpoint", "namespace", "label", ("pinned", "right"))
    for p in found:
        t.add_row(p.checkpoint_id, _ns_label(p.checkpoint_ns), p.label or "-", _age(time.time() - p.pinned_at))
    if found:
        out.table(t)
    out.line(f"{len(found)} pin(s)")
    return EXIT_OK


# -- operations: doctor, actions ---------------------------------------------------------


def _doctor(args: argparse.Namespace, out: Output) -> int:
    """Each tier's health (`DurableSaver.health`): exit 1 if one is down."""
    # The doctor looks: it writes nothing and does not ship the backlog at exit.
    with demo.saver_from_args(args, **LOOK, connect_timeout=args.timeout) as saver:
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
        t.add_row(key, state, "yes" if e.idempotent else "no", e.resolved_by or "-", _age(age), result)
    if entries:
        out.table(t)
    out.line(f"{len(entries)} action(s), {sum(e.escalated() for e in entries.values())} escalated")
    return EXIT_OK


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


# -- the demo --------------------------------------------------------------------------------


def _demo(args: argparse.Namespace, out: Output) -> int:
    # With --json the story goes to stderr; stdout carries the result.
    stream = sys.stderr if out.json else sys.stdout
    result = demo.run(args, stream, progress=lambda label, unit: progress_bar(label, unit=unit, file=stream))
    out.document(result)
    return EXIT_OK if result.ok else EXIT_FINDINGS


def _demo_worker(args: argparse.Namespace, out: Output) -> int:
    return demo.worker(args)


# -- the command table ---------------------------------------------------------------------


def _at_least(n: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < n:
            raise argparse.ArgumentTypeError(f"must be at least {n}, got {value}")
        return value

    return parse


def _json_value(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}): {text!r}") from None
    return text


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=_at_least(2), default=12, help="super-steps in the demo graph (default 12)")
    p.add_argument(
        "--kill-after", type=int, default=5, help="kill the worker once this step is checkpointed (default 5)"
    )
    p.add_argument("--thread", default=None, help="thread id (default: a new one)")


def _scan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")


def _threads_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archived", action="store_true", help="list the threads that live only in the archive")


def _archive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--idle-after",
        type=_duration,
        required=True,
        help="archive threads whose newest checkpoint is older than this (e.g. 30d, 12h)",
    )
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    p.add_argument("--dry-run", action="store_true", help="list what would be archived; move nothing")


def _restore_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("threads", nargs="*", metavar="THREAD", help="the threads to restore from the archive")
    p.add_argument("--all", action="store_true", help="every thread the archive holds (after losing the hot tiers)")
    p.add_argument(
        "--until",
        type=_point_in_time,
        default=None,
        metavar="TIME",
        help="as of this time (ISO 8601, e.g. 2026-11-27T18:00:00Z, or seconds since the epoch): segments the "
        "replica wrote later are left out",
    )


def _pin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("checkpoint", nargs="?", default=None, help="a checkpoint id from `history` (default: the latest)")
    p.add_argument("--ns", default="", help="namespace of the checkpoint (default: the root graph)")
    p.add_argument("--label", default="", help="why it is pinned (shown by `pins`)")


def _unpin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("checkpoint", help="the pinned checkpoint's id, as `pins` lists it")
    p.add_argument("--ns", default="", help="namespace of the checkpoint (default: the root graph)")


def _pins_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")


def _history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("thread", help="the thread id")
    p.add_argument("--ns", default=None, help="only this namespace ('' for the root graph; default: every namespace)")
    p.add_argument("--limit", type=_at_least(1), default=None, help="at most this many checkpoints (the newest)")


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


def _doctor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=5.0, help="seconds before a tier counts as down (default 5)")


def _actions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thread", required=True, help="the thread whose ledger to list")


def _resolve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thread", required=True, help="the thread the action belongs to")
    p.add_argument("--key", required=True, help="the action's key, as `actions` lists it")
    answer = p.add_mutually_exclusive_group(required=True)
    answer.add_argument("--done", action="store_true", help="it happened: later runs must not repeat it")
    answer.add_argument("--not-done", action="store_true", help="it did not happen: the next run may do it")
    p.add_argument(
        "--result",
        metavar="JSON",
        type=_json_value,
        default=None,
        help="with --done: what the action returned, as JSON (later runs get it as `act.result`)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="change an action that is already answered (confirmed done, or answered by an operator)",
    )


def _quarantine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("list", "restore", "purge"),
        help="list the quarantined copies (and what restore would do with each), restore some, or purge old ones",
    )
    p.add_argument("ids", nargs="*", help="with restore: ids as `list` prints them (tier:id)")
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    p.add_argument("--all", action="store_true", help="with restore: every record that can be put back (of --thread)")
    p.add_argument(
        "--older-than",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="with purge: delete for good the copies quarantined longer ago than this (e.g. 30d, 12h), in every tier",
    )
    p.add_argument("--dry-run", action="store_true", help="with purge: list what would be purged; delete nothing")


def _worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thread", required=True, help="thread id")
    p.add_argument("--steps", type=int, required=True, help="super-steps")
    p.add_argument("--executions", required=True, help="file the worker logs each execution to")
    p.add_argument("--resume", action="store_true", help="resume the thread instead of starting it")


@dataclass(frozen=True)
class Command:
    """One subcommand. `arguments` adds its own options; `tier_flags` and
    ``--json`` are added for it (``tiers`` / ``json``). `run(args, out)`
    returns the exit status. An ``internal`` command is left out of --help
    and only parsed when it is the first argument."""

    name: str
    help: str  # its line in `langgraph-durable --help`
    description: str  # its own --help
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Output], int]
    tiers: bool = True
    json: bool = True
    internal: bool = False


COMMANDS: list[Command] = [
    Command(
        "demo",
        "kill a running graph with SIGKILL and resume it from its last checkpoint",
        "Run a small graph in a worker process, kill the worker with SIGKILL in the middle of a step, start a "
        "new worker and watch the thread resume from its last checkpoint, then check that no step was lost. "
        "Uses the tiers the flags or the environment name (default: a local SQLite file). With --json the "
        "narration goes to stderr and the result to stdout.",
        _demo_args,
        _demo,
    ),
    Command(
        "threads",
        "list the threads: namespaces, checkpoints, last step, age, size",
        "One row per thread the tiers hold: its id, its namespaces ((root) and the subgraphs' nodes), number "
        "of checkpoints (all namespaces), last step of the root graph, whether it waits on an interrupt(), "
        f"age of its latest checkpoint and its size. Size: {browse.SIZE_MEANING}. Reads every checkpoint of "
        "every thread.",
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
    Command(
        "verify",
        "check every record copy in every tier; exit 1 if any is bad",
        "Check the checksum of every copy of every record in every tier (one thread or all), and compare "
        "the shared tiers: a record a shared tier lacks while another holds it is missing. Changes nothing; "
        "exit 1 if a copy is bad or missing. Needs every tier.",
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
    # Internal: the process the demo kills.
    Command("_demo-worker", "", "", _worker_args, _demo_worker, json=False, internal=True),
]


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line on stderr (exit 2),
    naming the command and, for a mistyped option or command, the likely one:
    ``langgraph-durable doctor: unknown option --postgress (did you mean
    --postgres?)``. With ``--json`` on the command line, the envelope (its
    ``error`` of type ``usage``) goes to stdout as well."""

    argv: Sequence[str] = ()  # the command line, set by `parse`

    def error(self, message: str) -> NoReturn:
        choice = re.match(r"argument COMMAND: invalid choice: '(.*?)'", message)
        if choice:
            message = _unknown("command", choice[1], _public_commands())
        if "(did you mean " not in message:
            message += f" (see `{self.prog} --help`)"
        print(f"{self.prog}: {message}", file=sys.stderr)
        if "--json" in self.argv:
            command = self.prog.removeprefix("langgraph-durable").strip()
            error = {"type": "usage", "message": message, "exit_status": EXIT_USAGE}
            _write_json(envelope(command, None, error=error))
        self.exit(EXIT_USAGE)


def _public_commands() -> list[str]:
    return [c.name for c in COMMANDS if not c.internal]


def _unknown(what: str, given: str, known: Sequence[str]) -> str:
    """``unknown option --postgress (did you mean --postgres?)``."""
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return f"unknown {what} {given}" + (f" (did you mean {close[0]}?)" if close else "")


def _unknown_option(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """The first option in `argv` (after the command) that `parser` does not
    take, as `_unknown` words it; None if there is none. Checked before
    parsing, so that a typo is what is reported, not a required option it
    hides."""
    known = [o for action in parser._actions for o in action.option_strings]
    # Arguments given without a flag (`history THREAD`): a flag spelled like
    # one is named as that, not as the nearest other flag.
    positional = {a.dest: a.metavar or a.dest.upper() for a in parser._actions if not a.option_strings}
    for token in argv:
        if token == "--":
            break
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d+(\.\d*)?|-\.\d+", token):
            continue
        name = token.split("=", 1)[0]
        if name in known or (name.startswith("--") and any(o.startswith(name) for o in known)):
            continue  # exact, or an abbreviation argparse accepts
        meant = difflib.get_close_matches(name.lstrip("-"), list(positional), n=1, cutoff=0.6)
        if meant:
            usage = f"{parser.prog} {positional[meant[0]]}"
            return f"unknown option {name} (did you mean `{usage}`? {positional[meant[0]]} takes no flag)"
        return _unknown("option", name, [o for o in known if o.startswith("--")] or known)
    return None


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """`argv` parsed (usage errors exit 2, `_Parser`)."""
    argv = list(argv)
    internal = argv[0] if argv and any(c.internal and c.name == argv[0] for c in COMMANDS) else None
    parser = build_parser(internal=internal, argv=argv)
    if argv and argv[0] in parser._subcommands:  # type: ignore[attr-defined]
        sub = parser._subcommands[argv[0]]  # type: ignore[attr-defined]
        unknown = _unknown_option(sub, argv[1:])
        if unknown is not None:
            sub.error(unknown)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's parser, which names the command
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


class _Formatter(argparse.HelpFormatter):
    """Wraps prose; keeps the line breaks of text that has them (the
    environment and exit status tables)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def build_parser(*, internal: str | None = None, argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of every public command (and of the `internal` one, if
    named); `argv` is the command line it is for (its usage errors answer
    in JSON when it has ``--json``)."""
    _Parser.argv = list(argv)
    parser = _Parser(
        prog="langgraph-durable",
        description="Tiered (SQLite -> Redis -> Postgres), checksummed LangGraph checkpoints: inspect, "
        "check, repair and operate the store of a DurableSaver. Every command takes --json (one JSON document "
        "on stdout) and the tier flags --sqlite, --redis, --postgres (default: the environment, below).",
        epilog=f"{ENVIRONMENT_HELP}\n\n{JSON_ENVELOPE_HELP}\n\n{EXIT_CODES_HELP}\n\n"
        "`langgraph-durable COMMAND --help` describes a command.",
        formatter_class=_Formatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"langgraph-durable {__version__}", help="print the version and exit"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subcommands: dict[str, argparse.ArgumentParser] = {}
    for cmd in COMMANDS:
        if cmd.internal and cmd.name != internal:
            continue
        extra: dict[str, Any] = {} if cmd.internal else {"help": cmd.help}
        p = commands.add_parser(
            cmd.name,
            description=cmd.description,
            epilog=SUBCOMMAND_EPILOG,
            formatter_class=_Formatter,
            **extra,
        )
        cmd.arguments(p)
        if cmd.json:
            p.add_argument("--json", action="store_true", help=JSON_HELP)
        if cmd.tiers:
            tier_flags(p)
        p.set_defaults(spec=cmd, parser=p)
        subcommands[cmd.name] = p
    parser._subcommands = subcommands  # type: ignore[attr-defined]
    return parser


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


if __name__ == "__main__":
    sys.exit(main())
