"""Pinned recovery points: checkpoints nothing removes. No I/O here.

``saver.pin(config, label=...)`` keeps a checkpoint (and whatever it is
rebuilt from) through retention, ``prune``, ``delete_for_runs`` and
archiving; resuming from it is LangGraph's time travel
(``graph.invoke(None, pin.config)``). A pin is stored as an entry of the
thread's ledger under a reserved key (`KEY_PREFIX`), so it is sealed,
written to every tier, reconciled across them and shipped to the archive
like any ledger entry, and leaves with the thread when the thread is
deleted. A pin is an entry in the ``intent`` state (idempotent, so never
escalated like an unconfirmed action); unpinning replaces it with a newer
``not_done`` one (the ledger only ever replaces entries, the newest
winning unless one says ``done``, which a pin never does).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..ledger import LedgerEntry

KEY_PREFIX = "langgraph-durable:pin:"
"""Ledger keys that hold pins; `record_action` refuses keys under ``langgraph-durable:``."""
RESERVED_PREFIX = "langgraph-durable:"


@dataclass(frozen=True, slots=True)
class Pin:
    """One pinned checkpoint."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    label: str
    pinned_at: float

    @property
    def config(self) -> dict[str, Any]:
        """The config that resumes from it: ``graph.invoke(None, pin.config)``."""
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": self.checkpoint_id,
            }
        }


def pin_key(checkpoint_ns: str, checkpoint_id: str) -> str:
    # The id last: namespaces hold ":" and "|", checkpoint ids do not.
    return f"{KEY_PREFIX}{checkpoint_ns}:{checkpoint_id}"


def is_pin_key(key: str) -> bool:
    return key.startswith(KEY_PREFIX)


def pin_entry(checkpoint_ns: str, checkpoint_id: str, label: str, *, now: float | None = None) -> LedgerEntry:
    at = time.time() if now is None else now
    result = {"ns": checkpoint_ns, "checkpoint_id": checkpoint_id, "label": label, "pinned_at": at}
    return LedgerEntry(pin_key(checkpoint_ns, checkpoint_id), "intent", True, result, at)


def unpin_entry(pinned: LedgerEntry, *, now: float | None = None) -> LedgerEntry:
    at = time.time() if now is None else now
    return LedgerEntry(pinned.key, "not_done", True, pinned.result, max(at, pinned.updated_at + 1e-6))


def pins_of(thread_id: str, entries: Mapping[str, LedgerEntry]) -> list[Pin]:
    """The thread's pins among its ledger entries, oldest first."""
    out = []
    for key, entry in entries.items():
        if not is_pin_key(key) or entry.state != "intent" or not isinstance(entry.result, dict):
            continue
        r = entry.result
        out.append(
            Pin(thread_id, str(r["ns"]), str(r["checkpoint_id"]), str(r.get("label", "")), float(r["pinned_at"]))
        )
    return sorted(out, key=lambda p: (p.pinned_at, p.checkpoint_id))


def pinned_ids(thread_id: str, entries: Mapping[str, LedgerEntry]) -> set[tuple[str, str]]:
    """(namespace, checkpoint id) of every pin of the thread."""
    return {(p.checkpoint_ns, p.checkpoint_id) for p in pins_of(thread_id, entries)}


def without_pins(entries: Mapping[str, LedgerEntry]) -> dict[str, LedgerEntry]:
    """The ledger's actions: every entry but the pins."""
    return {k: e for k, e in entries.items() if not is_pin_key(k)}
