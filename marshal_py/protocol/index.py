"""The coordination index: records of the compacted companion topic of ``__marshal``.

The index (``<coordination topic>-index`` by default, one partition,
``cleanup.policy=compact``) keeps what retention must never remove. Its record keys name a
kind first (``layout/...``; later kinds get their own first segment), its values use the
escaped framing of the coordination records (``Type/version/fields``). Today it holds the
**layout**: the partition count records are placed by (PROTOCOL.md, section 3).

Pure: no I/O. :func:`choose_layout` is the rule every reader applies to what it read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from marshal_py.protocol.codec import DecodeError, DecodeErrorKind, escape_field, unescape_field

#: What a coordination topic's index is called unless named otherwise.
INDEX_SUFFIX = "-index"
#: The first key segment of layout records.
LAYOUT_KIND = "layout"
LAYOUT_TYPE = "Layout"
LAYOUT_VERSION = 2
_MAX_TOPIC = 249


def index_topic_for(coordination_topic: str) -> str:
    """The default index topic of ``coordination_topic``."""
    return f"{coordination_topic}{INDEX_SUFFIX}"


def record_kind(key: bytes | None) -> str | None:
    """The kind an index record key names (its first ``/`` segment), None if unreadable."""
    if not key:
        return None
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.split("/", 1)[0] or None


def layout_key(writer: str) -> bytes:
    """The key of a layout record written by ``writer`` (an instance id): unique per
    writer, so compaction never replaces one layout record by another."""
    if not writer or "/" in writer:
        raise ValueError(f"bad writer id {writer!r}")
    return f"{LAYOUT_KIND}/{writer}".encode()


@dataclass(frozen=True)
class Layout:
    """The placement of a coordination topic: records about a topic go to
    ``coordination_partition(topic, partitions)``, whatever partition count the topic's
    metadata shows later. ``topic_id``: the coordination topic's id (Kafka's base64 form;
    empty when the broker gives none), so a layout never outlives the topic it was made
    for."""

    coordination_topic: str
    topic_id: str
    partitions: int

    def __post_init__(self) -> None:
        if not self.coordination_topic or len(self.coordination_topic) > _MAX_TOPIC:
            raise ValueError(f"bad coordination topic {self.coordination_topic!r}")
        if not 1 <= self.partitions < 2**31:
            raise ValueError(f"partitions must be in 1..2^31-1, got {self.partitions}")

    def applies_to(self, coordination_topic: str, topic_id: str | None) -> bool:
        """True for the topic of that name and id (an empty id on either side matches)."""
        if self.coordination_topic != coordination_topic:
            return False
        return not self.topic_id or not topic_id or self.topic_id == topic_id


def encode_layout(layout: Layout) -> bytes:
    """The value of a layout record: ``Layout/2/<coordination topic>/<topic id>/<count>``."""
    fields = [layout.coordination_topic, layout.topic_id, str(layout.partitions)]
    return "/".join([LAYOUT_TYPE, str(LAYOUT_VERSION), *map(escape_field, fields)]).encode()


def decode_layout(value: bytes | None) -> Layout:
    """Read a layout record's value; :class:`DecodeError` if it is not one."""
    if value is None:
        raise DecodeError(DecodeErrorKind.MALFORMED, "a layout record without a value")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(DecodeErrorKind.MALFORMED, "not UTF-8") from exc
    parts = text.split("/")
    if parts[0] != LAYOUT_TYPE:
        raise DecodeError(DecodeErrorKind.UNKNOWN_TYPE, repr(parts[0]))
    if len(parts) < 2 or parts[1] != str(LAYOUT_VERSION):
        raise DecodeError(DecodeErrorKind.UNKNOWN_VERSION, text[:40])
    if len(parts) != 5:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"field count of {text[:80]!r}")
    topic, topic_id, count = (unescape_field(p) for p in parts[2:])
    if not count.isdigit() or count != str(int(count)):
        raise DecodeError(DecodeErrorKind.MALFORMED, f"partition count {count!r}")
    try:
        return Layout(topic, topic_id, int(count))
    except ValueError as exc:
        raise DecodeError(DecodeErrorKind.MALFORMED, str(exc)) from exc


def choose_layout(records: Iterable[tuple[int, bytes | None, bytes | None]],
                  coordination_topic: str, topic_id: str | None) -> Layout | None:
    """The layout in force: of the index's records ``(offset, key, value)``, the layout
    record with the lowest offset that applies to this topic (name and id). Unreadable
    records and other kinds are skipped. None when there is none yet.

    The first one wins, so two first openers that wrote concurrently agree once each has
    read the index to its end (both see the same first record); compaction keeps every
    layout record because their keys differ."""
    for _, key, value in sorted(records, key=lambda r: r[0]):
        if record_kind(key) != LAYOUT_KIND:
            continue
        try:
            layout = decode_layout(value)
        except DecodeError:
            continue
        if layout.applies_to(coordination_topic, topic_id):
            return layout
    return None
