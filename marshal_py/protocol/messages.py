"""Typed coordination messages.

The four base messages are those of the original Marshal protocol. Every message names the
sender (a per-process ``instance_id`` and a stable ``client_id``), the consumer ``group_id``,
and the ``topic`` / ``partition`` it is about. ``sent_at`` is the sender's own clock in unix
seconds; it is informational only: the rationalizer decides with the broker's timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Message:
    """Fields every coordination message carries, in wire order."""

    TYPE: ClassVar[str] = ""
    #: Versions this implementation reads. Base messages: 1 (the original, literal fields) and
    #: 2 (the same fields, escaped). Extensions start at 2.
    VERSIONS: ClassVar[frozenset[int]] = frozenset({1, 2})

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
    """Extension (version 2): the sender is a live member of the group consuming ``topic``.

    Members write it once per heartbeat interval per topic, whether or not they hold a
    partition, so that every member can compute the same fair share. ``active`` is 1 while
    the member runs and 0 when it leaves (closing), which removes it at once. ``capacity`` is
    the most partitions of the topic the member will hold (its ``max_claims``), -1 for no
    limit, so that the others take up what it leaves.
    """

    TYPE: ClassVar[str] = "MemberHeartbeat"
    VERSIONS: ClassVar[frozenset[int]] = frozenset({2})
    active: int
    capacity: int = -1


EXTENSION_MESSAGE_TYPES: tuple[type[Message], ...] = (MemberHeartbeat,)
