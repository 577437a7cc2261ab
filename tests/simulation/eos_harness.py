"""Exactly-once members on MemoryLog: a fake of Kafka's transactions, and members that use it.

:class:`FakeTransactions` keeps, per transactional id, the current producer epoch, as Kafka's
transaction coordinator does: initializing an id (a fence) bumps the epoch, completes a
commit that was under way, and aborts an open transaction; a producer of an older epoch can
commit nothing. A committed transaction's output goes to :attr:`FakeTransactions.output` and
its commit record to the MemoryLog at once (the MemoryLog has no open transactions: a record
becomes visible when its transaction commits, as for a read_committed reader).

:class:`EosMember` is one member: a real :class:`MemberEngine` in ``"eos"`` mode and a real
:class:`BatchCommitter`, with the application's side played by the test.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sequence
from typing import Any

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.client.eos_batch import (
    BatchCommitter,
    TransactionBatch,
    TransactionFencedError,
    TransactionOutcomeUnknownError,
)
from marshal_py.client.transactions import transactional_id
from marshal_py.errors import BrokerUnavailableError
from marshal_py.log import MemoryLog
from marshal_py.protocol import coordination_partition, encode
from marshal_py.world import Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock


class FakeProducer:
    """A transactional producer of one id and epoch."""

    def __init__(self, broker: FakeTransactions, tid: str, epoch: int) -> None:
        self.broker = broker
        self.tid = tid
        self.epoch = epoch
        self.pending: list[tuple[str, bytes | None, bytes | None]] = []
        self.in_use = False
        self.retired = False
        #: Called inside commit() before it reaches the broker (a pause, a takeover).
        self.before_commit: Callable[[], None] | None = None
        #: Sends fail (the broker went away) while set.
        self.failing_sends = False

    def _check(self) -> None:
        if self.broker.epochs.get(self.tid) != self.epoch:
            raise TransactionFencedError(f"{self.tid} epoch {self.epoch} fenced")

    def begin(self) -> None:
        self._check()
        self.pending = []

    def send(self, topic: str, value: bytes | None, key: bytes | None,
             headers: Sequence[tuple[str, bytes]] | None, partition: int | None) -> Any:
        self._check()
        if self.failing_sends:
            raise BrokerUnavailableError("the broker went away (test)")
        self.pending.append((topic, key, value))

    def commit(self, coordination_topic: str, coordination_partition_: int,
               record: bytes) -> None:
        if self.before_commit is not None:
            hook, self.before_commit = self.before_commit, None
            hook()
        self._check()
        outcome = self.broker.commit_outcome(self)
        if outcome == "hold":  # accepted (PrepareCommit), completes at the next fence
            self.broker.committing[self.tid] = (list(self.pending), coordination_partition_,
                                                record)
            raise TransactionOutcomeUnknownError("commit under way (test)")
        if outcome == "lost":  # the client gave up; the commit did not happen
            raise TransactionOutcomeUnknownError("commit timed out (test)")
        self.broker.complete(self.pending, coordination_partition_, record)
        self.pending = []
        if outcome == "done-unknown":  # it happened, but the client could not tell
            raise TransactionOutcomeUnknownError("commit timed out (test)")

    def abort(self) -> None:
        self._check()
        self.pending = []


class FakeTransactions:
    """Kafka's transaction coordinator, for every member of a simulation; also each
    member's Fencing and producer registry (through :meth:`for_member`)."""

    def __init__(self, log: MemoryLog, rng: random.Random | None = None,
                 unknown_outcomes: float = 0.0) -> None:
        self.log = log
        self.rng = rng or random.Random(0)
        self.unknown_outcomes = unknown_outcomes
        self.epochs: dict[str, int] = {}
        #: Commits accepted and not completed yet: tid -> (outputs, partition, record).
        self.committing: dict[str, tuple[list[Any], int, bytes]] = {}
        #: Every committed output record: (topic, key, value).
        self.output: list[tuple[str, bytes | None, bytes | None]] = []
        self.fences: list[tuple[str, int]] = []

    def commit_outcome(self, producer: FakeProducer) -> str:
        if self.rng.random() >= self.unknown_outcomes:
            return "done"
        return self.rng.choice(["hold", "lost", "done-unknown"])

    def complete(self, outputs: list[Any], partition: int, record: bytes) -> None:
        self.output.extend(outputs)
        self.log.append(partition, record)

    def init(self, tid: str) -> int:
        """init_transactions: a commit under way completes, the epoch moves on."""
        if tid in self.committing:
            outputs, partition, record = self.committing.pop(tid)
            self.complete(outputs, partition, record)
        self.epochs[tid] = self.epochs.get(tid, 0) + 1
        return self.epochs[tid]


class MemberFencing:
    """One member's Fencing and producer registry on :class:`FakeTransactions`."""

    def __init__(self, broker: FakeTransactions, group: str) -> None:
        self.broker = broker
        self.group = group
        self.producers: dict[tuple[str, int], FakeProducer] = {}
        #: What happened, in order: ("fence", partition) and ("read", partition, offset).
        self.events: list[tuple[Any, ...]] = []

    def fence(self, topic: str, partition: int) -> None:
        tid = transactional_id(self.group, topic, partition)
        self.events.append(("fence", partition))
        self.broker.fences.append((tid, partition))
        self.producers[(topic, partition)] = FakeProducer(self.broker, tid, self.broker.init(tid))

    def forget(self, topic: str, partition: int) -> None:
        producer = self.producers.pop((topic, partition), None)
        if producer is not None:
            producer.retired = True

    def acquire(self, topic: str, partition: int, still_held: Callable[[], bool]) -> Any:
        producer = self.producers.get((topic, partition))
        if producer is None or producer.in_use or not still_held():
            return None
        producer.in_use = True
        return producer

    def release(self, producer: Any) -> None:
        producer.in_use = False


class EosMember:
    """An exactly-once member: engine, committer, and what the application holds."""

    def __init__(self, client: str, instance: str, log: MemoryLog, topic: MemoryTopic,
                 clock: Any, broker: FakeTransactions, *, hi: int, seed: int) -> None:
        config = EngineConfig(group_id="g", client_id=client, instance_id=instance,
                              topics=(topic.name,), mode="eos", heartbeat_interval_ms=hi,
                              offset_reset="earliest")
        self.fencing = MemberFencing(broker, "g")
        self.clock = clock
        self.engine = MemberEngine(config, log, Rationalizer(RationalizerConfig(
            log.partition_count(), hi)), topic, SimClock(clock), random.Random(seed),
            fencing=self.fencing)
        self.topic = topic
        count = log.partition_count()
        self.committer = BatchCommitter(
            group="g", client_id=client, writer_instance=lambda p: f"{instance}.t{p}",
            registry=self.fencing, coordination_topic=log.topic,
            coordination_partition=lambda t: coordination_partition(t, count), encode=encode,
            now_ms=clock, monotonic_ms=lambda: float(clock()),
            engine_lock=contextlib.nullcontext(),
            retake=lambda lease: self.engine.retake(lease.topic, lease.partition, lease.epoch),
            give_back=lambda batch: batch.lease.cursor.rewind(batch.first_offset))
        self.engine.start()

    def tick(self) -> None:
        self.engine.tick()

    def next_batch(self, max_records: int = 5) -> TransactionBatch | None:
        """A batch of the first held partition with records, as the consumer makes it."""
        for key, lease in sorted(self.engine.leases.items()):
            epoch, position = self.engine.assignments()[key]
            end = min(len(self.topic.records[key[1]]), position + max_records)
            offsets = list(range(position, end))
            if not offsets or not self.engine.accept(key[0], key[1], epoch, offsets, end):
                continue
            batch = self.committer.open(lease, offsets, end)
            if batch is not None:
                return batch
        return None

    def process(self, batch: TransactionBatch) -> None:
        """The application's transform: one output record per input record."""
        for offset in batch:
            batch.send("out", f"{batch.partition}:{offset}".encode())
