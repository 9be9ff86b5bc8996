"""langgraph-durable: a tiered, checksummed LangGraph checkpoint saver."""

from .errors import (
    ConfigError,
    CorruptCheckpoint,
    DurableError,
    ResumeRejected,
    SerializationError,
    TierUnavailable,
)
from .saver import DurableSaver

__all__ = [
    "ConfigError",
    "CorruptCheckpoint",
    "DurableError",
    "DurableSaver",
    "ResumeRejected",
    "SerializationError",
    "TierUnavailable",
]
