"""Typed coordination messages.

The four base messages are those of the original Marshal protocol. Every message names the
sender (a per-process ``instance_id`` and a stable ``client_id``), the consumer ``group_id``,
and the ``topic`` / ``partition`` it is about. ``sent_at`` is the sender's own clock in unix
seconds; it is informational only: the rationalizer decides with the broker's timestamp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from tests.golden.frozen.protocol.ranges import parse_ranges

#: Share-mode bounds, as KIP-932's: delivery attempt limit 2..10 (default 5), acquisition
#: lock 1 s..1 h (default 30 s).
MIN_DELIVERY_LIMIT, MAX_DELIVERY_LIMIT, DEFAULT_DELIVERY_LIMIT = 2, 10, 5
MIN_LOCK_MS, MAX_LOCK_MS, DEFAULT_LOCK_MS = 1_000, 3_600_000, 30_000
DEFAULT_INFLIGHT_LIMIT = 2_000
#: KIP-932 bounds the per-partition lock limit at 10,000; so do we, which also bounds the
#: work any single share record can cause a reader.
MAX_INFLIGHT_LIMIT = 10_000
#: What an application may say of a record it was delivered.
APPLICATION_ACK_KINDS = frozenset({"accept", "release", "reject"})
#: On the wire also ``gap``: the acquired offset holds no record a reader of the member's
#: isolation level can be delivered (a transaction marker, an aborted or compacted-away record).
ACK_KINDS = APPLICATION_ACK_KINDS | {"gap"}
#: The holder of a dead-letter duty wrote the record to the dead-letter topic.
DEAD_LETTERED = "dead-lettered"
#: Every kind the log knows.
ALL_ACK_KINDS = ACK_KINDS | {DEAD_LETTERED}
#: Longest group, client and instance id, and longest topic name (Kafka's own limit), in
#: characters. Longer ones are refused when written and malformed when read.
MAX_ID_CHARS = 255
MAX_TOPIC_CHARS = 249
#: The longest heartbeat interval a member may announce (an hour, as clients allow).
MAX_ANNOUNCED_INTERVAL_MS = 3_600_000
#: Unicode's control characters (general category Cc: fixed by the standard as U+0000..U+001F
#: and U+007F..U+009F). One regex search in C instead of a category lookup per character:
#: every decoded record checks four ids.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def id_problem(kind: str, value: str) -> str | None:
    """What is wrong with a group / client / instance id or a topic name (None: nothing)."""
    limit = MAX_TOPIC_CHARS if kind == "topic" else MAX_ID_CHARS
    if len(value) > limit:
        return f"{kind} has {len(value)} characters, more than {limit}"
    if _CONTROL_CHARS.search(value) is not None:
        return f"{kind} {value[:40]!r} holds control characters"
    return None


@dataclass(frozen=True, slots=True)
class Message:
    """Fields every coordination message carries, in wire order."""

    TYPE: ClassVar[str] = ""
    #: Versions this implementation reads. Base messages: 1 (the original, literal fields) and
    #: 2 (the same fields, escaped). Extensions start at 2.
    VERSIONS: ClassVar[frozenset[int]] = frozenset({1, 2})
    #: Fields added by a later version of the type: field name -> the first version that
    #: carries it (such fields come last and have defaults; older versions omit them).
    FIELD_VERSIONS: ClassVar[dict[str, int]] = {}

    sent_at: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str


@dataclass(frozen=True, slots=True)
class PartitionMessage(Message):
    """A message about one partition of the topic (the four base messages)."""

    partition: int


@dataclass(frozen=True, slots=True)
class Heartbeat(PartitionMessage):
    """The owner of a partition is alive and has committed everything before ``offset``."""

    TYPE: ClassVar[str] = "Heartbeat"
    offset: int


@dataclass(frozen=True, slots=True)
class ClaimingPartition(PartitionMessage):
    """The sender proposes to take ownership of the partition (or renews its own claim)."""

    TYPE: ClassVar[str] = "ClaimingPartition"


@dataclass(frozen=True, slots=True)
class ReleasingPartition(PartitionMessage):
    """The owner gives the partition up; ``offset`` is its final committed offset."""

    TYPE: ClassVar[str] = "ReleasingPartition"
    offset: int


@dataclass(frozen=True, slots=True)
class ClaimingMessages(PartitionMessage):
    """At-most-once: the owner will process records up to ``proposed_last_offset`` inclusive."""

    TYPE: ClassVar[str] = "ClaimingMessages"
    proposed_last_offset: int


BASE_MESSAGE_TYPES: tuple[type[Message], ...] = (
    Heartbeat,
    ClaimingPartition,
    ReleasingPartition,
    ClaimingMessages,
)


@dataclass(frozen=True, slots=True)
class MemberHeartbeat(Message):
    """Extension (versions 2 and 3): the sender is a live member of the group consuming
    ``topic``.

    Members write it once per heartbeat interval per topic, whether or not they hold a
    partition, so that every member can compute the same fair share. ``active`` is 1 while
    the member runs and 0 when it leaves (closing), which removes it at once. ``capacity`` is
    the most partitions of the topic the member will hold (its ``max_claims``), -1 for no
    limit, so that the others take up what it leaves. ``heartbeat_interval_ms`` (version 3)
    is the member's heartbeat interval, by which every reader judges its claims and its
    liveness; 0 (version 2) announces none.
    """

    TYPE: ClassVar[str] = "MemberHeartbeat"
    VERSIONS: ClassVar[frozenset[int]] = frozenset({2, 3})
    FIELD_VERSIONS: ClassVar[dict[str, int]] = {"heartbeat_interval_ms": 3}
    active: int
    capacity: int = -1
    heartbeat_interval_ms: int = 0

    def validate(self) -> None:
        """Raise ValueError when a field is out of its domain (the codec calls it)."""
        if not 0 <= self.heartbeat_interval_ms <= MAX_ANNOUNCED_INTERVAL_MS:
            raise ValueError(f"heartbeat_interval_ms {self.heartbeat_interval_ms} outside "
                             f"0..{MAX_ANNOUNCED_INTERVAL_MS}")


@dataclass(frozen=True, slots=True)
class ShareMessage(PartitionMessage):
    """Extensions (version 2) for share mode: many members consume one partition."""

    VERSIONS: ClassVar[frozenset[int]] = frozenset({2})

    def validate(self) -> None:
        """Raise ValueError when a field is out of its domain (the codec calls it)."""
        if hasattr(self, "ranges"):
            parse_ranges(self.ranges)
        lock_ms = getattr(self, "lock_ms", None)
        if lock_ms is not None and not MIN_LOCK_MS <= lock_ms <= MAX_LOCK_MS:
            raise ValueError(f"lock_ms {lock_ms} outside 1 s..1 h")


@dataclass(frozen=True, slots=True)
class InitializingSharePartition(ShareMessage):
    """Start a share-partition at ``start_offset`` with its limits and, from version 3, the
    topic its records are dead-lettered to at the delivery limit (``""``: none). The first
    one in the log wins."""

    TYPE: ClassVar[str] = "InitializingSharePartition"
    VERSIONS: ClassVar[frozenset[int]] = frozenset({2, 3})
    FIELD_VERSIONS: ClassVar[dict[str, int]] = {"dead_letter_topic": 3}
    start_offset: int
    delivery_limit: int
    inflight_limit: int
    dead_letter_topic: str = ""

    def validate(self) -> None:
        if self.dead_letter_topic:
            problem = id_problem("topic", self.dead_letter_topic)
            if problem is not None:
                raise ValueError(f"dead-letter {problem}")
        if self.start_offset < 0:
            raise ValueError("start_offset < 0")
        if not MIN_DELIVERY_LIMIT <= self.delivery_limit <= MAX_DELIVERY_LIMIT:
            raise ValueError(f"delivery_limit {self.delivery_limit} outside 2..10")
        if not 1 <= self.inflight_limit <= MAX_INFLIGHT_LIMIT:
            raise ValueError(
                f"inflight_limit {self.inflight_limit} outside 1..{MAX_INFLIGHT_LIMIT}"
            )


@dataclass(frozen=True, slots=True)
class AcquiringRecords(ShareMessage):
    """Acquire the Available records of ``ranges`` for ``lock_ms`` milliseconds."""

    TYPE: ClassVar[str] = "AcquiringRecords"
    ranges: str
    lock_ms: int


@dataclass(frozen=True, slots=True)
class AcknowledgingRecords(ShareMessage):
    """Acknowledge records the sender holds: ``kind`` is accept, release, reject, gap, or
    dead-lettered (a dead-letter duty done)."""

    TYPE: ClassVar[str] = "AcknowledgingRecords"
    ranges: str
    kind: str

    def validate(self) -> None:
        ShareMessage.validate(self)
        if self.kind not in ALL_ACK_KINDS:
            raise ValueError(f"unknown acknowledgement kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class RenewingLocks(ShareMessage):
    """Extend the sender's locks on ``ranges`` to ``lock_ms`` from this record's time."""

    TYPE: ClassVar[str] = "RenewingLocks"
    ranges: str
    lock_ms: int


@dataclass(frozen=True, slots=True)
class ResettingSharePartition(ShareMessage):
    """Move an **empty** share group's SPSO to ``start_offset``, discarding in-flight state
    (ignored while the group has live members)."""

    TYPE: ClassVar[str] = "ResettingSharePartition"
    start_offset: int

    def validate(self) -> None:
        if self.start_offset < 0:
            raise ValueError("start_offset < 0")


@dataclass(frozen=True, slots=True)
class ResettingOffsets(PartitionMessage):
    """Extension (version 2): set an **empty** group's committed offset of the partition to
    ``offset`` (exclusive and key-shared state; share-partitions have their own reset).
    Ignored while the group has live members on the topic."""

    TYPE: ClassVar[str] = "ResettingOffsets"
    VERSIONS: ClassVar[frozenset[int]] = frozenset({2})
    offset: int

    def validate(self) -> None:
        if self.offset < 0:
            raise ValueError("offset < 0")


@dataclass(frozen=True, slots=True)
class CommittingTransaction(PartitionMessage):
    """Extension (version 2), exactly-once mode: the input of the partition below ``offset``
    is processed, and its output written in the same Kafka transaction as this record.

    Only ever written inside a transaction by a member that fenced every earlier writer of the
    partition's transactional id: readers (read_committed) apply it whoever sends it
    (PROTOCOL.md, exactly-once)."""

    TYPE: ClassVar[str] = "CommittingTransaction"
    VERSIONS: ClassVar[frozenset[int]] = frozenset({2})
    offset: int

    def validate(self) -> None:
        if self.offset < 0:
            raise ValueError("offset < 0")


#: Key-shared mode splits the 64-bit key-hash space of a partition into this many equal
#: slots; slot = key_hash >> (64 - 10). Ranges of slots travel as range text (``0-511``).
KEY_SLOTS = 1024
KEY_SLOT_BITS = 10


@dataclass(frozen=True, slots=True)
class KeySharedMessage(PartitionMessage):
    """Extensions (version 2) for key-shared mode: members own ranges of key-hash slots."""

    VERSIONS: ClassVar[frozenset[int]] = frozenset({2})

    def validate(self) -> None:
        """Raise ValueError when a field is out of its domain (the codec calls it)."""
        slots = getattr(self, "slots", None)
        if slots is not None:
            ranges = parse_ranges(slots)
            if ranges[-1][1] >= KEY_SLOTS:
                raise ValueError(f"slot {ranges[-1][1]} outside 0..{KEY_SLOTS - 1}")
        offset = getattr(self, "offset", None)
        if offset is not None and offset < 0:
            raise ValueError("offset < 0")


@dataclass(frozen=True, slots=True)
class ClaimingKeyRanges(KeySharedMessage):
    """Take the key-hash ``slots`` of the partition that are free (unowned, owned by a stale
    member, or by an earlier process of the sender's client id); the rest is void."""

    TYPE: ClassVar[str] = "ClaimingKeyRanges"
    slots: str


@dataclass(frozen=True, slots=True)
class KeyRangesHeartbeat(KeySharedMessage):
    """The sender is alive and has processed every record of the slots it owns in the
    partition below ``offset`` (a slot's committed offset never moves back)."""

    TYPE: ClassVar[str] = "KeyRangesHeartbeat"
    offset: int


@dataclass(frozen=True, slots=True)
class ReleasingKeyRanges(KeySharedMessage):
    """The owner gives ``slots`` up, every record of them below ``offset`` processed."""

    TYPE: ClassVar[str] = "ReleasingKeyRanges"
    slots: str
    offset: int


@dataclass(frozen=True, slots=True)
class Checkpoint(Message):
    """Extension (version 2): the whole state of ``group_id`` on ``topic`` as a reader that
    had applied every record of this coordination partition before ``position`` sees it.

    ``state`` is compact JSON (PROTOCOL.md, checkpoints). A reader may start its replay at
    ``position`` with that state instead of replaying the group's history.
    """

    TYPE: ClassVar[str] = "Checkpoint"
    VERSIONS: ClassVar[frozenset[int]] = frozenset({2})
    position: int
    state: str

    def validate(self) -> None:
        if self.position < 0:
            raise ValueError("position < 0")


EXTENSION_MESSAGE_TYPES: tuple[type[Message], ...] = (
    MemberHeartbeat,
    InitializingSharePartition,
    AcquiringRecords,
    AcknowledgingRecords,
    RenewingLocks,
    ResettingSharePartition,
    ResettingOffsets,
    CommittingTransaction,
    ClaimingKeyRanges,
    KeyRangesHeartbeat,
    ReleasingKeyRanges,
    Checkpoint,
)
