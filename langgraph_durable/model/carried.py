"""Channel versions a checkpoint carries that no `put` ever stored.

LangGraph stores a channel's value only when its version moves (the
``new_versions`` of a `put`); a checkpoint carries the other channels'
versions on, and every saver reads those values from the record an ancestor
stored. One case breaks that rule. A checkpoint in LangGraph's older format
(channels named ``start:NODE``, ``branch:SOURCE:COND:NODE`` or ``NODE``,
checkpoint ``v`` < 3) is migrated in memory when LangGraph loads it
(``StateGraph._migrate_checkpoint``): channels are renamed under their old
versions, so the next checkpoint carries ``branch:to:NODE`` at a version no
`put` ever stored. SqliteSaver keeps it anyway (it stores every value inline
in the checkpoint), PostgresSaver keeps it when it is a plain value (stored
inline) and InMemorySaver reads the channel as empty.

DurableSaver reads a record that no tier holds as lost: it reports it and
falls back to the newest intact ancestor. So it has to tell "never written"
from "written and lost", and it does so where the difference is known, at
`put` time: a carried version that the parent checkpoint does not hold (or
any carried version, for a checkpoint without a parent) was never written,
and is stored with the new checkpoint (its value as the checkpoint holds it,
empty if it holds none), so a thread resumes as under SqliteSaver or
PostgresSaver. A record that goes missing later is still detected as lost.

The parent's versions come from `SeenVersions`: what this saver stored or
served last. A parent it has not seen (an evicted entry, another process's
write it never read) adds nothing, and a missing record counts as lost, as
before. LangGraph always reads the checkpoint it continues from, so its own
runs, forks and state updates find the parent here. No I/O in this module.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from .codec import version_key

# What `SeenVersions` may hold, in bytes (estimated: `_entry_size`). A saver
# gives it its share of ``memory_budget`` (`memory_budget.SHARES`) instead.
DEFAULT_SEEN_BYTES = 6 * 1024 * 1024
# Estimated cost of an entry beyond the lengths of its ids: key tuple,
# OrderedDict slot and versions dict; per channel its dict slot and str headers.
_ENTRY_OVERHEAD = 250
_CHANNEL_OVERHEAD = 120


class SeenVersions:
    """(thread, namespace, checkpoint id) -> its channel versions, for the
    checkpoints this saver stored or served last.

    Bounded by `max_bytes`, estimated from the lengths of the ids, channel
    names and versions an entry holds plus a fixed overhead: least recently
    used out first. A forgotten parent only costs what an unseen one costs
    (see the module docstring): nothing for a parent that stored its
    versions, which is every parent LangGraph makes today. Thread-safe (both
    faces share one)."""

    def __init__(self, *, max_bytes: int = DEFAULT_SEEN_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # key -> (channel versions, estimated size)
        self._seen: OrderedDict[tuple[str, str, str], tuple[dict[str, str], int]] = OrderedDict()
        self._bytes = 0

    def note(self, thread_id: str, ns: str, checkpoint_id: str, channel_versions: Mapping[str, Any]) -> None:
        # A copy: LangGraph migrates the checkpoint it was served in place.
        versions = {ch: version_key(v) for ch, v in channel_versions.items()}
        key = (thread_id, ns, checkpoint_id)
        size = _ENTRY_OVERHEAD + len(thread_id) + len(ns) + len(checkpoint_id)
        size += sum(_CHANNEL_OVERHEAD + len(ch) + len(v) for ch, v in versions.items())
        with self._lock:
            old = self._seen.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            self._seen[key] = (versions, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._bytes -= self._seen.popitem(last=False)[1][1]

    def get(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, str] | None:
        key = (thread_id, ns, checkpoint_id)
        with self._lock:
            found = self._seen.get(key)
            if found is None:
                return None
            self._seen.move_to_end(key)
            return found[0]

    def forget(self, thread_id: str | None = None) -> None:
        """Drop a thread's entries (every thread's: None)."""
        with self._lock:
            if thread_id is None:
                self._seen.clear()
                self._bytes = 0
                return
            for key in [k for k in self._seen if k[0] == thread_id]:
                self._bytes -= self._seen.pop(key)[1]

    @property
    def size(self) -> int:
        """Estimated bytes held (at most `max_bytes`)."""
        return self._bytes

    @property
    def entries(self) -> int:
        # Not __len__: an empty memo must stay truthy (``seen or SeenVersions()``).
        return len(self._seen)


def never_written(
    channel_versions: Mapping[str, Any],
    new_versions: Mapping[str, Any],
    parent_id: str | None,
    parent_versions: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The channels (and versions) a checkpoint carries that no `put`
    stored: carried (not in `new_versions`) at a version its parent does not
    hold. Without a parent every carried version is one; with a parent whose
    versions are unknown (`parent_versions` None) none can be named."""
    carried = {ch: v for ch, v in channel_versions.items() if ch not in new_versions}
    if not carried or parent_id is None:
        return carried
    if parent_versions is None:
        return {}
    return {ch: v for ch, v in carried.items() if parent_versions.get(ch) != version_key(v)}
