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
from marshal_py.client.confluent_records import PyConfluentRecord, py_split
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


class TopicMessage(FakeMessage):
    """A message as consume() returns it: with its topic, partition and error."""

    def __init__(self, topic: str, partition: int, offset: int, error: object = None) -> None:
        super().__init__(offset, b"k%d" % offset, b"v", None, (1, offset))
        self._topic, self._partition, self._error = topic, partition, error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def error(self) -> object:
        return self._error


def _runs(runs: Any) -> list[tuple[str, int, list[dict[str, Any]]]]:
    return [(t, p, [{f: getattr(r, f) for f in FIELDS} for r in records])
            for t, p, records in runs]


def _consumed(*spec: tuple[str, int, int]) -> list[TopicMessage]:
    return [TopicMessage(t, p, o) for t, p, o in spec]


@pytest.mark.parametrize(("messages", "one_topic"), [
    (_consumed(("a", 0, 5), ("a", 0, 6), ("a", 0, 7)), True),
    (_consumed(("a", 0, 5), ("a", 1, 9), ("a", 1, 10), ("a", 0, 6)), True),
    (_consumed(("a", 0, 5), ("b", 0, 9), ("b", 0, 10), ("a", 3, 6)), False),
    (_consumed(("a", 300, 5), ("a", 300, 6), ("b", 300, 1)), False),
    ([], True),
])
def test_records_of_both_builds_agree(messages: list[TopicMessage], one_topic: bool) -> None:
    c_runs, py_runs = _fastpath.split(messages, one_topic), py_split(messages, one_topic)
    assert _runs(c_runs) == _runs(py_runs)
    flat = [(t, p, r["offset"]) for t, p, records in _runs(c_runs) for r in records]
    assert flat == [(m.topic(), m.partition(), m.offset()) for m in messages]
    for _, _, records in c_runs:
        for record in records:
            fields = (getattr(record, f) for f in FIELDS[:4])
            assert repr(record) == repr(PyConfluentRecord(*fields))
    made = _fastpath.ConfluentRecord("orders", 4, 7, MESSAGES[0])
    assert (made.topic, made.partition, made.offset, made.key) == ("orders", 4, 7, b"k")
    assert PyConfluentRecord("orders", 4, 7, MESSAGES[0]).key == b"k"


def test_a_message_with_an_error_is_left_to_the_caller() -> None:
    messages = [*_consumed(("a", 0, 5), ("a", 0, 6)), TopicMessage("a", 0, 7, error="lost")]
    assert _fastpath.split(messages, True) is None and py_split(messages, True) is None


def test_both_builds_read_the_fields_of_a_record_alike() -> None:
    for message in MESSAGES:
        c = _fastpath.ConfluentRecord("t", 0, message.offset(), message)
        py = PyConfluentRecord("t", 0, message.offset(), message)
        assert {f: getattr(c, f) for f in FIELDS} == {f: getattr(py, f) for f in FIELDS}
    record = _fastpath.ConfluentRecord("t", 0, 8, MESSAGES[1])
    assert record.timestamp is None and record.timestamp_type is None
    assert record.headers == [] and record.key is None
    assert record.serialized_key_size == -1 and record.serialized_value_size == -1


def test_split_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError):
        _fastpath.split(tuple(MESSAGES), True)
    with pytest.raises(AttributeError):
        _fastpath.split([object()], True)
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
    code = ("import marshal_py.client.fastpath as f, marshal_py.client.confluent_records as c;"
            "assert not f.COMPILED and not c.COMPILED_RECORDS")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/property/test_commit_cursor.py", "tests/unit/test_handout_gaps.py",
         "tests/unit/test_handout_eos.py"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_the_c_committer_reads_confluent_records_directly() -> None:
    held = _held(("a", 0))
    slow = SlowCommit(held)
    commit = _fastpath.Committer(slow)
    commit.held = held
    [(_, _, records)] = _fastpath.split(_consumed(*(("a", 0, o) for o in range(10, 15))), True)
    assert all(commit(r) for r in records[:3])
    assert held[("a", 0)].cursor.committed == 13 and slow.calls == []
    assert commit(records[4]) is True  # out of order: the consumer's commit
    assert slow.calls == [("a", 0, 14)]
    assert commit(_fastpath.split(_consumed(("b", 0, 10)), True)[0][2][0]) is False
    with pytest.raises(TypeError):
        commit(records[0], records[1])
