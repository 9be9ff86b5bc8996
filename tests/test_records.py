"""The envelope on its own: no services."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from langgraph_durable.model.records import BadRecord, open_envelope, seal


@given(payload=st.binary(max_size=512), tag=st.text(min_size=1, max_size=20), context=st.text(max_size=40))
def test_roundtrip(payload: bytes, tag: str, context: str) -> None:
    assert open_envelope(context, seal(context, tag, payload)) == (tag, payload)


@given(payload=st.binary(min_size=1, max_size=256), data=st.data())
def test_any_single_byte_change_is_detected(payload: bytes, data: st.DataObject) -> None:
    sealed = bytearray(seal("ctx", "msgpack", payload))
    i = data.draw(st.integers(0, len(sealed) - 1))
    sealed[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(BadRecord):
        open_envelope("ctx", bytes(sealed))


@given(payload=st.binary(max_size=256), cut=st.integers(0, 300))
def test_truncation_is_detected(payload: bytes, cut: int) -> None:
    sealed = seal("ctx", "msgpack", payload)
    assume(cut < len(sealed))
    with pytest.raises(BadRecord):
        open_envelope("ctx", sealed[:cut])


def test_another_key_or_signing_key_is_rejected() -> None:
    sealed = seal("thread-a", "msgpack", b"data", key=b"secret")
    assert open_envelope("thread-a", sealed, key=b"secret") == ("msgpack", b"data")
    with pytest.raises(BadRecord, match="checksum"):
        open_envelope("thread-b", sealed, key=b"secret")
    with pytest.raises(BadRecord, match="checksum"):
        open_envelope("thread-a", sealed, key=b"other")
    with pytest.raises(BadRecord, match="checksum"):
        open_envelope("thread-a", seal("thread-a", "msgpack", b"data"), key=b"secret")


# Sealed by format version 1 when it shipped. A later release must still
# open these; if this test fails, an envelope change broke stored data.
GOLDEN_V1 = bytes.fromhex("d74c474401076d73677061636bd01e677ff1a99ca79b22dd54a513e39c91a568656c6c6f")
GOLDEN_V1_SIGNED = bytes.fromhex("d74c474401076d73677061636b6da3292ce29a4722d102863994c49eed91a568656c6c6f")
GOLDEN_CONTEXT = "b\x00thread-1\x00\x00messages\x001"


def test_format_1_records_stay_readable() -> None:
    assert open_envelope(GOLDEN_CONTEXT, GOLDEN_V1) == ("msgpack", b"\x91\xa5hello")
    assert open_envelope(GOLDEN_CONTEXT, GOLDEN_V1_SIGNED, key=b"k" * 32) == ("msgpack", b"\x91\xa5hello")


def test_unknown_format_version_is_refused_not_guessed() -> None:
    future = bytearray(GOLDEN_V1)
    future[4] = 2
    with pytest.raises(BadRecord, match="unknown envelope format 2"):
        open_envelope(GOLDEN_CONTEXT, bytes(future))
