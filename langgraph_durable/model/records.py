"""Record shapes and the checksummed envelope every tier stores. No I/O here.

A record is serialized once (with the saver's ``serde``) and sealed once into
an envelope; the same bytes go to every tier. The envelope's digest covers the
record's logical key as well as its payload, so a value copied under another
key (another thread, another checkpoint) fails verification just like a
flipped bit does.

Envelope layout (format version 1)::

    MAGIC (4) | format (1) | len(type tag) (1) | type tag | digest (16) | payload

The digest is SHA-256 truncated to 128 bits; with a signing key it is
HMAC-SHA256 (truncated likewise), so a value planted by someone without the
key never verifies. SHA-256 rather than BLAKE2b because CPUs accelerate it:
on the benchmark machine it hashes about 3x faster (benchmarks/RESULTS_CHECKSUMS.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

MAGIC = b"\xd7LGD"
FORMAT_VERSION = 1
DIGEST_SIZE = 16
_HEADER = len(MAGIC) + 2


class BadRecord(Exception):
    """Internal: one tier's copy of a record is unusable. `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# One keyed HMAC per signing key, copied for each digest: `hmac.new` sets the
# key up again on every call, and a read verifies several records.
_HMACS: dict[bytes, Any] = {}


def _digest(context: bytes, type_tag: bytes, payload: bytes | memoryview, key: bytes) -> bytes:
    if key:
        base = _HMACS.get(key)
        if base is None:
            base = _HMACS.setdefault(key, hmac.new(key, digestmod=hashlib.sha256))
        h: Any = base.copy()
    else:
        h = hashlib.sha256()
    h.update(b"%b\x00%b\x00" % (context, type_tag))
    h.update(payload)
    return h.digest()[:DIGEST_SIZE]


def seal(context: str, type_tag: str, payload: bytes, *, key: bytes = b"") -> bytes:
    """Wrap a serialized payload in an envelope bound to `context` (its key)."""
    tag = type_tag.encode()
    if len(tag) > 255:
        raise ValueError(f"serializer type tag too long: {type_tag!r}")
    digest = _digest(context.encode(), tag, payload, key)
    return b"".join((MAGIC, bytes((FORMAT_VERSION, len(tag))), tag, digest, payload))


def open_envelope(context: str, data: bytes, *, key: bytes = b"") -> tuple[str, bytes]:
    """Verify an envelope and return ``(type_tag, payload)``.

    Raises `BadRecord` on a wrong magic, an unknown format, truncation or a
    digest mismatch.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < _HEADER or data[: len(MAGIC)] != MAGIC:
        raise BadRecord("not an envelope (bad magic)")
    fmt, tag_len = data[len(MAGIC)], data[len(MAGIC) + 1]
    if fmt != FORMAT_VERSION:
        raise BadRecord(f"unknown envelope format {fmt}")
    tag_end = _HEADER + tag_len
    payload_start = tag_end + DIGEST_SIZE
    if len(data) < payload_start:
        raise BadRecord("truncated envelope")
    tag = bytes(data[_HEADER:tag_end])
    view = memoryview(data)
    # Verified in place: the payload is copied out only once it checks out.
    if not hmac.compare_digest(_digest(context.encode(), tag, view[payload_start:], key), view[tag_end:payload_start]):
        raise BadRecord("checksum mismatch")
    return tag.decode(), bytes(view[payload_start:])


def open_envelope_any(context: str, data: bytes, keys: Sequence[bytes]) -> tuple[str, bytes, int]:
    """`open_envelope` under the first of `keys` that verifies it.

    Returns ``(type_tag, payload, index of the key)``: an index above 0 means
    the record was sealed with an older key (rotation) and `repair` re-seals it.
    Raises `BadRecord` when no key verifies it.
    """
    last: BadRecord | None = None
    for i, key in enumerate(keys):
        try:
            tag, payload = open_envelope(context, data, key=key)
        except BadRecord as exc:
            if exc.reason != "checksum mismatch":
                raise  # damage no other key can explain
            last = exc
            continue
        return tag, payload, i
    assert last is not None
    raise last


def key_fingerprint(key: bytes, *, full: bool = False) -> str:
    """What a tier records about the key that seals it: never the key itself.

    ``"unsigned"`` for plain SHA-256 checksums. The fingerprint is an HMAC of
    a fixed label, so it reveals nothing about the key and cannot be used to
    forge records. The tiers record its first 16 hex digits; `full` gives all
    64, what an operator keeps to vouch for the store's key in the archive
    (`archive_key_fingerprint=`): 64 bits would be within reach of someone
    searching for a key of their own that matches.
    """
    if not key:
        return "unsigned"
    digest = hmac.new(key, b"langgraph-durable key fingerprint", hashlib.sha256).hexdigest()
    return "hmac-sha256:" + (digest if full else digest[:16])


def reseal(old_context: str, new_context: str, data: bytes, *, key: bytes = b"") -> bytes:
    """Verify an envelope under its old key and seal it under a new one.

    Used by `copy_thread`: the payload is not deserialized again.
    """
    tag, payload = open_envelope(old_context, data, key=key)
    return seal(new_context, tag, payload, key=key)


# --- logical keys -----------------------------------------------------------
# NUL separates the parts: namespaces use "|" and ":" themselves.


def checkpoint_context(thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None) -> str:
    return f"c\x00{thread_id}\x00{ns}\x00{checkpoint_id}\x00{parent_id or ''}"


def blob_context(thread_id: str, ns: str, channel: str, version: str) -> str:
    return f"b\x00{thread_id}\x00{ns}\x00{channel}\x00{version}"


def write_context(
    thread_id: str, ns: str, checkpoint_id: str, task_id: str, idx: int, channel: str, task_path: str
) -> str:
    return f"w\x00{thread_id}\x00{ns}\x00{checkpoint_id}\x00{task_id}\x00{idx}\x00{channel}\x00{task_path}"


def ledger_context(thread_id: str, key: str) -> str:
    return f"l\x00{thread_id}\x00{key}"


# --- rows: what a tier stores ------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """One checkpoint (without channel values) plus its metadata.

    `run_id` and `metadata_json` are plain copies kept for querying
    (`delete_for_runs`, `list(filter=...)`); they are never trusted for
    content: the saver re-checks filters against the verified envelope.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    metadata_json: str
    envelope: bytes

    @property
    def context(self) -> str:
        return checkpoint_context(self.thread_id, self.checkpoint_ns, self.checkpoint_id, self.parent_id)


@dataclass(frozen=True, slots=True)
class BlobRow:
    """One channel value at one version. Immutable, shared by checkpoints."""

    thread_id: str
    checkpoint_ns: str
    channel: str
    version: str
    envelope: bytes

    @property
    def context(self) -> str:
        return blob_context(self.thread_id, self.checkpoint_ns, self.channel, self.version)


@dataclass(frozen=True, slots=True)
class WriteRow:
    """One pending write of one task against one checkpoint."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    task_path: str
    envelope: bytes

    @property
    def context(self) -> str:
        return write_context(
            self.thread_id,
            self.checkpoint_ns,
            self.checkpoint_id,
            self.task_id,
            self.idx,
            self.channel,
            self.task_path,
        )


def metadata_json(metadata: dict[str, Any], *, allow_nan: bool = True) -> str:
    """A JSON copy of metadata for tier-side filtering.

    Values JSON cannot hold are stringified: the copy only narrows queries,
    the exact comparison happens on the decoded envelope. Without
    `allow_nan`, a NaN or an infinity raises ValueError (JSON has none).
    """
    text = json.dumps(metadata, default=str, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan)
    return _NUL.sub(r"\1", text) if "\\u0000" in text else text


# A NUL in a string, as JSON writes it (\u0000; Postgres jsonb refuses it),
# after an even number of backslashes: not the text "\u0000" itself, which
# JSON writes \\u0000.
_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def with_verified_metadata(row: CheckpointRow, metadata: dict[str, Any]) -> CheckpointRow:
    """`row` with its run id and metadata JSON rebuilt from its verified
    metadata. Those columns lie outside the checksum: a copy written to
    another tier (repair) takes them from the record, never from the source
    tier's columns, which may be damaged (and rejected by Postgres' jsonb)."""
    run_id = metadata.get("run_id")
    return replace(row, run_id=str(run_id) if run_id is not None else None, metadata_json=metadata_json(metadata))


def metadata_matches(metadata: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """Stock `list(filter=...)` semantics: every key equals the metadata value."""
    if not filter:
        return True
    return all(metadata.get(k) == v for k, v in filter.items())


# --- quarantine: a copy's row, kept so that it can be put back ----------------

Row = CheckpointRow | BlobRow | WriteRow


def row_fields(row: Row) -> list[Any]:
    """The fields of a row besides its thread, namespace and envelope."""
    if isinstance(row, CheckpointRow):
        return [row.checkpoint_id, row.parent_id, row.run_id, row.metadata_json]
    if isinstance(row, BlobRow):
        return [row.channel, row.version]
    return [row.checkpoint_id, row.task_id, row.idx, row.channel, row.task_path]


def row_from_fields(kind: str, thread_id: str, ns: str, fields: Sequence[Any], envelope: bytes) -> Row:
    """The row `row_fields` described. Raises ValueError on a shape that does not fit `kind`."""
    f = list(fields)
    if kind == "checkpoint" and len(f) == 4:
        return CheckpointRow(thread_id, ns, str(f[0]), f[1], f[2], str(f[3]), envelope)
    if kind == "blob" and len(f) == 2:
        return BlobRow(thread_id, ns, str(f[0]), str(f[1]), envelope)
    if kind == "write" and len(f) == 5:
        return WriteRow(thread_id, ns, str(f[0]), str(f[1]), int(f[2]), str(f[3]), str(f[4]), envelope)
    raise ValueError(f"a quarantined {kind} record has fields {f!r}, which do not describe a {kind}")
