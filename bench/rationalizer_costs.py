"""Per-record cost of the rationalizer against the size of the state it holds.

Usage: python -m bench.rationalizer_costs [--repeat R] [--frozen] [--quick]
       [--only share|key-shared|membership]

Three tables (issue 22 parts 2 and 6), each record's cost in CPU microseconds, median of R:

* share records (steady traffic of :func:`bench.rationalizer.build_share_log`: accept the
  oldest block and acquire the next, lock renewals, member heartbeats) with 1,000 to 10,000
  records in flight per share-partition;
* key-shared records (heartbeats and one-slot hand-overs, :func:`key_shared_log`) of 8 to 512
  members sharing a partition's slots;
* membership records of one group of M = 10 to 10,000 members, each heartbeating once per
  HI (so the group's log grows as M records per HI; flat per-record cost = linear total).

``--frozen`` times the frozen copy of the rationalizer before issue 22
(``tests/golden/frozen``) on the same records.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from bench.rationalizer import COORD, HI_MS, build_share_log
from marshal_py.protocol import (
    KEY_SLOTS,
    ClaimingKeyRanges,
    KeyRangesHeartbeat,
    MemberHeartbeat,
    ReleasingKeyRanges,
    coordination_partition,
    encode,
)
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig


def _readers(frozen: bool) -> dict[str, tuple[Any, Any]]:
    """name -> (make a reader, make a record) of the rationalizer (and the frozen copy)."""
    found: dict[str, tuple[Any, Any]] = {
        "rationalizer": (lambda: Rationalizer(RationalizerConfig(COORD, HI_MS)),
                         CoordinationRecord)}
    if frozen:
        from tests.golden.frozen import world as old

        found["frozen"] = (lambda: old.Rationalizer(old.RationalizerConfig(COORD, HI_MS)),
                           old.CoordinationRecord)
    return found


def _cost(make: Any, record: Any, fill: list[CoordinationRecord],
          traffic: list[CoordinationRecord], repeat: int) -> float:
    """Median CPU microseconds per record of ``traffic`` after ``fill``."""
    fill = [record(r.partition, r.position, r.timestamp_ms, r.value) for r in fill]
    traffic = [record(r.partition, r.position, r.timestamp_ms, r.value) for r in traffic]
    timings = []
    for _ in range(repeat):
        reader = make()
        reader.apply_all(fill)
        start = time.process_time()
        reader.apply_all(traffic)
        timings.append(time.process_time() - start)
    return statistics.median(timings) / len(traffic) * 1e6


def membership_log(members: int, rounds: int) -> list[CoordinationRecord]:
    """``rounds`` HI of one group of ``members`` members, each heartbeating once per HI."""
    topic, group = "events", "big"
    cp = coordination_partition(topic, COORD)
    crew = [(f"{m:08x}", f"worker-{m}") for m in range(members)]
    log: list[CoordinationRecord] = []
    now = 1_700_000_000_000.0
    for _ in range(rounds):
        for instance, client in crew:
            now += HI_MS / members
            ts = int(now)
            log.append(CoordinationRecord(cp, len(log), ts, encode(MemberHeartbeat(
                ts // 1000, instance, client, group, topic, 1, -1, HI_MS))))
    return log


def key_shared_log(members: int, steady: int, seed: int = 7
                   ) -> tuple[list[CoordinationRecord], list[CoordinationRecord]]:
    """One key-shared partition whose 1,024 slots ``members`` members share in equal runs:
    ``fill`` has their claims, ``steady`` records follow: 80 % heartbeats (offsets growing),
    20 % hand-overs of one slot (its owner releases it, another member claims it)."""
    rng = random.Random(seed)
    topic, group = "events", "keyed"
    cp = coordination_partition(topic, COORD)
    crew = [(f"{m:08x}", f"worker-{m}") for m in range(members)]
    owner = [s * members // KEY_SLOTS for s in range(KEY_SLOTS)]
    log: list[CoordinationRecord] = []
    now, offset = 1_700_000_000_000, 0

    def add(message: Any) -> None:
        log.append(CoordinationRecord(cp, len(log), now, encode(message)))

    for m in range(members):
        mine = [s for s in range(KEY_SLOTS) if owner[s] == m]
        add(ClaimingKeyRanges(now // 1000, *crew[m], group, topic, 0, f"{mine[0]}-{mine[-1]}"))
    fill = len(log)
    while len(log) < fill + steady:
        now += rng.randint(0, 3)
        offset += rng.randint(1, 50)
        if rng.random() < 0.8:
            add(KeyRangesHeartbeat(now // 1000, *crew[rng.randrange(members)], group, topic,
                                   0, offset))
        else:
            slot = rng.randrange(KEY_SLOTS)
            add(ReleasingKeyRanges(now // 1000, *crew[owner[slot]], group, topic, 0,
                                   str(slot), offset))
            owner[slot] = (owner[slot] + rng.randint(1, members - 1)) % members
            add(ClaimingKeyRanges(now // 1000, *crew[owner[slot]], group, topic, 0,
                                  str(slot)))
    return log[:fill], log[fill:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--frozen", action="store_true")
    parser.add_argument("--quick", action="store_true", help="A smoke run: small, one repeat.")
    parser.add_argument("--only", choices=("share", "key-shared", "membership"),
                        help="Time one table only.")
    args = parser.parse_args()
    readers = _readers(args.frozen)
    steady = 2_000 if args.quick else 10_000
    repeat = 1 if args.quick else args.repeat
    wanted = {args.only} if args.only else {"share", "key-shared", "membership"}
    if "share" in wanted:
        _share_table(readers, steady, repeat, args.quick)
    if "key-shared" in wanted:
        _key_shared_table(readers, steady, repeat, args.quick)
    if "membership" in wanted:
        _membership_table(readers, repeat, args.quick)


def _share_table(readers: dict[str, tuple[Any, Any]], steady: int, repeat: int,
                 quick: bool) -> None:
    print("share records: CPU us per record vs records in flight per share-partition "
          "(10 share-partitions)")
    for inflight in ((1_000,) if quick else (1_000, 3_000, 10_000)):
        fill, traffic = build_share_log(10, inflight, steady)
        row = {name: _cost(make, record, fill, traffic, repeat)
               for name, (make, record) in readers.items()}
        print(f"  in flight {inflight:>6,}: " + ", ".join(f"{n} {us:.1f} us"
                                                       for n, us in row.items()))


def _key_shared_table(readers: dict[str, tuple[Any, Any]], steady: int, repeat: int,
                      quick: bool) -> None:
    print("key-shared records: CPU us per record vs members sharing the 1,024 slots")
    for members in ((8,) if quick else (8, 64, 512)):
        fill, traffic = key_shared_log(members, steady)
        row = {name: _cost(make, record, fill, traffic, repeat)
               for name, (make, record) in readers.items()}
        print(f"  members {members:>6,}: " + ", ".join(f"{n} {us:.1f} us"
                                                     for n, us in row.items()))


def _membership_table(readers: dict[str, tuple[Any, Any]], repeat: int, quick: bool) -> None:
    print("membership records: CPU us per record vs members of the group")
    for members in ((10, 100) if quick else (10, 100, 1_000, 10_000)):
        rounds = max(3, 30_000 // members)
        log = membership_log(members, rounds)
        split = members  # the first HI joins everyone; the rest is the steady state
        row = {name: _cost(make, record, log[:split], log[split:], repeat)
               for name, (make, record) in readers.items()
               if name == "rationalizer" or members <= 1_000}
        print(f"  members {members:>6,}: " + ", ".join(f"{n} {us:.1f} us"
                                                     for n, us in row.items()))


if __name__ == "__main__":
    main()
