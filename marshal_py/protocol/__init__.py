"""The coordination protocol's wire format (pure: no I/O, no clocks)."""

from marshal_py.protocol.codec import (
    DecodeError,
    DecodeErrorKind,
    decode,
    encode,
    escape_field,
    register,
    unescape_field,
    wire_version,
)
from marshal_py.protocol.messages import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    MemberHeartbeat,
    Message,
    PartitionMessage,
    ReleasingPartition,
    RenewingLocks,
    ResettingSharePartition,
    ShareMessage,
)
from marshal_py.protocol.placement import coordination_partition, key_hash
from marshal_py.protocol.ranges import OffsetRange, format_ranges, parse_ranges, ranges_of

__all__ = [
    "AcknowledgingRecords",
    "AcquiringRecords",
    "ClaimingMessages",
    "ClaimingPartition",
    "DecodeError",
    "DecodeErrorKind",
    "Heartbeat",
    "InitializingSharePartition",
    "MemberHeartbeat",
    "Message",
    "OffsetRange",
    "PartitionMessage",
    "ReleasingPartition",
    "RenewingLocks",
    "ResettingSharePartition",
    "ShareMessage",
    "coordination_partition",
    "decode",
    "encode",
    "escape_field",
    "format_ranges",
    "key_hash",
    "parse_ranges",
    "ranges_of",
    "register",
    "unescape_field",
    "wire_version",
]
