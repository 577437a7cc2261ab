"""The records of the librdkafka fetcher (:mod:`marshal_py.client.confluent_fetcher`).

A :data:`ConfluentRecord` has the attributes of kafka-python's ``ConsumerRecord``, so code
reads records of either fetcher alike. :data:`split_messages` turns what one
``Consumer.consume()`` returned into records, in runs of one partition. Both come from the C
extension (``_fastpath.c``: one pass per consume, the Message's methods called directly)
where it was built, else from the Python build here (:class:`PyConfluentRecord`,
:func:`py_split`); ``tests/unit/test_fastpath.py`` checks that they agree. Measured per
record over 500 fetched Messages (timeit): a plain loop calling ``error()``, ``partition()``
and ``offset()`` 71-81 ns; :data:`split_messages` and a loop reading ``record.partition``
and ``record.offset``: C build 71 ns, Python build 395-442 ns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress, count, islice, pairwise, repeat
from operator import methodcaller, ne
from typing import Any, NamedTuple

from marshal_py.client.fastpath import compiled_module

__all__ = ["COMPILED_RECORDS", "ERROR", "TRACKED_PER_RECORD", "ConfluentRecord",
           "PyConfluentRecord", "py_split", "run_bounds", "split_messages"]

_TIMESTAMP_TYPES = (None, 0, 1)  # of confluent's NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME


def _ms(kind: int, ms: int) -> int | None:
    return ms if kind else None


class _Fields(NamedTuple):
    topic: str
    partition: int
    offset: int
    message: Any


def _length(raw: bytes | None) -> int:
    return -1 if raw is None else len(raw)


class PyConfluentRecord(tuple):  # type: ignore[type-arg]
    """A record of the confluent fetcher, shaped like kafka-python's ``ConsumerRecord``:
    ``topic partition offset key value headers timestamp timestamp_type
    serialized_key_size serialized_value_size`` (headers: (str,
    bytes) pairs, [] when none; timestamp: ms; its type 0 CreateTime, 1 LogAppendTime; both
    None when the record has none) and ``message``, the ``confluent_kafka.Message``.

    This is the Python build of the type, used when the C extension
    ``marshal_py.client._fastpath`` (the same attributes, a quarter of the cost per record)
    was not built: :data:`ConfluentRecord` names whichever is in use."""

    __slots__ = ()
    topic, partition, offset, message = _Fields.topic, _Fields.partition, _Fields.offset, \
        _Fields.message
    key = property(lambda self: self[3].key(), doc="The record's key.")
    value = property(lambda self: self[3].value(), doc="The record's value.")
    headers = property(lambda self: self[3].headers() or [], doc="The record's headers.")
    timestamp = property(lambda self: _ms(*self[3].timestamp()), doc="The timestamp in ms.")
    timestamp_type = property(lambda self: _TIMESTAMP_TYPES[self[3].timestamp()[0]],
                              doc="0: CreateTime, 1: LogAppendTime.")
    serialized_key_size = property(lambda self: _length(self[3].key()),
                                   doc="The key's length in bytes (-1: no key).")
    serialized_value_size = property(lambda self: _length(self[3].value()),
                                     doc="The value's length in bytes (-1: no value).")

    def __new__(cls, topic: str, partition: int, offset: int, message: Any
                ) -> PyConfluentRecord:
        return tuple.__new__(cls, (topic, partition, offset, message))

    def __repr__(self) -> str:
        return f"ConfluentRecord(topic={self[0]!r}, partition={self[1]}, offset={self[2]})"


def run_bounds(messages: list[Any], one_topic: bool) -> tuple[list[int], Iterable[tuple[int, int]]]:
    """The partition of each message, and the (start, stop) of each run of one partition in
    ``messages`` (error-free, not empty): C-level passes, no Python per message."""
    n = len(messages)
    parts = list(map(_PARTITION, messages))
    if one_topic and parts.count(parts[0]) == n:
        return parts, ((0, n),)
    # cut where the partition or the topic changes
    keys = parts if one_topic else list(zip(map(_TOPIC, messages), parts, strict=True))
    return parts, pairwise([0, *compress(count(1), map(ne, keys, islice(keys, 1, None))), n])


def py_split(messages: list[Any], one_topic: bool) -> list[tuple[str, int, list[Any]]] | None:
    """The records of a ``consume()`` result in runs of one partition, ``[(topic, partition,
    records)]`` in order (a partition may have several runs); None when a message carries an
    error. The Python build of ``_fastpath.split``: C-level passes (``map``, ``zip``) and a
    tuple per record."""
    if any(map(ERROR, messages)):
        return None
    if not messages:
        return []
    parts, bounds = run_bounds(messages, one_topic)
    runs = []
    for i, j in bounds:
        run = messages if j - i == len(messages) else messages[i:j]
        topic, partition = messages[i].topic(), parts[i]
        runs.append((topic, partition, list(map(tuple.__new__, repeat(PyConfluentRecord), zip(
            repeat(topic), repeat(partition), map(_OFFSET, run), run)))))
    return runs


_OFFSET, ERROR, _PARTITION, _TOPIC = map(methodcaller,
                                          ("offset", "error", "partition", "topic"))
_compiled = compiled_module()
#: True when records are built by the C extension (client/fastpath.py).
COMPILED_RECORDS = _compiled is not None
ConfluentRecord: type = _compiled.ConfluentRecord if _compiled else PyConfluentRecord
split_messages: Callable[[list[Any], bool], list[tuple[str, int, list[Any]]] | None] = \
    _compiled.split if _compiled else py_split
#: Objects the garbage collector tracks per record handed out: the Message, and in the
#: Python build the record (a tuple) too; the C records are not tracked.
TRACKED_PER_RECORD = 1 if COMPILED_RECORDS else 2
