"""Exactly-once take-up: what the engine needs of transactions, and reading to the end.

An exactly-once member commits a partition's offset in the same Kafka transaction as the
output of the input below it (PROTOCOL.md 7.2). When it wins a partition, the exclusive engine
(:class:`~marshal_py.client.engine.MemberEngine`) takes it up in this order, and no other:

1. **fence** every earlier writer of the partition's transactional id (:meth:`Fencing.fence`:
   ``init_transactions``): an open transaction of the previous owner is aborted, one that
   was committing completes, and the previous owner can commit nothing more;
2. **read** the coordination log to its end, ``read_committed`` (:func:`read_to_end`): a
   commit of the previous owner that completed before the fence is now in the log;
3. only then **start** at the committed offset, and heartbeat it.

Reading before fencing would miss a commit that lands in between, and the partition's output
for that input would be written twice. This module does no I/O of its own: the engine is
given a :class:`Fencing` (Kafka's transactional producers, or a fake in simulations).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from marshal_py.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    CoordinationLogLostError,
    MarshalError,
)
from marshal_py.log.base import HANGING_HINT, CoordinationLog
from marshal_py.replay.reading import follow_once
from marshal_py.world import Rationalizer

log = logging.getLogger(__name__)

#: Reads in a row that bring nothing before :func:`read_to_end` gives up.
_IDLE_READS = 10


class Fencing(Protocol):
    """The transactional side of an exactly-once member, as its engine sees it."""

    def fence(self, topic: str, partition: int) -> None:
        """Fence every earlier writer of the partition's transactional id and get ready to
        write transactions for it. Raises :class:`~marshal_py.errors.ConfigurationError`
        when it never can (no permission, a broker without transactions) and another
        :class:`~marshal_py.errors.MarshalError` when it cannot now (retried)."""
        ...

    def forget(self, topic: str, partition: int) -> None:
        """The partition is no longer held: its producer writes nothing more."""
        ...


def read_to_end(log: CoordinationLog, rationalizer: Rationalizer, partitions: Iterable[int],
                *, fetch_timeout_s: float = 0.5) -> None:
    """Apply every record of ``partitions`` up to their current end (for Kafka, the last
    stable offset: the end of what ``read_committed`` reads), passing positions that hold no
    record (transaction markers and aborted records, which every transaction leaves behind)
    without waiting on them.

    Raises :class:`~marshal_py.errors.CoordinationLogLostError` when a partition now ends
    before what was read (the topic was recreated), and
    :class:`~marshal_py.errors.BrokerUnavailableError` when nothing arrives."""
    targets = {p: log.end_position(p) for p in sorted(set(partitions))}
    for p, end in targets.items():
        if end < rationalizer.next_position(p):
            raise CoordinationLogLostError(
                f"coordination topic {log.topic!r} went back on partition {p}: it ends at "
                f"{end}, but {rationalizer.next_position(p)} records had been read; "
                f"{CoordinationLogLostError.ADVICE}")
    idle = 0
    while True:
        pending = [p for p, end in targets.items() if rationalizer.next_position(p) < end]
        if not pending:
            return
        before = [rationalizer.next_position(p) for p in pending]
        follow_once(log, rationalizer, pending, fetch_timeout_s)
        if [rationalizer.next_position(p) for p in pending] != before:
            idle = 0
            continue
        idle += 1
        if idle >= _IDLE_READS:
            raise BrokerUnavailableError(
                f"no coordination records arrive from {log.topic} partitions {pending} "
                f"(read up to {before}, ends {[targets[p] for p in pending]}): the broker may "
                f"be restarting, or {HANGING_HINT}; will try again")


def fence_and_read(fencing: Fencing, topic: str, partitions: list[int],
                   read_to_end_: Callable[[], bool], still_mine: Callable[[int], bool],
                   ) -> list[int]:
    """Take won ``partitions`` of ``topic`` up, exactly-once: FIRST fence every earlier writer
    of each one's transactional id, THEN read the log to its end (``read_to_end_``: False
    when it cannot now), so that a commit of the previous owner that completed meanwhile is
    seen. Returns those still ours (``still_mine``), whose committed offset may now be taken
    as the start; the others are forgotten. A fence that fails now (not for good) leaves its
    partition to a later attempt."""
    fenced = []
    for partition in partitions:
        try:
            fencing.fence(topic, partition)
        except (ConfigurationError, CoordinationLogLostError):
            raise
        except MarshalError as exc:
            log.warning("cannot take %s/%d up now (fencing its transactional id): %s",
                        topic, partition, exc)
            continue
        fenced.append(partition)
    if fenced and not read_to_end_():
        fenced = []
    kept = [p for p in fenced if still_mine(p)]
    for partition in partitions:
        if partition not in kept:
            fencing.forget(topic, partition)
    return kept
