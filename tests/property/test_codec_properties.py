"""Property tests of the codec: every message round-trips; no input makes decode crash."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    Heartbeat,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    decode,
    encode,
)

ids = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)
ints64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
partitions = st.integers(min_value=0, max_value=2**31 - 1)
timestamps = st.integers(min_value=0, max_value=2**63 - 1)


def _base() -> dict[str, st.SearchStrategy[object]]:
    return dict(sent_at=timestamps, instance_id=ids, client_id=ids, group_id=ids, topic=ids,
                partition=partitions)


messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(Heartbeat, **_base(), offset=ints64),
    st.builds(ClaimingPartition, **_base()),
    st.builds(ReleasingPartition, **_base(), offset=ints64),
    st.builds(ClaimingMessages, **_base(), proposed_last_offset=ints64),
    st.builds(MemberHeartbeat, sent_at=timestamps, instance_id=ids, client_id=ids, group_id=ids,
              topic=ids, active=st.integers(0, 1), capacity=st.integers(-1, 10_000),
              heartbeat_interval_ms=st.integers(0, 3_600_000)),
)


@settings(max_examples=2000)
@given(messages)
def test_decode_of_encode_is_identity(message: Message) -> None:
    assert decode(encode(message)) == message


@settings(max_examples=2000)
@given(st.binary(max_size=200))
def test_decode_of_random_bytes_raises_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data)


@settings(max_examples=2000)
@given(messages, st.data())
def test_decode_of_mutated_records_raises_only_decode_error(message: Message,
                                                           data: st.DataObject) -> None:
    wire = bytearray(encode(message))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(wire)))
        action = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = data.draw(st.sampled_from([ord("/"), ord("%"), ord("1"), ord("x"), 0xFF]))
        if action == "insert":
            wire.insert(index, byte)
        elif index < len(wire):
            if action == "delete":
                del wire[index]
            else:
                wire[index] = byte
    try:
        decoded = decode(bytes(wire))
    except DecodeError:
        return
    assert decode(encode(decoded)) == decoded
