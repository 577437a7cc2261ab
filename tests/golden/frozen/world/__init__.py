"""World state: the deterministic rationalizer and what it derives (pure: no I/O, no clocks)."""

from tests.golden.frozen.world.key_shared import KeySharedPartition, SlotRun, sticky_assignment
from tests.golden.frozen.world.lifecycle import (
    DEFAULT_OFFSETS_RETENTION_MS,
    GroupLifecycle,
    GroupState,
)
from tests.golden.frozen.world.rationalizer import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    Outcome,
    Rationalizer,
    RationalizerConfig,
    Verdict,
)
from tests.golden.frozen.world.records import CoordinationRecord
from tests.golden.frozen.world.state import (
    ClaimStatus,
    Owner,
    PartitionClaim,
    PartitionKey,
    status_for_age,
)

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_OFFSETS_RETENTION_MS",
    "ClaimStatus",
    "CoordinationRecord",
    "GroupLifecycle",
    "GroupState",
    "KeySharedPartition",
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
