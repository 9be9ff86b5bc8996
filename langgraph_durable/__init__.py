"""langgraph-durable: a tiered, checksummed LangGraph checkpoint saver."""

from .errors import (
    ConfigError,
    CorruptCheckpoint,
    DurableError,
    LeaseLost,
    RecordTooLarge,
    ResumeRejected,
    SerializationError,
    ThreadBusy,
    TierUnavailable,
)
from .integrity import CorruptionEvent, CorruptionHook
from .ledger import LedgerEntry, action, durable_action
from .saver import DurableSaver
from .validation import (
    Reject,
    ResumeContext,
    Rewind,
    ValidationOutcome,
    check,
    max_age,
    paths_exist,
    pin_version,
    reject,
    rewind,
)

__all__ = [
    # resume validation and non-resumable actions
    "LedgerEntry",
    "Reject",
    "ResumeContext",
    "Rewind",
    "ValidationOutcome",
    "action",
    "check",
    "durable_action",
    "max_age",
    "paths_exist",
    "pin_version",
    "reject",
    "rewind",
    # saver and errors
    "ConfigError",
    "CorruptCheckpoint",
    "CorruptionEvent",
    "CorruptionHook",
    "DurableError",
    "DurableSaver",
    "LeaseLost",
    "RecordTooLarge",
    "ResumeRejected",
    "SerializationError",
    "ThreadBusy",
    "TierUnavailable",
]
