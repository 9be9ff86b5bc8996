"""What the archive holds, and how it is read back. No I/O here.

A thread's archive copy is a series of *segments*: objects that each carry
the records one pass of the replica found new (checkpoints, channel values,
pending writes, ledger entries, pins) and the deletions it found recorded
(checkpoints pruned or deleted for runs, the thread deleted). Records keep
the envelopes they have in every tier, so each is verified again when it is
brought back; the segment itself is sealed too (`records.seal`, under the
store's key or the user's signing key, never unsigned), bound to its store
(the store id its owner object names), its thread and its object name, so a
segment planted, copied from another store, swapped between threads or
truncated is refused whole.

Object keys, below the archive URL's prefix::

    v1/store                      the store that owns the prefix (sealed JSON)
    v1/store-key                  a copy of the store's own key (stores without signing_key=)
    v1/threads/<thread>/<at ms, 13 digits>-<random>-<head tag>.seg
    v1/archived/<thread>          the thread left the hot tiers (sealed JSON)
    v1/ids/<digest folder>        the id a digest folder stands for (see below)

``<thread>`` is the thread id in unpadded lowercase base32, so no id can
name another thread's folder; an id whose base32 would be longer than
`MAX_FOLDER` is named by its SHA-256 instead (``_h<hex>-<base32 start>``),
and its id is written out under ``v1/ids/`` for listings.
Segment names sort by the time they were written; two replicas shipping
one thread write different names and never overwrite each other (a record
shipped twice is the same record). The head tag is a digest of the
thread's newest checkpoint and its pending writes when the segment was
cut: comparing it with the hot tiers' head tells, from a listing alone,
whether a thread has changed since it last shipped.

`ThreadImage.fold` replays a thread's segments in order into the records it
holds now (or at a point in time, for a restore ``--until``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ormsgpack

from ..model.records import (
    DIGEST_SIZE,
    MAGIC,
    BadRecord,
    BlobRow,
    CheckpointRow,
    WriteRow,
    open_envelope_any,
    seal,
)

ROOT = "v1"
THREADS = f"{ROOT}/threads"
ARCHIVED = f"{ROOT}/archived"
IDS = f"{ROOT}/ids"  # the id a digest folder stands for (`id_key`)
OWNER = f"{ROOT}/store"
SEGMENT_TAG = "langgraph-durable-segment+zlib+store"  # msgpack, zlib-compressed, bound to its store
MARKER_TAG = "langgraph-durable-archived+store"
OWNER_TAG = "langgraph-durable-archive-owner"
# Written before segments named their store: bound to their thread and name
# only. Still read (under a key the operator trusts, never unsigned), so an
# archive written by an older version keeps its threads; see `Segment.open`.
LEGACY_SEGMENT_TAG = "langgraph-durable-segment+zlib"
LEGACY_MARKER_TAG = "langgraph-durable-archived"

CheckpointKey = tuple[str, str]  # ns, checkpoint id
BlobKey = tuple[str, str, str]  # ns, channel, version
WriteKey = tuple[str, str, str, int]  # ns, checkpoint id, task id, idx


# The longest readable folder name. S3 refuses object names over 1,024
# bytes, and a 1,024-byte id (the longest the saver accepts) is 1,639
# characters of base32: a longer name is the id's digest instead, so that
# any id a LangGraph user's graph runs with is archived, with room left for
# the URL's prefix (`store_async.MAX_PREFIX_BYTES`) and the segment's name.
# Ids up to 400 bytes keep the names they always had, so an archive written
# before reads as it did.
MAX_FOLDER = 640
# A digest folder: "_h", the id's SHA-256, and the first characters of its
# base32 (for people listing the bucket). The id itself is in every
# segment, sealed (`Segment.open` checks it), so a segment planted under a
# colliding folder is refused.
HASHED_PREFIX = "_h"
HASHED_READABLE = 40


def thread_folder(thread_id: str) -> str:
    """The thread's name in object keys: unambiguous for any id, and never
    longer than the object store allows."""
    readable = base64.b32encode(thread_id.encode("utf-8")).decode("ascii").rstrip("=").lower() or "_"
    if len(readable) <= MAX_FOLDER:
        return readable
    digest = hashlib.sha256(thread_id.encode("utf-8")).hexdigest()
    return f"{HASHED_PREFIX}{digest}-{readable[:HASHED_READABLE]}"


def thread_of_folder(folder: str) -> str:
    """The thread id `thread_folder` named; ValueError for a name it never
    makes, and for a digest folder (its id is only in its segments)."""
    if folder == "_":
        return ""
    if folder.startswith(HASHED_PREFIX):
        raise ValueError(f"the folder {folder!r} names a thread by its digest")
    text = folder.upper()
    return base64.b32decode(text + "=" * (-len(text) % 8)).decode("utf-8")


def id_key(folder: str) -> str:
    """Where the id of a digest folder is written out, for listings (a
    restore of every thread): unsealed, since whatever it holds must hash
    to the folder's name (`thread_of_id_object`)."""
    return f"{IDS}/{folder}"


def is_digest_folder(folder: str) -> bool:
    return folder.startswith(HASHED_PREFIX)


def thread_of_id_object(folder: str, data: bytes | None) -> str:
    """The id `id_key(folder)` holds; ValueError unless it names that folder."""
    if data is None:
        raise ValueError(f"no id object for {folder!r}")
    thread_id = data.decode("utf-8")
    if thread_folder(thread_id) != folder:
        raise ValueError(f"the id object of {folder!r} names another folder")
    return thread_id


def segments_prefix(thread_id: str) -> str:
    return f"{THREADS}/{thread_folder(thread_id)}/"


def marker_key(thread_id: str) -> str:
    return f"{ARCHIVED}/{thread_folder(thread_id)}"


def head_tag(
    checkpoint_id: str | None, write_keys: Iterable[tuple[str, int]], ledger: Mapping[str, bytes] | None = None
) -> str:
    """A digest of a thread's newest checkpoint, its pending writes' keys
    and its ledger (actions and pins)."""
    h = hashlib.sha256((checkpoint_id or "").encode())
    for task_id, idx in sorted(write_keys):
        h.update(b"\x00" + task_id.encode() + b"\x00" + str(idx).encode())
    for key, envelope in sorted((ledger or {}).items()):
        h.update(b"\x01" + key.encode() + b"\x00" + hashlib.sha256(envelope).digest())
    return h.hexdigest()[:12]


def segment_name(at: float, tag: str) -> str:
    return f"{int(at * 1000):013d}-{os.urandom(4).hex()}-{tag}.seg"


_SEGMENT_NAME = re.compile(r"[0-9]{13}-[0-9a-f]{8}-[0-9a-f]{1,64}\.seg")


def is_segment_name(key: str) -> bool:
    """Whether `key` ends in a name `segment_name` makes: anything else in a
    thread's folder (put there by hand, or by another tool) is not read."""
    return _SEGMENT_NAME.fullmatch(key.rsplit("/", 1)[-1]) is not None


def name_time(key: str) -> float:
    """When the segment under `key` was cut, in seconds since the epoch."""
    return int(key.rsplit("/", 1)[-1].split("-", 1)[0]) / 1000


def name_tag(key: str) -> str:
    return key.rsplit("/", 1)[-1].rsplit("-", 1)[-1].removesuffix(".seg")


def ident(kind: str, *parts: object) -> str:
    """An entry of a thread's copy, named for `Segment.times`."""
    return "\x00".join([kind, *(str(p) for p in parts)])


def _context(store: str, thread_id: str, name: str) -> str:
    # The store id is hex and the name's last part has no NUL: the thread id
    # between them is unambiguous whatever it holds.
    return f"S\x00{store}\x00{thread_id}\x00{name.rsplit('/', 1)[-1]}"


def _legacy_context(thread_id: str, name: str) -> str:
    return f"s\x00{thread_id}\x00{name.rsplit('/', 1)[-1]}"


def sealing_keys(keys: Sequence[bytes]) -> list[bytes]:
    """The keys an archive object may verify under: never b"" (unsigned),
    which anyone who can write the bucket could seal with."""
    return [k for k in keys if k]


def _open_bound(
    contexts: Sequence[tuple[str, str]], data: bytes, keys: Sequence[bytes], what: str
) -> tuple[str, bytes]:
    """Open an archive object under the first of `contexts` (context, type
    tag it must carry) that verifies with one of `keys` (real keys only)."""
    real = sealing_keys(keys)
    if not real:
        raise BadRecord(f"no signing key to verify the {what} with (an unsigned one is never trusted)")
    last: BadRecord | None = None
    for context, expected in contexts:
        try:
            tag, payload, _ = open_envelope_any(context, data, real)
        except BadRecord as exc:
            if exc.reason != "checksum mismatch":
                raise
            last = exc
            continue
        if tag != expected:
            raise BadRecord(f"not a {what} (type tag {tag!r})")
        return tag, payload
    assert last is not None
    raise last


@dataclass
class Segment:
    """One pass's worth of a thread: what was new, what was deleted."""

    thread_id: str
    at: float = field(default_factory=time.time)
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    blobs: list[BlobRow] = field(default_factory=list)
    writes: list[WriteRow] = field(default_factory=list)
    ledger: dict[str, bytes] = field(default_factory=dict)
    gone: list[CheckpointKey] = field(default_factory=list)
    deleted_through: str | None = None
    times: dict[str, float] = field(default_factory=dict)
    """When each entry was first shipped (`ident`), where it was before
    `at`: a compacted segment's, so that a restore ``--until`` a time older
    than the compaction still finds what existed then."""

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.blobs or self.writes or self.ledger or self.gone or self.deleted_through)

    @property
    def records(self) -> int:
        return len(self.checkpoints) + len(self.blobs) + len(self.writes) + len(self.ledger)

    def seal(self, name: str, key: bytes, store: str) -> bytes:
        body = {
            "thread": self.thread_id,
            "at": self.at,
            "c": [
                [r.checkpoint_ns, r.checkpoint_id, r.parent_id, r.run_id, r.metadata_json, r.envelope]
                for r in self.checkpoints
            ],
            "b": [[r.checkpoint_ns, r.channel, r.version, r.envelope] for r in self.blobs],
            "w": [
                [r.checkpoint_ns, r.checkpoint_id, r.task_id, r.idx, r.channel, r.task_path, r.envelope]
                for r in self.writes
            ],
            "l": [[k, v] for k, v in sorted(self.ledger.items())],
            "gone": [list(g) for g in self.gone],
            "deleted_through": self.deleted_through,
            "t": [[k, v] for k, v in sorted(self.times.items())],
        }
        if not key:
            raise ValueError("an archive segment is never sealed unsigned")
        packed = zlib.compress(ormsgpack.packb(body), 6)
        return seal(_context(store, self.thread_id, name), SEGMENT_TAG, packed, key=key)

    @classmethod
    def open(cls, thread_id: str, name: str, data: bytes, keys: Sequence[bytes], store: str | None) -> Segment:
        """The segment stored under `name`, verified; `BadRecord` if it is not
        one this store's replica sealed for this thread under that name.

        `keys` are the keys the operator trusts (their own signing key, or the
        store's key from the system of record or vouched for by its
        fingerprint); unsigned never verifies. A segment an older version
        wrote is bound to its thread and name only: a copy from another store
        sealed with the same key would pass, which takes two stores sharing
        one key (a signing key given to both, or a store that took another's
        key from the bucket before keys were only taken on the operator's
        word)."""
        contexts = [(_legacy_context(thread_id, name), LEGACY_SEGMENT_TAG)]
        if store:
            contexts.insert(0, (_context(store, thread_id, name), SEGMENT_TAG))
        _, payload = _open_bound(contexts, data, keys, "segment")
        try:
            body = ormsgpack.unpackb(zlib.decompress(payload))
            if body["thread"] != thread_id:
                raise BadRecord("segment of another thread")
            t = thread_id
            return cls(
                thread_id=t,
                at=float(body["at"]),
                checkpoints=[CheckpointRow(t, ns, cid, p, run, md, env) for ns, cid, p, run, md, env in body["c"]],
                blobs=[BlobRow(t, ns, ch, v, env) for ns, ch, v, env in body["b"]],
                writes=[
                    WriteRow(t, ns, cid, task, int(idx), ch, path, env)
                    for ns, cid, task, idx, ch, path, env in body["w"]
                ],
                ledger={str(k): bytes(v) for k, v in body["l"]},
                gone=[(str(ns), str(cid)) for ns, cid in body["gone"]],
                deleted_through=body["deleted_through"],
                times={str(k): float(v) for k, v in body.get("t", ())},
            )
        except (KeyError, TypeError, ValueError, zlib.error, ormsgpack.MsgpackDecodeError) as exc:
            raise BadRecord(f"segment has an unexpected shape ({exc})") from None


@dataclass
class ThreadImage:
    """A thread's records as its segments leave them, keyed like the tiers key them."""

    thread_id: str
    checkpoints: dict[CheckpointKey, CheckpointRow] = field(default_factory=dict)
    blobs: dict[BlobKey, BlobRow] = field(default_factory=dict)
    writes: dict[WriteKey, WriteRow] = field(default_factory=dict)
    ledger: dict[str, bytes] = field(default_factory=dict)
    deleted_through: str | None = None
    gone: set[CheckpointKey] = field(default_factory=set)
    segments: int = 0
    newest_at: float = 0.0
    first: dict[str, float] = field(default_factory=dict)
    """When each entry held was first shipped (`ident`): what a compacted segment keeps."""

    @classmethod
    def fold(cls, thread_id: str, segments: Iterable[Segment], *, until: float | None = None) -> ThreadImage:
        image = cls(thread_id)
        for segment in segments:
            image.apply(segment, until=until)
        return image

    def apply(self, s: Segment, *, until: float | None = None) -> None:
        """Deletions first (a segment records what was gone when it was cut),
        then what it brought; with `until`, only what was shipped by then."""

        def when(ident: str) -> float | None:
            """When the entry was shipped; None if after `until`."""
            at = s.times.get(ident, s.at)
            if until is not None and at > until:
                return None
            return min(at, self.first.get(ident, at))

        self.segments += 1
        self.newest_at = max(self.newest_at, s.at)
        if s.deleted_through is not None and (at := when("d")) is not None:
            # The thread was deleted through this id: everything before goes.
            m = s.deleted_through
            self.deleted_through = max(self.deleted_through or "", m)
            self.first["d"] = at
            self.checkpoints = {k: r for k, r in self.checkpoints.items() if k[1] > m}
            self.writes = {k: r for k, r in self.writes.items() if k[1] > m}
            if not self.checkpoints:
                self.blobs.clear()
                self.ledger.clear()
        for key in s.gone:
            if (at := when(ident("g", *key))) is None:
                continue
            self.gone.add(key)
            self.first[ident("g", *key)] = at
            self.checkpoints.pop(key, None)
            for wk in [wk for wk in self.writes if (wk[0], wk[1]) == key]:
                del self.writes[wk]
        for c in s.checkpoints:
            key = (c.checkpoint_ns, c.checkpoint_id)
            if (at := when(ident("c", *key))) is None:
                continue
            self.checkpoints[key] = c
            self.first[ident("c", *key)] = at
            self.gone.discard(key)
        for b in s.blobs:
            bkey = (b.checkpoint_ns, b.channel, b.version)
            if (at := when(ident("b", *bkey))) is not None:
                self.blobs[bkey] = b
                self.first[ident("b", *bkey)] = at
        for w in s.writes:
            wkey = (w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx)
            if (at := when(ident("w", *wkey))) is not None:
                self.writes[wkey] = w
                self.first[ident("w", *wkey)] = at
        for k, v in s.ledger.items():
            if (at := when(ident("l", k))) is not None:
                self.ledger[k] = v
                self.first[ident("l", k)] = at

    def compacted(self, at: float) -> Segment:
        """One segment holding all of this image, each entry with when it
        was first shipped, cut at `at` (the oldest folded segment's time)."""
        whole = Segment(self.thread_id, at=at)
        whole.checkpoints = list(self.checkpoints.values())
        whole.blobs = list(self.blobs.values())
        whole.writes = list(self.writes.values())
        whole.ledger = dict(self.ledger)
        whole.gone = sorted(self.gone)
        whole.deleted_through = self.deleted_through
        idents = (
            [ident("c", *k) for k in self.checkpoints]
            + [ident("b", *k) for k in self.blobs]
            + [ident("w", *k) for k in self.writes]
            + [ident("l", k) for k in self.ledger]
            + [ident("g", *k) for k in self.gone]
            + (["d"] if self.deleted_through is not None else [])
        )
        whole.times = {i: self.first[i] for i in idents if i in self.first}
        return whole

    @property
    def empty(self) -> bool:
        return not (self.checkpoints or self.ledger)

    @property
    def records(self) -> int:
        return len(self.checkpoints) + len(self.blobs) + len(self.writes) + len(self.ledger)

    @property
    def size_bytes(self) -> int:
        """About the memory it holds: its records' envelopes."""
        return (
            sum(len(r.envelope) for r in self.checkpoints.values())
            + sum(len(r.envelope) for r in self.blobs.values())
            + sum(len(r.envelope) for r in self.writes.values())
            + sum(len(v) for v in self.ledger.values())
        )

    def head(self, ns: str = "") -> tuple[str | None, list[tuple[str, int]]]:
        """The newest checkpoint of `ns` and its pending writes' keys."""
        ids = [cid for n, cid in self.checkpoints if n == ns]
        newest = max(ids, default=None)
        return newest, [(t, i) for n, c, t, i in self.writes if n == ns and c == newest]

    def tag(self) -> str:
        newest, writes = self.head("")
        return head_tag(newest, writes)

    def missing(
        self,
        checkpoints: Iterable[CheckpointRow],
        blobs: Iterable[BlobRow],
        writes: Iterable[WriteRow],
        ledger: dict[str, bytes],
    ) -> Segment:
        """What of these records this image lacks (or holds other bytes of), as a segment."""
        s = Segment(self.thread_id)
        s.checkpoints = [c for c in checkpoints if self.checkpoints.get((c.checkpoint_ns, c.checkpoint_id)) != c]
        s.blobs = [b for b in blobs if (b.checkpoint_ns, b.channel, b.version) not in self.blobs]
        s.writes = [w for w in writes if self.writes.get((w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx)) != w]
        s.ledger = {k: v for k, v in ledger.items() if self.ledger.get(k) != v}
        return s

    def holds(
        self,
        checkpoints: Iterable[CheckpointRow],
        blobs: Iterable[BlobRow],
        writes: Iterable[WriteRow],
        ledger: dict[str, bytes],
    ) -> bool:
        """Whether every one of these records is here, byte for byte."""
        return not self.missing(checkpoints, blobs, writes, ledger)


def seal_marker(thread_id: str, info: dict[str, Any], key: bytes, store: str) -> bytes:
    """The ``archived/<thread>`` object: the thread left the hot tiers."""
    body = json.dumps({"thread": thread_id, **info}, sort_keys=True).encode()
    return seal(f"A\x00{store}\x00{thread_id}", MARKER_TAG, body, key=key)


def open_marker(thread_id: str, data: bytes, keys: Sequence[bytes], store: str | None) -> dict[str, Any]:
    contexts = [(f"a\x00{thread_id}", LEGACY_MARKER_TAG)]
    if store:
        contexts.insert(0, (f"A\x00{store}\x00{thread_id}", MARKER_TAG))
    _, payload = _open_bound(contexts, data, keys, "archive marker")
    try:
        body = json.loads(payload)
    except ValueError:
        raise BadRecord("archive marker is not JSON") from None
    if not isinstance(body, dict) or body.get("thread") != thread_id:
        raise BadRecord("archive marker of another thread")
    return body


def new_store_id() -> str:
    return os.urandom(16).hex()


def seal_owner(store: str, fingerprint: str, key: bytes) -> bytes:
    """The ``v1/store`` object: which store owns the prefix (its id, and its
    sealing key's fingerprint, for people), sealed with that key."""
    body = json.dumps({"store": store, "key": fingerprint}, sort_keys=True).encode()
    return seal("o\x00owner", OWNER_TAG, body, key=key)


def read_owner(data: bytes) -> dict[str, str]:
    """What an owner object says, NOT verified: only for naming it in an
    error, so only the hex it should hold is kept (a planted one could
    name anything). Empty if it is not one."""
    try:
        body = json.loads(data[len(MAGIC) + 2 + data[len(MAGIC) + 1] + DIGEST_SIZE :])
    except (ValueError, IndexError):
        return {}
    if not isinstance(body, dict):
        return {}
    said = {"store": str(body.get("store", "")), "key": str(body.get("key", "")).removeprefix("hmac-sha256:")}
    found = {k: v[:64] for k, v in said.items() if v and all(c in "0123456789abcdef" for c in v[:64])}
    if "key" in found:
        found["key"] = "hmac-sha256:" + found["key"]
    return found


def open_owner(data: bytes, keys: Sequence[bytes]) -> dict[str, str]:
    """The owner object, verified under one of `keys`; `BadRecord` if it
    does not verify (another store's, or planted)."""
    _, payload = _open_bound([("o\x00owner", OWNER_TAG)], data, keys, "archive owner object")
    try:
        body = json.loads(payload)
    except ValueError:
        raise BadRecord("archive owner object is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("store"), str):
        raise BadRecord("archive owner object has an unexpected shape")
    return {"store": body["store"], "key": str(body.get("key", ""))}
