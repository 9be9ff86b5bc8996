"""Growing lists stored as what they gained: the decisions, with no I/O.

Every stock saver stores a channel's whole value again each time it changes,
so a message list that grows by one message a step costs the square of the
conversation in storage. Here a list that *extends* the value this saver
last stored for the same (thread, namespace, channel) is stored as a
**piece**: the elements it appended, plus the versions of the pieces it is
rebuilt from. Every `DEFAULT_SNAPSHOT_EVERY`-th version is stored whole (a
snapshot), so rebuilding a value reads at most that many records, and the
records a read needs are named by the piece itself (one more round trip per
tier, never a walk).

Deciding "extends" is done on the serialized bytes, not on the Python
objects: msgpack encodes a list as a header (its length) followed by each
element's encoding, independent of the others. A value is stored as a piece
only when its element bytes start with the previous value's element bytes,
byte for byte; an element changed in place, a list rebuilt, a fork from an
older checkpoint, anything else is stored whole. Rebuilding concatenates the
very bytes a whole copy would have held, under a header for the total
length, and decodes them once: a read cannot tell the difference, and the
checksums seal every piece as they seal every record (`records.py`).

Only LangGraph's msgpack encoding is split (not the pickle fallback, not an
`EncryptedSerializer`'s ciphertext). The memory of what was stored last
(`DeltaMemo`) lives in the process, bounded; after a restart, or on a thread
another replica wrote last, the first value is simply stored whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import ormsgpack

from .records import BadRecord

# The type tag of a piece's envelope (a sealed record like any other).
DELTA_TAG = "lgd-delta"
# The serializer tag whose lists are split.
MSGPACK_TAG = "msgpack"
# A value is stored whole at least every this many versions of its channel:
# a read of it touches at most this many records. 16 keeps the bytes of a
# long conversation near 1/16 of storing it whole at every step.
DEFAULT_SNAPSHOT_EVERY = 16
# What the memory of last stored values may hold, in bytes (estimated:
# `_entry_size`). A saver gives it its share of ``memory_budget``
# (`memory_budget.SHARES`) instead.
DEFAULT_MEMO_BYTES = 16 * 1024 * 1024
# Estimated cost of a memo entry beyond the lengths of its ids and bytes: the
# key tuple, the OrderedDict slot and the channels dict (`_ENTRY_OVERHEAD`);
# per channel its `Last`, bytes and str headers and dict slot
# (`_CHANNEL_OVERHEAD`); per version named in a chain its str and tuple slot.
_ENTRY_OVERHEAD = 300
_CHANNEL_OVERHEAD = 300
_VERSION_OVERHEAD = 60
_FORMAT = 1


def array_header(payload: bytes) -> tuple[int, int] | None:
    """(element count, header length) of a msgpack array, else None."""
    if not payload:
        return None
    first = payload[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, 1
    if first == 0xDC and len(payload) >= 3:
        return int.from_bytes(payload[1:3], "big"), 3
    if first == 0xDD and len(payload) >= 5:
        return int.from_bytes(payload[1:5], "big"), 5
    return None


def whole_payload(count: int, elements: bytes) -> bytes:
    """The msgpack payload of a list of `count` encoded `elements`."""
    return _header(count) + elements


def _header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class Piece:
    """A stored piece: the value is the pieces at `base` (versions of the
    same channel, the snapshot first), then `appended`, `count` elements in all."""

    base: tuple[str, ...]
    count: int
    appended: bytes

    def encode(self) -> bytes:
        return ormsgpack.packb([_FORMAT, list(self.base), self.count, self.appended])


def decode_piece(payload: bytes) -> Piece:
    """A piece from its (verified) payload; `BadRecord` if it is not one."""
    try:
        parts = ormsgpack.unpackb(payload)
    except ormsgpack.MsgpackDecodeError as exc:
        raise BadRecord(f"undecodable list piece ({exc})") from exc
    if (
        not isinstance(parts, list)
        or len(parts) != 4
        or parts[0] != _FORMAT
        or not isinstance(parts[1], list)
        or not parts[1]
        or not all(isinstance(v, str) for v in parts[1])
        or not isinstance(parts[2], int)
        or not isinstance(parts[3], bytes)
    ):
        raise BadRecord("list piece has an unexpected shape")
    return Piece(tuple(parts[1]), parts[2], parts[3])


def rebuild(snapshot: bytes, pieces: Sequence[Piece]) -> bytes:
    """The msgpack payload a whole copy would hold: the snapshot's elements,
    then each piece's, oldest first (`pieces[-1]` is the value asked for).
    `BadRecord` when they do not fit together (a piece from another chain)."""
    head = array_header(snapshot)
    if head is None:
        raise BadRecord("the snapshot a list piece is rebuilt from is not a list")
    count, size = head
    parts = [snapshot[size:]]
    for i, piece in enumerate(pieces):
        if len(piece.base) != i + 1 or (i and piece.base[:-1] != pieces[i - 1].base) or piece.count < count:
            raise BadRecord("a list piece does not continue the pieces it names")
        parts.append(piece.appended)
        count = piece.count
    return _header(count) + b"".join(parts)


@dataclass(frozen=True, slots=True)
class Last:
    """What was stored last for a channel: its version, the element bytes
    of its value, their count, and the versions it is rebuilt from (itself
    last; a snapshot's chain is itself alone)."""

    version: str
    elements: bytes
    count: int
    chain: tuple[str, ...]


def plan(last: Last | None, version: str, tag: str, payload: bytes, *, every: int) -> tuple[Piece | None, Last | None]:
    """How to store a new value of a channel: as a `Piece` (or None: whole),
    and what to remember once it is stored (None: forget the channel)."""
    if tag != MSGPACK_TAG:
        return None, None
    head = array_header(payload)
    if head is None:
        return None, None
    count, size = head
    elements = payload[size:]
    if (
        last is not None
        and len(last.chain) < every
        and count >= last.count
        and elements.startswith(last.elements)
        and last.version != version
    ):
        piece = Piece(last.chain, count, elements[len(last.elements) :])
        return piece, Last(version, elements, count, (*last.chain, version))
    return None, Last(version, elements, count, (version,))


@dataclass(frozen=True, slots=True)
class Remember:
    """What a checkpoint's write leaves in the memory once it succeeded."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    channels: dict[str, Last]


class DeltaMemo:
    """Per (thread, namespace): the last checkpoint this saver stored, and
    for each of its list channels what was stored (`Last`). A new value is
    stored as a piece only when its checkpoint's parent is that checkpoint,
    so a piece only ever names versions its parent holds: what keeps the
    parent (`prune`, retention) keeps everything the piece is rebuilt from.

    Bounded by `max_bytes`, estimated from the lengths of what an entry
    holds (`_entry_size`: ids, versions, element bytes, a fixed overhead):
    least recently stored out first; an entry larger than `max_bytes` alone
    is not kept. Forgetting only costs bytes: the thread's next value of each
    list is stored whole, as after a restart, and reads never depend on the
    memo (`stored` is a shortcut for a value a tier holds anyway).
    Thread-safe (both faces)."""

    def __init__(self, *, max_bytes: int = DEFAULT_MEMO_BYTES, every: int = DEFAULT_SNAPSHOT_EVERY) -> None:
        self.max_bytes = max_bytes
        self.every = every
        self._lock = threading.Lock()
        # (thread, ns) -> (checkpoint id, its list channels, estimated size)
        self._last: OrderedDict[tuple[str, str], tuple[str, dict[str, Last], int]] = OrderedDict()
        self._bytes = 0

    def base_for(self, thread_id: str, ns: str, parent_id: str | None) -> dict[str, Last]:
        """The list channels of `parent_id`, if it is the checkpoint last stored here."""
        with self._lock:
            found = self._last.get((thread_id, ns))
        if found is None or parent_id is None or found[0] != parent_id:
            return {}
        return found[1]

    def stored(self, thread_id: str, ns: str, channel: str, version: str) -> Last | None:
        """What was stored as `version` of a channel, if it is the one this
        saver stored last (the newest checkpoint's, usually what is read)."""
        with self._lock:
            found = self._last.get((thread_id, ns))
        if found is None:
            return None
        last = found[1].get(channel)
        return last if last is not None and last.version == version else None

    def remember(self, what: Remember) -> None:
        """Record what a write stored. Call it once the write succeeded: a
        piece must only ever name versions that are stored."""
        key = (what.thread_id, what.checkpoint_ns)
        size = _entry_size(what)
        with self._lock:
            self._drop(key)
            if what.channels and size <= self.max_bytes:
                self._last[key] = (what.checkpoint_id, what.channels, size)
                self._bytes += size
            while self._bytes > self.max_bytes and self._last:
                self._drop(next(iter(self._last)))

    def forget(self, thread_id: str | None = None) -> None:
        """Drop a thread (all threads: None); its next values are stored whole."""
        with self._lock:
            for key in [k for k in self._last if thread_id is None or k[0] == thread_id]:
                self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._last.pop(key, None)
        if old is not None:
            self._bytes -= old[2]

    @property
    def size(self) -> int:
        """Estimated bytes held (at most `max_bytes`)."""
        return self._bytes

    @property
    def entries(self) -> int:
        # Not __len__: an empty memo must stay truthy (``deltas or DeltaMemo()``).
        return len(self._last)


def _entry_size(what: Remember) -> int:
    """An entry's estimated bytes: lengths of what it holds, and fixed
    overheads (no walk of the objects). Element bytes shared by several
    threads' entries (a fork) are counted in each."""
    size = _ENTRY_OVERHEAD + len(what.thread_id) + len(what.checkpoint_ns) + len(what.checkpoint_id)
    for channel, last in what.channels.items():
        size += _CHANNEL_OVERHEAD + len(channel) + len(last.version) + len(last.elements)
        size += sum(_VERSION_OVERHEAD + len(v) for v in last.chain)
    return size
