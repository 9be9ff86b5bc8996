"""Importing threads from another checkpoint saver: the decisions, and the
readers of the stock savers' tables.

`DurableSaver.import_from` (`importer_async.py` and its generated sync twin)
writes each source checkpoint with `put` and its pending writes with
`put_writes`, the calls LangGraph itself makes. Where the records come from:

- A SqliteSaver / AsyncSqliteSaver or PostgresSaver / AsyncPostgresSaver
  (also what the command line's ``--from`` opens): its tables are read
  directly through its own connection, and every serialized value is
  decoded by `SafeDecoder`, which runs nothing the bytes name: a msgpack
  extension or JSON constructor outside LangGraph's allowlist (plus the
  types the user allows) is refused before anything is built, ``pickle`` is
  never unpickled. A row that cannot be read safely is reported
  (`Rejected`) and skipped; the rest is imported.
- Any other `BaseCheckpointSaver`: through its public ``list``, which
  decodes with the source saver's own serializer (the user's saver, trusted
  as the user's application trusts it).

This module holds those decisions and what the import reports, plus
`open_source`, which opens a stock saver from a path or URL for the CLI.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.base import CipherProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_NUMPY_ARRAY,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)

from ...errors import ConfigError, printable

# How many differences between a source checkpoint and its copy, and how
# many skipped rows, a report keeps (all are counted).
MAX_REPORTED_DIFFERENCES = 100
MAX_REPORTED_REJECTED = 100

# A type the user trusts, as ("module", "Class").
Allowed = tuple[str, str]

# LangGraph's pending-sends channel (checkpoints before format 4 kept sends apart).
TASKS = "__pregel_tasks"


class ImportConflict(ConfigError):
    """Threads of the source already hold a different history in the tiers
    (checkpoints the source does not have). Raised before anything is
    written. `threads` names them (as they are named in the tiers)."""

    def __init__(self, message: str, *, threads: Sequence[str]) -> None:
        super().__init__(message)
        self.threads = list(threads)


class Refused(Exception):
    """A source record that an import will not read; the message says why."""


@dataclass(slots=True, frozen=True)
class Rejected:
    """A source row an import skipped, and why. `thread_id` is bytes when
    the source's thread id is not valid UTF-8 text."""

    thread_id: str | bytes
    checkpoint_ns: str
    checkpoint_id: str | None
    what: str  # "thread", "checkpoint", "pending write of task ... to channel ..."
    reason: str

    def __str__(self) -> str:
        where = f"thread {self.thread_id!r}"
        if self.checkpoint_ns:
            where += f" namespace {self.checkpoint_ns!r}"
        if self.checkpoint_id is not None:
            where += f" checkpoint {self.checkpoint_id!r}"
        return printable(f"{where}: {self.what} skipped: {self.reason}")

    def as_dict(self) -> dict[str, Any]:
        thread = self.thread_id if isinstance(self.thread_id, str) else repr(self.thread_id)
        return {
            "thread_id": thread,
            "checkpoint_ns": self.checkpoint_ns,
            "checkpoint_id": self.checkpoint_id,
            "what": self.what,
            "reason": self.reason,
        }


@dataclass(slots=True)
class ImportReport:
    """What an import did. `differences` lists copies that did not read
    back as their source checkpoint did (empty when all is well, or when
    verification was off); `rejected` lists source rows that were skipped
    because they could not be read safely (a pickled value, a type outside
    the allowlist, an id that is not text, ...). `ok` is True only when
    both are empty."""

    threads: int = 0
    namespaces: int = 0
    checkpoints: int = 0  # written by this import
    skipped: int = 0  # already in the tiers (an import run again, or resumed)
    writes: int = 0  # pending writes written by this import
    verified: int = 0  # checkpoints read back and compared with their source
    differences: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    rejected_count: int = 0  # all skipped rows (`rejected` keeps the first ones)

    @property
    def ok(self) -> bool:
        return not self.differences and not self.rejected_count

    def differ(self, what: str) -> None:
        if len(self.differences) < MAX_REPORTED_DIFFERENCES:
            self.differences.append(what)

    def reject(self, row: Rejected) -> None:
        self.rejected_count += 1
        if len(self.rejected) < MAX_REPORTED_REJECTED:
            self.rejected.append(row)

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "namespaces": self.namespaces,
            "checkpoints": self.checkpoints,
            "skipped": self.skipped,
            "writes": self.writes,
            "verified": self.verified,
            "differences": list(self.differences),
            "rejected": [r.as_dict() for r in self.rejected],
            "rejected_count": self.rejected_count,
            "ok": self.ok,
        }


def parse_allow(text: str) -> Allowed:
    """``"module:Class"`` (the CLI's ``--allow``) as ``("module", "Class")``;
    `ConfigError` if it is not of that shape."""
    module, sep, name = text.partition(":")
    if not sep or not module.strip() or not name.strip() or ":" in name:
        raise ConfigError(
            f"--allow takes module:Class (e.g. myapp.state:Order), not {text!r}; repeat it for each type."
        )
    return module.strip(), name.strip()


def allowed_types(allow: Iterable[Allowed | str | type]) -> frozenset[Allowed]:
    """`allow` as given to `import_from`: ``("module", "Class")`` pairs,
    ``"module:Class"`` strings or the classes themselves."""
    found = set()
    for item in allow:
        if isinstance(item, type):
            found.add((item.__module__, item.__qualname__))
        elif isinstance(item, str):
            found.add(parse_allow(item))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item):
            found.add((item[0], item[1]))
        else:
            raise ConfigError(
                f"allow= takes ('module', 'Class') pairs, 'module:Class' strings or classes, not {item!r}."
            )
    return frozenset(found)


# Extensions that name something to import and call (`jsonplus._create_msgpack_ext_hook`).
_CONSTRUCTING = {
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
}
# Extensions LangGraph rebuilds without naming a callable.
_PLAIN = {EXT_DELTA_SNAPSHOT, EXT_NUMPY_ARRAY}


def _named(module: object, name: object) -> str:
    return f"{module!s:.80}:{name!s:.80}"


class SafeDecoder:
    """Decodes a source's serialized ``(type, bytes)`` values without running
    anything the bytes name.

    First the bytes are walked as plain data (msgpack extensions are unpacked
    as lists, JSON as dicts; no object is built) and every type they would
    rebuild is checked against LangGraph's msgpack allowlist plus `allow`.
    Only then is the value decoded, by LangGraph's strict serializer
    (``allowed_msgpack_modules`` = `allow`, no pickle), which builds nothing
    else. `load` raises `Refused` for a value it will not decode.
    `cipher`: the source's EncryptedSerializer cipher, to decrypt first."""

    def __init__(self, allow: Iterable[Allowed] = (), *, cipher: CipherProtocol | None = None) -> None:
        self.allowed = frozenset(allow)
        json_ids = [(*module.split("."), name) for module, name in sorted(self.allowed)]
        self.serde = JsonPlusSerializer(
            pickle_fallback=False,
            allowed_msgpack_modules=tuple(sorted(self.allowed)) or None,
            allowed_json_modules=json_ids or None,
        )
        self.cipher = cipher
        self._found: dict[Allowed, bool] = {}

    def load(self, tag: str | None, payload: bytes | None) -> Any:
        if tag is None:
            raise Refused("it has no serialization type")
        if self.cipher is not None and "+" in tag:
            tag, cipher_name = tag.split("+", 1)
            try:
                payload = self.cipher.decrypt(cipher_name, payload or b"")
            except Exception as exc:  # any cipher failure: this row cannot be read
                raise Refused(f"it cannot be decrypted ({type(exc).__name__})") from exc
        if tag == "pickle":
            raise Refused(
                "it is pickled (type 'pickle'): unpickling runs whatever the bytes name, so an import never "
                "reads it; re-save the thread without pickle_fallback if you need this value"
            )
        if tag in ("null", "bytes", "bytearray"):
            return self.serde.loads_typed((tag, payload or b""))
        if payload is None:
            raise Refused(f"its {tag!r} value has no bytes")
        if tag == "msgpack":
            blocked = self._msgpack_blocked(payload)
        elif tag == "json":
            blocked = self._json_blocked(payload)
        else:
            raise Refused(
                f"its serialization type {tag!r:.40} is not one an import reads (msgpack, json, null, bytes; "
                "an encrypted source needs its saver's serde to be an EncryptedSerializer)"
            )
        if blocked:
            names = ", ".join(sorted(blocked)[:5])
            raise Refused(
                f"it would rebuild {names}, not on the allowlist of types an import builds; if you trust "
                "this source and the type is your application's, allow it (--allow module:Class, or "
                "allow=[('module', 'Class')])"
            )
        try:
            return self.serde.loads_typed((tag, payload))
        except Exception as exc:  # any decoder failure: this row cannot be read
            raise Refused(f"it cannot be decoded ({type(exc).__name__}: {exc!s:.200})") from exc

    def _importable(self, module: str, name: str) -> bool:
        """Whether an allowed type can be built in this process. LangGraph's
        decoder hands back a type it cannot import as its plain data, which
        an import would then store for good in place of the object."""
        key = (module, name)
        if key not in self._found:
            try:
                getattr(importlib.import_module(module), name)
                self._found[key] = True
            except Exception:  # any failure to import the user's module: not importable here
                self._found[key] = False
        return self._found[key]

    def _msgpack_blocked(self, payload: bytes) -> set[str]:
        blocked: set[str] = set()
        missing: set[str] = set()

        def walk(code: int, data: bytes) -> None:
            # The extension's own bytes, unpacked as plain data: nothing is built.
            inner = ormsgpack.unpackb(data, ext_hook=walk, option=ormsgpack.OPT_NON_STR_KEYS)
            if code in _PLAIN:
                return None
            if code not in _CONSTRUCTING and code != EXT_METHOD_SINGLE_ARG:
                blocked.add(f"msgpack extension {code}")
            elif not isinstance(inner, list) or len(inner) < 3 or not all(isinstance(x, str) for x in inner[:2]):
                blocked.add(f"a malformed msgpack extension {code}")
            elif code == EXT_METHOD_SINGLE_ARG:
                method = inner[3] if len(inner) > 3 and isinstance(inner[3], str) else "?"
                if (inner[0], inner[1], method) not in SAFE_MSGPACK_METHODS:
                    blocked.add(f"{_named(inner[0], inner[1])}.{method:.80}")
            elif (inner[0], inner[1]) not in SAFE_MSGPACK_TYPES:
                if (inner[0], inner[1]) not in self.allowed:
                    blocked.add(_named(inner[0], inner[1]))
                elif not self._importable(inner[0], inner[1]):
                    missing.add(_named(inner[0], inner[1]))
            return None

        try:
            ormsgpack.unpackb(payload, ext_hook=walk, option=ormsgpack.OPT_NON_STR_KEYS)
        except Exception as exc:  # any decoder failure: this row cannot be read
            raise Refused(f"it is not valid msgpack ({type(exc).__name__}: {exc!s:.200})") from exc
        if missing and not blocked:
            raise Refused(
                f"it holds {', '.join(sorted(missing)[:5])}, allowed but not importable in this process: run "
                "the import where your application's modules can be imported"
            )
        return blocked

    def _json_blocked(self, payload: bytes) -> set[str]:
        blocked: set[str] = set()

        def walk(obj: dict[str, Any]) -> dict[str, Any]:
            # LangGraph's reviver imports and calls an lc=2 "constructor" (lc=1
            # goes to langchain's own allowlist of its core objects).
            if obj.get("lc") == 2 and obj.get("type") == "constructor" and obj.get("id") is not None:
                ids = obj["id"]
                if not isinstance(ids, list) or len(ids) < 2 or not all(isinstance(i, str) for i in ids):
                    blocked.add("a malformed JSON constructor")
                else:
                    key = (".".join(ids[:-1]), ids[-1])
                    if key not in SAFE_MSGPACK_TYPES and key not in self.allowed:
                        blocked.add(_named(*key))
            return obj

        try:
            json.loads(payload, object_hook=walk)
        except Exception as exc:  # any decoder failure: this row cannot be read
            raise Refused(f"it is not valid JSON ({type(exc).__name__}: {exc!s:.200})") from exc
        return blocked


def text_of(raw: object, what: str) -> str:
    """A source id read as bytes (so SQLite never decodes it), as text;
    `Refused` when it is missing or not valid UTF-8."""
    if raw is None:
        raise Refused(f"its {what} is NULL")
    if isinstance(raw, str):
        return raw
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused(f"its {what} {bytes(raw)!r:.80} is not valid UTF-8 text") from exc
    return str(raw)


def _bytes_or_none(raw: object) -> bytes | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return raw.encode("utf-8")
    return bytes(raw)  # type: ignore[call-overload]


# -- the stock savers' tables ----------------------------------------------------------

Fetch = Callable[[str, Sequence[Any]], Sequence[Sequence[Any]]]
AFetch = Callable[[str, Sequence[Any]], Awaitable[Sequence[Sequence[Any]]]]


@dataclass(frozen=True, slots=True)
class Tables:
    """The SQL that reads one stock saver's tables, every id as bytes (so a
    SQLite id that is not UTF-8 is a row to report, not a driver error) and
    every value as its stored ``(type, bytes)``."""

    kind: Literal["sqlite", "postgres"]

    @property
    def mark(self) -> str:
        return "?" if self.kind == "sqlite" else "%s"

    @property
    def columns(self) -> str:
        """(table, column) of the tables the import reads."""
        if self.kind == "sqlite":
            return (
                "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p "
                "WHERE m.type = 'table' AND m.name IN ('checkpoints', 'writes')"
            )
        return (
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes')"
        )

    @property
    def ids(self) -> str:
        """thread, namespace, checkpoint id, and whether the first two are stored as text."""
        if self.kind == "sqlite":
            return (
                "SELECT CAST(thread_id AS BLOB), CAST(checkpoint_ns AS BLOB), CAST(checkpoint_id AS BLOB), "
                "typeof(thread_id) = 'text' AND typeof(checkpoint_ns) = 'text' FROM checkpoints"
            )
        return "SELECT thread_id, checkpoint_ns, checkpoint_id, true FROM checkpoints"

    @property
    def checkpoints(self) -> str:
        """id, parent id, type, checkpoint, metadata of one thread and namespace."""
        m = self.mark
        if self.kind == "sqlite":
            return (
                "SELECT CAST(checkpoint_id AS BLOB), CAST(parent_checkpoint_id AS BLOB), CAST(type AS BLOB), "
                "CAST(checkpoint AS BLOB), CAST(metadata AS BLOB) FROM checkpoints "
                f"WHERE thread_id = {m} AND checkpoint_ns = {m}"
            )
        return (
            "SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint::text, metadata::text FROM checkpoints "
            f"WHERE thread_id = {m} AND checkpoint_ns = {m}"
        )

    @property
    def blobs(self) -> str:
        m = self.mark
        return (
            f"SELECT channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = {m} AND checkpoint_ns = {m}"
        )

    def writes(self, has_task_path: bool) -> str:
        """checkpoint id, task id, task path, idx, channel, type, value."""
        m = self.mark
        if self.kind == "sqlite":
            path = "CAST(task_path AS BLOB)" if has_task_path else "''"
            return (
                f"SELECT CAST(checkpoint_id AS BLOB), CAST(task_id AS BLOB), {path}, idx, CAST(channel AS BLOB), "
                f"CAST(type AS BLOB), CAST(value AS BLOB) FROM writes WHERE thread_id = {m} AND checkpoint_ns = {m}"
            )
        path = "task_path" if has_task_path else "''"
        return (
            f"SELECT checkpoint_id, task_id, {path}, idx, channel, type, blob FROM checkpoint_writes "
            f"WHERE thread_id = {m} AND checkpoint_ns = {m}"
        )

    def layout(self, rows: Iterable[Sequence[Any]]) -> tuple[bool, str | None, bool]:
        """From `columns`' rows: whether the source has checkpoints, its
        writes table (None without one), and whether that has task_path."""
        found: dict[str, set[str]] = {}
        for table, column in rows:
            found.setdefault(str(table), set()).add(str(column))
        writes = "writes" if self.kind == "sqlite" else "checkpoint_writes"
        has_writes = writes in found
        return "checkpoints" in found, writes if has_writes else None, "task_path" in found.get(writes, set())


@dataclass(slots=True)
class TableAccess:
    """How an import reads one stock saver's tables: the SQL, a fetch through
    the saver's own connection (sync or async, as the face) and the decoder."""

    tables: Tables
    fetch: Any  # Fetch on the sync face, AFetch on the async one
    cipher: CipherProtocol | None = None


def _plain_serde(saver: BaseCheckpointSaver) -> tuple[bool, CipherProtocol | None]:
    """Whether `saver` stores what LangGraph's JsonPlusSerializer writes (so
    its tables can be read without it), and the cipher it encrypts with."""
    serde = saver.serde
    if isinstance(serde, EncryptedSerializer):
        return isinstance(serde.serde, JsonPlusSerializer), serde.cipher
    return isinstance(serde, JsonPlusSerializer), None


def sync_tables(source: BaseCheckpointSaver) -> TableAccess | None:
    """Direct access to `source`'s tables if it is a SqliteSaver or a
    PostgresSaver with LangGraph's serializer; None for any other saver."""
    plain, cipher = _plain_serde(source)
    if not plain:
        return None
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        SqliteSaver = None  # type: ignore[assignment,misc]
    if SqliteSaver is not None and type(source) is SqliteSaver:
        sqlite_saver = source

        def fetch_sqlite(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
            with sqlite_saver.lock:
                return sqlite_saver.conn.execute(sql, tuple(params)).fetchall()

        return TableAccess(Tables("sqlite"), fetch_sqlite, cipher)
    try:
        from langgraph.checkpoint.postgres import PostgresSaver, _internal
        from psycopg.rows import tuple_row
    except ImportError:
        return None
    if type(source) is PostgresSaver:
        pg_saver = source

        def fetch_postgres(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
            with pg_saver.lock, _internal.get_connection(pg_saver.conn) as conn:
                with conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(sql, list(params))
                    return cur.fetchall()

        return TableAccess(Tables("postgres"), fetch_postgres, cipher)
    return None


def async_tables(source: BaseCheckpointSaver) -> TableAccess | None:
    """`sync_tables` for the async face: an AsyncSqliteSaver or an
    AsyncPostgresSaver with LangGraph's serializer, or a SqliteSaver or
    PostgresSaver (their queries then run on the event loop: these savers
    have no async face); None for any other saver."""
    plain, cipher = _plain_serde(source)
    if not plain:
        return None
    sync = sync_tables(source)
    if sync is not None:
        fetch = sync.fetch

        async def fetch_on_loop(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
            return fetch(sql, params)

        return TableAccess(sync.tables, fetch_on_loop, sync.cipher)
    try:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError:
        AsyncSqliteSaver = None  # type: ignore[assignment,misc]
    if AsyncSqliteSaver is not None and type(source) is AsyncSqliteSaver:
        sqlite_saver = source

        async def fetch_sqlite(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
            # setup() is what the saver's own reads start with (it opens the connection).
            await sqlite_saver.setup()
            async with sqlite_saver.lock, sqlite_saver.conn.execute(sql, tuple(params)) as cur:
                return list(await cur.fetchall())

        return TableAccess(Tables("sqlite"), fetch_sqlite, cipher)
    try:
        from langgraph.checkpoint.postgres import _ainternal
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import tuple_row
    except ImportError:
        return None
    if type(source) is AsyncPostgresSaver:
        pg_saver = source

        async def fetch_postgres(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
            async with pg_saver.lock, _ainternal.get_connection(pg_saver.conn) as conn:
                async with conn.cursor(row_factory=tuple_row) as cur:
                    await cur.execute(sql, list(params))
                    return await cur.fetchall()

        return TableAccess(Tables("postgres"), fetch_postgres, cipher)
    return None


# -- source rows -> checkpoint tuples (no I/O) -------------------------------------------

SourceIds = dict[str, dict[str, set[str]]]  # thread -> namespace -> checkpoint ids


def source_ids(rows: Iterable[Sequence[Any]]) -> tuple[SourceIds, list[Rejected]]:
    """`Tables.ids` rows grouped by thread and namespace; threads whose id
    cannot be used (not UTF-8 text) are returned as rejected, once each."""
    found: SourceIds = {}
    bad: dict[Any, Rejected] = {}
    for raw_thread, raw_ns, raw_cid, is_text in rows:
        try:
            thread = text_of(raw_thread, "thread id")
            ns = text_of(raw_ns, "namespace")
            if not is_text:
                raise Refused("its thread id or namespace is stored as bytes (a BLOB), not text")
        except Refused as why:
            key = (_bytes_or_none(raw_thread), _bytes_or_none(raw_ns))
            if key not in bad:
                shown: str | bytes = raw_thread if isinstance(raw_thread, str) else _bytes_or_none(raw_thread) or b""
                with contextlib.suppress(Refused):
                    shown = text_of(raw_thread, "thread id")
                bad[key] = Rejected(shown, "", None, "thread", str(why))
            continue
        try:
            cid = text_of(raw_cid, "checkpoint id")
        except Refused:
            cid = repr(_bytes_or_none(raw_cid))  # reported when the thread is read
        found.setdefault(thread, {}).setdefault(ns, set()).add(cid)
    return found, list(bad.values())


@dataclass(slots=True)
class SourceThread:
    """One thread and namespace of a source, oldest checkpoint first, with
    what could not be read. `task_paths`: (checkpoint id, task id) -> path."""

    tuples: list[CheckpointTuple] = field(default_factory=list)
    task_paths: dict[tuple[str, str], str] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)


def _json_object(raw: object, what: str) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw if isinstance(raw, str) else bytes(raw))  # type: ignore[call-overload]
    except (TypeError, ValueError) as exc:
        raise Refused(f"its {what} is not JSON ({exc!s:.100})") from exc
    if not isinstance(value, dict):
        raise Refused(f"its {what} is not a JSON object")
    return value


def source_thread(
    tables: Tables,
    decoder: SafeDecoder,
    thread_id: str,
    ns: str,
    checkpoint_rows: Iterable[Sequence[Any]],
    blob_rows: Iterable[Sequence[Any]],
    write_rows: Iterable[Sequence[Any]],
) -> SourceThread:
    """The checkpoint tuples the stock saver's `list` would build from these
    rows, each value decoded by `decoder`. A checkpoint that cannot be read
    safely is rejected whole; a pending write that cannot is rejected alone."""
    out = SourceThread()
    # Pending writes first: a checkpoint before format 4 takes its sends from its parent's.
    writes: dict[str, list[tuple[str, str, int, str, Any]]] = {}
    for raw_cid, raw_task, raw_path, raw_idx, raw_channel, raw_type, value in write_rows:
        try:
            of = text_of(raw_cid, "checkpoint id")
        except Refused:
            continue  # its checkpoint (if any) is rejected for the same id
        task, channel = raw_task, raw_channel
        try:
            task = text_of(raw_task, "task id")
            channel = text_of(raw_channel, "channel")
            path = text_of(raw_path, "task path")
            if not isinstance(raw_idx, int):
                raise Refused(f"its index {raw_idx!r:.40} is not an integer")
            tag = text_of(raw_type, "type") if raw_type is not None else None
            decoded = decoder.load(tag, _bytes_or_none(value))
        except Refused as why:
            what = f"pending write of task {task!r:.80} to channel {channel!r:.80}"
            out.rejected.append(Rejected(thread_id, ns, of, printable(what), str(why)))
            continue
        writes.setdefault(of, []).append((path, str(task), raw_idx, str(channel), decoded))
    blobs: dict[tuple[str, str], tuple[str, bytes | None]] = {}
    for raw_channel, raw_version, raw_type, blob in blob_rows:
        blobs[(str(raw_channel), str(raw_version))] = (str(raw_type), _bytes_or_none(blob))
    for raw_cid, raw_parent, raw_type, raw_checkpoint, raw_metadata in checkpoint_rows:
        cid: str | None = None
        try:
            cid = text_of(raw_cid, "checkpoint id")
            parent = text_of(raw_parent, "parent checkpoint id") if raw_parent is not None else None
            if tables.kind == "sqlite":
                tag = text_of(raw_type, "type") if raw_type is not None else None
                checkpoint = decoder.load(tag, _bytes_or_none(raw_checkpoint))
                if not isinstance(checkpoint, dict):
                    raise Refused("its checkpoint is not a dict")
            else:
                checkpoint = _json_object(raw_checkpoint, "checkpoint")
                values = dict(checkpoint.get("channel_values") or {})
                for channel, version in (checkpoint.get("channel_versions") or {}).items():
                    stored = blobs.get((channel, str(version)))
                    if stored is None or stored[0] == "empty":
                        continue
                    try:
                        values[channel] = decoder.load(*stored)
                    except Refused as why:
                        raise Refused(f"its channel {channel!r:.80}: {why}") from why
                if checkpoint.get("v", 4) < 4 and parent is not None:
                    _migrate_pending_sends(checkpoint, values, writes.get(parent, []))
                checkpoint["channel_values"] = values
            metadata = _json_object(raw_metadata, "metadata")
        except Refused as why:
            shown = cid if cid is not None else repr(_bytes_or_none(raw_cid))
            out.rejected.append(Rejected(thread_id, ns, shown, "checkpoint", str(why)))
            continue
        mine = sorted(writes.get(cid, []), key=lambda w: (w[0], w[1], w[2]))
        for path, task, _, _, _ in mine:
            out.task_paths[(cid, task)] = path
        out.tuples.append(
            CheckpointTuple(
                config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
                checkpoint=checkpoint,
                metadata=metadata,  # type: ignore[arg-type]
                parent_config=(
                    {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                    if parent
                    else None
                ),
                pending_writes=[(task, channel, value) for _, task, _, channel, value in mine],
            )
        )
    out.tuples.sort(key=checkpoint_id)
    return out


def _migrate_pending_sends(
    checkpoint: dict[str, Any], values: dict[str, Any], parent_writes: Sequence[tuple[str, str, int, str, Any]]
) -> None:
    """As PostgresSaver's `list` does for a checkpoint before format 4: the
    sends its parent's tasks wrote become the value of the tasks channel."""
    sends = [w[4] for w in sorted(parent_writes, key=lambda w: (w[0], w[1], w[2])) if w[3] == TASKS]
    if not sends:
        return
    values[TASKS] = sends
    versions = checkpoint.setdefault("channel_versions", {})
    versions[TASKS] = max(versions.values()) if versions else f"{1:032}.{0.0:016}"


def renamed(tup: CheckpointTuple, thread_id: str) -> CheckpointTuple:
    """`tup` under another thread id (an import with a thread prefix)."""

    def moved(config: RunnableConfig) -> RunnableConfig:
        return {"configurable": {**config["configurable"], "thread_id": thread_id}}

    parent = moved(tup.parent_config) if tup.parent_config is not None else None
    return tup._replace(config=moved(tup.config), parent_config=parent)


def conflicts(source: Mapping[str, set[str]], target: Mapping[str, set[str]]) -> int:
    """How many checkpoints a thread in the tiers (namespace -> ids) holds
    that the source's thread does not: 0 for a thread that is new, or the
    same history imported before (fully or in part)."""
    return sum(len(ids - source.get(ns, set())) for ns, ids in target.items())


def checkpoint_id(tup: CheckpointTuple) -> str:
    return str(tup.config["configurable"]["checkpoint_id"])


def parent_id(tup: CheckpointTuple) -> str | None:
    if not tup.parent_config:
        return None
    return tup.parent_config["configurable"].get("checkpoint_id")


def new_versions_for(tup: CheckpointTuple, parent_versions: Mapping[str, Any] | None) -> dict[str, Any]:
    """The channel versions to store with `tup`: those its parent does not
    hold (all of them when the parent was not imported: a source that
    pruned it). A value the source reads as absent is stored as empty."""
    versions = tup.checkpoint.get("channel_versions", {})
    if parent_versions is None:
        return dict(versions)
    return {ch: v for ch, v in versions.items() if parent_versions.get(ch) != v}


def writes_by_task(tup: CheckpointTuple) -> list[tuple[str, list[tuple[str, Any]]]]:
    """`tup`'s pending writes as `put_writes` calls: per task, in order (a
    write's index is its position, special channels aside, as LangGraph numbers them)."""
    tasks: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or []:
        tasks.setdefault(task_id, []).append((channel, value))
    return list(tasks.items())


def write_keys(tup: CheckpointTuple) -> list[tuple[str, str]]:
    return sorted((task_id, channel) for task_id, channel, _ in tup.pending_writes or [])


def differences(source: CheckpointTuple, copy: CheckpointTuple | None) -> list[str]:
    """How `copy` (read back from the tiers) differs from `source`."""
    where = f"thread {source.config['configurable']['thread_id']!r} checkpoint {checkpoint_id(source)}"
    if copy is None:
        return [f"{where}: not found after the import"]
    found = []
    if parent_id(copy) != parent_id(source):
        found.append(f"{where}: parent {parent_id(copy)} instead of {parent_id(source)}")
    a, b = source.checkpoint, copy.checkpoint
    for key in ("channel_versions", "versions_seen"):
        if a.get(key) != b.get(key):
            found.append(f"{where}: {key} differ")
    values_a, values_b = a.get("channel_values", {}), b.get("channel_values", {})
    for channel in sorted(set(values_a) | set(values_b)):
        if values_a.get(channel) != values_b.get(channel):
            found.append(f"{where}: channel {channel!r} differs")
    # As every saver stores metadata today: without LangGraph 0.2's "writes".
    if get_serializable_checkpoint_metadata({}, source.metadata) != dict(copy.metadata or {}):
        found.append(f"{where}: metadata differ")
    if _writes(source) != _writes(copy):
        found.append(f"{where}: pending writes differ")
    return found


def _writes(tup: CheckpointTuple) -> list[tuple[str, str, Any]]:
    # Stable: a task's writes keep their order.
    return sorted(tup.pending_writes or [], key=lambda w: (w[0], w[1]))


@contextlib.contextmanager
def open_source(spec: str) -> Iterator[BaseCheckpointSaver]:
    """A stock saver reading `spec`: a SqliteSaver file (a path, or
    ``sqlite:///path``) or a PostgresSaver database (``postgresql://`` URL).
    Raises ConfigError when the file is missing or the stock saver's package
    is not installed (``pip install 'langgraph-durable[import]'``)."""
    if spec.startswith(("postgresql://", "postgres://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise ConfigError(
                "importing from Postgres needs langgraph-checkpoint-postgres: pip install 'langgraph-durable[import]'"
            ) from exc
        import psycopg

        from ...tiers.base import redact
        from ...tiers.postgres.tier_async import connect_error

        shown = redact(spec)
        try:
            opened = PostgresSaver.from_conn_string(spec)
            saver = opened.__enter__()
        except psycopg.Error as exc:
            raise connect_error(exc, f"the import source {shown}", "--from") from exc
        try:
            try:
                with saver._cursor() as cur:  # the saver's own connection (or a pooled one)
                    cur.execute("SELECT 1 FROM checkpoints LIMIT 1")
            except psycopg.errors.UndefinedTable as exc:
                raise ConfigError(
                    f"{shown} is not a PostgresSaver database that can be read (it has no checkpoints table): "
                    "check that --from names the database your application wrote (and set up)."
                ) from exc
            yield saver
        finally:
            opened.__exit__(None, None, None)
        return
    path = spec.removeprefix("sqlite:///") if spec.startswith("sqlite:///") else spec
    if "://" in path:
        raise ConfigError(
            f"--from takes a SqliteSaver file (a path or sqlite:///path) or a postgresql:// URL, not {spec!r}."
        )
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise ConfigError(
            "importing from SQLite needs langgraph-checkpoint-sqlite: pip install 'langgraph-durable[import]'"
        ) from exc
    try:
        # Read-only: an import never changes its source.
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("SELECT 1 FROM checkpoints LIMIT 1")
    except sqlite3.Error as exc:
        raise ConfigError(f"{path!r} is not a SqliteSaver file that can be read ({exc}).") from exc
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()
