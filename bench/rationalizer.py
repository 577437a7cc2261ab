"""Records per second the pure rationalizer applies.

Usage: python -m bench.rationalizer [--records N] [--partitions P] [--repeat R] [--quick]
                                    [--mix MIX ...] [--frozen]

Builds coordination logs in memory and times ``Rationalizer.apply_all`` over each, R times,
printing the median (CPU time of the process: the same as the wall clock on a quiet machine,
and steadier than it on a busy one). Decoding is included: the input is raw record bytes, as
replay from Kafka delivers them. The mixes:

* ``original`` (:func:`build_log`): claims, races, heartbeats, releases, AMO claims and a
  little garbage from 8 random clients over P partitions of one topic and 3 groups (most
  heartbeats are from non-owners). The log of the earlier measurements.
* ``exclusive`` (:func:`build_exclusive_log`): 10 groups of 4 members each owning a share of
  the P partitions: heartbeats from the owners, claims (mostly renewals and lost races),
  releases each followed by another member's winning claim, and membership heartbeats.
* ``signed``: the same log, each group authenticated and every record signed (version 3,
  with sequence numbers).

``--frozen`` also times the frozen copy of the rationalizer before its rewrite
(``tests/golden/frozen``) on the same logs in the same process, and prints the ratio: on a
shared machine the ratio is steadier than either figure.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    GroupKey,
    Heartbeat,
    InitializingSharePartition,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    RenewingLocks,
    coordination_partition,
    encode,
    sign,
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


BENCH_KEY = GroupKey("bench", b"bench-secret-0123456789abcdef!!")


def build_exclusive_log(records: int, partitions: int, groups: int = 10, members: int = 4,
                        signed: bool = False, seed: int = 7) -> list[CoordinationRecord]:
    """``records`` records of ``groups`` settled groups of ``members`` members each on one
    topic of ``partitions`` partitions: 85 % heartbeats from the owners (offsets growing),
    5 % membership heartbeats (with the member's interval), 5 % claims by a random member
    (renewals and lost races), 5 % hand-overs (the owner releases, another member claims
    and wins). ``signed``: every record signed with :data:`BENCH_KEY` (version 3, a
    sequence number per writer)."""
    rng = random.Random(seed)
    topic = "events"
    cp = coordination_partition(topic, COORD)
    now = 1_700_000_000_000
    names = [f"group-{g:02d}" for g in range(groups)]
    crew = [[(f"{g:02d}{m:06x}", f"worker-{m}") for m in range(members)]
            for g in range(groups)]
    owner = [[p % members for p in range(partitions)] for _ in range(groups)]
    offsets = [[0] * partitions for _ in range(groups)]
    seqs: dict[str, int] = {}
    log: list[CoordinationRecord] = []

    def add(message: Message) -> None:
        value = encode(message)
        if signed:
            seqs[message.instance_id] = seqs.get(message.instance_id, 0) + 1
            value = sign(value, BENCH_KEY, seqs[message.instance_id])
        log.append(CoordinationRecord(cp, len(log), now, value))

    for g in range(groups):
        for m in range(members):
            add(MemberHeartbeat(now // 1000, *crew[g][m], names[g], topic, 1, -1, HI_MS))
        for p in range(partitions):
            add(ClaimingPartition(now // 1000, *crew[g][owner[g][p]], names[g], topic, p))
    while len(log) < records:
        now += rng.randint(0, 3)
        g, p = rng.randrange(groups), rng.randrange(partitions)
        base = (now // 1000, *crew[g][owner[g][p]], names[g], topic, p)
        roll = rng.random()
        if roll < 0.85:
            offsets[g][p] += rng.randint(1, 500)
            add(Heartbeat(*base, offsets[g][p]))
        elif roll < 0.90:
            add(MemberHeartbeat(now // 1000, *rng.choice(crew[g]), names[g], topic, 1, -1,
                                HI_MS))
        elif roll < 0.95:
            add(ClaimingPartition(now // 1000, *rng.choice(crew[g]), names[g], topic, p))
        else:
            add(ReleasingPartition(*base, offsets[g][p]))
            owner[g][p] = (owner[g][p] + rng.randint(1, members - 1)) % members
            add(ClaimingPartition(now // 1000, *crew[g][owner[g][p]], names[g], topic, p))
    return log[:records]


def config_for(mix: str, groups: int = 10) -> RationalizerConfig:
    """The readers' settings for a mix (the signed one authenticates every group)."""
    keys = ({f"group-{g:02d}": (BENCH_KEY,) for g in range(groups)} if mix == "signed"
            else {})
    return RationalizerConfig(COORD, HI_MS, group_keys=keys)


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


def logs(mix: str, records: int, partitions: int) -> list[CoordinationRecord]:
    """The log of ``mix`` (see the module's doc)."""
    if mix == "original":
        return build_log(records, partitions)
    return build_exclusive_log(records, partitions, signed=mix == "signed")


def time_apply(make: Callable[[], Any], log: list[Any], repeat: int) -> list[float]:
    """CPU seconds ``apply_all`` of a fresh rationalizer takes over ``log``, ``repeat``
    times. CPU time, not the wall clock: the work is one thread's pure computation, and on a
    shared machine the wall clock also counts the time other processes ran."""
    timings = []
    for _ in range(repeat):
        r = make()
        start = time.process_time()
        r.apply_all(log)
        timings.append(time.process_time() - start)
    return timings


def summary(records: int, timings: list[float]) -> dict[str, float]:
    median = statistics.median(timings)
    return {
        "records": records,
        "seconds_median": median,
        "records_per_s": records / median,
        "min_records_per_s": records / max(timings),
        "max_records_per_s": records / min(timings),
    }


def run(records: int, partitions: int, repeat: int, mix: str = "original",
        frozen: bool = False) -> dict[str, dict[str, float]]:
    """Time the rationalizer (and with ``frozen`` the frozen copy, alternately) on the log
    of ``mix``."""
    log = logs(mix, records, partitions)
    config = config_for(mix) if mix != "original" else RationalizerConfig(COORD, HI_MS)
    results = {"rationalizer": summary(records, time_apply(lambda: Rationalizer(config),
                                                           log, repeat))}
    if frozen:
        from tests.golden.frozen import world as old

        old_config = old.RationalizerConfig(
            config.coordination_partitions, config.heartbeat_interval_ms,
            group_keys={g: tuple(old_key(k) for k in keys)
                        for g, keys in config.group_keys.items()})
        old_log = [old.CoordinationRecord(r.partition, r.position, r.timestamp_ms, r.value)
                   for r in log]
        results["frozen"] = summary(records, time_apply(lambda: old.Rationalizer(old_config),
                                                        old_log, repeat))
    return results


def old_key(key: GroupKey) -> Any:
    """The frozen copy's GroupKey for ``key``."""
    from tests.golden.frozen.protocol import GroupKey as OldKey

    return OldKey(key.key_id, key.secret)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mix", nargs="+", default=["original"],
                        choices=["original", "exclusive", "signed"])
    parser.add_argument("--frozen", action="store_true",
                        help="Also time the frozen copy of the rationalizer before issue 22.")
    parser.add_argument("--quick", action="store_true", help="A smoke run: tiny, one repeat.")
    args = parser.parse_args()
    if args.quick:
        args.records, args.repeat = 5_000, 1
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    for mix in args.mix:
        results = run(args.records, args.partitions, args.repeat, mix, args.frozen)
        for name, result in results.items():
            print(f"{mix:9} {name:12}: {result['records']:,} records x {args.repeat} runs, "
                  f"median {result['seconds_median']:.3f} s = "
                  f"{result['records_per_s']:,.0f} records/s "
                  f"(range {result['min_records_per_s']:,.0f}.."
                  f"{result['max_records_per_s']:,.0f})")
        if "frozen" in results:
            ratio = results["rationalizer"]["records_per_s"] / results["frozen"]["records_per_s"]
            print(f"{mix:9} rationalizer / frozen: {ratio:.1f}x")


if __name__ == "__main__":
    main()
