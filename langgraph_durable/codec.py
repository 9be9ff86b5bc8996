"""Turning LangGraph objects into sealed rows and back. No I/O here.

`RecordCodec` is the only place that calls the serializer: each record is
serialized once per `put`, and the resulting rows are handed to every tier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .errors import ConfigError, RecordTooLarge, SerializationError
from .ledger import LedgerEntry
from .records import (
    BadRecord,
    BlobRow,
    CheckpointRow,
    WriteRow,
    blob_context,
    checkpoint_context,
    ledger_context,
    metadata_json,
    open_envelope,
    seal,
    write_context,
)

EMPTY_TAG = "empty"
# Generous: a state this large is almost always a mistake (a file or a model
# in the state), and every super-step rewrites the channels that changed.
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024


def thread_of(config: RunnableConfig | None, *, what: str) -> str:
    """`thread_id` from a config, or a `ConfigError` that says how to pass it."""
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ConfigError(
            f"{what} needs a thread id: pass "
            '{"configurable": {"thread_id": "<your thread>"}} as the config '
            "(graph.invoke(inputs, config) / saver methods)."
        )
    return str(thread_id)


def version_key(version: str | int | float) -> str:
    """Channel versions may be str, int or float; tiers key blobs by text."""
    return str(version)


class RecordCodec:
    """Serializes checkpoints, blobs and writes into sealed rows and back."""

    def __init__(
        self, serde: SerializerProtocol, *, signing_key: bytes = b"", max_record_bytes: int | None = None
    ) -> None:
        self.serde = serde
        self.key = signing_key
        self.max_record_bytes = max_record_bytes

    # -- encode ------------------------------------------------------------

    def _dump(self, value: Any, *, channel: str, what: str) -> tuple[str, bytes]:
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
        if self.max_record_bytes is not None and len(payload) > self.max_record_bytes:
            raise RecordTooLarge(
                f"{what} {channel!r} serializes to {len(payload):,} bytes, over max_record_bytes="
                f"{self.max_record_bytes:,}. Keep large data outside the state (store a path or an id) "
                "or raise max_record_bytes.",
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
        thread_id = thread_of(config, what="put")
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        parent_id = configurable.get("checkpoint_id")
        values = checkpoint.get("channel_values", {})
        blobs = []
        for channel, version in new_versions.items():
            if channel in values:
                tag, payload = self._dump(values[channel], channel=channel, what="state key")
            else:
                tag, payload = EMPTY_TAG, b""
            v = version_key(version)
            blobs.append(
                BlobRow(
                    thread_id, ns, channel, v, seal(blob_context(thread_id, ns, channel, v), tag, payload, key=self.key)
                )
            )
        stored = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        md = cast(dict[str, Any], get_serializable_checkpoint_metadata(config, metadata))
        tag, payload = self._dump({"checkpoint": stored, "metadata": md}, channel="metadata", what="checkpoint")
        cid = checkpoint["id"]
        row = CheckpointRow(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=cid,
            parent_id=parent_id,
            run_id=str(md["run_id"]) if md.get("run_id") is not None else None,
            metadata_json=metadata_json(md),
            envelope=seal(checkpoint_context(thread_id, ns, cid, parent_id), tag, payload, key=self.key),
        )
        return row, blobs

    def encode_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[list[WriteRow], bool]:
        """Rows for `put_writes`, and whether they replace existing ones.

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
        rows = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            tag, payload = self._dump(value, channel=channel, what="pending write to channel")
            ctx = write_context(thread_id, ns, cid, task_id, idx, channel, task_path)
            rows.append(
                WriteRow(thread_id, ns, cid, task_id, idx, channel, task_path, seal(ctx, tag, payload, key=self.key))
            )
        upsert = all(ch in WRITES_IDX_MAP for ch, _ in writes)
        return rows, upsert

    # -- decode --------------------------------------------------------------
    # Each raises BadRecord when the row cannot be trusted.

    def _load(self, context: str, envelope: bytes) -> Any:
        tag, payload = open_envelope(context, envelope, key=self.key)
        if tag == EMPTY_TAG:
            return _EMPTY
        try:
            return self.serde.loads_typed((tag, payload))
        except Exception as exc:  # any decoder failure means this copy is unusable
            raise BadRecord(f"undecodable payload ({type(exc).__name__}: {exc})") from exc

    def decode_checkpoint(self, row: CheckpointRow) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(checkpoint without channel_values, metadata)`` of a verified row."""
        body = self._load(row.context, row.envelope)
        if not isinstance(body, dict) or "checkpoint" not in body or "metadata" not in body:
            raise BadRecord("checkpoint record has an unexpected shape")
        return body["checkpoint"], body["metadata"]

    def decode_blob(self, row: BlobRow) -> Any:
        """The channel value, or `EMPTY` for a channel stored as empty."""
        return self._load(row.context, row.envelope)

    def decode_write(self, row: WriteRow) -> PendingWrite:
        value = self._load(row.context, row.envelope)
        return (row.task_id, row.channel, None if value is _EMPTY else value)

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
        tag, payload = open_envelope(old_context, envelope, key=self.key)
        return seal(new_context, tag, payload, key=self.key)


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
