"""Where a command writes: `Output` (rich tables and lines for people, one
JSON document with ``--json``: the `envelope`), `progress_bar`, the exit
statuses, and the short forms of ages, sizes, namespaces and values."""

from __future__ import annotations

import functools
import json
import os
import pprint
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO, cast

from .. import browse
from ..errors import DurableError, as_cli_flags, printable

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod
    from rich.table import Table

# Exit status, documented in --help.
EXIT_OK = 0


# verify found bad copies (or unreachable state versions), repair could not
# restore some, doctor found a tier down, resolve-action refused,
# history/show found nothing, migrate left a thread, the demo failed
EXIT_FINDINGS = 1


EXIT_USAGE = 2  # bad command line (argparse exits with 2 itself)


EXIT_CANNOT_RUN = 3  # a tier is unreachable or the configuration is wrong


EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


def make_console(file: TextIO) -> Console:
    """A rich console on `file`. Not a terminal (a pipe, a log, CI): no ANSI
    codes, and wide enough that lines are not folded at 80 columns. Strings
    are printed as they are (no markup, emoji codes or highlighting): thread
    ids and values may contain brackets and colons."""
    from rich.console import Console  # loaded when a command writes, not for --help

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
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
    from .._version import __version__  # read from the installed distribution: only for JSON output

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


def write_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()


class Output:
    """Where a command writes. Without ``--json``: lines and rich tables on
    stdout. With it: nothing on stdout but the one JSON document
    (`document`). Progress and notes go to stderr either way."""

    def __init__(self, json_mode: bool = False, command: str = "") -> None:
        self.json = json_mode
        self.command = command
        self._report: Any = None
        self._summary = ""  # the last line of human output: the message of a failing envelope
        self._sent = False

    # Made when first written to: a command that fails before writing
    # anything (a tier down, a wrong setting) says so without loading rich.
    @functools.cached_property
    def out(self) -> Console:
        """The console of human output (stdout)."""
        return make_console(sys.stdout)

    @functools.cached_property
    def err(self) -> Console:
        """The console of notes (stderr)."""
        return make_console(sys.stderr)

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
            write_json(envelope(self.command, self._report))
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
            write_json(envelope(self.command, self._report, error=error))
        return code

    def progress(
        self, label: str, *, unit: str = "", transient: bool = False
    ) -> AbstractContextManager[Callable[[int, int], None]]:
        """`progress_bar` on stderr."""
        return progress_bar(label, unit=unit, file=sys.stderr, transient=transient)


@functools.cache
def _printable_table() -> type[Table]:
    """A rich table whose text cells are shown with control characters
    escaped (rich loads when a command writes a table, not for --help)."""
    from rich.table import Table

    class PrintableTable(Table):
        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*(printable(r) if isinstance(r, str) else r for r in renderables), **kwargs)

    return PrintableTable


def table(*columns: str | tuple[str, str]) -> Table:
    """A borderless table; a column given as ``(name, "right")`` is right-aligned.
    Text cells are escaped (`printable`)."""
    t = _printable_table()(box=None, pad_edge=False, show_edge=False, header_style="bold", highlight=False)
    for column in columns:
        name, justify = column if isinstance(column, tuple) else (column, "left")
        t.add_column(name, justify=cast("JustifyMethod", justify))
    return t


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size, limit in (("s", 1, 90), ("m", 60, 90 * 60), ("h", 3600, 36 * 3600)):
        if seconds < limit:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds / 86400:.0f}d"


def size_text(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def ns_label(ns: str) -> str:
    """A namespace as people read it: the root graph, or the path of subgraph nodes."""
    if not ns:
        return "(root)"
    return "|".join(part.split(":", 1)[0] for part in ns.split("|"))


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


def whole(value: Any) -> str:
    """`value` whole: a string as it is (its lines kept), anything else pretty-printed."""
    if isinstance(value, str):
        return value
    return pprint.pformat(value, width=100, sort_dicts=False)
