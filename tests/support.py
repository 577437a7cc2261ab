"""Test helpers: building coordination logs by hand; a secured development broker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    RenewingLocks,
    coordination_partition,
    encode,
)
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig

if TYPE_CHECKING:
    from marshal_py.devbroker.security import SecureDevBroker

HI = 10_000  # heartbeat interval used by scenario tests, in ms
T0 = 1_700_000_000_000


@dataclass
class Scenario:
    """A coordination log written record by record, with explicit broker timestamps."""

    partitions: int = 4
    heartbeat_interval_ms: int = HI
    records: list[CoordinationRecord] = field(default_factory=list)

    def _next_position(self, partition: int) -> int:
        return sum(1 for r in self.records if r.partition == partition)

    def raw(self, value: bytes | None, at: int, partition: int = 0) -> CoordinationRecord:
        record = CoordinationRecord(partition, self._next_position(partition), T0 + at, value)
        self.records.append(record)
        return record

    def write(self, message: Message, at: int, partition: int | None = None) -> CoordinationRecord:
        if partition is None:
            partition = coordination_partition(message.topic, self.partitions)
        return self.raw(encode(message), at, partition)

    @staticmethod
    def _base(client: str, instance: str | None, group: str, topic: str, partition: int) -> dict:
        return dict(sent_at=0, instance_id=instance or f"i-{client}", client_id=client,
                    group_id=group, topic=topic, partition=partition)

    def claim(self, client: str, at: int, *, instance: str | None = None, group: str = "g",
              topic: str = "t", partition: int = 0) -> CoordinationRecord:
        return self.write(ClaimingPartition(**self._base(client, instance, group, topic,
                                                         partition)), at)

    def heartbeat(self, client: str, at: int, offset: int, *, instance: str | None = None,
                  group: str = "g", topic: str = "t", partition: int = 0) -> CoordinationRecord:
        return self.write(Heartbeat(**self._base(client, instance, group, topic, partition),
                                    offset=offset), at)

    def release(self, client: str, at: int, offset: int, *, instance: str | None = None,
                group: str = "g", topic: str = "t", partition: int = 0) -> CoordinationRecord:
        return self.write(ReleasingPartition(**self._base(client, instance, group, topic,
                                                          partition), offset=offset), at)

    def claim_messages(self, client: str, at: int, last: int, *, instance: str | None = None,
                       group: str = "g", topic: str = "t",
                       partition: int = 0) -> CoordinationRecord:
        return self.write(ClaimingMessages(**self._base(client, instance, group, topic, partition),
                                           proposed_last_offset=last), at)

    def member(self, client: str, at: int, *, active: bool = True, instance: str | None = None,
               group: str = "g", topic: str = "t", capacity: int = -1,
               interval_ms: int = 0) -> CoordinationRecord:
        """A membership heartbeat; ``interval_ms``: the heartbeat interval it announces (0:
        none, version 2)."""
        return self.write(MemberHeartbeat(0, instance or f"i-{client}", client, group, topic,
                                          int(active), capacity, interval_ms), at)

    def share_init(self, client: str, at: int, start: int, *, delivery_limit: int = 5,
                   inflight_limit: int = 2000, group: str = "g", topic: str = "t",
                   partition: int = 0, dead_letter_topic: str = "") -> CoordinationRecord:
        return self.write(InitializingSharePartition(
            **self._base(client, None, group, topic, partition), start_offset=start,
            delivery_limit=delivery_limit, inflight_limit=inflight_limit,
            dead_letter_topic=dead_letter_topic), at)

    def acquire(self, client: str, at: int, ranges: str, *, lock_ms: int = 30_000,
                group: str = "g", topic: str = "t", partition: int = 0) -> CoordinationRecord:
        return self.write(AcquiringRecords(**self._base(client, None, group, topic, partition),
                                           ranges=ranges, lock_ms=lock_ms), at)

    def ack(self, client: str, at: int, ranges: str, kind: str = "accept", *, group: str = "g",
            topic: str = "t", partition: int = 0) -> CoordinationRecord:
        return self.write(AcknowledgingRecords(
            **self._base(client, None, group, topic, partition), ranges=ranges, kind=kind), at)

    def renew(self, client: str, at: int, ranges: str, *, lock_ms: int = 30_000,
              group: str = "g", topic: str = "t", partition: int = 0) -> CoordinationRecord:
        return self.write(RenewingLocks(**self._base(client, None, group, topic, partition),
                                        ranges=ranges, lock_ms=lock_ms), at)

    def rationalizer(self) -> Rationalizer:
        return Rationalizer(RationalizerConfig(self.partitions, self.heartbeat_interval_ms))

    def replay(self) -> Rationalizer:
        r = self.rationalizer()
        r.apply_all(self.records)
        return r


# -- a secured broker (the broker-side modules are imported on use: pure tests need none) ------


@contextmanager
def secured_broker(*users: str) -> Iterator[SecureDevBroker]:
    """A secure development broker (SASL_SSL, SCRAM-SHA-512, a test CA, ACLs on) with the
    super user admin and ``users`` (no ACLs until a test grants them some), and `__marshal`
    (and its index) created by admin; stopped on exit."""
    from marshal_py.devbroker.security import SecureDevBroker
    from marshal_py.log.kafka import KafkaLog, KafkaLogConfig

    secure = SecureDevBroker(users=users, heap="512m")
    secure.start()
    try:
        KafkaLog(KafkaLogConfig(bootstrap_servers=secure.bootstrap_servers,
                                kafka_config=secure.client_config())).close()
        yield secure
    finally:
        secure.stop()


def write_as_admin(broker: SecureDevBroker, topic: str, partitions: int,
                   values: Iterable[tuple[int, bytes]]) -> list[tuple[int, int]]:
    """Create ``topic`` with ``partitions`` partitions and write ``values`` (partition,
    value) into it as admin, acknowledged by the broker; where each landed (partition,
    offset), in order."""
    from kafka import KafkaAdminClient, KafkaProducer

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, **broker.client_config())
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}},
                            wait_for_metadata=True)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all",
                             **broker.client_config())
    try:
        futures = [producer.send(topic, value=value, partition=partition)
                   for partition, value in values]
        producer.flush()
        return [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]
    finally:
        producer.close()
