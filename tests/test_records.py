"""The envelope on its own: no services."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from langgraph_durable.records import BadRecord, open_envelope, seal


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
