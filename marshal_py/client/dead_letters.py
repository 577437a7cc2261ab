"""Dead letters of share groups: writing a record to its share-partition's dead-letter topic.

Who writes a dead letter is decided by the log (PROTOCOL.md section 8.2, rule 9): a record
whose delivery attempts ran out is owed one, and the member that acquires it as a *duty*
writes it here and then acknowledges ``dead-lettered``. A member that crashes in between
leaves the duty to the next holder, which first looks in the dead-letter topic for the
letter its predecessor may have written (:meth:`DeadLetterWriter.already_written`), so the
record gets exactly one.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from marshal_py.errors import BrokerUnavailableError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.log.kafka_config import GROUPLESS, SAFE_PRODUCER, new_client

log = logging.getLogger(__name__)

#: Headers of a dead letter (besides the record's own), naming what it was.
GROUP, TOPIC, PARTITION, OFFSET = ("marshal.group", "marshal.original.topic",
                                   "marshal.original.partition", "marshal.original.offset")
DELIVERY_COUNT, REASON = "marshal.delivery.count", "marshal.reason"
#: How far before the moment a record became owed a predecessor's letter is looked for: the
#: dead-letter topic's timestamps are its writers' clocks, not the broker's.
CLOCK_SLACK_MS = 300_000


class DeadLetterWriter:
    """Writes dead letters of one share group (an idempotent ``acks=all`` producer, made on
    first use) and finds letters written before."""

    def __init__(self, kafka: KafkaLogConfig, group_id: str) -> None:
        self._kafka = kafka
        self._group = group_id
        self._producer: KafkaProducer | None = None

    def write(self, dead_letter_topic: str, record: Any, delivery_count: int,
              reason: str) -> None:
        """Write ``record`` (topic, partition, offset, key, value, headers) to
        ``dead_letter_topic`` and wait for the broker; BrokerUnavailableError when it fails."""
        if self._producer is None:
            self._producer = new_client(KafkaProducer, **self._kafka.client_config(
                KafkaProducer, fixed=SAFE_PRODUCER))
        headers = [
            (GROUP, self._group.encode()),
            (TOPIC, record.topic.encode()),
            (PARTITION, str(record.partition).encode()),
            (OFFSET, str(record.offset).encode()),
            (DELIVERY_COUNT, str(delivery_count).encode()),
            (REASON, reason.encode()),
            *(record.headers or []),
        ]
        try:
            self._producer.send(dead_letter_topic, key=record.key, value=record.value,
                                headers=headers).get(timeout=self._kafka.timeout_s)
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"writing to the dead-letter topic {dead_letter_topic!r} failed: {exc}"
            ) from exc
        log.info("dead-lettered %s/%d@%d to %s (%s)", record.topic, record.partition,
                 record.offset, dead_letter_topic, reason)

    def already_written(self, dead_letter_topic: str, topic: str, partition: int, offset: int,
                        since_ms: int) -> bool:
        """Is a letter of this group's record ``topic/partition@offset`` in the dead-letter
        topic, written at or after about ``since_ms``? Reads every partition of the topic
        from then to its end (dead letters are few); BrokerUnavailableError when it cannot."""
        wanted = {GROUP: self._group.encode(), TOPIC: topic.encode(),
                  PARTITION: str(partition).encode(), OFFSET: str(offset).encode()}
        consumer = new_client(KafkaConsumer,
                              **self._kafka.client_config(KafkaConsumer, fixed=GROUPLESS))
        try:
            count = consumer.partitions_for_topic(dead_letter_topic) or set()
            tps = [TopicPartition(dead_letter_topic, p) for p in sorted(count)]
            if not tps:
                return False
            consumer.assign(tps)
            ends = consumer.end_offsets(tps)
            starts = consumer.offsets_for_times({tp: max(0, since_ms - CLOCK_SLACK_MS)
                                                 for tp in tps})
            left = {}
            for tp in tps:
                found = starts.get(tp)
                start = ends[tp] if found is None else found.offset
                if start < ends[tp]:
                    consumer.seek(tp, start)
                    left[tp] = ends[tp]
            while left:
                polled = consumer.poll(timeout_ms=int(self._kafka.timeout_s * 1000))
                if not polled:
                    raise BrokerUnavailableError(
                        f"reading the dead-letter topic {dead_letter_topic!r} timed out")
                for tp, records in polled.items():
                    for r in records:
                        if wanted.items() <= dict(r.headers or []).items():
                            return True
                    if tp in left and consumer.position(tp) >= left[tp]:
                        del left[tp]
            return False
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"reading the dead-letter topic {dead_letter_topic!r} failed: {exc}") from exc
        finally:
            consumer.close()

    def close(self) -> None:
        """Close the producer (after delivering what it holds)."""
        if self._producer is not None:
            self._producer.close()
            self._producer = None
