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
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    Message,
    PartitionMessage,
    ReleasingPartition,
)
from marshal_py.protocol.placement import coordination_partition, key_hash

__all__ = [
    "ClaimingMessages",
    "ClaimingPartition",
    "DecodeError",
    "DecodeErrorKind",
    "Heartbeat",
    "MemberHeartbeat",
    "Message",
    "PartitionMessage",
    "ReleasingPartition",
    "coordination_partition",
    "decode",
    "encode",
    "escape_field",
    "key_hash",
    "register",
    "unescape_field",
    "wire_version",
]
