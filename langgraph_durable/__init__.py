"""langgraph-durable: a tiered, checksummed LangGraph checkpoint saver."""

from ._version import __version__
from .engine.importing import ImportConflict, ImportReport
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
    UndecodableRecord,
)
from .integrity import CorruptionEvent, CorruptionHook
from .ledger import LedgerEntry, action, apin_here, durable_action, pin_here
from .metrics import CorruptCopy, MetricsHook, OpenTelemetryMetrics, TierCall, TierStats
from .model.pins import Pin
from .retention import RetentionPolicy, RetentionReport
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
    "__version__",
    # resume validation and non-resumable actions
    "LedgerEntry",
    "Reject",
    "ResumeContext",
    "Rewind",
    "ValidationOutcome",
    "action",
    "apin_here",
    "check",
    "durable_action",
    "max_age",
    "paths_exist",
    "Pin",
    "pin_here",
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
    "ImportConflict",
    "ImportReport",
    # metrics
    "CorruptCopy",
    "MetricsHook",
    "OpenTelemetryMetrics",
    "TierCall",
    "TierStats",
    "RetentionPolicy",
    "RetentionReport",
    "LeaseLost",
    "RecordTooLarge",
    "ResumeRejected",
    "SerializationError",
    "ThreadBusy",
    "TierUnavailable",
    "UndecodableRecord",
]
