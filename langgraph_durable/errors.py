"""The exceptions langgraph-durable raises.

Everything derives from `DurableError`, so `except DurableError` catches all
of them. Each message says what went wrong *and* what to do about it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "CorruptCheckpoint",
    "DurableError",
    "RecordTooLarge",
    "ResumeRejected",
    "SerializationError",
    "TierUnavailable",
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
    """

    def __init__(self, message: str, *, tier: str) -> None:
        super().__init__(message)
        self.tier = tier


class CorruptCheckpoint(DurableError):
    """A stored record failed its checksum or could not be decoded, and no
    tier holds a good copy of it.

    `key` names the record, `reasons` lists what each tier returned.
    """

    def __init__(self, message: str, *, key: str, reasons: list[str] | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.reasons = reasons or []


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
