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
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleasingPartition,
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
