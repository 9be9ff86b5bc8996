"""Turning LangGraph objects into sealed rows and back. No I/O here.

`RecordCodec` is the only place that calls the serializer: each record is
serialized once per `put`, and the resulting rows are handed to every tier.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import logging
import math
import re
import sys
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeGuard, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde import jsonplus as _jsonplus
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..errors import ConfigError, RecordTooLarge, SerializationError, UndecodableRecord
from ..ledger import LedgerEntry
from .delta_trail import PLAIN, Dumped, History
from .deltas import DELTA_TAG, MSGPACK_TAG, DeltaMemo, Last, Piece, Remember, decode_piece, plan, rebuild
from .records import (
    BadRecord,
    BlobRow,
    CheckpointRow,
    WriteRow,
    blob_context,
    checkpoint_context,
    key_fingerprint,
    ledger_context,
    metadata_json,
    open_envelope_any,
    seal,
    write_context,
)

logger = logging.getLogger("langgraph_durable")

EMPTY_TAG = "empty"
# Generous: a state this large is almost always a mistake (a file or a model
# in the state), and every super-step rewrites the channels that changed.
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024


# Ids and names become parts of every tier's keys. Postgres caps one index
# entry at 2,704 bytes and indexes (thread, namespace, checkpoint id, task id)
# or (thread, namespace, channel, version) together: two ids plus two names
# stay under that cap with room to spare. Limits are in UTF-8 bytes.
DEFAULT_MAX_ID_BYTES = 1024  # thread ids, checkpoint namespaces
DEFAULT_MAX_NAME_BYTES = 256  # task ids, channel names, channel versions (a checkpoint id is a 36-byte UUID)


def fits_key(value: object, limit: int | None) -> TypeGuard[str]:
    """Whether `value` is a key part `check_key_part` takes, answered
    without its error message (built only for one it refuses): the common
    case, short ASCII text, whose length in bytes is its length."""
    return type(value) is str and value.isascii() and "\x00" not in value and (limit is None or len(value) <= limit)


def check_key_part(value: object, *, what: str, limit: int | None) -> str:
    """`value` if every tier can store it as part of a key, else `ConfigError`.

    Checked before any tier is touched: Postgres text cannot hold a NUL (and
    Redis keys use NUL as a separator), no tier can encode a lone surrogate,
    and an over-long key fails in Postgres only after nearer tiers took it.
    `limit` None checks everything but the length.
    """
    if fits_key(value, limit):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a str, not {type(value).__name__} ({value!r:.80}).")
    if "\x00" in value:
        raise ConfigError(
            f"{what} {value!r:.80} contains a NUL character (\\x00), which Postgres text cannot store; remove it."
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} {value!r:.80} is not valid Unicode ({exc.reason}); pass a str that encodes to UTF-8."
        ) from exc
    if limit is not None and size > limit:
        raise ConfigError(
            f"{what} is {size:,} bytes long (UTF-8), over the limit of {limit:,} (it is part of every "
            f"tier's keys): use a shorter id, e.g. a hash or uuid of it ({value[:40]!r}...)."
        )
    return value


# A checkpoint id as LangGraph writes it: str(uuid6()) (`langgraph.checkpoint.
# base.id`), a canonical lowercase UUID. Every version that used uuids wrote
# this form; the conformance suite asks for str(uuid4()) ids too. Checkpoint
# ids order the history as strings (the newest is the greatest, in every tier
# and in the stock savers), and a deletion marker is one, so any other text
# ("not-a-uuid", upper case, braces) would sort among them wrongly, and
# LangGraph itself fails later on it.
_CHECKPOINT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CHECKPOINT_ID_EXAMPLE = "1ef4f797-8335-6428-8001-8a1503f9b875"


def _is_checkpoint_id(value: object) -> bool:
    return isinstance(value, str) and _CHECKPOINT_ID.fullmatch(value) is not None


def check_checkpoint_id(value: object, *, what: str) -> str:
    """`value` if it is a checkpoint id LangGraph writes (a lowercase UUID
    string, 8-4-4-4-12 hex digits, as ``str(uuid6())`` gives), else
    `ConfigError` saying what an id must look like. Checked before any tier
    is touched, so a refused id leaves nothing written."""
    if isinstance(value, str) and _CHECKPOINT_ID.fullmatch(value):
        return value
    shown = f"{value!r:.80}" if isinstance(value, str) else f"{value!r:.80} ({type(value).__name__})"
    hint = ""
    if isinstance(value, (str, uuid.UUID)):
        try:
            canonical = str(uuid.UUID(str(value)))
        except ValueError:
            pass
        else:
            hint = f"; written that way, this one is {canonical!r}"
    raise ConfigError(
        f"{what} {shown} is not a checkpoint id: a checkpoint id is a lowercase UUID string, 8-4-4-4-12 hex "
        f"digits such as {CHECKPOINT_ID_EXAMPLE!r}, as LangGraph writes it (str(uuid6()) from "
        f"langgraph.checkpoint.base.id){hint}. Pass the config put() returned, or an id from list()."
    )


def thread_id_of(thread_id: object, *, what: str) -> str:
    """A bare thread id (`delete_thread`, `copy_thread`, the ledger, ...),
    checked and converted as `thread_of` does."""
    return thread_of({"configurable": {"thread_id": thread_id}}, what=what)


def thread_of(config: RunnableConfig | None, *, what: str) -> str:
    """`thread_id` from a config, or a `ConfigError` that says how to pass it.

    Also checks the config's ``checkpoint_ns`` and ``checkpoint_id`` (a
    checkpoint id LangGraph writes: `check_checkpoint_id`), so a key no tier
    can store, or an id that does not order as checkpoint ids do, is refused
    before any tier is touched. An int or UUID thread id is taken as
    ``str(thread_id)``, as LangGraph's own ``invoke`` and ``get_state`` do
    (5 and "5" are one thread there too); any other non-str raises
    `ConfigError`.
    """
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ConfigError(
            f"{what} needs a thread id: pass "
            '{"configurable": {"thread_id": "<your thread>"}} as the config '
            "(graph.invoke(inputs, config) / saver methods)."
        )
    if isinstance(thread_id, (int, uuid.UUID)) and not isinstance(thread_id, bool):
        thread_id = str(thread_id)
    elif not isinstance(thread_id, str):
        raise ConfigError(
            f"{what}: thread_id must be a str, not {type(thread_id).__name__} ({thread_id!r:.80}); "
            "pass str(thread_id) if its text names the thread."
        )
    if not fits_key(thread_id, DEFAULT_MAX_ID_BYTES):
        check_key_part(thread_id, what=f"{what}: thread_id", limit=DEFAULT_MAX_ID_BYTES)
    if (ns := configurable.get("checkpoint_ns")) and not fits_key(ns, DEFAULT_MAX_ID_BYTES):
        check_key_part(ns, what=f"{what}: checkpoint_ns", limit=DEFAULT_MAX_ID_BYTES)
    if (cid := configurable.get("checkpoint_id")) and not _is_checkpoint_id(cid):
        check_checkpoint_id(cid, what=f"{what}: checkpoint_id")
    return thread_id


def _non_finite(value: Any, path: str = "", depth: int = 0) -> tuple[str, float] | None:
    """Key path and value of the first NaN or infinity inside `value`."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    if depth < 32:
        items: Any = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
        )
        for key, item in items:
            found = _non_finite(item, f"{path}[{key!r}]", depth + 1)
            if found is not None:
                return found
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def checked_metadata_json(md: dict[str, Any]) -> str:
    """`metadata_json(md)`, or `SerializationError` naming the metadata key
    that every tier cannot store: NaN or infinity (not JSON; the Postgres
    jsonb column rejects them), text that is not valid Unicode, a dict key
    JSON cannot hold."""
    try:
        try:
            text = metadata_json(md, allow_nan=False)  # a NaN or an infinity raises ValueError
        except ValueError:
            # As a value JSON cannot hold it; as a dict key it is the text "NaN".
            text = metadata_json(md)
            json.loads(text, parse_constant=_reject_constant)
        text.encode("utf-8")
        return text
    except (TypeError, ValueError, RecursionError) as whole:
        for key, value in md.items():
            try:
                one = metadata_json({key: value})
                json.loads(one, parse_constant=_reject_constant)
                one.encode("utf-8")
            except (TypeError, ValueError, RecursionError) as exc:
                bad = _non_finite(value)
                if bad is not None:
                    where = f" at {bad[0]}" if bad[0] else ""
                    problem = f"holds {bad[1]!r}{where}, which JSON (and the Postgres jsonb column) cannot store"
                    fix = "store None or a string such as 'nan' instead"
                else:
                    problem = f"cannot be stored as JSON ({exc})"
                    fix = "store plain JSON data (str keys, valid Unicode text, finite numbers)"
                raise SerializationError(
                    f"checkpoint metadata key {key!r} {problem}: {fix}, or keep the value in the state.",
                    channel=str(key),
                ) from exc
        raise SerializationError(
            f"checkpoint metadata cannot be stored as JSON ({whole}); keep it to plain JSON data.",
            channel="metadata",
        ) from whole


def version_key(version: str | int | float) -> str:
    """Channel versions may be str, int or float; tiers key blobs by text."""
    return str(version)


class KeyRing:
    """The signing keys records are sealed and verified with: the sealing key
    first, then older keys still accepted (b"" accepts unsigned records).

    Shared by a codec and its `with_allowlist` clones, so the store key a
    saver adopts at setup (`adopt`) reaches every clone made before it."""

    __slots__ = ("keys",)

    def __init__(self, keys: Sequence[bytes]) -> None:
        self.keys: tuple[bytes, ...] = tuple(keys) or (b"",)

    def adopt(self, store_key: bytes, *, unsigned_too: bool) -> None:
        """Seal with `store_key` from now on; keep accepting unsigned records
        when the store already holds some (`unsigned_too`)."""
        self.keys = (store_key, b"") if unsigned_too else (store_key,)

    def accept(self, key: bytes) -> None:
        """Also verify records sealed with `key` (never seal with it)."""
        if key not in self.keys:
            self.keys = (*self.keys, key)


# `RecordCodec._loads` collects here what LangGraph's msgpack allowlist
# blocked while it decoded one record: LangGraph then hands back the object's
# plain data and only logs, and a value must never change type silently.
_BLOCKED: ContextVar[list[str] | None] = ContextVar("langgraph_durable_blocked_types", default=None)


def _on_serde_event(event: Any) -> None:
    found = _BLOCKED.get()
    if found is not None and event.get("kind") in ("msgpack_blocked", "msgpack_method_blocked"):
        name = f"{event.get('module')}.{event.get('name')}"
        if event.get("method"):
            name += f".{event['method']}"
        found.append(name)


register_serde_event_listener(_on_serde_event)


# And here what LangGraph could not rebuild although it was allowed: a class
# that cannot be imported in this process (renamed, moved, a module this
# process lacks) or that refused the stored arguments. LangGraph then hands
# back the stored data instead (`_reconstruction_fallback`, and for pydantic
# models the field dict) with at most one log line per type and process.
# Two hooks see it, both idle outside `RecordCodec._loads`: the fallback
# function, and every msgpack ext hook LangGraph's decoder runs (nested
# values included), which it finds as `ormsgpack` in its module.
_UNBUILT: ContextVar[list[str] | None] = ContextVar("langgraph_durable_unbuilt_types", default=None)
_PYDANTIC_EXTS = (_jsonplus.EXT_PYDANTIC_V1, _jsonplus.EXT_PYDANTIC_V2)


def _ext_type_name(real: Any, data: bytes) -> str:
    """``module.Name`` that a constructor/pydantic ext payload names."""
    try:
        tup = real.unpackb(data, ext_hook=lambda code, data: None, option=real.OPT_NON_STR_KEYS)
        return f"{tup[0]}.{tup[1]}"
    except Exception:
        return "a stored object"


class _WatchedMsgpack:
    """Stands in for `ormsgpack` inside LangGraph's jsonplus module: the same
    functions, except that while a record is being decoded (`_UNBUILT` set)
    each ext hook is watched for a pydantic model handed back as its dict."""

    def __init__(self, real: Any) -> None:
        self._real = real
        # Copied once: `packb` and the constants are looked up on every
        # value LangGraph encodes, nested ones too (no `__getattr__` call).
        for name in dir(real):
            if not name.startswith("__") and name != "unpackb":
                setattr(self, name, getattr(real, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def unpackb(self, data: Any, *args: Any, ext_hook: Any = None, **kwargs: Any) -> Any:
        unbuilt = _UNBUILT.get()
        if ext_hook is None or unbuilt is None:
            return self._real.unpackb(data, *args, ext_hook=ext_hook, **kwargs)
        real, blocked = self._real, _BLOCKED.get()

        def watched(code: int, payload: bytes) -> Any:
            seen = len(blocked) if blocked is not None else 0
            value = ext_hook(code, payload)
            # A model is never exactly a dict; blocked types are reported
            # apart. (A RootModel comes back as its root value wherever it
            # is defined: LangGraph passes it the stored data as keywords.)
            if code in _PYDANTIC_EXTS and type(value) is dict and (blocked is None or len(blocked) == seen):
                unbuilt.append(_ext_type_name(real, payload))
            return value

        return self._real.unpackb(data, *args, ext_hook=watched, **kwargs)


# What `RecordCodec._dump` collects while LangGraph serializes one value: the
# objects whose class cannot be imported under the module and name LangGraph
# stores with it (a class defined in a function, a nested class, a model
# made with `create_model`). LangGraph's own decoder can only ever hand such
# an object back as its stored data, as the stock savers do. The record says
# so (`_mark_tag`): a reader hands that data back too, while a class that
# was importable when the record was written and is not now still raises.
_WRITING: ContextVar[set[str] | None] = ContextVar("langgraph_durable_never_importable", default=None)
# Classes found importable under their module and name: module-level
# objects, which live as long as their module (so holding them costs nothing).
_IMPORTABLE: dict[type, None] = {}


def _never_importable(cls: type) -> str | None:
    """``module.Name`` as LangGraph stores `cls` when its module, loaded,
    has nothing under that name (a class defined in a function, a nested
    class, a model made with `create_model`). None whenever that cannot be
    told for sure: the name leads to something (the class, a later
    definition of it as a notebook cell run again makes, a decorator's
    wrapper LangGraph can call), the module is not loaded, or looking the
    name up fails; such a class raises when it cannot be rebuilt, as before."""
    if cls in _IMPORTABLE:
        return None
    module, name = getattr(cls, "__module__", None), getattr(cls, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        return None
    loaded = sys.modules.get(module)
    if loaded is None:
        return None
    try:
        found = getattr(loaded, name, None)
    except Exception:  # a module __getattr__ that raises: cannot tell
        return None
    if found is not None:
        if found is cls:
            _IMPORTABLE[cls] = None
        return None
    return f"{module}.{name}"


# LangGraph's own functions, kept on its module the first time: a reload of
# this module must wrap them, never the wrappers it installed before.
_ORIGINALS = _jsonplus.__dict__.setdefault(
    "_langgraph_durable_originals",
    {
        "ormsgpack": _jsonplus.ormsgpack,
        "fallback": _jsonplus._reconstruction_fallback,
        "default": _jsonplus._msgpack_default,
    },
)
_langgraph_fallback = _ORIGINALS["fallback"]
_langgraph_default = _ORIGINALS["default"]


def _msgpack_default(obj: Any) -> Any:
    """LangGraph's msgpack `default` (called for each object msgpack cannot
    store natively), which while a record is being encoded (`_WRITING` set)
    also notes a class LangGraph could never rebuild."""
    writing = _WRITING.get()
    if writing is not None:
        cls = type(obj)
        if cls not in _IMPORTABLE and (name := _never_importable(cls)) is not None:
            writing.add(name)
    return _langgraph_default(obj)


def _reconstruction_fallback(tup: Any, exc: Exception) -> Any:
    unbuilt = _UNBUILT.get()
    if unbuilt is not None:
        try:
            unbuilt.append(f"{tup[0]}.{tup[1]} ({type(exc).__name__}: {exc})")
        except Exception:
            unbuilt.append(f"a stored object ({type(exc).__name__}: {exc})")
    return _langgraph_fallback(tup, exc)


_jsonplus.ormsgpack = _WatchedMsgpack(_ORIGINALS["ormsgpack"])  # type: ignore[assignment]
_jsonplus._reconstruction_fallback = _reconstruction_fallback
_jsonplus._msgpack_default = _msgpack_default


# A record's type tag carries the marks of its never-importable types after
# this separator (the tag is covered by the record's checksum or signature).
_PLAIN_SEP = "+plain:"
_MARK_CHARS = 10
_MAX_TAG_BYTES = 255


def _type_mark(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:_MARK_CHARS]


def _mark_tag(tag: str, names: Collection[str]) -> str | None:
    """`tag` with the marks of `names`; None if they do not all fit in a
    tag (`RecordCodec._dump` then refuses the value)."""
    out = tag + _PLAIN_SEP + ",".join(sorted({_type_mark(n) for n in names}))
    return out if len(out.encode()) <= _MAX_TAG_BYTES else None


def split_tag(tag: str) -> tuple[str, frozenset[str]]:
    """A stored type tag's serializer tag, and the marks of the types that
    were never importable where it was written (`_mark_tag`)."""
    base, sep, marks = tag.partition(_PLAIN_SEP)
    return (base, frozenset(marks.split(","))) if sep else (tag, frozenset())


def _label(context: str) -> str:
    """A record's key as an operator reads it (`records.*_context` joined by NULs)."""
    kind, _, rest = context.partition("\x00")
    what = {"c": "checkpoint", "b": "channel value", "w": "pending write", "l": "ledger entry"}.get(kind, "record")
    return f"{what} {'/'.join(rest.split(chr(0)))!r}"


class RecordCodec:
    """Serializes checkpoints, blobs and writes into sealed rows and back."""

    def __init__(
        self,
        serde: SerializerProtocol,
        *,
        signing_keys: Sequence[bytes] = (b"",),
        max_record_bytes: int | None = None,
        strict: bool = False,
    ) -> None:
        """`signing_keys`: the key that seals new records first, then older
        keys still accepted when verifying (b"" stands for unsigned records).
        `strict`: decode records that verify WITHOUT a key (unsigned: anyone
        who can write a shared tier can make one) with LangGraph's allowlisted
        msgpack (see `strict_serializer`) instead of `serde` as given; a record
        verified under a signing key is decoded with `serde` as given."""
        self.serde = serde
        self.ring = KeyRing(signing_keys)
        self.max_record_bytes = max_record_bytes
        self.strict = strict
        # Hand back plain data where LangGraph does (a class this process
        # cannot import) instead of raising: for the command line's read
        # commands, which show values and never write them back.
        self.plain_when_unbuildable = False
        # Called once per type (`plain_data`) with a type's ``module.Name``
        # and the record it was first met in, when a record hands back the
        # stored data of a class that was never importable where it was
        # written (as LangGraph does): the saver reports it (log, metrics).
        self.on_plain_data: Callable[[str, str], None] | None = None
        self._plain_reported: set[str] = set()
        self._plain_lock = threading.Lock()
        self.loader: SerializerProtocol = serde
        self.strict_loader: SerializerProtocol | None = None
        if strict:
            self.strict_loader = strict_serializer(serde)
            if self.strict_loader is None:
                logger.warning(
                    "serde %s has no msgpack allowlist, so records read from Redis/Postgres without a "
                    "signing key are decoded with it as is; set signing_key= to protect them",
                    type(serde).__name__,
                )

    @property
    def keys(self) -> tuple[bytes, ...]:
        return self.ring.keys

    @property
    def key(self) -> bytes:
        """The key that seals new records (b"": unsigned)."""
        return self.ring.keys[0]

    def with_allowlist(self, serde: SerializerProtocol, extra: Collection[tuple[str, ...]]) -> RecordCodec:
        """The same codec for `serde` (a saver clone's), its strict loader
        also allowing `extra` (the types of a compiled graph's state)."""
        clone = copy.copy(self)
        clone.serde = serde
        clone.loader = serde
        if self.strict:
            loader = strict_serializer(serde)
            if isinstance(loader, JsonPlusSerializer):
                loader = loader.with_msgpack_allowlist(extra)
            clone.strict_loader = loader
        return clone

    @property
    def fingerprints(self) -> list[str]:
        """`key_fingerprint` of each accepted key, the sealing key first."""
        return [key_fingerprint(k) for k in self.keys]

    # -- encode ------------------------------------------------------------

    def _dump(self, value: Any, *, channel: str, what: str) -> tuple[str, bytes]:
        never_importable: set[str] = set()
        token = _WRITING.set(never_importable)
        try:
            tag, payload = self.serde.dumps_typed(value)
        except Exception as exc:  # the serializer raises TypeError, ValueError, ormsgpack errors
            path, culprit = self._culprit(value)
            where = f" at {path}" if path else ""
            raise SerializationError(
                f"{what} {channel!r}{where} holds a value of type {type(culprit).__name__} that the "
                f"serializer cannot store ({exc}). Store plain data (dicts, lists, str, numbers, "
                "pydantic models, dataclasses) in the state, or pass a serde= that handles this type.",
                channel=channel,
            ) from exc
        finally:
            _WRITING.reset(token)
        if never_importable:
            marked = _mark_tag(tag, never_importable)
            if marked is None:
                names = ", ".join(sorted(never_importable)[:5]) + (", ..." if len(never_importable) > 5 else "")
                raise SerializationError(
                    f"{what} {channel!r} holds objects of {len(never_importable)} classes that cannot be imported "
                    f"by their module and name ({names}), more than one record can note. Define them at a "
                    "module's top level (each then comes back as itself), or hold fewer kinds in one value.",
                    channel=channel,
                )
            tag = marked
        if self.max_record_bytes is not None and len(payload) > self.max_record_bytes:
            raise RecordTooLarge(
                f"{what} {channel!r} serializes to {len(payload):,} bytes, over Integrity(max_record_bytes="
                f"{self.max_record_bytes:,}). Keep large data outside the state (store a path or an id) "
                "or raise Integrity(max_record_bytes=).",
                channel=channel,
                size=len(payload),
            )
        return tag, payload

    def _culprit(self, value: Any, path: str = "", depth: int = 0) -> tuple[str, Any]:
        """The innermost part of `value` that fails to serialize, and its key
        path. Runs only after a failure, so its cost does not matter."""
        if depth < 8:
            if isinstance(value, dict):
                items: Any = value.items()
            elif isinstance(value, (list, tuple)):
                items = enumerate(value)
            else:
                items = ()
            for key, item in items:
                try:
                    self.serde.dumps_typed(item)
                except Exception:  # found the part that fails; look deeper
                    return self._culprit(item, f"{path}[{key!r}]", depth + 1)
        return path, value

    def encode_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[CheckpointRow, list[BlobRow]]:
        """The checkpoint's row and its new channel values' rows, each whole."""
        row, blobs, _ = self.encode_put(config, checkpoint, metadata, new_versions)
        return row, blobs

    def encode_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        memo: DeltaMemo | None = None,
        never_written: Mapping[str, Any] | None = None,
        records: dict[str, tuple[str, Dumped | str | None]] | None = None,
    ) -> tuple[CheckpointRow, list[BlobRow], Remember]:
        """`encode_checkpoint`, storing a list that extends its value in the
        parent checkpoint (as `memo` remembers it) as a piece (`deltas.py`).
        `never_written`: carried channel versions no put stored
        (`carried.never_written`), stored with this checkpoint (its value,
        or empty when it has none).
        Also returns what to tell `memo` once the write succeeded. `records`,
        if given, receives per channel whose value record is written the
        version and what it holds, as a `DeltaTrail` follows it: a
        `_DeltaSnapshot`'s encoding, `PLAIN` for another value, None for none."""
        thread_id = thread_of(config, what="put")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        parent_id = configurable.get("checkpoint_id")
        cid = check_checkpoint_id(checkpoint.get("id"), what="put: checkpoint['id']")
        values = checkpoint.get("channel_values", {})
        base = memo.base_for(thread_id, ns, parent_id) if memo is not None else {}
        every = memo.every if memo is not None else 0
        lists: dict[str, Last] = {}
        blobs = []
        for channel, version in new_versions.items():
            v = self._key_parts(channel, version)
            if channel in values:
                tag, payload = self._dump(values[channel], channel=channel, what="state key")
                if records is not None:
                    records[channel] = (v, (tag, payload) if isinstance(values[channel], _DeltaSnapshot) else PLAIN)
                if memo is not None:
                    piece, last = plan(base.get(channel), v, tag, payload, every=every)
                    if last is not None:
                        lists[channel] = last
                    if piece is not None:
                        tag, payload = DELTA_TAG, piece.encode()
            else:
                tag, payload = EMPTY_TAG, b""
                if records is not None:
                    records[channel] = (v, None)
            blobs.append(
                BlobRow(
                    thread_id, ns, channel, v, seal(blob_context(thread_id, ns, channel, v), tag, payload, key=self.key)
                )
            )
        for channel, version in (never_written or {}).items():
            v = self._key_parts(channel, version)
            if channel in values:
                tag, payload = self._dump(values[channel], channel=channel, what="state key")
            else:
                tag, payload = EMPTY_TAG, b""
            if records is not None:
                snapshot = isinstance(values.get(channel), _DeltaSnapshot)
                records[channel] = (v, (tag, payload) if snapshot else PLAIN if channel in values else None)
            context = blob_context(thread_id, ns, channel, v)
            blobs.append(BlobRow(thread_id, ns, channel, v, seal(context, tag, payload, key=self.key)))
        for channel, version in checkpoint.get("channel_versions", {}).items():
            # A channel this step left alone keeps its value, and its chain.
            kept = base.get(channel)
            if channel not in new_versions and kept is not None and kept.version == version_key(version):
                lists[channel] = kept
        stored = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        md = cast(dict[str, Any], get_serializable_checkpoint_metadata(config, metadata))
        tag, payload = self._dump({"checkpoint": stored, "metadata": md}, channel="metadata", what="checkpoint")
        row = CheckpointRow(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=cid,
            parent_id=parent_id,
            run_id=str(md["run_id"]) if md.get("run_id") is not None else None,
            metadata_json=checked_metadata_json(md),
            envelope=seal(checkpoint_context(thread_id, ns, cid, parent_id), tag, payload, key=self.key),
        )
        return row, blobs, Remember(thread_id, ns, cid, lists)

    @staticmethod
    def _key_parts(channel: str, version: Any) -> str:
        """A put's channel name checked (`check_key_part`), and its version as stored."""
        if not fits_key(channel, DEFAULT_MAX_NAME_BYTES):
            check_key_part(channel, what="put: channel name", limit=DEFAULT_MAX_NAME_BYTES)
        v = version_key(version)
        if not fits_key(v, DEFAULT_MAX_NAME_BYTES):
            check_key_part(v, what=f"put: version of channel {channel!r}", limit=DEFAULT_MAX_NAME_BYTES)
        return v

    def encode_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        dumped: list[Dumped] | None = None,
    ) -> tuple[list[WriteRow], bool]:
        """Rows for `put_writes`, and whether they replace existing ones
        (`dumped`, if given, receives each row's encoded value).

        Special channels (error, interrupt, ...) have fixed indexes and
        replace what is stored; ordinary writes are insert-or-ignore, so a
        repeated call does not duplicate them. Same rule as the stock savers.
        """
        thread_id = thread_of(config, what="put_writes")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        cid = configurable.get("checkpoint_id")
        if not cid:
            raise ConfigError(
                "put_writes needs the checkpoint the writes belong to: pass the config "
                "returned by put() (it carries configurable.checkpoint_id)."
            )
        check_key_part(task_id, what="put_writes: task_id", limit=DEFAULT_MAX_NAME_BYTES)
        check_key_part(task_path, what="put_writes: task_path", limit=None)
        for channel, _ in writes:
            if not fits_key(channel, DEFAULT_MAX_NAME_BYTES):
                check_key_part(channel, what="put_writes: channel name", limit=DEFAULT_MAX_NAME_BYTES)
        rows = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            tag, payload = self._dump(value, channel=channel, what="pending write to channel")
            if dumped is not None:
                dumped.append((tag, payload))
            ctx = write_context(thread_id, ns, cid, task_id, idx, channel, task_path)
            rows.append(
                WriteRow(thread_id, ns, cid, task_id, idx, channel, task_path, seal(ctx, tag, payload, key=self.key))
            )
        upsert = all(ch in WRITES_IDX_MAP for ch, _ in writes)
        return rows, upsert

    # -- decode --------------------------------------------------------------
    # Each raises BadRecord when the row cannot be trusted.

    def _load(self, context: str, envelope: bytes) -> Any:
        tag, payload, index = open_envelope_any(context, envelope, self.keys)
        if tag == EMPTY_TAG:
            return _EMPTY
        return self._loads(context, tag, payload, unsigned=not self.keys[index])

    def _loads(self, context: str, tag: str, payload: bytes, *, unsigned: bool) -> Any:
        """Decode a verified payload: the value that was stored, or
        `UndecodableRecord`. Never `BadRecord`: bytes that verify are intact,
        so a failure here is this reader's serializer, never damage to
        quarantine or repair over. A type the msgpack allowlist blocks is an
        error too, where LangGraph alone would hand back its plain data."""
        loader = self.strict_loader if unsigned and self.strict_loader is not None else self.loader
        tag, never_importable = split_tag(tag)
        blocked: list[str] = []
        unbuilt: list[str] = []
        token = _BLOCKED.set(blocked)
        token_unbuilt = _UNBUILT.set(None if self.plain_when_unbuildable else unbuilt)
        try:
            value = loader.loads_typed((tag, payload))
        except Exception as exc:  # any decoder failure: the serializer is not the writer's
            raise UndecodableRecord(
                f"{_label(context)} is intact but cannot be decoded with this saver's serde "
                f"({type(self.serde).__name__}): type {tag!r}, {type(exc).__name__}: {exc}. It was written "
                "with another serializer: pass the application's serde= (for example its EncryptedSerializer); "
                "on the command line, --serde module:factory or LANGGRAPH_DURABLE_SERDE.",
                key=context,
                type_tag=tag,
            ) from exc
        finally:
            _UNBUILT.reset(token_unbuilt)
            _BLOCKED.reset(token)
        if unbuilt and never_importable:
            # Classes that could not be imported where the record was
            # written either: their stored data, as LangGraph hands it back.
            marked = {n for n in {u.split(" (")[0] for u in unbuilt} if _type_mark(n) in never_importable}
            plain = [u for u in unbuilt if u.split(" (")[0] in marked]
            if plain:
                self._report_plain(plain, context)
                unbuilt = [u for u in unbuilt if u not in plain]
        if unbuilt:
            names = "; ".join(dict.fromkeys(unbuilt))
            raise UndecodableRecord(
                f"{_label(context)} is intact but holds values this process cannot rebuild: {names}. LangGraph "
                "would hand back their stored data as plain dicts or lists. Make each class importable here "
                "under the module and name it was stored with: install or import the application's package in "
                "this process, and keep an alias at the old path for a class that was renamed or moved.",
                key=context,
                type_tag=tag,
                unbuildable=[name.split(" (")[0] for name in dict.fromkeys(unbuilt)],
            )
        if blocked:
            names = ", ".join(dict.fromkeys(blocked))
            if unsigned and loader is self.strict_loader:
                why = (
                    "it was stored without a signing key, so only LangGraph's allowlisted types are rebuilt from "
                    "it (anyone who can write to Redis or Postgres can plant such a record). If this store's "
                    "unsigned records were written by your application alone, seal them once with the store's "
                    "key: DurableSaver(..., integrity=Integrity(permissive_decoding=True)).repair(). Else allow the types: "
                    "serde=JsonPlusSerializer(allowed_msgpack_modules=[...])."
                )
            else:
                why = (
                    "this saver's serde blocks them (its msgpack allowlist, e.g. LANGGRAPH_STRICT_MSGPACK=true). "
                    "Add them: serde=JsonPlusSerializer(allowed_msgpack_modules=[('module', 'Class'), ...]), or "
                    "name the type in the graph's state schema."
                )
            raise UndecodableRecord(
                f"{_label(context)} holds {names}, which would come back as plain data: {why}",
                key=context,
                type_tag=tag,
                blocked=list(dict.fromkeys(blocked)),
            )
        return value

    def _report_plain(self, plain: Iterable[str], context: str) -> None:
        """Hand each type in `plain` to `on_plain_data`, once per codec."""
        names = [u.split(" (")[0] for u in plain]
        with self._plain_lock:
            new = [n for n in dict.fromkeys(names) if n not in self._plain_reported]
            self._plain_reported.update(new)
        if self.on_plain_data is not None:
            for name in new:
                self.on_plain_data(name, _label(context))

    def decode_checkpoint(self, row: CheckpointRow) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(checkpoint without channel_values, metadata)`` of a verified row."""
        body = self._load(row.context, row.envelope)
        if not isinstance(body, dict) or "checkpoint" not in body or "metadata" not in body:
            raise BadRecord("checkpoint record has an unexpected shape")
        return body["checkpoint"], body["metadata"]

    def decode_blob(self, row: BlobRow) -> Any:
        """The channel value, or `EMPTY` for a channel stored as empty, or
        the `deltas.Piece` of a list stored as a piece (`value_of` rebuilds it)."""
        return self.open_blob(row, decode=True)[2]

    def open_blob(self, row: BlobRow, *, decode: bool) -> tuple[str, bytes, Any]:
        """A verified blob's type tag, payload and: its `Piece` if it is one,
        else (with `decode`) its value, else None. Raises BadRecord, or
        `UndecodableRecord` for an intact value this reader cannot decode."""
        tag, payload, index = open_envelope_any(row.context, row.envelope, self.keys)
        if tag == DELTA_TAG:
            return tag, payload, decode_piece(payload)
        if not decode:
            return tag, payload, None
        if tag == EMPTY_TAG:
            return tag, payload, _EMPTY
        return tag, payload, self._loads(row.context, tag, payload, unsigned=not self.keys[index])

    def rebuild_value(self, snapshot: tuple[str, bytes], pieces: Sequence[Piece]) -> Any:
        """The list a chain of verified pieces stands for (`deltas.rebuild`),
        decoded as a whole copy would be. Raises BadRecord, or
        `UndecodableRecord` (see `_loads`)."""
        tag, payload = snapshot
        if tag != MSGPACK_TAG:
            raise BadRecord(f"the snapshot a list piece is rebuilt from has type {tag!r}, not a msgpack list")
        whole = rebuild(payload, pieces)
        # The pieces' keys are not at hand here: where the store still
        # accepts unsigned records, decode the list as one of them would be.
        return self._loads("b\x00list rebuilt from its pieces", MSGPACK_TAG, whole, unsigned=b"" in self.keys)

    def check_write(self, row: WriteRow) -> PendingWrite:
        """`decode_write` without decoding the value (None in its place): the
        record verified, or `BadRecord`."""
        open_envelope_any(row.context, row.envelope, self.keys)
        return (row.task_id, row.channel, None)

    def decode_write(self, row: WriteRow) -> PendingWrite:
        value = self._load(row.context, row.envelope)
        return (row.task_id, row.channel, None if value is _EMPTY else value)

    def decode_trail(self, histories: Mapping[str, History]) -> dict[str, DeltaChannelHistory]:
        """A `DeltaTrail`'s answer decoded: LangGraph's `DeltaChannelHistory`
        per channel. What it holds was encoded by this saver and never left
        its memory, so there is no record to verify; each value is decoded
        as its record would be (fresh objects every time)."""
        unsigned = not self.key
        out: dict[str, DeltaChannelHistory] = {}
        for ch, (seed, writes) in histories.items():
            label = f"w\x00{ch}\x00(held in memory)"
            entry: DeltaChannelHistory = {
                "writes": [(task_id, ch, self._loads(label, d[0], d[1], unsigned=unsigned)) for task_id, d in writes]
            }
            if seed is not None:
                entry["seed"] = self._loads(f"b\x00{ch}\x00(held in memory)", *seed, unsigned=unsigned)
            out[ch] = entry
        return out

    def encode_ledger(self, thread_id: str, entry: LedgerEntry) -> bytes:
        tag, payload = self._dump(
            {
                "key": entry.key,
                "state": entry.state,
                "idempotent": entry.idempotent,
                "result": entry.result,
                "updated_at": entry.updated_at,
                "resolved_by": entry.resolved_by,
            },
            channel=entry.key,
            what="result of action",
        )
        return seal(ledger_context(thread_id, entry.key), tag, payload, key=self.key)

    def decode_ledger(self, thread_id: str, key: str, envelope: bytes) -> LedgerEntry:
        body = self._load(ledger_context(thread_id, key), envelope)
        if not isinstance(body, dict) or body.get("key") != key:
            raise BadRecord("ledger entry has an unexpected shape")
        return LedgerEntry(
            key,
            body["state"],
            bool(body["idempotent"]),
            body["result"],
            body["updated_at"],
            body.get("resolved_by", ""),
        )

    def reseal(self, old_context: str, new_context: str, envelope: bytes) -> bytes:
        """The envelope verified under `old_context` (any accepted key) and
        sealed under `new_context` with the sealing key; not deserialized."""
        tag, payload, _ = open_envelope_any(old_context, envelope, self.keys)
        return seal(new_context, tag, payload, key=self.key)

    def sealed_with_old_key(self, context: str, envelope: bytes) -> bool:
        """Whether a verifying envelope was sealed with an older accepted key."""
        return open_envelope_any(context, envelope, self.keys)[2] > 0


def serde_from_spec(spec: str, *, what: str) -> SerializerProtocol:
    """The serializer that ``module:attr`` names: a serializer object, or a
    function (or class) that returns one when called with no arguments.
    `ConfigError` saying what is wrong otherwise (`what` names the option)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} takes MODULE:ATTR (for example myapp.storage:make_serde), got {spec!r}.")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raises as it loads
        raise ConfigError(
            f"{what} {spec!r}: cannot import it ({type(exc).__name__}: {exc}); check the module is importable here."
        ) from exc
    if not (hasattr(target, "loads_typed") and hasattr(target, "dumps_typed")) and callable(target):
        try:
            target = target()
        except Exception as exc:  # whatever the factory raises, say which option named it
            raise ConfigError(
                f"{what} {spec!r}: calling it with no arguments failed ({type(exc).__name__}: {exc}); name a "
                "serializer, or a function that returns one."
            ) from exc
    if not (hasattr(target, "loads_typed") and hasattr(target, "dumps_typed")):
        raise ConfigError(
            f"{what} {spec!r} is a {type(target).__name__}, not a serializer (an object with dumps_typed and "
            "loads_typed, such as LangGraph's JsonPlusSerializer or EncryptedSerializer) or a function returning one."
        )
    return cast(SerializerProtocol, target)


def strict_serializer(serde: SerializerProtocol) -> SerializerProtocol | None:
    """`serde` restricted to LangGraph's msgpack allowlist (its "strict" mode):
    only LangGraph's safe types plus the ones `serde` was told to allow are
    rebuilt, anything else comes back as its plain data, and pickle is off.
    A record planted by someone who can write to a shared tier then cannot
    make this process import and call arbitrary code. None when `serde` is
    not LangGraph's JsonPlusSerializer (or one wrapped by EncryptedSerializer)."""
    if isinstance(serde, EncryptedSerializer):
        inner = strict_serializer(serde.serde)
        return EncryptedSerializer(serde.cipher, inner) if inner is not None else None
    if not isinstance(serde, JsonPlusSerializer):
        return None
    allowed = getattr(serde, "_allowed_msgpack_modules", None)
    return JsonPlusSerializer(
        pickle_fallback=False,
        allowed_msgpack_modules=tuple(allowed) if isinstance(allowed, (set, frozenset, tuple, list)) else None,
    )


class _Empty:
    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY"


_EMPTY = _Empty()
EMPTY = _EMPTY


def assemble_tuple(
    row: CheckpointRow,
    checkpoint: dict[str, Any],
    metadata: dict[str, Any],
    values: Mapping[str, Any],
    writes: Iterable[tuple[WriteRow, PendingWrite]],
) -> CheckpointTuple:
    """Build the `CheckpointTuple` LangGraph expects from verified parts.

    `writes` are ``(row, decoded)`` pairs; they are returned in
    ``(task_path, task_id, idx)`` order, the order live execution applies them.
    """
    cp = dict(checkpoint)
    cp["channel_values"] = {k: v for k, v in values.items() if v is not _EMPTY}
    ordered = sorted(writes, key=lambda w: (w[0].task_path, w[0].task_id, w[0].idx))
    config: RunnableConfig = {
        "configurable": {
            "thread_id": row.thread_id,
            "checkpoint_ns": row.checkpoint_ns,
            "checkpoint_id": row.checkpoint_id,
        }
    }
    parent: RunnableConfig | None = None
    if row.parent_id:
        parent = {
            "configurable": {
                "thread_id": row.thread_id,
                "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.parent_id,
            }
        }
    return CheckpointTuple(
        config=config,
        checkpoint=cast(Checkpoint, cp),
        metadata=cast(CheckpointMetadata, metadata),
        parent_config=parent,
        pending_writes=[w[1] for w in ordered],
    )
