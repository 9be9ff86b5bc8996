"""Reads served again without reading, while the SQLite file is unchanged.

With SQLite alone, a read of a thread that nothing has written since costs
a few statements, a checksum per record and a decode per value, every time
(`get_state` in a loop, a UI polling history). `ReadCache` keeps what such
a read served, serialized with the saver's serializer, under the file's
*version* (`SqliteTier.version`): this tier's own count of write
transactions and SQLite's ``PRAGMA data_version``, which moves whenever
another connection (of this process or another) commits to the file. A
later read whose version is unchanged is rebuilt from those bytes: fresh
objects, never one a caller could have changed, and no statement but the
version's. Any write in between, through this saver or not, is a miss.

Only reads that met no bad copy are kept (`AsyncTierReader.incident_reads`
unchanged across the read): a read that reported one reports it again.

What this trades: a record damaged on disk *without* a commit (bit rot, a
byte changed by hand in the file while it is open) is not seen while its
read is cached. What is served is still the intact state this saver
verified when it read it; `verify()` scrubs the file, and the next write
to the file makes the next read a real one again.

Bounded by bytes (its share of ``DurableSaver(memory_budget=)``, a quarter,
or ``read_cache_bytes=``: each entry counts
its serialized size, its key's and a fixed overhead, so many small entries
stay bounded too), least recently used first out. Not kept: a read that
found nothing (there is nothing to save), and one holding a ``bytearray``
value, which the whole-read serialization would turn into ``bytes``.

With SQLite alone every read is kept. With shared tiers another replica
can write without touching this file, so only one read is: a thread's
latest state read back from the local tier under this saver's lease
(`AsyncTierReader.local_latest`), kept under what the lease says the file
holds (the head and its pending write keys) as well as the version.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, SerializerProtocol

# A saver gives the cache its share of ``memory_budget`` (memory_budget.py).
DEFAULT_READ_CACHE_BYTES = 16 * 1024 * 1024
# One read bigger than this share of the budget is not kept: it would push
# out everything else.
_LARGEST_SHARE = 4
# What an entry costs beyond its bytes and its key's text (the key and
# version tuples, the OrderedDict slot), counted against the budget so that
# many small entries (a thread id asked with many `before` ids) stay bounded.
_ENTRY_OVERHEAD = 400


class ReadCache:
    """`CheckpointTuple`s and pages of them by key, each valid for one version."""

    def __init__(self, serde: SerializerProtocol, max_bytes: int = DEFAULT_READ_CACHE_BYTES) -> None:
        self.serde = serde
        self.max_bytes = max_bytes
        # key -> (version, size counted, serialized tuples)
        self._entries: OrderedDict[Hashable, tuple[Hashable, int, tuple[str, bytes]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, version: Hashable) -> list[CheckpointTuple] | None:
        """The tuples kept for `key` at `version`, rebuilt; None on a miss."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != version:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        try:
            return [_tuple(t) for t in self.serde.loads_typed(entry[2])]
        except Exception:  # cannot happen for what `put` wrote: a read instead
            self._drop(key)
            return None

    def put(self, key: Hashable, version: Hashable, tuples: Sequence[CheckpointTuple]) -> None:
        """Keep `tuples` as read at `version` (taken *before* the read: a
        write during the read makes the entry one no later read matches)."""
        if not tuples or any(_changes_type(t) for t in tuples):
            self._drop(key)
            return
        try:
            packed = self.serde.dumps_typed([_fields(t) for t in tuples])
        except Exception:  # a value this serializer cannot write whole: not kept
            self._drop(key)
            return
        size = len(packed[1]) + len(repr(key)) + _ENTRY_OVERHEAD
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size * _LARGEST_SHARE > self.max_bytes:
                return
            self._entries[key] = (version, size, packed)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped, _) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def _drop(self, key: Hashable) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

    @property
    def size(self) -> int:
        """Bytes counted against the budget (serialized reads, keys, overhead)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


def _changes_type(t: CheckpointTuple) -> bool:
    """Whether serializing `t` whole would change a value's type: a
    ``bytearray`` channel or write value (tagged on its own, a plain binary
    inside a list) would come back as ``bytes``."""
    values = t.checkpoint.get("channel_values") or {}
    return any(isinstance(v, bytearray) for v in values.values()) or any(
        isinstance(w[2], bytearray) for w in t.pending_writes or ()
    )


def _fields(t: CheckpointTuple) -> list[Any]:
    parent = t.parent_config["configurable"] if t.parent_config else None
    writes = [list(w) for w in t.pending_writes or ()]
    return [t.config["configurable"], t.checkpoint, t.metadata, parent, writes]


def _tuple(fields: list[Any]) -> CheckpointTuple:
    conf, checkpoint, metadata, parent, writes = fields
    return CheckpointTuple(
        config={"configurable": conf},
        checkpoint=checkpoint,
        metadata=metadata,
        parent_config={"configurable": parent} if parent is not None else None,
        pending_writes=[(w[0], w[1], w[2]) for w in writes],
    )
