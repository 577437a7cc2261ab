"""The record a share-group member hands out (:class:`ShareRecord`), and how a member's
fetching thread turns what a poll returned into them (:data:`share_batch`: the C build in
``marshal_py.client._fastpath`` when it was compiled, else :func:`share_batch_py`, the same
behaviour; ``tests/unit/test_share_handout.py`` runs both on the same inputs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marshal_py.client.fastpath import compiled_module


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


def share_batch_py(records: list[Any], waiting: dict[int, int], owed: dict[int, Any],
                   expiries: dict[int, int], shift: float, drops: int,
                   append: Callable[[tuple[ShareRecord, float, int]], object],
                   share_type: type[ShareRecord] = ShareRecord) -> list[tuple[Any, int]]:
    """What a share member's fetching thread does with the records of one poll: each whose
    offset is in ``waiting`` (acquired, not fetched: offset -> delivery count) is taken out
    of it; a dead-letter duty (in ``owed``) is returned as (record, count); any other is
    passed to ``append`` as (its :class:`ShareRecord`, the monotonic time its lock surely
    holds until -- its expiry in broker ms, shifted by ``shift`` -- or -1.0, ``drops``)."""
    duties: list[tuple[Any, int]] = []
    take, expiry_of = waiting.pop, expiries.get
    for r in records:
        offset = r.offset
        count = take(offset, None)
        if count is None:
            continue
        if offset in owed:
            duties.append((r, count))
            continue
        expiry = expiry_of(offset)
        append((new_share_record(r.topic, r.partition, offset, r.timestamp, r.key, r.value,
                                 list(r.headers or ()), count),
                -1.0 if expiry is None else expiry / 1000 + shift, drops))
    return duties


_compiled = compiled_module()
#: :func:`share_batch_py`, in C when the extension was built.
share_batch: Callable[..., list[tuple[Any, int]]] = \
    _compiled.share_batch if _compiled is not None else share_batch_py
