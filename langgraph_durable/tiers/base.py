"""The surface every tier implements, and how tier failures are reported.

A tier stores rows (`records.py`) and answers simple questions about them;
it never decodes an envelope and makes no decision about other tiers.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ormsgpack

from ..errors import TierUnavailable
from ..model.records import BlobRow, CheckpointRow, WriteRow, row_from_fields

BlobKey = tuple[str, str]  # (channel, version)


@dataclass(frozen=True, slots=True)
class Head:
    """A tier's answer to "what is the newest checkpoint of (thread, ns)",
    with everything a read of it can go stale on, in one round trip: its
    id, the thread's deletion marker (`mark_deleted`), its pending writes
    (a set that grows) and, where the tier has it, the checkpoint row."""

    checkpoint_id: str | None
    deleted_through: str | None
    row: CheckpointRow | None = None
    writes: tuple[WriteRow, ...] = ()


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """A bad copy kept for forensics: never served, removed with its thread."""

    tier: str
    thread_id: str
    checkpoint_ns: str
    kind: str
    key: str
    reason: str
    record: bytes
    detected_at: float
    id: str = ""  # unique within its tier; what `restore` takes
    fields: list[Any] | None = None  # `records.row_fields` of the copy, None if not restorable

    def row(self) -> Any:
        """The live row this copy was, to be written back (None if unknown)."""
        if self.fields is None:
            return None
        try:
            return row_from_fields(self.kind, self.thread_id, self.checkpoint_ns, self.fields, self.record)
        except (ValueError, TypeError):
            return None


# Meta key: the fingerprints (`records.key_fingerprint`) of the keys that
# seal the tier's records, comma-separated.
KEYS_META = "key_fingerprints"
# Meta key: the store's own signing key (base64), kept in the system of record
# (and copied into the local tier) when the user gives none.
STORE_KEY_META = "store_key"
# Meta key (local tier): set while the file is a store's system of record
# (SQLite alone): its history is nowhere else, and a saver given shared
# tiers refuses it until it was copied there (`promote_local`).
EMBEDDED_META = "embedded_history"
# Meta key (local tier): the file was set up as a cache of shared tiers. A
# checkpoint written to it alone later (a stale copy planted, a script)
# does not make it a store of its own.
SHARED_META = "shared_cache"
# Meta key: the id of the store (hex), which binds its archive's segments to it.
STORE_ID_META = "store_id"
# Meta key: the archive (bucket/prefix) this store owns, once its owner
# object was checked or written: later starts do not ask the object store.
ARCHIVE_META = "archive_owned"


def key_mismatch_message(tier: str, foreign: list[str], accepted: list[str]) -> str:
    """What to tell an operator whose saver's key does not fit the store."""
    ours = "no signing key" if accepted == ["unsigned"] else f"key fingerprint(s) {', '.join(accepted)}"
    if foreign == ["unsigned"]:
        hint = (
            "The store was written without a signing key. To start signing it, pass "
            "integrity=Integrity(signing_keys=[key, None]) (or LANGGRAPH_DURABLE_OLD_SIGNING_KEYS=unsigned) and run "
            "`langgraph-durable repair` to seal the old records with the key; then drop None."
        )
    elif accepted == ["unsigned"]:
        hint = (
            "By default a store with Postgres seals its records with its own key, which Postgres keeps: open it "
            "with its Postgres URL too (postgres=, --postgres). Else set LANGGRAPH_DURABLE_SIGNING_KEY (or "
            "signing_key=) to the key the store was written with."
        )
    else:
        hint = (
            "Use the key the store was written with, or during a rotation pass Integrity(signing_keys=[new, old]) "
            "(LANGGRAPH_DURABLE_OLD_SIGNING_KEYS) and run `langgraph-durable repair` to re-seal."
        )
    return (
        f"the {tier} tier holds records sealed with {', '.join(foreign)}, which this saver ({ours}) cannot "
        f"verify. Nothing was read or changed. {hint}"
    )


def live_row_where(row: CheckpointRow | BlobRow | WriteRow, placeholder: str) -> tuple[str, str, tuple[Any, ...]]:
    """Table, WHERE clause (with the SQL dialect's `placeholder`) and
    parameters that find one record's live row in the SQLite and Postgres
    tiers, which share their table layout."""
    key: dict[str, Any]
    if isinstance(row, CheckpointRow):
        table, key = "lgd_checkpoints", {"checkpoint_id": row.checkpoint_id}
    elif isinstance(row, BlobRow):
        table, key = "lgd_blobs", {"channel": row.channel, "version": row.version}
    else:
        table, key = "lgd_writes", {"checkpoint_id": row.checkpoint_id, "task_id": row.task_id, "idx": row.idx}
    columns = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns, **key}
    return table, " AND ".join(f"{c} = {placeholder}" for c in columns), tuple(columns.values())


def gone_key(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """The meta key recording that one checkpoint was deleted."""
    return json.dumps(["gone", thread_id, ns, checkpoint_id], ensure_ascii=False)


def gone_range(thread_id: str) -> tuple[str, str]:
    """The keys of every note `gone_key` makes for the thread lie in
    [low, high) in code point (UTF-8 byte) order: `delete_thread` drops them."""
    prefix = json.dumps(["gone", thread_id], ensure_ascii=False)[:-1] + ", "
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def deleted_key(thread_id: str) -> str:
    """The meta key of a thread's deletion marker."""
    return f"deleted:{thread_id}"


def archived_key(thread_id: str) -> str:
    """The meta key of a thread's ``archived`` flag (`archive.archiver_async`)."""
    return f"archived:{thread_id}"


def archive_owed_key(thread_id: str) -> str:
    """The meta key saying the archive has yet to learn of a deletion in the
    thread (`archive.archiver_async`): kept where the replica's memory is
    not, so a process that exits before the object store answers again
    does not take the deletion with it."""
    return f"archive_owed:{thread_id}"


def pack_fields(fields: Sequence[Any]) -> bytes:
    return ormsgpack.packb(list(fields))


def _fields(data: bytes | None) -> list[Any] | None:
    if not data:
        return None
    try:
        value = ormsgpack.unpackb(bytes(data))
    except ormsgpack.MsgpackDecodeError:
        return None
    return value if isinstance(value, list) else None


@dataclass(frozen=True, slots=True)
class ThreadRecords:
    """Every live record of one thread in one tier."""

    checkpoints: list[CheckpointRow]
    blobs: list[BlobRow]
    writes: list[WriteRow]


@contextmanager
def unavailable_on(tier: str, where: str, *errors: type[BaseException]) -> Iterator[None]:
    """Turn a driver's connection errors into `TierUnavailable`.

    Only the connection-level error types passed in are translated; anything
    else (a bug, a constraint violation) propagates unchanged.
    """
    try:
        yield
    except errors as exc:
        raise TierUnavailable(
            f"{tier} tier at {where} is unreachable ({type(exc).__name__}: {exc}). "
            f"Check that the server is running and the URL is right.",
            tier=tier,
        ) from exc


# psycopg and redis-py both take a password from the query string too
# (``?password=...``, ``&sslpassword=...``), and libpq from a conninfo string
# (``password='...'``), which a misconfigured URL may turn out to be.
_SECRET_PARAM = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)", re.IGNORECASE)


def redact(url: str) -> str:
    """A URL (or conninfo string) without its passwords, for error messages and logs."""
    text = _SECRET_PARAM.sub(r"\1***", url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    # The user info ends at the last "@" before the query string, so a
    # password holding an unescaped "@" or "/" is hidden whole.
    query = rest.find("?")
    at = rest.rfind("@", 0, query if query >= 0 else len(rest))
    if at < 0:
        return text
    creds, host = rest[:at], rest[at + 1 :]
    user, colon, _ = creds.partition(":")
    return f"{scheme}://{user}:***@{host}" if colon else text


async def aclose_redis(client: Any) -> None:
    """Close an asyncio redis-py client and, on a cluster, every node it knows.

    redis-py's async `RedisCluster.aclose` (8.1) disconnects the nodes only
    if the client is initialized. A command that met a connection error (a
    node went down) marks it for re-initialization, and until a later
    command re-initializes it, ``aclose()`` does nothing: every node's
    connections stay open, for the garbage collector to report unclosed.
    """
    await client.aclose()
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        nodes = {id(node): node for node in (*manager.nodes_cache.values(), *manager.startup_nodes.values())}
        # As aclose: each node's connections, in use or not. One that fails
        # to close cleanly is dropped all the same (its streams are let go).
        await asyncio.gather(*(node.disconnect() for node in nodes.values()), return_exceptions=True)


def close_redis(client: Any) -> None:
    """Close a redis-py client and, on a cluster, every node's connection pool.

    redis-py's sync `RedisCluster.close` (8.1) closes each node's client, but
    a node client built from a URL was handed its pool, so it leaves the pool
    open: the sockets stay connected until the garbage collector finds them.
    """
    client.close()
    for node in client.get_nodes() if hasattr(client, "get_nodes") else ():
        if node.redis_connection is not None:
            node.redis_connection.connection_pool.disconnect()
