"""The index's history records (PROTOCOL.md section 6): vectors, the view a reader takes of
them, and the record filter that lets a member read past other groups' records."""

from __future__ import annotations

import pytest

from marshal_py.log.record_filter import RecordFilter
from marshal_py.protocol import (
    ClaimingPartition,
    DecodeError,
    Heartbeat,
    MemberHeartbeat,
    decode,
    encode,
    sign,
)
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.codec import DecodeErrorKind
from marshal_py.protocol.index import (
    CheckpointAt,
    Declared,
    History,
    Layout,
    checkpoint_key,
    declared_key,
    decode_entry,
    encode_entry,
    encode_layout,
    history_key,
    index_view,
    layout_key,
)
from marshal_py.protocol.messages import Checkpoint, CheckpointChunk

TOPIC_ID = "sIMo83SvRriQ7NzGw1usEQ"


def test_the_protocol_vectors() -> None:
    history = History("__marshal", TOPIC_ID, "orders.g", "orders", 4711)
    assert history_key("orders.g", "orders", "ab12cd34") == b"history/orders.g/orders/ab12cd34"
    assert encode_entry(history) == \
        b"History/2/__marshal/sIMo83SvRriQ7NzGw1usEQ/orders.g/orders/4711"
    pointer = CheckpointAt("__marshal", TOPIC_ID, "orders.g", "orders", 5000)
    assert checkpoint_key("orders.g", "orders") == b"checkpoint/orders.g/orders"
    assert encode_entry(pointer) == \
        b"CheckpointAt/2/__marshal/sIMo83SvRriQ7NzGw1usEQ/orders.g/orders/5000"
    declared = Declared("__marshal", TOPIC_ID)
    assert declared_key("ab12cd34") == b"declared/ab12cd34"
    assert encode_entry(declared) == b"Declared/2/__marshal/sIMo83SvRriQ7NzGw1usEQ"
    for key, entry in ((history_key("orders.g", "orders", "w"), history),
                       (checkpoint_key("orders.g", "orders"), pointer),
                       (declared_key("w"), declared)):
        assert decode_entry(key, encode_entry(entry)) == entry


def test_ids_with_slashes_are_escaped_in_keys_and_values() -> None:
    history = History("__marshal", "", "team/a%", "t/1", 0)
    key = history_key("team/a%", "t/1", "w")
    assert key == b"history/team%2Fa%25/t%2F1/w"
    assert encode_entry(history) == b"History/2/__marshal//team%2Fa%25/t%2F1/0"
    assert decode_entry(key, encode_entry(history)) == history


@pytest.mark.parametrize(("key", "value", "kind"), [
    (b"history/g/t/w", b"History/2/__marshal/x/g/t/07", DecodeErrorKind.MALFORMED),
    (b"history/g/t/w", b"History/2/__marshal/x/g/t/-1", DecodeErrorKind.MALFORMED),
    (b"history/g/t/w", b"History/2/__marshal/x/g/t", DecodeErrorKind.MALFORMED),
    (b"history/g/t/w", b"History/2/__marshal/x//t/1", DecodeErrorKind.MALFORMED),
    (b"history/g/t/w", b"History/3/__marshal/x/g/t/1", DecodeErrorKind.UNKNOWN_VERSION),
    (b"checkpoint/g/t", b"History/2/__marshal/x/g/t/1", DecodeErrorKind.MALFORMED),
    (b"history/g/t/w", b"Whatever/2/x", DecodeErrorKind.UNKNOWN_TYPE),
    (b"declared/w", b"Declared/2/__marshal", DecodeErrorKind.MALFORMED),
    (b"declared/w", None, DecodeErrorKind.MALFORMED),
])
def test_bad_entries_are_typed_decode_errors(key: bytes, value: bytes | None,
                                             kind: DecodeErrorKind) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_entry(key, value)
    assert caught.value.kind is kind


def rec(offset: int, key: bytes, entry: object) -> tuple[int, bytes, bytes | None]:
    if entry is None:
        return offset, key, None
    if isinstance(entry, Layout):
        return offset, key, encode_layout(entry)
    return offset, key, encode_entry(entry)  # type: ignore[arg-type]


def test_the_view_takes_the_lowest_history_and_the_newest_pointer() -> None:
    records = [
        rec(0, layout_key("w0"), Layout("__marshal", TOPIC_ID, 4)),
        rec(1, history_key("g", "t", "w2"), History("__marshal", TOPIC_ID, "g", "t", 120)),
        rec(2, history_key("g", "t", "w1"), History("__marshal", TOPIC_ID, "g", "t", 100)),
        rec(3, checkpoint_key("g", "t"), CheckpointAt("__marshal", TOPIC_ID, "g", "t", 900)),
        rec(4, checkpoint_key("g", "t"), CheckpointAt("__marshal", TOPIC_ID, "g", "t", 950)),
        rec(5, history_key("h", "t", "w1"), History("__marshal", "other-id", "h", "t", 1)),
        rec(6, history_key("k", "t", "w1"), History("__other", TOPIC_ID, "k", "t", 1)),
        (7, b"history/x/t/w1", b"\xff garbage"),
    ]
    view = index_view(records, "__marshal", TOPIC_ID)
    assert not view.declared
    assert view.history_start("g", "t") == 100
    assert view.checkpoint_position("g", "t") == 950
    assert view.history_start("h", "t") is None  # an earlier topic of the same name
    assert view.history_start("k", "t") is None
    declared = [*records, rec(8, declared_key("w9"), Declared("__marshal", TOPIC_ID))]
    assert index_view(declared, "__marshal", TOPIC_ID).declared
    assert not index_view(declared, "__marshal", "recreated-id").declared


def test_a_later_tombstone_or_garbage_replaces_a_key_as_compaction_would() -> None:
    records = [
        rec(1, checkpoint_key("g", "t"), CheckpointAt("__marshal", "", "g", "t", 900)),
        rec(2, history_key("g", "t", "w1"), History("__marshal", "", "g", "t", 100)),
        rec(3, checkpoint_key("g", "t"), None),
        (4, history_key("g", "t", "w1"), b"nonsense"),
    ]
    view = index_view(records, "__marshal", "")
    assert view.checkpoint_position("g", "t") is None
    assert view.history_start("g", "t") is None


# -- the record filter ------------------------------------------------------------------------

KEY = GroupKey("k1", b"0123456789abcdef0123456789abcdef")


@pytest.mark.parametrize("group", ["orders.g", "team/a", "100%", "a/%2F", "grüppe", "g"])
def test_the_filter_keeps_every_record_of_its_group(group: str) -> None:
    others = "orders.g2" if group != "orders.g2" else "x"
    wanted = RecordFilter([group])
    messages = [
        ClaimingPartition(1700000000, "ab12cd34", "w1", group, "orders", 3),
        Heartbeat(1700000000, "ab12cd34", group, group, "orders", 3, 5),
        MemberHeartbeat(1700000000, "ab12cd34", "w/1", group, "t%2F", 1, -1, 10_000),
        Checkpoint(0, "ab12cd34", "w1", group, "orders", 7, '{"v":2}'),
        CheckpointChunk(0, "ab12cd34", "w1", group, "orders", 7, 0, 2, "0" * 64, "a/b%c"),
    ]
    for message in messages:
        value = encode(message)
        assert decode(value).group_id == group
        assert wanted(value)
        assert wanted(sign(value, KEY, 9))
    assert not wanted(encode(ClaimingPartition(0, "ab12cd34", "w1", others, "orders", 3)))
    assert not wanted(None)


def test_a_lowercase_escape_is_kept_for_a_group_with_a_slash() -> None:
    value = b"Heartbeat/2/1700000000/ab12cd34/w1/team%2fa/orders/3/5"
    assert decode(value).group_id == "team/a"
    assert RecordFilter(["team/a"])(value)
    assert not RecordFilter(["team.b"])(value)


def test_the_filter_drops_other_groups_and_garbage() -> None:
    mine = RecordFilter(["orders.g"])
    for value in (b"garbage", b"", b"ClaimingPartition/1/0/i/c/orders.g2/t/0",
                  b"ClaimingPartition/1/0/i/c/xorders.g/t/0"):
        assert not mine(value)
    with pytest.raises(ValueError):
        RecordFilter([])
