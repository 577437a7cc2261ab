"""The C build of the per-record work (marshal_py.client._fastpath) against its Python build:
the same records, the same commits, the same answers (client/fastpath.py).

bin/setup builds the extension; a test here fails when it is missing, so the suite never
passes on the Python build alone without saying so. The Python build is checked on the
same inputs, and the cursor and hand-out tests run once more in a process that uses it
(``MARSHAL_PY_PURE=1``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from marshal_py.client import fastpath
from marshal_py.client.confluent_fetcher import PyConfluentRecord, py_wrap
from marshal_py.client.lease import CommitCursor, PartitionLease

_fastpath: Any = fastpath.compiled_module()
ROOT = Path(__file__).resolve().parents[2]


class FakeMessage:
    """What a record reads of a confluent_kafka.Message."""

    def __init__(self, offset: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None, timestamp: tuple[int, int]) -> None:
        self._offset, self._key, self._value = offset, key, value
        self._headers, self._timestamp = headers, timestamp

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


MESSAGES = [
    FakeMessage(7, b"k", b"value", [("h", b"1")], (1, 1_700_000_000_000)),
    FakeMessage(8, None, None, None, (0, -1)),
    FakeMessage(9, b"", b"", [], (2, 1_700_000_000_001)),
]
FIELDS = ("topic", "partition", "offset", "message", "key", "value", "headers", "timestamp",
          "timestamp_type", "serialized_key_size", "serialized_value_size")


def test_the_extension_is_built() -> None:
    assert _fastpath is not None, "bin/setup builds marshal_py.client._fastpath: run it again"
    assert fastpath.COMPILED


@pytest.mark.parametrize(("start", "stop"), [(0, 3), (1, 3), (0, 0), (2, 3)])
def test_records_of_both_builds_agree(start: int, stop: int) -> None:
    c_records = _fastpath.wrap("orders", 4, MESSAGES, start, stop)
    py_records = py_wrap("orders", 4, MESSAGES, start, stop)
    assert len(c_records) == len(py_records) == stop - start
    for c, py in zip(c_records, py_records, strict=True):
        assert {f: getattr(c, f) for f in FIELDS} == {f: getattr(py, f) for f in FIELDS}
        assert repr(c) == repr(py) == \
            f"ConfluentRecord(topic='orders', partition=4, offset={py.offset})"
    made = _fastpath.ConfluentRecord("orders", 4, 7, MESSAGES[0])
    assert (made.topic, made.partition, made.offset, made.key) == ("orders", 4, 7, b"k")
    assert PyConfluentRecord("orders", 4, 7, MESSAGES[0]).key == b"k"


def test_a_record_without_timestamp_or_headers() -> None:
    (record,) = _fastpath.wrap("t", 0, MESSAGES, 1, 2)
    assert record.timestamp is None and record.timestamp_type is None
    assert record.headers == [] and record.key is None
    assert record.serialized_key_size == -1 and record.serialized_value_size == -1


def test_wrap_refuses_bad_arguments() -> None:
    with pytest.raises(IndexError):
        _fastpath.wrap("t", 0, MESSAGES, 0, 4)
    with pytest.raises(IndexError):
        _fastpath.wrap("t", 0, MESSAGES, 2, 1)
    with pytest.raises(TypeError):
        _fastpath.wrap(b"t", 0, MESSAGES, 0, 1)
    with pytest.raises(TypeError):
        _fastpath.wrap("t", 0, tuple(MESSAGES), 0, 1)
    with pytest.raises(AttributeError):
        _fastpath.wrap("t", 0, [object()], 0, 1)
    with pytest.raises(TypeError):
        _fastpath.ConfluentRecord("t", "0", 1, None)


class Record:
    """A record as a consumer hands it out (the attributes commit reads)."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


class SlowCommit:
    """The consumer's Python commit: records what reached it, answers as the consumer does."""

    def __init__(self, held: dict[tuple[str, int], PartitionLease]) -> None:
        self.held = held
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, record: Any) -> bool:
        self.calls.append((record.topic, record.partition, record.offset))
        lease = self.held.get((record.topic, record.partition))
        if lease is None or lease.revoked:
            return False
        lease.cursor.commit(record.offset)
        return True


def _held(*keys: tuple[str, int]) -> dict[tuple[str, int], PartitionLease]:
    held = {}
    for topic, partition in keys:
        lease = PartitionLease(topic, partition, 1, 10, float("inf"))
        lease.cursor.handed(list(range(10, 15)), 15)
        held[(topic, partition)] = lease
    return held


@pytest.mark.parametrize("build", ["c", "python"])
def test_the_committer_commits_in_order_and_leaves_the_rest_to_the_consumer(
        build: str) -> None:
    held = _held(("a", 0), ("a", 1))
    slow = SlowCommit(held)
    commit = _fastpath.Committer(slow) if build == "c" else fastpath.PyCommitter(slow)
    commit.held = held
    cursor0, cursor1 = held[("a", 0)].cursor, held[("a", 1)].cursor
    assert commit(Record("a", 0, 10)) is True
    assert commit(Record("a", 0, 11)) is True
    assert cursor0.committed == 12
    assert commit(Record("a", 1, 10)) is True
    assert commit(Record("a", 1, 12)) is True  # out of order: the consumer's commit
    assert cursor1.committed == 11
    assert commit(Record("a", 1, 11)) is True
    assert cursor1.committed == 13  # 12 was done
    assert commit(Record("b", 0, 10)) is False  # not held
    for offset in (12, 13, 14):
        assert commit(Record("a", 0, offset)) is True
    assert cursor0.committed == 15 and not cursor0.outstanding
    if build == "c":
        # out of order, then in order while an offset above is done, then not held
        assert slow.calls == [("a", 1, 12), ("a", 1, 11), ("b", 0, 10)]
    held[("a", 0)].revoke()
    assert commit(Record("a", 0, 15)) is False  # revoked: the consumer says so
    assert slow.calls[-1] == ("a", 0, 15)


def test_the_c_committer_forgets_its_cache_when_the_holding_changes() -> None:
    held = _held(("a", 0))
    slow = SlowCommit(held)
    commit = _fastpath.Committer(slow)
    commit.held = held
    assert commit(Record("a", 0, 10)) is True
    renewed = _held(("a", 0))  # a new claim: a new lease and cursor
    slow.held = renewed
    commit.held = renewed
    assert commit(Record("a", 0, 10)) is True
    assert renewed[("a", 0)].cursor.committed == 11
    assert held[("a", 0)].cursor.committed == 11  # the old cursor got nothing more
    assert commit(Record("a", 0, 11)) is True
    assert held[("a", 0)].cursor.committed == 11
    with pytest.raises(TypeError):
        commit.held = [("a", 0)]
    with pytest.raises(AttributeError):  # the slow path raises what Python would
        commit(object())


def test_the_cursor_fields_are_c_fields_with_the_python_rules() -> None:
    cursor = CommitCursor(5)
    assert isinstance(cursor, _fastpath.CursorCore)
    cursor.handed([5, 6, 7], 9)
    cursor.commit(6)  # out of order: the Python slow path
    assert cursor.committed == 5 and cursor._done == {6}
    cursor.commit(5)
    assert cursor.committed == 7
    cursor.commit(7)
    assert cursor.committed == 9  # the position, past the offset without a record
    with pytest.raises(TypeError):
        cursor.commit("8")  # type: ignore[arg-type]


def test_the_python_build_passes_the_cursor_and_hand_out_tests() -> None:
    env = {**os.environ, "MARSHAL_PY_PURE": "1", "MARSHAL_TESTS_FAST": "1"}
    code = ("import marshal_py.client.fastpath as f, marshal_py.client.confluent_fetcher as c;"
            "assert not f.COMPILED and not c.COMPILED_RECORDS")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/property/test_commit_cursor.py", "tests/unit/test_handout_gaps.py",
         "tests/unit/test_handout_eos.py"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
