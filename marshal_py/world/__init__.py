"""World state: the deterministic rationalizer and what it derives (pure: no I/O, no clocks)."""

from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.key_shared import KeySharedPartition, SlotRun, sticky_assignment
from marshal_py.world.lifecycle import (
    DEFAULT_OFFSETS_RETENTION_MS,
    GroupLifecycle,
    GroupState,
    MemberRank,
)
from marshal_py.world.rationalizer import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    Outcome,
    Rationalizer,
    RationalizerConfig,
    Verdict,
)
from marshal_py.world.state import ClaimStatus, Owner, PartitionClaim, PartitionKey, status_for_age

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_OFFSETS_RETENTION_MS",
    "ClaimStatus",
    "CoordinationRecord",
    "GroupLifecycle",
    "GroupState",
    "KeySharedPartition",
    "MemberRank",
    "Outcome",
    "Owner",
    "PartitionClaim",
    "PartitionKey",
    "Rationalizer",
    "RationalizerConfig",
    "SlotRun",
    "Verdict",
    "status_for_age",
    "sticky_assignment",
]
