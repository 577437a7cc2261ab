"""Placement test vectors (also in PROTOCOL.md)."""

from __future__ import annotations

import pytest

from marshal_py.protocol import coordination_partition, key_hash


@pytest.mark.parametrize(("topic", "expected"), [("test1", 2), ("test2", 1), ("test3", 2)])
def test_md5_placement_matches_the_original_vectors(topic: str, expected: int) -> None:
    assert coordination_partition(topic, 4) == expected


def test_placement_of_more_topics_and_counts() -> None:
    assert coordination_partition("events", 4) == 2
    assert coordination_partition("events", 1) == 0
    assert coordination_partition("événements", 16) == coordination_partition("événements", 16)
    with pytest.raises(ValueError):
        coordination_partition("events", 0)


def test_key_hash_is_xxh3_64_and_no_key_hashes_like_the_empty_key() -> None:
    assert key_hash(b"") == 0x2D06800538D394C2
    assert key_hash(None) == key_hash(b"")
    assert key_hash(b"order-42") == key_hash(b"order-42")
    assert key_hash(b"order-42") != key_hash(b"order-43")
