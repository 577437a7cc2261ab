"""A share member's fetched records into its buffer: the C build (``_fastpath.share_batch``)
against the Python build (``share_batch_py``) on the same inputs -- librdkafka's records and
kafka-python's alike, acquired and not, duties, expiries and none."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from marshal_py.client import fastpath
from marshal_py.client.share_handout import ShareRecord, new_share_record, share_batch_py
from tests.unit.test_fastpath import FakeMessage

_fastpath: Any = fastpath.compiled_module()


class PlainRecord:
    """A kafka-python ConsumerRecord's attributes."""

    def __init__(self, offset: int, headers: list[tuple[str, bytes]] | None) -> None:
        self.topic, self.partition, self.offset = "t", 3, offset
        self.timestamp, self.key, self.value = 1_700_000_000_000 + offset, b"k", b"v%d" % offset
        self.headers = headers


def _records(kind: str) -> list[Any]:
    records: list[Any] = []
    for offset in range(10, 30):
        headers = [("h", b"%d" % offset)] if offset % 3 == 0 else None
        if kind == "confluent":
            message = FakeMessage(offset, None if offset % 4 == 0 else b"key",
                                  b"value-%d" % offset, headers,
                                  (0, 0) if offset == 11 else (1, 1_700_000_000_000 + offset))
            records.append(_fastpath.ConfluentRecord("t", 3, offset, message))
        else:
            records.append(PlainRecord(offset, headers))
    return records


def _run(build: Any, records: list[Any]) -> tuple[list[Any], list[Any], dict[int, int]]:
    waiting = {o: 1 + o % 3 for o in range(8, 30) if o not in (12, 13)}  # 12, 13: not acquired
    owed = {17: object(), 25: object()}
    expiries = {o: 1_700_000_060_000 + o for o in range(8, 30) if o != 20}  # 20: no expiry
    buffer: deque[tuple[ShareRecord, float, int]] = deque()
    duties = build(records, waiting, owed, expiries, 0.25, 7, buffer.append, ShareRecord)
    return list(buffer), duties, waiting


@pytest.mark.parametrize("kind", ["confluent", "kafka-python"])
def test_both_builds_make_the_same_buffer_duties_and_leftovers(kind: str) -> None:
    assert _fastpath is not None, "bin/setup builds marshal_py.client._fastpath"
    records = _records(kind)
    c_buffer, c_duties, c_waiting = _run(_fastpath.share_batch, records)
    py_buffer, py_duties, py_waiting = _run(share_batch_py, records)
    assert c_buffer == py_buffer
    assert [(r.offset, n) for r, n in c_duties] == [(r.offset, n) for r, n in py_duties] \
        == [(17, 1 + 17 % 3), (25, 1 + 25 % 3)]
    assert c_waiting == py_waiting == {8: 3, 9: 1}  # acquired, not in this poll
    assert [entry[0].offset for entry in c_buffer] == \
        [o for o in range(10, 30) if o not in (12, 13, 17, 25)]
    by_offset = {entry[0].offset: entry for entry in c_buffer}
    assert by_offset[20][1] == -1.0  # no expiry known
    assert by_offset[21][1] == (1_700_000_060_000 + 21) / 1000 + 0.25
    assert all(entry[2] == 7 for entry in c_buffer)
    record = by_offset[15][0]
    assert isinstance(record, ShareRecord) and record.delivery_count == 1
    assert record.headers == [("h", b"15")] and by_offset[16][0].headers == []
    if kind == "confluent":
        assert by_offset[11][0].timestamp is None and by_offset[16][0].key is None
    # The records are ordinary ShareRecords: equal to one built the usual way, hashable,
    # frozen.
    again = ShareRecord(record.topic, record.partition, record.offset, record.timestamp,
                        record.key, record.value, list(record.headers), record.delivery_count)
    assert record == again == new_share_record(*(getattr(again, f) for f in (
        "topic", "partition", "offset", "timestamp", "key", "value", "headers",
        "delivery_count")))
    with pytest.raises(AttributeError):
        record.offset = 0  # type: ignore[misc]


def test_the_c_build_refuses_what_is_not_a_list_of_records() -> None:
    assert _fastpath is not None
    with pytest.raises(TypeError):
        _fastpath.share_batch((), {}, {}, {}, 0.0, 0, print, ShareRecord)
    with pytest.raises(TypeError, match="has no slot"):
        _fastpath.share_batch([], {}, {}, {}, 0.0, 0, print, int)
