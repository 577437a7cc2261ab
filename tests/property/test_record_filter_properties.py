"""The record filter never drops a record of its group: whatever the ids hold, however the
record is spelled (version 1 or 2, upper or lower case escapes, signed or not), and for
mutated bytes that still decode."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.log.record_filter import RecordFilter
from marshal_py.protocol import DecodeError, decode, encode, sign
from marshal_py.protocol.auth import GroupKey
from tests.property.test_codec_properties import ids, messages

KEY = GroupKey("k1", b"0123456789abcdef0123456789abcdef")


@settings(max_examples=2000)
@given(messages, st.booleans(), st.booleans(), ids)
def test_a_record_of_the_group_is_always_kept(message: object, lowercase: bool, signed: bool,
                                              other: str) -> None:
    value = encode(message)  # type: ignore[arg-type]
    if lowercase:
        value = value.replace(b"%2F", b"%2f")
    if signed:
        value = sign(value, KEY, 1)
    group = decode(value).group_id
    assert RecordFilter([group])(value)
    assert RecordFilter([other, group])(value)


@settings(max_examples=2000)
@given(messages, st.data())
def test_mutated_records_that_decode_are_kept_for_their_group(message: object,
                                                              data: st.DataObject) -> None:
    wire = bytearray(encode(message))  # type: ignore[arg-type]
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, max(0, len(wire) - 1)))
        byte = data.draw(st.sampled_from([ord("/"), ord("%"), ord("2"), ord("F"), ord("f"),
                                          ord("5"), ord("a")]))
        wire[index:index + 1] = bytes([byte])
    try:
        group = decode(bytes(wire)).group_id
    except DecodeError:
        return
    assert RecordFilter([group])(bytes(wire))
