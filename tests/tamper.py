"""Direct access to the bytes each tier stores, bypassing the saver.

Used by the corruption property tests to read, damage, replace and delete
stored records exactly where they live: the ``record`` column of the SQLite
and Postgres tables, the Redis hash fields (see the layout in
``langgraph_durable/tiers/redis/tier_async.py``). Nothing here imports the
package's tier code, so a bug there cannot hide a bug here.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import ormsgpack
import psycopg
import redis as redis_lib

SEP = "\x00"

CHECKPOINT, BLOB, WRITE = "checkpoint", "blob", "write"


@dataclass(frozen=True, slots=True)
class Rec:
    """One logical record of one thread.

    key: ``(checkpoint_id,)`` for a checkpoint, ``(channel, version)`` for a
    blob, ``(checkpoint_id, task_id, idx)`` for a pending write.
    """

    kind: str
    ns: str
    key: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.kind}{list(self.key)}"


@dataclass(frozen=True, slots=True)
class Stored:
    """What one tier holds for one record.

    raw: the bytes at the storage location (the ``record`` column, or the
        Redis hash field's value, a msgpack frame for checkpoints and writes).
    envelope: the sealed envelope (== raw, except in Redis frames); None when
        a frame cannot be unpacked.
    meta: the other stored fields that enter the record's checksum context:
        ``(parent_id,)`` for a checkpoint, ``(channel, task_path)`` for a
        write, ``()`` for a blob; None when a frame cannot be unpacked.
    """

    raw: bytes
    envelope: bytes | None
    meta: tuple[Any, ...] | None

    def same_record(self, other: Stored) -> bool:
        """Both are the same verifying record (same envelope, same key fields)."""
        return self.envelope is not None and self.envelope == other.envelope and self.meta == other.meta


def flip(data: bytes, pos: int, mask: int) -> bytes:
    if not data:
        return b"\xff"
    out = bytearray(data)
    out[pos % len(out)] ^= mask or 1
    return bytes(out)


def flip_char(text: str, pos: int, mask: int) -> str:
    """Flip low bits of one character (ASCII stays ASCII and never becomes NUL)."""
    i = pos % len(text)
    return text[:i] + chr(ord(text[i]) ^ ((mask & 0x1F) or 1)) + text[i + 1 :]


def truncate(data: bytes, fraction: float) -> bytes:
    return data[: int(len(data) * fraction) % max(len(data), 1)]


# --- SQL tiers -----------------------------------------------------------------


class SqlStore:
    """lgd_checkpoints / lgd_blobs / lgd_writes in SQLite or Postgres."""

    def __init__(self, name: str, conn: Any, placeholder: str) -> None:
        self.name = name
        self.conn = conn
        self.ph = placeholder

    def _x(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self.conn.execute(sql.replace("?", self.ph), params)

    @staticmethod
    def _where(rec: Rec) -> tuple[str, str, tuple[Any, ...]]:
        if rec.kind == CHECKPOINT:
            return "lgd_checkpoints", "checkpoint_id = ?", rec.key
        if rec.kind == BLOB:
            return "lgd_blobs", "channel = ? AND version = ?", rec.key
        return "lgd_writes", "checkpoint_id = ? AND task_id = ? AND idx = ?", rec.key

    def get(self, thread: str, rec: Rec) -> Stored | None:
        table, where, params = self._where(rec)
        extra = {CHECKPOINT: ", parent_id", BLOB: "", WRITE: ", channel, task_path"}[rec.kind]
        row = self._x(
            f"SELECT record{extra} FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? AND {where}",
            (thread, rec.ns, *params),
        ).fetchone()
        if row is None:
            return None
        raw = bytes(row[0])
        return Stored(raw, raw, tuple(row[1:]))

    def get_all(self, thread: str, recs: list[Rec]) -> dict[Rec, Stored | None]:
        """`get` for many records, one query per table."""
        held: dict[Rec, Stored] = {}
        ns = {r.ns for r in recs}
        assert len(ns) <= 1
        args = (thread, next(iter(ns), ""))
        where = "WHERE thread_id = ? AND checkpoint_ns = ?"
        for cid, record, parent in self._x(
            f"SELECT checkpoint_id, record, parent_id FROM lgd_checkpoints {where}", args
        ):
            held[Rec(CHECKPOINT, args[1], (cid,))] = Stored(bytes(record), bytes(record), (parent,))
        for channel, version, record in self._x(f"SELECT channel, version, record FROM lgd_blobs {where}", args):
            held[Rec(BLOB, args[1], (channel, version))] = Stored(bytes(record), bytes(record), ())
        rows = self._x(f"SELECT checkpoint_id, task_id, idx, record, channel, task_path FROM lgd_writes {where}", args)
        for cid, task_id, idx, record, channel, task_path in rows:
            held[Rec(WRITE, args[1], (cid, task_id, idx))] = Stored(bytes(record), bytes(record), (channel, task_path))
        return {r: held.get(r) for r in recs}

    def put_raw(self, thread: str, rec: Rec, raw: bytes, original: Stored) -> None:
        table, where, params = self._where(rec)
        self._x(
            f"UPDATE {table} SET record = ? WHERE thread_id = ? AND checkpoint_ns = ? AND {where}",
            (raw, thread, rec.ns, *params),
        )

    put_envelope = put_raw

    def delete(self, thread: str, rec: Rec) -> None:
        table, where, params = self._where(rec)
        self._x(f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? AND {where}", (thread, rec.ns, *params))

    drop_field = delete

    def flip_field(self, thread: str, rec: Rec, pos: int, mask: int, original: Stored) -> None:
        """Flip a character of a key column the checksum covers: a
        checkpoint's parent_id, a write's channel."""
        table, where, params = self._where(rec)
        column = {CHECKPOINT: "parent_id", WRITE: "channel"}[rec.kind]
        row = self._x(
            f"SELECT {column} FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? AND {where}",
            (thread, rec.ns, *params),
        ).fetchone()
        if row is None or not row[0]:
            return
        self._x(
            f"UPDATE {table} SET {column} = ? WHERE thread_id = ? AND checkpoint_ns = ? AND {where}",
            (flip_char(row[0], pos, mask), thread, rec.ns, *params),
        )

    def index_ids(self, thread: str, ns: str) -> set[str]:
        """Checkpoint ids this tier would name as latest / list."""
        rows = self._x(
            "SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = ? AND checkpoint_ns = ?", (thread, ns)
        )
        return {r[0] for r in rows.fetchall()}

    record_ids = index_ids

    def close(self) -> None:
        self.conn.close()


def sqlite_store(path: str) -> SqlStore:
    return SqlStore("sqlite", sqlite3.connect(path, isolation_level=None, timeout=30), "?")


def postgres_store(url: str) -> SqlStore:
    return SqlStore("postgres", psycopg.connect(url, autocommit=True), "%s")


# --- Redis ---------------------------------------------------------------------


class RedisStore:
    """The hashes of ``P:{T}:...`` (see the layout in tiers/redis/tier_async.py)."""

    name = "redis"

    def __init__(self, url: str, prefix: str) -> None:
        # Any: redis-py types replies as bytes | str; without decode_responses they are bytes.
        self.client: Any = redis_lib.Redis.from_url(url)
        self.prefix = prefix

    def _k(self, thread: str, part: str) -> str:
        return f"{self.prefix}:{{{thread}}}:{part}"

    def _loc(self, thread: str, rec: Rec) -> tuple[str, str]:
        if rec.kind == CHECKPOINT:
            return self._k(thread, "cp"), f"{rec.ns}{SEP}{rec.key[0]}"
        if rec.kind == BLOB:
            channel, version = rec.key
            return self._k(thread, "blob"), f"{rec.ns}{SEP}{channel}{SEP}{version}"
        cid, task_id, idx = rec.key
        return self._k(thread, f"w:{rec.ns}{SEP}{cid}"), f"{task_id}{SEP}{idx}"

    @staticmethod
    def _frame(rec: Rec, raw: bytes) -> Stored:
        if rec.kind == BLOB:
            return Stored(raw, raw, ())
        n = 4 if rec.kind == CHECKPOINT else 3
        try:
            parts = ormsgpack.unpackb(raw)
        except Exception:
            return Stored(raw, None, None)
        if not isinstance(parts, list) or len(parts) != n or not isinstance(parts[-1], bytes):
            return Stored(raw, None, None)
        meta = (parts[0],) if rec.kind == CHECKPOINT else (parts[0], parts[1])
        return Stored(raw, parts[-1], meta)

    def get(self, thread: str, rec: Rec) -> Stored | None:
        key, field = self._loc(thread, rec)
        raw = self.client.hget(key, field)
        return None if raw is None else self._frame(rec, bytes(raw))

    def get_all(self, thread: str, recs: list[Rec]) -> dict[Rec, Stored | None]:
        """`get` for many records, one round trip."""
        locs = [self._loc(thread, r) for r in recs]
        keys = list(dict.fromkeys(k for k, _ in locs))
        with self.client.pipeline(transaction=False) as pipe:
            for k in keys:
                pipe.hgetall(k)
            hashes = dict(zip(keys, pipe.execute()))
        out: dict[Rec, Stored | None] = {}
        for rec, (key, field) in zip(recs, locs):
            raw = hashes[key].get(field.encode())
            out[rec] = None if raw is None else self._frame(rec, bytes(raw))
        return out

    def put_raw(self, thread: str, rec: Rec, raw: bytes, original: Stored) -> None:
        key, field = self._loc(thread, rec)
        self.client.hset(key, field, raw)

    def _parts(self, thread: str, rec: Rec, original: Stored) -> list[Any]:
        """The fields of the stored frame (of the original if it is unreadable)."""
        current = self.get(thread, rec)
        parts: Any = None
        for source in (current, original):
            if source is None:
                continue
            try:
                parts = ormsgpack.unpackb(source.raw)
            except Exception:
                continue
            if isinstance(parts, list) and len(parts) == (4 if rec.kind == CHECKPOINT else 3):
                break
            parts = None
        assert parts is not None, "the original frame always unpacks"
        return list(parts)

    def put_envelope(self, thread: str, rec: Rec, envelope: bytes, original: Stored) -> None:
        """Replace the envelope inside the frame, keeping its other fields."""
        if rec.kind == BLOB:
            self.put_raw(thread, rec, envelope, original)
            return
        parts = self._parts(thread, rec, original)
        parts[-1] = envelope
        self.put_raw(thread, rec, ormsgpack.packb(parts), original)

    def flip_field(self, thread: str, rec: Rec, pos: int, mask: int, original: Stored) -> None:
        """Flip a character of the frame's first field (a checkpoint's parent
        id, a write's channel), keeping the envelope intact."""
        parts = self._parts(thread, rec, original)
        if not isinstance(parts[0], str) or not parts[0]:
            return
        parts[0] = flip_char(parts[0], pos, mask)
        self.put_raw(thread, rec, ormsgpack.packb(parts), original)

    def delete(self, thread: str, rec: Rec) -> None:
        """Delete the record the way a row delete would: for a checkpoint,
        its hash field and its entry in the ids index."""
        key, field = self._loc(thread, rec)
        self.client.hdel(key, field)
        if rec.kind == CHECKPOINT:
            self.client.zrem(self._k(thread, f"ids:{rec.ns}"), rec.key[0])

    def drop_field(self, thread: str, rec: Rec) -> None:
        """Delete only the hash field; a checkpoint's index entry stays."""
        key, field = self._loc(thread, rec)
        self.client.hdel(key, field)

    def index_ids(self, thread: str, ns: str) -> set[str]:
        return {i.decode() for i in self.client.zrange(self._k(thread, f"ids:{ns}"), 0, -1)}

    def record_ids(self, thread: str, ns: str) -> set[str]:
        head = f"{ns}{SEP}".encode()
        return {f[len(head) :].decode() for f in self.client.hkeys(self._k(thread, "cp")) if f.startswith(head)}

    def close(self) -> None:
        self.client.close()


Store = SqlStore | RedisStore


def open_stores(saver: Any, redis_url: str) -> list[Store]:
    """Direct handles on every tier of `saver`, nearest first."""
    stores: list[Store] = []
    for name in saver.tier_names:
        if name == "sqlite":
            stores.append(sqlite_store(saver.sqlite_path))
        elif name == "redis":
            stores.append(RedisStore(redis_url, saver.redis_key_prefix))
        else:
            stores.append(postgres_store(saver.postgres_url))
    return stores
