"""Key-shared mode on the real broker: three `marshal consume --mode key-shared --print`
processes share ONE partition holding 1,000 keys.

Each process prints every record it is handed (key, partition, offset, and ``at_ms``: the
wall time it was handed out; implicit commit, so a record is processed until the process asks
for the next one). Checked: every record is processed; per process and per key the offsets
strictly increase; across processes, each key's records ordered by the time they were handed
out are in offset order (so no key is processed by two members at once and hand-overs keep
the order), except re-deliveries, after the kill, of records only the killed member had.
Then one member is killed with SIGKILL and its slots must move to the survivors within
2 HI (plus one coordination tick) of the kill, measured with the broker timestamps of the
survivors' ClaimingKeyRanges.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import (
    KEY_SLOTS,
    ClaimingKeyRanges,
    coordination_partition,
    parse_ranges,
)
from marshal_py.protocol.ranges import offsets_in
from marshal_py.replay import catch_up
from marshal_py.world import Outcome, Owner, Rationalizer, RationalizerConfig, Verdict
from tests.integration.consumer_support import (
    HI,
    ON_EVERY_BROKER,
    Cluster,
    ConsumerProcess,
    broker_bootstrap,
    wait_for,
)

pytestmark = pytest.mark.integration

KEYS = 1_000
TICK_S = max(0.05, min(1.0, HI / 5))  # the Marshaler's coordination tick


@dataclass(frozen=True)
class Claim:
    ts_ms: int
    sender: Owner
    slots: frozenset[int]


class SlotWatcher:
    """Follows the key-shared state of partition 0 of the cluster's group in the log."""

    def __init__(self, cluster: Cluster) -> None:
        self.group, self.topic = cluster.group, cluster.topic
        self.log = KafkaLog(KafkaLogConfig(bootstrap_servers=cluster.bootstrap,
                                           topic=cluster.ctopic))
        self.home = coordination_partition(self.topic, self.log.partition_count())
        self.rationalizer = Rationalizer(RationalizerConfig(
            self.log.partition_count(), int(HI * 1000)))
        self.claims: list[Claim] = []
        self.seen: dict[Owner, int] = {}  # last sign of life in the group, broker time
        self.rationalizer.observe(self._observe)

    def _observe(self, outcome: Outcome) -> None:
        message = outcome.message
        if message is None or message.group_id != self.group or message.topic != self.topic:
            return
        sender = Owner(message.instance_id, message.client_id)
        if outcome.verdict in (Verdict.KEY_RANGES_CLAIMED, Verdict.KEY_RANGES_HEARTBEAT,
                               Verdict.MEMBER_HEARTBEAT):
            self.seen[sender] = outcome.record.timestamp_ms
        if isinstance(message, ClaimingKeyRanges) and outcome.verdict is \
                Verdict.KEY_RANGES_CLAIMED:
            applied = outcome.detail.split(" ")[1]
            self.claims.append(Claim(outcome.record.timestamp_ms, sender,
                                     frozenset(offsets_in(parse_ranges(applied)))))

    def owners(self) -> list[Owner | None]:
        catch_up(self.log, self.rationalizer, [self.home])
        state = self.rationalizer.key_shared_partition(self.group, self.topic, 0)
        return state.owners() if state is not None else [None] * KEY_SLOTS

    def held(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for owner in self.owners():
            name = "-" if owner is None else owner.instance_id
            out[name] = out.get(name, 0) + 1
        return out

    def close(self) -> None:
        self.log.close()


@pytest.fixture
def cluster(request: pytest.FixtureRequest, unique_name: str,
            tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(broker_bootstrap(request), unique_name, tmp_path, partitions=1)
    try:
        yield c
    finally:
        c.close()


def keyed(first: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(f"key-{i % KEYS}".encode(), f"{i}".encode()) for i in range(first, first + count)]


@pytest.mark.serial  # bounds the takeover by 2 HI + a tick: a loaded machine stretches it
@ON_EVERY_BROKER
def test_three_members_keep_per_key_order_and_survivors_take_a_killed_members_slots(
        cluster: Cluster) -> None:
    watcher = SlotWatcher(cluster)
    stop = threading.Event()  # stops the producing thread below, whatever happens
    background: threading.Thread | None = None
    try:
        first = cluster.spawn("member-0", mode="key-shared")
        first.wait_joined()
        produced = cluster.producer.send_raw(keyed(0, 3_000), partition=0)
        # Two more join while the first one is busy: slots are handed over mid-stream.
        members = [first, cluster.spawn("member-1", mode="key-shared"),
                   cluster.spawn("member-2", mode="key-shared")]
        instances = [first.instance_id] + [m.wait_joined() for m in members[1:]]
        produced += cluster.producer.send_raw(keyed(3_000, 3_000), partition=0)
        wait_for(lambda: sorted(n for i, n in watcher.held().items() if i in instances)
                 == [341, 341, 342], 30, "the slots to be shared 342/341/341",
                 describe=lambda: str(watcher.held()))
        cluster.wait_consumed([(0, o) for o in produced], timeout=60)
        check_order(members, victim=None, killed_at_ms=None)

        # kill -9 one member, at a moment its last sign of life is 0.25 to 0.5 HI old (so
        # the 2 HI it takes to go stale start before the kill, as they do for a real crash,
        # and its next heartbeat is not about to be written: a check late in the interval
        # could kill it just after one).
        victim = members[1]
        survivors = [m for m in members if m is not victim]
        victim_slots = {s for s, o in enumerate(watcher.owners())
                        if o is not None and o.instance_id == victim.instance_id}

        def quiet() -> bool:
            watcher.owners()
            seen = max(t for o, t in watcher.seen.items()
                       if o.instance_id == victim.instance_id)
            return 250 * HI <= time.time() * 1000 - seen <= 500 * HI

        # Records keep coming while the victim dies, so it dies with records in hand.
        during: list[int] = []

        def produce() -> None:
            first_index = 6_000
            while not stop.is_set():
                during.extend(cluster.producer.send_raw(keyed(first_index, 100), partition=0))
                first_index += 100
                stop.wait(0.02)

        background = threading.Thread(target=produce, daemon=True)
        background.start()
        wait_for(quiet, 10, "a moment between the victim's heartbeats", interval=0.01)
        killed_at_ms = time.time() * 1000
        victim.kill()
        survivor_ids = {m.instance_id for m in survivors}
        wait_for(lambda: all(o is not None and o.instance_id in survivor_ids
                             for o in watcher.owners()), 10 * HI,
                 "the survivors to own every slot", describe=lambda: str(watcher.held()))
        taken = [c for c in watcher.claims if c.sender.instance_id in survivor_ids
                 and c.slots & victim_slots and c.ts_ms >= killed_at_ms]
        assert set().union(*(c.slots for c in taken)) >= victim_slots
        moved_ms = max(c.ts_ms for c in taken) - killed_at_ms
        last_seen = max(t for o, t in watcher.seen.items()
                        if o.instance_id == victim.instance_id)
        print(f"\nkey-shared takeover: the survivors claimed the killed member's "
              f"{len(victim_slots)} slots {moved_ms / 1000:.2f} s after the kill "
              f"({(max(c.ts_ms for c in taken) - last_seen) / 1000:.2f} s after its last sign "
              f"of life; HI = {HI:g} s, bound 2 HI + one tick = {2 * HI + TICK_S:.2f} s)")
        assert moved_ms <= (2 * HI + TICK_S) * 1000
        stop.set()
        background.join(timeout=30)
        produced += during
        cluster.wait_consumed([(0, o) for o in produced], timeout=60, procs=members)
        check_order(members, victim=victim, killed_at_ms=killed_at_ms)
    finally:
        stop.set()
        if background is not None:
            background.join(timeout=30)
        watcher.close()


def check_order(members: list[ConsumerProcess], victim: ConsumerProcess | None,
                killed_at_ms: float | None) -> None:
    """Per key: each process in offset order; all processes, by hand-out time, in offset
    order, except after the kill re-deliveries of what only the victim had handed out."""
    by_key: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for member in members:
        last: dict[str, int] = {}
        for line in member.lines():
            key, offset = line["key"], line["offset"]
            assert offset > last.get(key, -1), \
                f"{member.client_id} handed out {key}@{offset} after @{last[key]}"
            last[key] = offset
            by_key[key].append((line["at_ms"], offset, member.client_id))
    assert len(by_key) == KEYS
    redelivered = 0
    for key, handed in by_key.items():
        handed.sort()
        history: list[tuple[int, str]] = []
        for at_ms, offset, who in handed:
            earlier = [(o, w) for o, w in history if o >= offset]
            if earlier:
                assert victim is not None and killed_at_ms is not None and \
                    at_ms > killed_at_ms and all(w == victim.client_id for _, w in earlier), (
                        f"{key}@{offset} handed to {who} at {at_ms:.3f} after {earlier}")
                redelivered += 1
            history.append((offset, who))
    if victim is not None:
        print(f"key-shared: {redelivered} records re-delivered after the kill")
