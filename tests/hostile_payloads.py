"""What a hostile checkpoint store names, for the import tests: a function
that records each call (so a test can assert it never ran) and builders of
the planted payloads (a msgpack extension that names a callable, a pickle
that calls one when unpickled)."""

from __future__ import annotations

import pickle
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS, EXT_CONSTRUCTOR_SINGLE_ARG

CALLS: list[tuple[Any, ...]] = []


def record(*args: Any) -> None:
    """Called by a payload that ran."""
    CALLS.append(args)


def calls_record(tag: str) -> ormsgpack.Ext:
    """A msgpack extension that LangGraph's default serializer decodes by
    calling `record(tag)`."""
    return ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb([__name__, "record", [tag]]))


def runs_shell(command: str) -> ormsgpack.Ext:
    """A msgpack extension decoded by calling ``os.system(command)``."""
    return ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb(["os", "system", command]))


class _Pickled:
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __reduce__(self) -> tuple[Any, ...]:
        return (record, (self.tag,))


def pickled_call(tag: str) -> bytes:
    """Bytes that call `record(tag)` when unpickled."""
    return pickle.dumps(_Pickled(tag))


def packed(value: Any) -> bytes:
    return ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS)


def unpacked(data: bytes) -> Any:
    """msgpack bytes as plain data, every extension kept as it is."""
    return ormsgpack.unpackb(data, ext_hook=ormsgpack.Ext, option=ormsgpack.OPT_NON_STR_KEYS)
