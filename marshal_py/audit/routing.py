"""Routing records to buckets, for audit engines that split the log (the Spark engine runs
one rationalizer per bucket; the local engine runs one over the whole log and needs none).

**Why the Spark engine may split the log.** A verdict depends only on the records of its own
(group, topic, partition) before it, with one exception: ``ResettingSharePartition`` asks
whether the (group, topic) has live members, and every claim, heartbeat, share message and
``MemberHeartbeat`` of any partition of that (group, topic) is a sign of life. So a bucket is
one (group, topic, partition), except that member heartbeats of a (group, topic) form their own
bucket and a (group, topic) whose log holds a reset is one bucket as a whole (so is one
with a signed record: the replay guard keeps one sequence per sender and pair). Positions must
grow strictly within a coordination partition (true for a Kafka topic) so that no record is a
duplicate in one replay and not in another. ``tests/property/test_audit_decomposition.py``
checks this for random traffic.
"""

from __future__ import annotations

from typing import NamedTuple

from marshal_py.protocol.codec import DecodeError, decode_signed
from marshal_py.protocol.messages import (
    PartitionMessage,
    ResettingOffsets,
    ResettingSharePartition,
)
from marshal_py.protocol.placement import coordination_partition as home_partition
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS

GARBAGE, MISPLACED, MEMBER = "garbage", "misplaced", "member"
PARTITION, RESET = "partition", "reset"
#: A signed record (PROTOCOL.md, authenticated groups): the replay guard keeps one sequence
#: per sender and pair, so a (group, topic) with a signed record is audited as a whole, as for
#: a reset.
SIGNED = "signed"
#: Route kinds that make their (group, topic) one bucket.
WHOLE_TOPIC_KINDS = frozenset({RESET, SIGNED})
#: Bucket partition of a (group, topic)'s member heartbeats, or of the whole (group, topic).
WHOLE_TOPIC = -1


def needs_whole_topic(has_reset: bool, first_ms: int, last_ms: int,
                      offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS) -> bool:
    """Must every record of a (group, topic) be audited by one rationalizer?

    Resets and offset expiry depend on whether the (group, topic) has a live member, which
    every partition's records decide. A reset (share or offsets) can be decided only with the
    whole topic; expiry can happen only when the pair's records span more than the offset
    retention. Otherwise each partition (plus the member heartbeats) can be audited alone.
    """
    return has_reset or last_ms - first_ms > offsets_retention_ms


class Route(NamedTuple):
    """What a record is about, as far as splitting the log goes."""

    kind: str
    group: str | None
    topic: str | None
    partition: int | None


def route(value: bytes | None, coordination_partition: int, partition_count: int) -> Route:
    """Classify one record for bucketing (decodes it with the protocol's codec)."""
    if value is None:
        return Route(GARBAGE, None, None, None)
    try:
        message, signature = decode_signed(value)
    except DecodeError:
        return Route(GARBAGE, None, None, None)
    partition = message.partition if isinstance(message, PartitionMessage) else None
    if home_partition(message.topic, partition_count) != coordination_partition:
        return Route(MISPLACED, message.group_id, message.topic, partition)
    if signature is not None:
        return Route(SIGNED, message.group_id, message.topic, partition)
    if partition is None:
        return Route(MEMBER, message.group_id, message.topic, None)
    if isinstance(message, ResettingSharePartition | ResettingOffsets):
        return Route(RESET, message.group_id, message.topic, partition)
    return Route(PARTITION, message.group_id, message.topic, partition)


def bucket_partition(route_: Route, topic_has_reset: bool) -> int | None:
    """The bucket's partition number: the record's partition, :data:`WHOLE_TOPIC` for member
    heartbeats and checkpoints and for every record of a (group, topic) that
    :func:`needs_whole_topic`, None for garbage."""
    if route_.kind == GARBAGE:
        return None
    if route_.kind == MISPLACED:
        return route_.partition
    if route_.kind == MEMBER or topic_has_reset:
        return WHOLE_TOPIC
    return route_.partition
