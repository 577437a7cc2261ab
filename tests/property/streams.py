"""Coordination messages of every kind, built from a few small numbers: the vocabulary of
the property tests that generate logs."""

from __future__ import annotations

from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    Checkpoint,
    ClaimingKeyRanges,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    MemberHeartbeat,
    Message,
    ReleasingKeyRanges,
    ReleasingPartition,
    RenewingLocks,
    ResettingOffsets,
)

#: Every kind :func:`message_for` builds ("junk" builds nothing: the caller writes garbage).
KINDS = ["claim", "heartbeat", "release", "messages", "member", "leave", "share-init",
         "acquire", "ack", "renew", "key-claim", "key-heartbeat", "key-release", "checkpoint",
         "reset", "junk"]


def message_for(kind: str, sender: tuple[str, str], pair: tuple[str, str], partition: int,
                a: int, b: int) -> Message | None:
    """A message of ``kind`` from ``sender`` about ``pair`` = (group, topic); ``a`` and ``b``
    pick offsets and key slots. None for "junk"."""
    base = (0, sender[0], sender[1], pair[0], pair[1], partition)
    lo, hi = min(a * 25, b), max(a * 25, b)
    slots = f"{lo}-{hi}" if lo < hi else str(lo)
    return {
        "claim": lambda: ClaimingPartition(*base),
        "heartbeat": lambda: Heartbeat(*base, a),
        "release": lambda: ReleasingPartition(*base, a),
        "messages": lambda: ClaimingMessages(*base, a),
        "member": lambda: MemberHeartbeat(*base[:5], 1, a % 3 - 1,
                                          (0, 500, 1_000, 3_000)[b % 4]),  # announced HI
        "leave": lambda: MemberHeartbeat(*base[:5], 0, -1),
        "share-init": lambda: InitializingSharePartition(*base, a, 3, 20),
        "acquire": lambda: AcquiringRecords(*base, f"{a}-{a + 3}", 2_000),
        "ack": lambda: AcknowledgingRecords(*base, f"{a}-{a + 1}",
                                            ("accept", "release", "reject")[b % 3]),
        "renew": lambda: RenewingLocks(*base, f"{a}-{a + 5}", 3_000),
        "key-claim": lambda: ClaimingKeyRanges(*base, slots),
        "key-heartbeat": lambda: KeyRangesHeartbeat(*base, a),
        "key-release": lambda: ReleasingKeyRanges(*base, slots, a),
        "checkpoint": lambda: Checkpoint(*base[:5], a, '{"v":1}'),
        "reset": lambda: ResettingOffsets(*base, a),
        "junk": lambda: None,
    }[kind]()
