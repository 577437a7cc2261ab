"""Share mode: a task's ``gap`` acknowledgements, written by the executor in the driver's name.

An acquired offset may hold nothing to deliver: a transaction marker, a record of an aborted
transaction (read_committed), a record removed by compaction. PROTOCOL.md §8.2 rule 4 says
the holder that fetched past such offsets writes ``AcknowledgingRecords(gap)`` for them.
In the Spark source the holder is the driver's member, but only the executor that read the
range knows which offsets came without a record; Spark's python data source gives a reading
task no way to send anything back to the driver. So the task writes the acknowledgement
itself, as the holder (:class:`~marshal_py.client.batch_member.ShareHolder`, shipped in the
task), once it has read its ranges: one record per partition, its offsets as ranges. The
driver reads them back before it accepts the batch (PROTOCOL.md §7.1).

In an authenticated group (option ``auth.keys``) the acknowledgement is a **gap
declaration** (PROTOCOL.md §12.1): numbered 0 and signed with the holder's key, which the
driver derives from the group key for its own (instance, client) and ships in the task. The
task needs neither the group secret nor the driver's sequence numbers, and the key signs
nothing but gaps among that driver's locked records.

This is safe to repeat and to lose. A gap is a property of the partition, not of a reading:
a retried or speculative task finds the same offsets empty, and its second acknowledgement
is ignored (the offsets are no longer held). One that lands after the driver released or
accepted the offsets, or after their locks elapsed, is ignored too: only the holder's live
locks change. If the write fails, the task still succeeds: the driver then accepts those
offsets with the batch (the log says accepted for an offset that held nothing; the SPSO
passes it all the same).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from kafka import KafkaProducer
from kafka.errors import KafkaError

from marshal_py.client.batch_member import ShareHolder
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.log.kafka_config import SAFE_PRODUCER, new_client
from marshal_py.protocol import AcknowledgingRecords, OffsetRange, encode, format_ranges
from marshal_py.protocol.auth import DECLARATION_SEQ, sign

log = logging.getLogger(__name__)

TP = tuple[str, int]


def record_value(holder: ShareHolder, message: AcknowledgingRecords) -> bytes:
    """The record of a gap acknowledgement: signed as a gap declaration in an authenticated
    group, plain otherwise."""
    body = encode(message)
    key = holder.declaration_key
    return body if key is None else sign(body, key, DECLARATION_SEQ)


def gap_messages(holder: ShareHolder, gaps: Mapping[TP, Sequence[OffsetRange]],
                 sent_at_s: int) -> list[tuple[int, AcknowledgingRecords]]:
    """(coordination partition, acknowledgement) for each partition with gaps."""
    return [(holder.coordination_partition(topic),
             AcknowledgingRecords(sent_at_s, holder.instance_id, holder.client_id,
                                  holder.group_id, topic, partition, format_ranges(ranges),
                                  "gap"))
            for (topic, partition), ranges in sorted(gaps.items()) if ranges]


def write_gaps(holder: ShareHolder, coordination: KafkaLogConfig,
               gaps: Mapping[TP, Sequence[OffsetRange]]) -> bool:
    """Write ``gaps`` as ``gap`` acknowledgements in ``holder``'s name to the coordination
    topic, and wait until they are stored. False (and a warning) if that failed."""
    messages = gap_messages(holder, gaps, int(time.time()))
    if not messages:
        return True
    producer: KafkaProducer | None = None
    try:
        producer = new_client(KafkaProducer, **coordination.client_config(
            KafkaProducer, defaults={"linger_ms": 0}, fixed=SAFE_PRODUCER))
        futures = [producer.send(coordination.topic, value=record_value(holder, message),
                                 partition=partition)
                   for partition, message in messages]
        for future in futures:
            future.get(timeout=coordination.timeout_s)
    except KafkaError as exc:
        offsets = sum(last - first + 1 for ranges in gaps.values() for first, last in ranges)
        log.warning("could not write gap acknowledgements for %d offsets to %s (%s); the "
                    "driver accepts them with the batch instead. Executors need write access "
                    "to the coordination topic", offsets, coordination.topic, exc)
        return False
    finally:
        if producer is not None:
            producer.close(timeout=coordination.timeout_s)
    return True
