"""Claim latency (:func:`claim_latency`): members joining one after the other, each claim from
proposal to the win read back (step 2 of :mod:`bench.consumer`; the ``coordination`` suite
runs it too)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from kafka import KafkaAdminClient

from bench.common import (
    HI_S,
    PARTITIONS,
    BenchError,
    create_topic,
    wait_for,
)
from marshal_py import Consumer, Marshaler
from marshal_py.client import BrokerClock


class LocalClock(BrokerClock):
    """This machine's clock, never corrected (an option of claim_latency; the engine's
    latencies are measured on a monotonic clock either way)."""

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        return None


@dataclass
class ClaimLatency:
    label: str
    joins: int
    wanted: int  # partitions each join claims
    latencies_ms: list[int]
    first_of_join_ms: list[int]  # the first win of every join
    join_s: list[float]  # from m.consumer() to holding ``wanted`` partitions


def claim_latency(bootstrap: str, admin: KafkaAdminClient, joins: int,
                  max_claims: int | None = None, local_clock: bool = False) -> ClaimLatency:
    """``joins`` members, one after the other, each claiming every partition (or
    ``max_claims``) of a fresh 12-partition topic and then closing (releasing them).

    ``local_clock``: run the engine on :class:`LocalClock` so that its claim latencies are
    true milliseconds; False keeps the shipped BrokerClock.
    """
    tag = uuid.uuid4().hex[:8]
    topic, group = f"bench-claims-{tag}", f"bench.claims.{tag}"
    create_topic(admin, topic)
    wanted = max_claims or PARTITIONS
    label = (f"one member claims {wanted}" + (" (max_claims=1)" if max_claims == 1 else "")
             + (", uncorrected local clock" if local_clock else ""))
    result = ClaimLatency(label, joins, wanted, [], [], [])
    for i in range(joins):
        # A new client id each time: a member does not re-take for one HI what it released.
        with Marshaler(bootstrap, group_id=group, client_id=f"claimer-{i}",
                       heartbeat_interval=HI_S) as m:
            if local_clock:
                m.clock = LocalClock()  # read by m.consumer() when it builds the engine
            started = time.monotonic()
            consumer = m.consumer([topic], mode="alo", offset_reset="earliest",
                                  max_claims=max_claims)

            def holds_all(c: Consumer = consumer) -> bool:
                return len(c.assignment()) == wanted

            wait_for(f"join {i + 1} to hold {wanted} partitions", holds_all, 30)
            result.join_s.append(time.monotonic() - started)
            won = list(consumer.stats.claim_latencies_ms)
            if won:
                result.latencies_ms.extend(won)
                result.first_of_join_ms.append(won[0])
    if not result.latencies_ms:
        raise BenchError("no claim latencies were recorded (stats.claim_latencies_ms empty)")
    return result
