"""The record a share-group member hands out (:class:`ShareRecord`), and a fast way to make one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """A record delivered to a share-group member, with its delivery count (1 the first
    time, more after a release or an elapsed lock)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    delivery_count: int


def _share_record_builder() -> Callable[..., ShareRecord]:
    """A constructor of :class:`ShareRecord` that sets its slots directly: the same object
    as ``ShareRecord(...)``, at half the cost of a frozen dataclass's ``__init__`` (one per
    record handed out)."""
    setters = [getattr(ShareRecord, name).__set__ for name in (
        "topic", "partition", "offset", "timestamp", "key", "value", "headers",
        "delivery_count")]
    topic, partition, offset, timestamp, key, value, headers, delivery_count = setters
    new = object.__new__

    def build(t: str, p: int, o: int, ts: int, k: bytes | None, v: bytes | None,
              h: list[tuple[str, bytes]], count: int) -> ShareRecord:
        record = new(ShareRecord)
        topic(record, t)
        partition(record, p)
        offset(record, o)
        timestamp(record, ts)
        key(record, k)
        value(record, v)
        headers(record, h)
        delivery_count(record, count)
        return record

    return build


new_share_record = _share_record_builder()
