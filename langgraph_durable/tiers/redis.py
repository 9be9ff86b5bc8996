# WARNING: generated from tiers/redis_async.py by langgraph_durable/_codegen.py. DO NOT EDIT.
# Edit the async source and run `python -m langgraph_durable._codegen`.
"""The Redis tier: the hot tier shared by every replica.

Plain Redis 6+ or Valkey, no modules. Every key of one thread carries the
hash tag ``{thread_id}``, so on Redis Cluster a thread lives on one slot and
its multi-key transactions stay legal. Layout, under the key prefix ``P``::

    P:{T}:cp              hash  "ns\\0id"          -> [parent, run_id, metadata json, envelope]
    P:{T}:ids:<ns>        zset  checkpoint ids (score 0, ordered by id)
    P:{T}:nss             set   namespaces of the thread
    P:{T}:blob            hash  "ns\\0channel\\0ver" -> envelope
    P:{T}:w:<ns>\\0<id>    hash  "task\\0idx"       -> [channel, task_path, envelope]
    P:{T}:wkeys           set   the thread's write hashes (for deletes)
    P:{T}:quarantine      list  bad copies kept for forensics
    P:{T}:ledger          hash  action key -> envelope (non-resumable actions)

Every write touches one thread's keys only, so it is one MULTI/EXEC on one
slot. There is deliberately no global index (it would put a second slot in
every transaction): the rare whole-store operations, ``list(None)`` and
``delete_for_runs``, find threads by SCAN over ``P:{*}:nss`` instead.

This is the async source; ``redis.py`` is generated from it by
``tools/generate_sync.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import ormsgpack
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..records import BlobRow, CheckpointRow, WriteRow, metadata_matches
from .base import BlobKey, QuarantinedRecord, ThreadRecords, redact, unavailable_on

DEFAULT_KEY_PREFIX = "langgraph_durable"
DEFAULT_SOCKET_TIMEOUT_S = 5.0
_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)
_SEP = "\x00"


def _pack(*parts: Any) -> bytes:
    return ormsgpack.packb(list(parts))


def _unpack(data: bytes, n: int) -> list[Any]:
    """A stored frame: n-1 optional strings and an envelope. A damaged frame
    (undecodable, wrong shape or wrong types; msgpack ignores trailing bytes,
    so a flipped header byte can still decode) comes back with an empty
    envelope, which then fails verification like any corrupt copy."""
    try:
        parts = ormsgpack.unpackb(data)
    except ormsgpack.MsgpackDecodeError:
        parts = None
    if (
        isinstance(parts, list)
        and len(parts) == n
        and isinstance(parts[-1], bytes)
        and all(p is None or isinstance(p, (str, float, int)) for p in parts[:-1])
    ):
        return parts
    return [None] * (n - 1) + [b""]


class RedisTier:
    """Checkpoints in Redis, one hash-tagged key family per thread."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.where = redact(url)
        self.prefix = key_prefix
        # Typed Any: redis-py types replies as bytes | str whatever
        # decode_responses says; with False they are always bytes.
        self.client: Any = Redis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout, decode_responses=False
        )

    # -- keys -----------------------------------------------------------------

    def _k(self, thread_id: str, part: str) -> str:
        return f"{self.prefix}:{{{thread_id}}}:{part}"

    def _all_threads(self) -> list[str]:
        head = f"{self.prefix}:{{"
        tail = "}:nss"
        pattern = _glob_escape(head) + "*" + _glob_escape(tail)
        found = set()
        for key in self.client.scan_iter(match=pattern, count=1000):
            name = key.decode()
            found.add(name[len(head) : -len(tail)])
        return sorted(found)

    def _wkey(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return self._k(thread_id, f"w:{ns}{_SEP}{checkpoint_id}")

    # -- lifecycle --------------------------------------------------------------

    def setup(self) -> None:
        with unavailable_on("redis", self.where, *_ERRORS):
            self.client.ping()

    def close(self) -> None:
        self.client.close()

    # -- writes -------------------------------------------------------------------

    def write_checkpoint(self, row: CheckpointRow, blobs: Sequence[BlobRow]) -> None:
        t, ns, cid = row.thread_id, row.checkpoint_ns, row.checkpoint_id
        with unavailable_on("redis", self.where, *_ERRORS):
            with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(
                    self._k(t, "cp"),
                    f"{ns}{_SEP}{cid}",
                    _pack(row.parent_id, row.run_id, row.metadata_json, row.envelope),
                )
                pipe.zadd(self._k(t, f"ids:{ns}"), {cid: 0})
                pipe.sadd(self._k(t, "nss"), ns)
                for b in blobs:
                    pipe.hsetnx(self._k(t, "blob"), f"{b.checkpoint_ns}{_SEP}{b.channel}{_SEP}{b.version}", b.envelope)
                pipe.execute()

    def write_blobs(self, blobs: Sequence[BlobRow]) -> None:
        if not blobs:
            return
        with unavailable_on("redis", self.where, *_ERRORS):
            with self.client.pipeline(transaction=True) as pipe:
                for b in blobs:
                    pipe.hset(
                        self._k(b.thread_id, "blob"), f"{b.checkpoint_ns}{_SEP}{b.channel}{_SEP}{b.version}", b.envelope
                    )
                pipe.execute()

    def write_writes(self, rows: Sequence[WriteRow], upsert: bool) -> None:
        if not rows:
            return
        with unavailable_on("redis", self.where, *_ERRORS):
            with self.client.pipeline(transaction=True) as pipe:
                for w in rows:
                    key = self._wkey(w.thread_id, w.checkpoint_ns, w.checkpoint_id)
                    field = f"{w.task_id}{_SEP}{w.idx}"
                    value = _pack(w.channel, w.task_path, w.envelope)
                    if upsert:
                        pipe.hset(key, field, value)
                    else:
                        pipe.hsetnx(key, field, value)
                    pipe.sadd(self._k(w.thread_id, "wkeys"), key)
                pipe.execute()

    # -- reads ----------------------------------------------------------------------

    def _cp_row(self, thread_id: str, ns: str, cid: str, data: bytes) -> CheckpointRow:
        parent, run_id, md, envelope = _unpack(data, 4)
        return CheckpointRow(thread_id, ns, cid, parent, run_id, md or "{}", envelope)

    def read_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRow | None:
        with unavailable_on("redis", self.where, *_ERRORS):
            data = self.client.hget(self._k(thread_id, "cp"), f"{ns}{_SEP}{checkpoint_id}")
        return self._cp_row(thread_id, ns, checkpoint_id, data) if data is not None else None

    def read_blobs(self, thread_id: str, ns: str, keys: Sequence[BlobKey]) -> dict[BlobKey, BlobRow]:
        if not keys:
            return {}
        with unavailable_on("redis", self.where, *_ERRORS):
            values = self.client.hmget(self._k(thread_id, "blob"), [f"{ns}{_SEP}{c}{_SEP}{v}" for c, v in keys])
        return {(c, v): BlobRow(thread_id, ns, c, v, data) for (c, v), data in zip(keys, values) if data is not None}

    def read_writes(self, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        if not checkpoint_ids:
            return []
        with unavailable_on("redis", self.where, *_ERRORS):
            with self.client.pipeline(transaction=False) as pipe:
                for cid in checkpoint_ids:
                    pipe.hgetall(self._wkey(thread_id, ns, cid))
                results = pipe.execute()
        out = []
        for cid, fields in zip(checkpoint_ids, results):
            for field, data in fields.items():
                task_id, idx = field.decode().rsplit(_SEP, 1)
                channel, task_path, envelope = _unpack(data, 3)
                out.append(WriteRow(thread_id, ns, cid, task_id, int(idx), channel or "", task_path or "", envelope))
        return out

    def latest_id(self, thread_id: str, ns: str) -> str | None:
        with unavailable_on("redis", self.where, *_ERRORS):
            ids = self.client.zrevrangebylex(self._k(thread_id, f"ids:{ns}"), "+", "-", start=0, num=1)
        return ids[0].decode() if ids else None

    def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> list[CheckpointRow]:
        per_key_limit = None if filter else limit
        rows: list[CheckpointRow] = []
        with unavailable_on("redis", self.where, *_ERRORS):
            if thread_id is not None:
                threads = [thread_id]
            else:
                threads = self._all_threads()
            for t in threads:
                if ns is not None:
                    namespaces = [ns]
                else:
                    namespaces = sorted(n.decode() for n in self.client.smembers(self._k(t, "nss")))
                for n in namespaces:
                    if checkpoint_id is not None:
                        if before is not None and not checkpoint_id < before:
                            continue
                        ids = [checkpoint_id]
                    else:
                        top = f"({before}" if before is not None else "+"
                        if per_key_limit is None:
                            raw = self.client.zrevrangebylex(self._k(t, f"ids:{n}"), top, "-")
                        else:
                            raw = self.client.zrevrangebylex(
                                self._k(t, f"ids:{n}"), top, "-", start=0, num=per_key_limit
                            )
                        ids = [i.decode() for i in raw]
                    if not ids:
                        continue
                    datas = self.client.hmget(self._k(t, "cp"), [f"{n}{_SEP}{i}" for i in ids])
                    rows.extend(self._cp_row(t, n, i, d) for i, d in zip(ids, datas) if d is not None)
        rows.sort(key=lambda r: r.checkpoint_id, reverse=True)
        if filter:
            rows = [r for r in rows if metadata_matches(_loads(r.metadata_json), filter)]
        return rows[:limit] if limit is not None else rows

    # -- deletes ----------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        t = thread_id
        with unavailable_on("redis", self.where, *_ERRORS):
            nss = self.client.smembers(self._k(t, "nss"))
            wkeys = self.client.smembers(self._k(t, "wkeys"))
            with self.client.pipeline(transaction=True) as pipe:
                keys = [self._k(t, p) for p in ("cp", "nss", "blob", "wkeys", "quarantine", "ledger")]
                keys += [self._k(t, f"ids:{n.decode()}") for n in nss]
                keys += [k.decode() for k in wkeys]
                pipe.delete(*keys)
                pipe.execute()

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        if not wanted:
            return
        with unavailable_on("redis", self.where, *_ERRORS):
            for t in self._all_threads():
                stored = self.client.hgetall(self._k(t, "cp"))
                doomed = []
                for field, data in stored.items():
                    if _unpack(data, 4)[1] in wanted:
                        doomed.append(field.decode().split(_SEP))
                if not doomed:
                    continue
                with self.client.pipeline(transaction=True) as pipe:
                    for ns, cid in doomed:
                        self._drop(pipe, t, ns, cid)
                    pipe.execute()

    def _drop(self, pipe: Any, t: str, ns: str, cid: str) -> None:
        pipe.hdel(self._k(t, "cp"), f"{ns}{_SEP}{cid}")
        pipe.zrem(self._k(t, f"ids:{ns}"), cid)
        pipe.delete(self._wkey(t, ns, cid))
        pipe.srem(self._k(t, "wkeys"), self._wkey(t, ns, cid))

    def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with unavailable_on("redis", self.where, *_ERRORS):
            with self.client.pipeline(transaction=True) as pipe:
                pipe.hdel(self._k(thread_id, "cp"), f"{ns}{_SEP}{checkpoint_id}")
                pipe.zrem(self._k(thread_id, f"ids:{ns}"), checkpoint_id)
                pipe.execute()

    def write_ledger(self, thread_id: str, key: str, envelope: bytes) -> None:
        with unavailable_on("redis", self.where, *_ERRORS):
            self.client.hset(self._k(thread_id, "ledger"), key, envelope)

    def read_ledger(self, thread_id: str) -> dict[str, bytes]:
        with unavailable_on("redis", self.where, *_ERRORS):
            fields = self.client.hgetall(self._k(thread_id, "ledger"))
        return {k.decode(): v for k, v in fields.items()}

    def thread_ids(self) -> list[str]:
        with unavailable_on("redis", self.where, *_ERRORS):
            return self._all_threads()

    def thread_records(self, thread_id: str) -> ThreadRecords:
        """Every live record of one thread, for `verify` and `repair`."""
        t = thread_id
        with unavailable_on("redis", self.where, *_ERRORS):
            cps = self.client.hgetall(self._k(t, "cp"))
            blobs = self.client.hgetall(self._k(t, "blob"))
            wkeys = sorted(k.decode() for k in self.client.smembers(self._k(t, "wkeys")))
            whashes = [self.client.hgetall(k) for k in wkeys]
        checkpoints = []
        for field, data in cps.items():
            ns, cid = field.decode().split(_SEP)
            checkpoints.append(self._cp_row(t, ns, cid, data))
        blob_rows = []
        for field, data in blobs.items():
            ns, channel, version = field.decode().split(_SEP)
            blob_rows.append(BlobRow(t, ns, channel, version, data))
        writes = []
        head = self._k(t, "w:")
        for key, fields in zip(wkeys, whashes):
            ns, cid = key[len(head) :].split(_SEP)
            for field, data in fields.items():
                task_id, idx = field.decode().rsplit(_SEP, 1)
                channel, task_path, envelope = _unpack(data, 3)
                writes.append(WriteRow(t, ns, cid, task_id, int(idx), channel or "", task_path or "", envelope))
        return ThreadRecords(checkpoints, blob_rows, writes)

    def quarantine(self, thread_id: str, ns: str, kind: str, key: str, reason: str, envelope: bytes) -> None:
        with unavailable_on("redis", self.where, *_ERRORS):
            self.client.rpush(
                self._k(thread_id, "quarantine"), _pack(ns, kind, key, reason, envelope, time.time())
            )

    def list_quarantine(self, thread_id: str | None) -> list[QuarantinedRecord]:
        out = []
        with unavailable_on("redis", self.where, *_ERRORS):
            threads = [thread_id] if thread_id is not None else self._all_threads()
            for t in threads:
                for item in self.client.lrange(self._k(t, "quarantine"), 0, -1):
                    ns, kind, key, reason, envelope, at = _unpack(item, 6)
                    out.append(
                        QuarantinedRecord(
                            "redis", t, ns or "", kind or "", key or "", reason or "", envelope, at or 0.0
                        )
                    )
        return out

    def prune(self, thread_id: str, keep: set[tuple[str, str]], keep_blobs: set[tuple[str, str, str]]) -> None:
        t = thread_id
        with unavailable_on("redis", self.where, *_ERRORS):
            fields = self.client.hkeys(self._k(t, "cp"))
            wkeys = {k.decode() for k in self.client.smembers(self._k(t, "wkeys"))}
            blob_fields = self.client.hkeys(self._k(t, "blob"))
            kept_wkeys = {self._wkey(t, ns, cid) for ns, cid in keep}
            with self.client.pipeline(transaction=True) as pipe:
                for f in fields:
                    ns, cid = f.decode().split(_SEP)
                    if (ns, cid) not in keep:
                        self._drop(pipe, t, ns, cid)
                for k in wkeys - kept_wkeys:
                    pipe.delete(k)
                    pipe.srem(self._k(t, "wkeys"), k)
                for f in blob_fields:
                    ns, ch, ver = f.decode().split(_SEP)
                    if (ns, ch, ver) not in keep_blobs:
                        pipe.hdel(self._k(t, "blob"), f)
                pipe.execute()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _loads(metadata_json: str) -> dict[str, Any]:
    try:
        value = json.loads(metadata_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
