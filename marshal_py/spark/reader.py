"""The ``marshal`` stream reader: the Spark driver's membership in the group.

Spark creates the reader in its long-lived driver-side Python worker, and also (only to ship
:meth:`MarshalStreamReader.read` to executors) in a planner process: the group member is
therefore started lazily, on the first call that needs it, and never pickled.

The life of a micro-batch:

1. ``latestOffset(start, limit)``: every batch up to ``start`` is complete (Spark asks for
   the next batch only after the previous one ran and was committed), so it is committed in
   the coordination log first. Then the member plans the next ranges of what it holds (or
   acquires share records), at most ``limit`` records; nothing to read returns ``start``.
2. ``partitions(start, end)``: the ranges of ``end`` cut into tasks. A batch planned by an
   earlier process (a restart re-running an interrupted batch) is reconciled with the
   coordination log first.
3. ``read(task)`` on an executor: exactly that range (librdkafka or kafka-python). In share
   mode the task then writes ``gap`` acknowledgements, in the member's name, for offsets of
   its ranges that held no record (:mod:`marshal_py.spark.gaps`); in authenticated groups
   (option ``auth.keys``) as gap declarations, signed with the driver's holder key.
4. ``commit(end)``: complete (also done by the next ``latestOffset``, whichever comes first);
   share mode accepts what is still held after reading the tasks' gaps back.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import signal
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from marshal_py.spark.options import SourceOptions
from marshal_py.spark.planning import TP, BatchOffset, ReadTask, split_ranges

if TYPE_CHECKING:
    # Each process imports only its side: the driver the member (SourceOptions.marshaler, when
    # joining), an executor the reading (in read).
    from marshal_py.client.batch_member import BatchMember, PlannedRange
    from marshal_py.client.marshaler import Marshaler

log = logging.getLogger(__name__)


class MarshalInputPartition(InputPartition):
    """One Spark task: a :class:`ReadTask`."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


class MarshalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches as a member of the group; see the module docstring."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._init_driver_state()

    def _init_driver_state(self) -> None:
        self._lock = threading.Lock()
        self._marshaler: Marshaler | None = None
        self._member: BatchMember | None = None
        self._batch = 0
        self._targets: dict[TP, int] | None = None
        #: batches planned (or re-run) and not yet complete, oldest first
        self._inflight: dict[tuple[str, int], list[PlannedRange]] = {}
        #: floors of re-run batches: their checkpointed ``next`` claims more than was read
        self._floors: dict[tuple[str, int], Mapping[TP, int]] = {}

    # Executors get the reader pickled; the member and its threads stay on the driver.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self.schema = state["schema"]
        self._init_driver_state()

    # -- the member --------------------------------------------------------------------------

    def _joined(self) -> BatchMember:
        if self._member is not None:
            return self._member
        o = self.options
        marshaler = o.marshaler()
        try:
            member = marshaler.batch_member(
                o.topics, o.mode, offset_reset=o.offset_reset, balance=o.balance,
                max_claims=o.max_claims, lock_duration=o.lock_duration_s,
                delivery_limit=o.delivery_limit, inflight_limit=o.inflight_limit,
                start_time=o.start_time, isolation_level=o.isolation_level,
                max_poll_interval=o.max_poll_interval_s)
            member.wait_settled(o.settle_timeout)
        except BaseException:
            marshaler.close()
            raise
        self._marshaler, self._member = marshaler, member
        _leave_gracefully_on_sigterm()
        log.info("marshal source joined group %s as %s (instance %s, mode %s)", o.group,
                 o.client_id, member.instance_id, o.mode)
        return member

    # -- Spark's calls -------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """A new query: no batch yet; where each partition starts comes from the group."""
        return BatchOffset().to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` when given, else everything available."""
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Read at most up to the partitions' current ends: the query then stops."""
        with self._lock:
            self._targets = self._joined().end_offsets()
            log.info("available-now: reading up to %d partitions' current ends",
                     len(self._targets))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Complete everything up to ``start``, then plan the next batch (or return
        ``start``: nothing to read)."""
        with self._lock:
            begin = BatchOffset.from_json(start)
            member = self._joined()
            self._complete(member, begin)
            floors = self._floors.get(begin.key, begin.next)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            ranges = member.plan(max_rows, self._targets, floors)
            if not ranges:
                return start
            self._batch += 1
            end = BatchOffset(begin.planner, begin.batch, floors).following(
                member.instance_id, self._batch, ranges)
            self._inflight[end.key] = ranges
            return end.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Cut the batch's ranges into tasks; reconcile a batch an earlier process planned."""
        from marshal_py.client.share_batch_member import ShareBatchMember

        with self._lock:
            last = BatchOffset.from_json(end)
            if not last.ranges:
                return []
            member = self._joined()
            ranges: list[PlannedRange] = list(last.ranges)
            if last.planner != member.instance_id:
                ranges = self._rerun(member, BatchOffset.from_json(start), last)
            tasks = split_ranges(ranges, self.options.max_records_per_partition,
                                 self.options.min_partitions)
            if isinstance(member, ShareBatchMember):
                # Workers write their gaps in the driver's name (PROTOCOL.md 7.1), as gap
                # declarations signed with its holder key in an authenticated group.
                holder = member.holder
                tasks = [dataclasses.replace(t, holder=holder) for t in tasks]
            return [MarshalInputPartition(t) for t in tasks]

    def _rerun(self, member: BatchMember, first: BatchOffset, last: BatchOffset
               ) -> list[PlannedRange]:
        """An interrupted batch of an earlier process: at-least-once re-reads what this member
        holds now from where the group stands; at-most-once and share read nothing again
        (at-most-once confirmed those records as delivered; share records return to the
        group when their locks elapse)."""
        member.skip_processed(self._floors.get(first.key, first.next))
        adopted = member.adopt(last.ranges)
        floors = dict(self._floors.get(first.key, first.next))
        for r in adopted:
            floors[(r.topic, r.partition)] = max(floors.get((r.topic, r.partition), 0), r.end)
        self._floors[last.key] = floors
        self._inflight[last.key] = adopted
        dropped = sum(r.size for r in last.ranges) - sum(r.size for r in adopted)
        log.warning("re-running batch %d of an earlier run (planner %s): %d records re-read, "
                    "%d not (%s)", last.batch, last.planner, sum(r.size for r in adopted),
                    dropped, "mode " + self.options.mode)
        return adopted

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: read the task's range (no state, no coordination)."""
        from marshal_py.spark.fetch import read_task
        from marshal_py.spark.gaps import write_gaps

        task = partition.task if isinstance(partition, MarshalInputPartition) else partition.value
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        on_gaps = (None if task.holder is None
                   else functools.partial(write_gaps, task.holder, self.options.log_config))
        return read_task(task, self.options.data_config, arrow_schema,
                         fetcher=self.options.fetcher,
                         fail_on_data_loss=self.options.fail_on_data_loss,
                         timeout_s=self.options.fetch_timeout_s, on_gaps=on_gaps)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has processed everything up to ``end``."""
        with self._lock:
            if self._member is not None:
                self._complete(self._member, BatchOffset.from_json(end))

    def stop(self) -> None:
        """The query ended: release everything with its committed offset and leave."""
        with self._lock:
            marshaler, self._marshaler, self._member = self._marshaler, None, None
            if marshaler is not None:
                marshaler.close()

    # -- completion -----------------------------------------------------------------------

    def _complete(self, member: BatchMember, done: BatchOffset) -> None:
        """Commit (accept) every in-flight batch up to and including ``done``."""
        if done.key not in self._inflight:
            return
        for key in list(self._inflight):
            member.complete(self._inflight.pop(key))
            if key == done.key:
                break


def _leave_gracefully_on_sigterm() -> None:
    """Spark stops a query's driver-side Python worker with SIGTERM, whose default action
    would kill it before :meth:`MarshalStreamReader.stop` could release the partitions (the
    worker calls ``stop`` when its command loop ends). Turn the first SIGTERM into
    ``SystemExit`` in the worker's main thread, so the loop ends and ``stop`` runs; ignore
    repeats while it does. Only where nobody installed a handler already."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return

    def leave(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.info("marshal source: SIGTERM, leaving the group")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)
