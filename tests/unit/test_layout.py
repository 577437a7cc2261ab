"""The coordination index's layout records (PROTOCOL.md section 3): vectors and the rule that
picks the layout in force."""

from __future__ import annotations

import pytest

from marshal_py.protocol import DecodeError, coordination_partition
from marshal_py.protocol.codec import DecodeErrorKind
from marshal_py.protocol.index import (
    Layout,
    choose_layout,
    decode_layout,
    encode_layout,
    index_topic_for,
    layout_key,
    record_kind,
)

TOPIC_ID = "sIMo83SvRriQ7NzGw1usEQ"
OTHER_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def layout_record(offset: int, count: int, topic_id: str = TOPIC_ID, writer: str = "ab12cd34",
                  topic: str = "__marshal") -> tuple[int, bytes | None, bytes | None]:
    return offset, layout_key(writer), encode_layout(Layout(topic, topic_id, count))


def test_the_protocol_vector() -> None:
    layout = Layout("__marshal", TOPIC_ID, 4)
    assert layout_key("ab12cd34") == b"layout/ab12cd34"
    assert encode_layout(layout) == b"Layout/2/__marshal/sIMo83SvRriQ7NzGw1usEQ/4"
    assert decode_layout(encode_layout(layout)) == layout
    assert index_topic_for("__marshal") == "__marshal-index"
    # Placed by the layout, `events` stays where 4 partitions put it.
    assert coordination_partition("events", layout.partitions) == 2
    assert coordination_partition("events", 16) == 6


def test_topic_names_are_escaped_and_an_empty_topic_id_round_trips() -> None:
    layout = Layout("coord/a%b", "", 12)
    assert encode_layout(layout) == b"Layout/2/coord%2Fa%25b//12"
    assert decode_layout(encode_layout(layout)) == layout


@pytest.mark.parametrize(("value", "kind"), [
    (b"Layout/2/__marshal/x/04", DecodeErrorKind.MALFORMED),
    (b"Layout/2/__marshal/x/0", DecodeErrorKind.MALFORMED),
    (b"Layout/2/__marshal/x/-1", DecodeErrorKind.MALFORMED),
    (b"Layout/2/__marshal/x", DecodeErrorKind.MALFORMED),
    (b"Layout/2//x/4", DecodeErrorKind.MALFORMED),
    (b"Layout/3/__marshal/x/4", DecodeErrorKind.UNKNOWN_VERSION),
    (b"Checkpoint/2/__marshal/x/4", DecodeErrorKind.UNKNOWN_TYPE),
    (b"\xff\xfe", DecodeErrorKind.MALFORMED),
    (None, DecodeErrorKind.MALFORMED),
])
def test_bad_values_are_typed_decode_errors(value: bytes | None, kind: DecodeErrorKind) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_layout(value)
    assert caught.value.kind is kind


def test_record_kinds_are_the_first_key_segment() -> None:
    assert record_kind(b"layout/ab12cd34") == "layout"
    assert record_kind(b"checkpoint/group/topic") == "checkpoint"
    assert record_kind(None) is None
    assert record_kind(b"\xff") is None
    with pytest.raises(ValueError):
        layout_key("a/b")


def test_the_first_layout_record_wins_whatever_came_after() -> None:
    """Two first openers wrote concurrently (partitions added in between): both read the
    whole index, so both take the record with the lowest offset."""
    records = [layout_record(7, 16, writer="bbbbbbbb"), layout_record(3, 4)]
    assert choose_layout(records, "__marshal", TOPIC_ID) == Layout("__marshal", TOPIC_ID, 4)


def test_other_kinds_unreadable_values_and_other_topics_are_skipped() -> None:
    records = [
        (0, b"checkpoint/g/t", b"Layout/2/__marshal/sIMo83SvRriQ7NzGw1usEQ/99"),
        (1, b"layout/aaaaaaaa", b"garbage"),
        (2, None, b"Layout/2/__marshal/sIMo83SvRriQ7NzGw1usEQ/98"),
        layout_record(3, 97, topic="__other"),
        layout_record(4, 8),
    ]
    assert choose_layout(records, "__marshal", TOPIC_ID) == Layout("__marshal", TOPIC_ID, 8)
    assert choose_layout(records[:4], "__marshal", TOPIC_ID) is None


def test_a_layout_belongs_to_one_incarnation_of_the_topic() -> None:
    """A recreated coordination topic (a new id) gets a layout of its own; an empty id (a
    broker without topic ids) matches any."""
    old = layout_record(0, 4, topic_id=OTHER_ID)
    assert choose_layout([old], "__marshal", TOPIC_ID) is None
    new = layout_record(1, 2)
    assert choose_layout([old, new], "__marshal", TOPIC_ID) == Layout("__marshal", TOPIC_ID, 2)
    assert choose_layout([old, new], "__marshal", None) == Layout("__marshal", OTHER_ID, 4)
    idless = layout_record(0, 6, topic_id="")
    assert choose_layout([idless, new], "__marshal", TOPIC_ID) == Layout("__marshal", "", 6)


def test_layouts_refuse_impossible_counts() -> None:
    with pytest.raises(ValueError):
        Layout("__marshal", "", 0)
    with pytest.raises(ValueError):
        Layout("", "", 4)
