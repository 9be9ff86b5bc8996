"""langgraph-durable: a tiered, checksummed LangGraph checkpoint saver."""

from .errors import (
    ConfigError,
    CorruptCheckpoint,
    DurableError,
    RecordTooLarge,
    ResumeRejected,
    SerializationError,
    TierUnavailable,
)
from .integrity import CorruptionEvent, CorruptionHook
from .saver import DurableSaver

__all__ = [
    "ConfigError",
    "CorruptCheckpoint",
    "CorruptionEvent",
    "CorruptionHook",
    "DurableError",
    "DurableSaver",
    "RecordTooLarge",
    "ResumeRejected",
    "SerializationError",
    "TierUnavailable",
]
