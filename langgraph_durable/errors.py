"""The exceptions langgraph-durable raises.

Everything derives from `DurableError`, so `except DurableError` catches all
of them. Each message says what went wrong *and* what to do about it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ConfigError",
    "CorruptCheckpoint",
    "DurableError",
    "LeaseLost",
    "MigrationFailed",
    "NewerStateVersion",
    "RecordTooLarge",
    "ResumeRejected",
    "SerializationError",
    "ThreadArchived",
    "ThreadBusy",
    "TierUnavailable",
    "UndecodableRecord",
    "as_cli_flags",
    "printable",
]


class DurableError(Exception):
    """Root of every error raised by langgraph-durable."""


class ConfigError(DurableError, ValueError):
    """The saver was configured or called with something it cannot use.

    Examples: an unknown URL scheme, a config without `thread_id`. Nothing
    has been written when this is raised.
    """


class SerializationError(DurableError, TypeError):
    """A value in the state could not be serialized.

    `channel` names the state key (or pending-write channel) that held it.
    Raised before any tier is touched: nothing has been written.
    """

    def __init__(self, message: str, *, channel: str | None = None) -> None:
        super().__init__(message)
        self.channel = channel


class RecordTooLarge(SerializationError):
    """A state value, pending write or checkpoint serializes to more than the
    saver's ``max_record_bytes``. Nothing has been written."""

    def __init__(self, message: str, *, channel: str | None = None, size: int = 0) -> None:
        super().__init__(message, channel=channel)
        self.size = size


class TierUnavailable(DurableError, ConnectionError):
    """A storage tier (sqlite, redis or postgres) could not be reached.

    `tier` names it. When a write fails this way the saver has removed the
    partial checkpoint from the tiers that did accept it, so a retry is safe.
    `skipped`: the tier was not called at all, its circuit breaker being
    open after earlier failures.

    `tiers` names every tier that failed the call, `tier` the first of them:
    a call that no tier could answer (every shared tier down) raises one
    error naming them all (`TierUnavailable.every`).
    """

    def __init__(self, message: str, *, tier: str, skipped: bool = False, tiers: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.tier = tier
        self.tiers: list[str] = list(tiers) or [tier]
        self.skipped = skipped

    def detached(self) -> TierUnavailable:
        """This error without its traceback or the error it was raised from:
        what a call keeps while it tries the other tiers (for `every`).
        Those hold the frames of the failed call and so the run's config,
        and a run's end is seen when its config is let go (its lease is
        given back then), not at the next garbage collection."""
        return TierUnavailable(str(self), tier=self.tier, skipped=self.skipped, tiers=self.tiers)

    @classmethod
    def every(cls, errors: Sequence[BaseException]) -> BaseException:
        """The one error to raise when each of `errors` (in tier order) failed
        the same call: the first if there is one, or if one is not a
        `TierUnavailable` (a tier answered and refused); else one
        `TierUnavailable` naming every tier and each one's reason."""
        if len(errors) == 1 or not all(isinstance(e, TierUnavailable) for e in errors):
            return errors[0]
        down = [e for e in errors if isinstance(e, TierUnavailable)]
        names = list(dict.fromkeys(n for e in down for n in e.tiers))
        if len(names) == 1:
            return down[0]
        reasons = "; ".join(str(e).rstrip(".") for e in down)
        return cls(
            f"no tier could be reached ({', '.join(names)}): {reasons}.",
            tier=names[0],
            skipped=all(e.skipped for e in down),
            tiers=names,
        )


class CorruptCheckpoint(DurableError):
    """A stored record failed its checksum or could not be decoded, and no
    tier holds a good copy of it.

    `key` names the record, `reasons` lists what each tier returned.
    """

    def __init__(self, message: str, *, key: str, reasons: list[str] | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.reasons = reasons or []


class UndecodableRecord(DurableError):
    """A record is intact (its checksum or signature verifies) but this
    reader cannot turn it back into the value that was stored: it was written
    with another serializer (an `EncryptedSerializer` whose key this reader
    lacks, pickle), or it holds a type the reader's msgpack allowlist blocks,
    or a class this process cannot import or construct (renamed, moved, a
    package this process lacks).

    This is the reader's configuration, not damage: nothing is quarantined,
    withdrawn or repaired, and the value is never replaced by a plain dict.
    `type_tag` is the serializer's tag of the record; `blocked` names the
    ``module.Class`` types the allowlist refused, if that was the cause, and
    `unbuildable` those this process could not import or construct.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        type_tag: str,
        blocked: list[str] | None = None,
        unbuildable: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.type_tag = type_tag
        self.blocked = blocked or []
        self.unbuildable = unbuildable or []


class ResumeRejected(DurableError):
    """A thread may not continue from its checkpoint: a resume validator
    rejected it, or a non-resumable action it started was never confirmed.

    Raised from ``invoke`` / ``ainvoke`` / ``stream`` before anything is
    written. `reason` says why, `validator` names who decided, `checkpoint`
    is the checkpoint tuple the run would have resumed from and `actions` the
    unconfirmed action keys, if that is the reason.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        checkpoint_id: str | None = None,
        checkpoint: Any = None,
        validator: str | None = None,
        actions: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.checkpoint_id = checkpoint_id
        self.checkpoint = checkpoint
        self.validator = validator
        self.actions = actions or []


class NewerStateVersion(ResumeRejected):
    """The thread was written by a newer version of the graph's state than
    this replica runs (`Migrations`): during a rolling update, a replica of
    the old version met a thread the new one already migrated or wrote.

    Nothing was run or written. Retry the request on a replica of the newer
    version (`version` says which), or let ``Migrations(on_newer="wait")``
    wait for one to take the thread. `taken` says whether one did while
    this replica waited.
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str,
        version: int,
        running: int,
        checkpoint_id: str | None = None,
        checkpoint: Any = None,
        taken: bool = False,
    ) -> None:
        super().__init__(
            message,
            reason=f"written by state version {version}, this replica runs {running}",
            checkpoint_id=checkpoint_id,
            checkpoint=checkpoint,
            validator="state_version",
        )
        self.thread_id = thread_id
        self.version = version
        self.running = running
        self.taken = taken


class MigrationFailed(DurableError):
    """A thread could not be brought up to the running state version: a
    migration step raised, or none is registered from its version.

    Nothing was written: the thread stays as it was, at `from_version`.
    `thread_id`, `checkpoint_id`, `step` (the step's name; None when it is
    missing) and ``__cause__`` (what the step raised) say where.
    """

    def __init__(
        self, message: str, *, thread_id: str, checkpoint_id: str, from_version: int, step: str | None
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.from_version = from_version
        self.step = step


# -- one writer per thread (see lease.py) -----------------------------------------------


class ThreadBusy(DurableError):
    """Another writer (another process or saver) holds the thread's writer
    lease, so this one may not run the thread now.

    Raised from ``invoke`` / ``ainvoke`` / ``stream`` (or a direct ``put``)
    before anything is written. `holder` names the writer, `expires_in` says
    how many seconds its lease has left unless it writes again. Wait and
    retry, use ``Leases(on_busy="wait")``, or have the holder ``release_thread()``.
    """

    def __init__(self, message: str, *, thread_id: str, holder: str, token: int, expires_in: float) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.holder = holder
        self.token = token
        self.expires_in = expires_in


class ThreadArchived(DurableError):
    """The thread lives in the archive (another saver of the store moved it
    there), and this saver has no archive to bring it back from.

    Raised by the read a run starts with (``invoke``, ``get_state``,
    ``get_state_history``, ``list``) before anything is written, rather
    than taking the thread for an empty one and starting a second history
    on its id. `archive` names the archive the store uses (``bucket/prefix``),
    when the store records it: give this saver the same ``archive=``.
    """

    def __init__(self, message: str, *, thread_id: str, archive: str | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.archive = archive


class LeaseLost(DurableError):
    """This run's writer lease on the thread was taken over by another writer
    (after it expired) or released, so the run may not write any more.

    The write that raised it was not stored in the authoritative tier (nor
    kept in the nearer ones). Run the thread again to continue from its latest
    checkpoint. `token` is the run's fencing token, `holder` the new holder
    if known.
    """

    def __init__(self, message: str, *, thread_id: str, token: int | None = None, holder: str | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.token = token
        self.holder = holder


# -- text an operator reads ------------------------------------------------------------

# A keyword of `DurableSaver` that the command line spells as a flag: messages
# name the keyword (``postgres=``), the CLI shows them with the flag instead.
_KEYWORD = re.compile(r"(?<![\w?&.=/:-])(sqlite|redis|postgres|archive|Archive\(key_fingerprint)=\)?(?=(['\"])?)")
_REPEATED_FLAG = re.compile(r"(--(?:sqlite|redis|postgres|archive)), \1\b")


def no_store_at(path: str) -> ConfigError:
    """What a read-only saver, or a command that only looks, says of a
    local file that is not there (it never creates one)."""
    return ConfigError(
        f"no store at {path!r}: a read-only saver (and every command that only looks) never creates one. "
        "Check the path (sqlite=, --sqlite, LANGGRAPH_DURABLE_SQLITE) and the directory you run it from."
    )


def no_archive() -> ConfigError:
    """What an archive operation says on a saver without an archive."""
    return ConfigError(
        "this saver has no archive: pass archive='s3://BUCKET/PREFIX' (or set "
        "LANGGRAPH_DURABLE_ARCHIVE_URL, or --archive on the command line)."
    )


def as_cli_flags(message: str) -> str:
    """`message` as a command-line user reads it: the saver's keywords
    (``postgres=``, ``redis=``, ``sqlite=``, ``archive=``,
    ``Archive(key_fingerprint=)``) named by their flags (``--postgres``...).
    The Python API's messages keep the keywords; the CLI renders every
    error it prints through this."""

    def flag(m: re.Match[str]) -> str:
        name = "archive-key-fingerprint" if m.group(1).startswith("Archive(") else m.group(1)
        return f"--{name}" + (" " if m.group(2) else "")

    return _REPEATED_FLAG.sub(r"\1", _KEYWORD.sub(flag, message))


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every control and format character escaped (``\\x1b``,
    ``\\u202e``), so an id or value can neither drive the terminal (clear it,
    set its title, plant a hyperlink) nor reorder what is shown. `newlines`
    keeps line breaks, for text made of several lines."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or (newlines and ch == "\n"):
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


class _PrintableArgs(logging.Filter):
    """Escapes the text arguments of this package's log records: they carry
    thread ids, namespaces and keys that anyone who can call the saver chose."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        return True


logging.getLogger("langgraph_durable").addFilter(_PrintableArgs())
