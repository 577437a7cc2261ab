"""Writing messages to the coordination log, signed when their group is authenticated.

A signed record carries its writer's sequence number, and readers refuse a signed record
whose number is not above the last one they accepted from the same sender (PROTOCOL.md,
authenticated groups). So a writer must (1) never use a number twice or go back, across all
the records of its instance id, and (2) append its records to each coordination partition in
the order of their numbers. Here:

1. numbers come from one counter per process, and an instance id is made fresh by every
   process (:func:`marshal_py.identity.new_instance_id`), so the numbers of an instance only
   grow, whichever channel or consumer of the process writes;
2. a :class:`MessageWriter` takes the numbers and hands the records to the log under one
   lock, in one call, and the log keeps the order of what it is given per partition
   (KafkaLog's producer is idempotent: one batch in flight per partition, retried in order).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence

from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import GroupKey, Message, encode, sign
from marshal_py.protocol.records import CoordinationRecord

_sequence = itertools.count(1)
_sequence_lock = threading.Lock()


def next_sequence() -> int:
    """The next sequence number of this process (1, 2, ...; never repeats)."""
    with _sequence_lock:
        return next(_sequence)


def record_value(message: Message, group_keys: Mapping[str, Sequence[GroupKey]]) -> bytes:
    """``message`` as a record's value, signed with its group's first key and this process's
    next sequence number when ``group_keys`` has keys for its group. For a record that
    another producer than a :class:`MessageWriter` appends (an exactly-once commit, inside a
    Kafka transaction): its writer must be the only one writing under its instance id, so
    that its records reach the log in the order of their numbers."""
    body = encode(message)
    keys = group_keys.get(message.group_id)
    return sign(body, keys[0], next_sequence()) if keys else body


class MessageWriter:
    """Appends messages to a coordination log, signing those about the groups of
    ``group_keys`` with the group's first key and the process's next sequence numbers.

    Thread-safe: the numbers are taken and the records handed to the log under one lock, so
    they reach every coordination partition in the order of their numbers.
    """

    def __init__(self, log_: CoordinationLog,
                 group_keys: Mapping[str, Sequence[GroupKey]] | None = None) -> None:
        self.log = log_
        self.group_keys = dict(group_keys or {})
        self._lock = threading.Lock()

    def write(self, items: Sequence[tuple[int, Message]]) -> list[CoordinationRecord]:
        """Append each (coordination partition, message), all sent before any is awaited;
        return them as stored. Raises ValueError for a message no reader would accept (and
        writes nothing), and the log's error if any was not written."""
        bodies = [(partition, encode(message), message.group_id)
                  for partition, message in items]
        if not bodies:
            return []
        with self._lock:
            values = [(partition, self._signed(body, group)) for partition, body, group in bodies]
            # One record: the plain append (a log that only fails appends still fails here).
            if len(values) == 1:
                return [self.log.append(*values[0])]
            return self.log.append_all(values)

    def _signed(self, body: bytes, group: str) -> bytes:
        keys = self.group_keys.get(group)
        return sign(body, keys[0], next_sequence()) if keys else body
