"""langgraph-durable: a tiered, checksummed LangGraph checkpoint saver.

The public names below are imported when first used (PEP 562), so the
command line's ``--help`` and ``--version`` do not load LangGraph and the
database drivers: ``from langgraph_durable import DurableSaver`` works as
usual. ``__version__`` too: reading it from the installed distribution
loads `importlib.metadata`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._version import __version__
    from .engine.imports.sources import ImportConflict, ImportReport
    from .errors import (
        ConfigError,
        CorruptCheckpoint,
        DurableError,
        LeaseLost,
        MigrationFailed,
        NewerStateVersion,
        RecordTooLarge,
        ResumeRejected,
        SerializationError,
        ThreadArchived,
        ThreadBusy,
        TierUnavailable,
        UndecodableRecord,
    )
    from .integrity import CorruptionEvent, CorruptionHook
    from .ledger import LedgerEntry, action, apin_here, durable_action, pin_here
    from .metrics import CorruptCopy, MetricsHook, OpenTelemetryMetrics, PlainData, TierCall, TierStats
    from .migrations import Migration, MigrationReport, Migrations, ThreadMigration
    from .model.pins import Pin
    from .option_groups import Archive, Integrity, Leases, Memory, Tiers
    from .options import register_tier_kind
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

# Each public name and the module that defines it.
_EXPORTS = {
    "__version__": "._version",
    "ImportConflict": ".engine.imports.sources",
    "ImportReport": ".engine.imports.sources",
    "ConfigError": ".errors",
    "CorruptCheckpoint": ".errors",
    "DurableError": ".errors",
    "LeaseLost": ".errors",
    "MigrationFailed": ".errors",
    "NewerStateVersion": ".errors",
    "RecordTooLarge": ".errors",
    "ResumeRejected": ".errors",
    "SerializationError": ".errors",
    "ThreadArchived": ".errors",
    "ThreadBusy": ".errors",
    "TierUnavailable": ".errors",
    "UndecodableRecord": ".errors",
    "CorruptionEvent": ".integrity",
    "CorruptionHook": ".integrity",
    "LedgerEntry": ".ledger",
    "action": ".ledger",
    "apin_here": ".ledger",
    "durable_action": ".ledger",
    "pin_here": ".ledger",
    "CorruptCopy": ".metrics",
    "MetricsHook": ".metrics",
    "OpenTelemetryMetrics": ".metrics",
    "PlainData": ".metrics",
    "TierCall": ".metrics",
    "TierStats": ".metrics",
    "Migration": ".migrations",
    "Migrations": ".migrations",
    "MigrationReport": ".migrations",
    "ThreadMigration": ".migrations",
    "Pin": ".model.pins",
    "Archive": ".option_groups",
    "Integrity": ".option_groups",
    "Leases": ".option_groups",
    "Memory": ".option_groups",
    "Tiers": ".option_groups",
    "register_tier_kind": ".options",
    "RetentionPolicy": ".retention",
    "RetentionReport": ".retention",
    "DurableSaver": ".saver",
    "Reject": ".validation",
    "ResumeContext": ".validation",
    "Rewind": ".validation",
    "ValidationOutcome": ".validation",
    "check": ".validation",
    "max_age": ".validation",
    "paths_exist": ".validation",
    "pin_version": ".validation",
    "reject": ".validation",
    "rewind": ".validation",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


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
    # state versions
    "Migration",
    "Migrations",
    "MigrationFailed",
    "MigrationReport",
    "ThreadMigration",
    "NewerStateVersion",
    # saver and errors
    "ConfigError",
    "CorruptCheckpoint",
    "CorruptionEvent",
    "CorruptionHook",
    "DurableError",
    "DurableSaver",
    # the saver's option groups
    "Archive",
    "Integrity",
    "Leases",
    "Memory",
    "Tiers",
    "register_tier_kind",
    "ImportConflict",
    "ImportReport",
    # metrics
    "CorruptCopy",
    "MetricsHook",
    "OpenTelemetryMetrics",
    "PlainData",
    "TierCall",
    "TierStats",
    "RetentionPolicy",
    "RetentionReport",
    "LeaseLost",
    "RecordTooLarge",
    "ResumeRejected",
    "SerializationError",
    "ThreadArchived",
    "ThreadBusy",
    "TierUnavailable",
    "UndecodableRecord",
]
