"""Records per second the pure rationalizer applies.

Usage: python -m bench.rationalizer [--records N] [--partitions P] [--repeat R] [--quick]

Builds a realistic coordination log in memory (claims, races, heartbeats every HI, releases,
AMO claims, a little garbage) over P partitions of one topic and 3 groups, then times
Rationalizer.apply_all over it, R times, and prints the median. Decoding is included: the
input is raw record bytes, as replay from Kafka delivers them.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

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

HI_MS = 10_000
COORD = 4


def build_log(records: int, partitions: int, seed: int = 7) -> list[CoordinationRecord]:
    """A coordination log of ``records`` records about one topic."""
    rng = random.Random(seed)
    topic = "events"
    cp = coordination_partition(topic, COORD)
    log: list[CoordinationRecord] = []
    now = 1_700_000_000_000
    groups = ["team.a", "team.b", "team.c"]
    clients = [(f"{i:08x}", f"worker-{i}") for i in range(8)]
    while len(log) < records:
        now += rng.randint(0, 20)
        instance, client = rng.choice(clients)
        base = (now // 1000, instance, client, rng.choice(groups), topic,
                rng.randrange(partitions))
        roll = rng.random()
        if roll < 0.70:
            message: object = Heartbeat(*base, rng.randrange(10**9))
        elif roll < 0.85:
            message = ClaimingPartition(*base)
        elif roll < 0.93:
            message = ClaimingMessages(*base, rng.randrange(10**9))
        elif roll < 0.99:
            message = ReleasingPartition(*base, rng.randrange(10**9))
        else:
            message = None
        value = encode(message) if message is not None else b"\x00garbage"  # type: ignore[arg-type]
        log.append(CoordinationRecord(cp, len(log), now, value))
    return log


SHARE_BLOCK = 100
SHARE_LOCK_MS = 3_600_000


def build_share_log(partitions: int, inflight: int, steady: int, seed: int = 7
                    ) -> tuple[list[CoordinationRecord], list[CoordinationRecord]]:
    """The log of one share group (8 members) on a topic of ``partitions`` partitions, in two
    parts: ``fill`` initializes every share-partition and acquires ``inflight`` records of
    each (blocks of 100, locks of one hour, so they stay in flight), and ``steady`` is
    ``steady`` records of the traffic that keeps them there: per record, at a random
    partition, accept the oldest block and acquire the next (SPSO and SPEO both move by 100),
    or renew the locks of a block in flight (15 %), or a member heartbeat (5 %). ``steady``
    may come out one record longer (a pair is never split)."""
    if inflight < SHARE_BLOCK or inflight % SHARE_BLOCK:
        raise ValueError(f"inflight must be a multiple of {SHARE_BLOCK}")
    rng = random.Random(seed)
    topic, group = "events", "team.share"
    cp = coordination_partition(topic, COORD)
    members = [(f"{i:08x}", f"worker-{i}") for i in range(8)]
    log: list[CoordinationRecord] = []
    now = 1_700_000_000_000

    def add(message: Message) -> None:
        log.append(CoordinationRecord(cp, len(log), now, encode(message)))

    def block(b: int) -> str:
        return f"{b * SHARE_BLOCK}-{b * SHARE_BLOCK + SHARE_BLOCK - 1}"

    blocks = inflight // SHARE_BLOCK
    for p in range(partitions):
        add(InitializingSharePartition(now // 1000, *members[0], group, topic, p, 0, 5,
                                       inflight))
        for b in range(blocks):
            add(AcquiringRecords(now // 1000, *members[b % 8], group, topic, p, block(b),
                                 SHARE_LOCK_MS))
        now += 1
    fill = len(log)
    first = [0] * partitions  # the oldest block in flight, per partition
    while len(log) < fill + steady:
        now += rng.randint(0, 2)
        roll = rng.random()
        p = rng.randrange(partitions)
        if roll < 0.05:
            add(MemberHeartbeat(now // 1000, *rng.choice(members), group, topic, 1, -1))
        elif roll < 0.20:
            b = rng.randrange(first[p], first[p] + blocks)
            add(RenewingLocks(now // 1000, *members[b % 8], group, topic, p, block(b),
                              SHARE_LOCK_MS))
        else:
            b = first[p]
            add(AcknowledgingRecords(now // 1000, *members[b % 8], group, topic, p, block(b),
                                     "accept"))
            add(AcquiringRecords(now // 1000, *members[(b + blocks) % 8], group, topic, p,
                                 block(b + blocks), SHARE_LOCK_MS))
            first[p] += 1
    return log[:fill], log[fill:]  # one more when the last pair crossed ``steady``


def run(records: int, partitions: int, repeat: int) -> dict[str, float]:
    log = build_log(records, partitions)
    timings = []
    for _ in range(repeat):
        r = Rationalizer(RationalizerConfig(COORD, HI_MS))
        start = time.perf_counter()
        r.apply_all(log)
        timings.append(time.perf_counter() - start)
    median = statistics.median(timings)
    return {
        "records": records,
        "seconds_median": median,
        "records_per_s": records / median,
        "min_records_per_s": records / max(timings),
        "max_records_per_s": records / min(timings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="A smoke run: tiny, one repeat.")
    args = parser.parse_args()
    if args.quick:
        args.records, args.repeat = 5_000, 1
    result = run(args.records, args.partitions, args.repeat)
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    print(f"rationalizer: {result['records']:,} records x {args.repeat} runs, median "
          f"{result['seconds_median']:.3f} s = {result['records_per_s']:,.0f} records/s "
          f"(range {result['min_records_per_s']:,.0f}..{result['max_records_per_s']:,.0f})")


if __name__ == "__main__":
    main()
