"""The coordination index: records of the compacted companion topic of ``__marshal``.

The index (``<coordination topic>-index`` by default, one partition,
``cleanup.policy=compact``) keeps what retention must never remove. Its record keys name a
kind first (``layout/...``, ``history/...``), its values use the escaped framing of the
coordination records (``Type/version/fields``). It holds the **layout**: the partition count
records are placed by (PROTOCOL.md, section 3); and where the history of each (group, topic)
pair begins, where its newest checkpoint is, and whether every pair's history is declared
(:func:`index_view`; PROTOCOL.md section 6).

Pure: no I/O. :func:`choose_layout` is the rule every reader applies to what it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from marshal_py.protocol.codec import DecodeError, DecodeErrorKind, escape_field, unescape_field

#: One record of the index as read: (offset, key, value); a None value is a tombstone.
IndexRecord = tuple[int, bytes | None, bytes | None]

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


def choose_layout(records: Iterable[IndexRecord],
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


# -- the history of each (group, topic) pair (PROTOCOL.md section 6) ---------------------------

HISTORY_KIND, HISTORY_TYPE = "history", "History"
CHECKPOINT_KIND, CHECKPOINT_AT_TYPE = "checkpoint", "CheckpointAt"
DECLARED_KIND, DECLARED_TYPE = "declared", "Declared"
_VERSION = 2


@dataclass(frozen=True)
class History:
    """Every record about (``group``, ``topic``) on its coordination partition is at or after
    ``position``: written before the first one by its writer (and by a scan that declares a
    topic), so a reader of the pair may start there."""

    coordination_topic: str
    topic_id: str
    group: str
    topic: str
    position: int


@dataclass(frozen=True)
class CheckpointAt:
    """The newest checkpoint of (``group``, ``topic``) that its writer knew of is the record
    at ``record_position`` of the pair's coordination partition (the first part of a chunked
    one). A hint: a reader checks the record itself."""

    coordination_topic: str
    topic_id: str
    group: str
    topic: str
    record_position: int


@dataclass(frozen=True)
class Declared:
    """Every pair with a record on the coordination topic (of this id) has a ``History``
    record in the index: a pair without one has no history."""

    coordination_topic: str
    topic_id: str


IndexEntry = Layout | History | CheckpointAt | Declared


def _writer_segment(writer: str) -> str:
    if not writer or "/" in writer:
        raise ValueError(f"bad writer id {writer!r}")
    return writer


def history_key(group: str, topic: str, writer: str) -> bytes:
    """Key of a History record: one per pair and writer, so that compaction keeps every
    writer's (the pair's history begins at the lowest)."""
    return "/".join([HISTORY_KIND, escape_field(group), escape_field(topic),
                     _writer_segment(writer)]).encode()


def checkpoint_key(group: str, topic: str) -> bytes:
    """Key of a CheckpointAt record: one per pair (compaction keeps the newest)."""
    return "/".join([CHECKPOINT_KIND, escape_field(group), escape_field(topic)]).encode()


def declared_key(writer: str) -> bytes:
    """Key of a Declared record."""
    return f"{DECLARED_KIND}/{_writer_segment(writer)}".encode()


def encode_entry(entry: History | CheckpointAt | Declared) -> bytes:
    """The value of a History, CheckpointAt or Declared record."""
    if isinstance(entry, History):
        name, fields = HISTORY_TYPE, [entry.group, entry.topic, str(entry.position)]
    elif isinstance(entry, CheckpointAt):
        name, fields = CHECKPOINT_AT_TYPE, [entry.group, entry.topic,
                                            str(entry.record_position)]
    else:
        name, fields = DECLARED_TYPE, []
    head = [entry.coordination_topic, entry.topic_id]
    return "/".join([name, str(_VERSION), *map(escape_field, head + fields)]).encode()


def _position(text: str) -> int:
    if not text.isdigit() or text != str(int(text)) or int(text) >= 2**63:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"position {text!r}")
    return int(text)


_FIELD_COUNTS = {HISTORY_TYPE: 5, CHECKPOINT_AT_TYPE: 5, DECLARED_TYPE: 2}
_KINDS = {HISTORY_TYPE: HISTORY_KIND, CHECKPOINT_AT_TYPE: CHECKPOINT_KIND,
          DECLARED_TYPE: DECLARED_KIND, LAYOUT_TYPE: LAYOUT_KIND}


def decode_entry(key: bytes | None, value: bytes | None) -> IndexEntry:
    """Read an index record of any known kind; :class:`DecodeError` when it is none, or
    its key names another kind than its value."""
    if value is None:
        raise DecodeError(DecodeErrorKind.MALFORMED, "a tombstone")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(DecodeErrorKind.MALFORMED, "not UTF-8") from exc
    name = text.split("/", 1)[0]
    if _KINDS.get(name) is None:
        raise DecodeError(DecodeErrorKind.UNKNOWN_TYPE, repr(name[:40]))
    if record_kind(key) != _KINDS[name]:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"a {name} value under key {key!r}")
    if name == LAYOUT_TYPE:
        return decode_layout(value)
    parts = text.split("/")
    if parts[1:2] != [str(_VERSION)]:
        raise DecodeError(DecodeErrorKind.UNKNOWN_VERSION, text[:40])
    if len(parts) != 2 + _FIELD_COUNTS[name]:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"field count of {text[:80]!r}")
    fields = [unescape_field(p) for p in parts[2:]]
    if not fields[0] or len(fields[0]) > _MAX_TOPIC:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"coordination topic {fields[0][:40]!r}")
    if name == DECLARED_TYPE:
        return Declared(fields[0], fields[1])
    if not fields[2] or not fields[3]:
        raise DecodeError(DecodeErrorKind.MALFORMED, "an empty group or topic")
    if name == HISTORY_TYPE:
        return History(fields[0], fields[1], fields[2], fields[3], _position(fields[4]))
    return CheckpointAt(fields[0], fields[1], fields[2], fields[3], _position(fields[4]))


def _applies(entry: History | CheckpointAt | Declared, coordination_topic: str,
             topic_id: str | None) -> bool:
    if entry.coordination_topic != coordination_topic:
        return False
    return not entry.topic_id or not topic_id or entry.topic_id == topic_id


@dataclass(frozen=True)
class IndexView:
    """What a reader learns from the index about the pairs of one coordination topic."""

    #: Every pair's history is declared (a Declared record applies).
    declared: bool = False
    #: (group, topic) -> the lowest position of its History records.
    histories: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: (group, topic) -> the record position of its newest CheckpointAt.
    checkpoints: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def history_start(self, group: str, topic: str) -> int | None:
        """Where the pair's history begins (None: no History record)."""
        return self.histories.get((group, topic))

    def checkpoint_position(self, group: str, topic: str) -> int | None:
        """The record position of the pair's newest checkpoint, as its writer recorded it."""
        return self.checkpoints.get((group, topic))


def index_view(records: Iterable[IndexRecord], coordination_topic: str,
               topic_id: str | None) -> IndexView:
    """The view of the index records ``(offset, key, value)`` for this coordination topic:
    records read in offset order, a later record (or tombstone) of a key replacing an
    earlier one as compaction would; unreadable records and other topics' are skipped."""
    latest: dict[bytes | None, IndexEntry] = {}
    for _, key, value in sorted(records, key=lambda r: r[0]):
        if value is None:
            latest.pop(key, None)
            continue
        try:
            latest[key] = decode_entry(key, value)
        except DecodeError:
            latest.pop(key, None)
    declared = False
    histories: dict[tuple[str, str], int] = {}
    checkpoints: dict[tuple[str, str], int] = {}
    for entry in latest.values():
        if isinstance(entry, Layout) or not _applies(entry, coordination_topic, topic_id):
            continue
        if isinstance(entry, Declared):
            declared = True
        elif isinstance(entry, History):
            pair = (entry.group, entry.topic)
            histories[pair] = min(entry.position, histories.get(pair, entry.position))
        else:
            checkpoints[(entry.group, entry.topic)] = entry.record_position
    return IndexView(declared, histories, checkpoints)
