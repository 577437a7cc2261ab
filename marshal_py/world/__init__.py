"""World state: the deterministic rationalizer and what it derives (pure: no I/O, no clocks)."""

from marshal_py.world.rationalizer import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    Outcome,
    Rationalizer,
    RationalizerConfig,
    Verdict,
)
from marshal_py.world.records import CoordinationRecord
from marshal_py.world.state import ClaimStatus, Owner, PartitionClaim, PartitionKey, status_for_age

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "ClaimStatus",
    "CoordinationRecord",
    "Outcome",
    "Owner",
    "PartitionClaim",
    "PartitionKey",
    "Rationalizer",
    "RationalizerConfig",
    "Verdict",
    "status_for_age",
]
