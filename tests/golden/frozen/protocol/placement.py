"""Where records go: the coordination partition of a topic, and the hash of a record key."""

from __future__ import annotations

import hashlib
import struct

import xxhash

from tests.golden.frozen.protocol.messages import KEY_SLOT_BITS


def coordination_partition(topic: str, partition_count: int) -> int:
    """The ``__marshal`` partition that carries every claim about ``topic``.

    The first 8 bytes of md5(topic, UTF-8) read as a little-endian unsigned 64-bit integer,
    modulo the coordination topic's partition count (as the original Go implementation).
    """
    if partition_count < 1:
        raise ValueError(f"partition_count must be >= 1, got {partition_count}")
    digest = hashlib.md5(topic.encode("utf-8"), usedforsecurity=False).digest()
    (value,) = struct.unpack("<Q", digest[:8])
    return int(value % partition_count)


def key_hash(key: bytes | None) -> int:
    """xxh3-64 of a record key; a record without a key hashes like the empty key."""
    return int(xxhash.xxh3_64_intdigest(key or b""))


def key_slot(key: bytes | None) -> int:
    """The key-shared slot of a record key: the top bits of :func:`key_hash`.

    Records without a key all hash like the empty key, so they share one slot, are handled
    by one member at a time and stay in offset order.
    """
    return key_hash(key) >> (64 - KEY_SLOT_BITS)
