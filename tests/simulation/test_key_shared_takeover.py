"""A key-shared member back from a write outage, its slots taken over in the middle of a tick.

The sequence of the chaos campaign 2026-11-25 (run 5: key-shared, 8 consumers, broker kill -9
and restart): member ``a`` could not write for longer than 2 HI (its heartbeats failed and
its lease lapsed), so its slots went stale. Writes came back between a failed heartbeat and
its retry, so in its next tick ``a`` sent no heartbeat; it claimed free slots instead. Between
its tick's read of the log and that claim, member ``b`` took some of ``a``'s stale slots (the
rationalizer granted them: ``a`` was stale). ``a`` read its claim back, which renewed its
lease, but kept handing out the slots ``b`` had just taken, until its next tick: two members
delivered one key at once.

Here ``a`` is a real :class:`KeySharedEngine`; ``b`` (and ``c``, whose slots are the free ones)
are written by the test, and ``b``'s takeover lands exactly between ``a``'s read of the log
and its claim (a log that runs a hook right before ``a``'s next claim is appended).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from marshal_py.client.key_shared_engine import KeySharedConfig, KeySharedEngine
from marshal_py.errors import BrokerUnavailableError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import (
    KEY_SLOTS,
    ClaimingKeyRanges,
    KeyRangesHeartbeat,
    MemberHeartbeat,
    Message,
    ReleasingKeyRanges,
    coordination_partition,
    encode,
    key_slot,
)
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.replay import catch_up
from marshal_py.world import Owner, Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000
GROUP = "orders.g"
TOPIC = "orders"
COORDINATION_PARTITIONS = 2
HOME = coordination_partition(TOPIC, COORDINATION_PARTITIONS)


class OutageLog:
    """One member's connection to a shared :class:`MemoryLog`: its appends fail while
    ``down``, and ``before_claim`` (if set) runs once right before its next claim lands."""

    def __init__(self, log: MemoryLog) -> None:
        self._log = log
        self.down = False
        self.before_claim: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self._log, name)

    def append(self, partition: int, value: bytes) -> CoordinationRecord:
        if self.down:
            raise BrokerUnavailableError("the broker is down (simulated)")
        if self.before_claim is not None and value.startswith(b"ClaimingKeyRanges/"):
            hook, self.before_claim = self.before_claim, None
            hook()
        return self._log.append(partition, value)


class Scene:
    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.log = MemoryLog(partitions=COORDINATION_PARTITIONS, clock=self.clock)
        self.topic = MemoryTopic(TOPIC, 1)
        self.produce(2_000)
        self.auditor = Rationalizer(RationalizerConfig(COORDINATION_PARTITIONS, HI))
        self.a_log = OutageLog(self.log)
        config = KeySharedConfig(group_id=GROUP, client_id="a", instance_id="0000000a",
                                 topics=(TOPIC,), heartbeat_interval_ms=HI,
                                 offset_reset="earliest")
        self.a = KeySharedEngine(config, self.a_log,  # type: ignore[arg-type]
                                 Rationalizer(RationalizerConfig(COORDINATION_PARTITIONS, HI)),
                                 self.topic, SimClock(self.clock), random.Random(7))
        self.fetched: dict[tuple[str, int], tuple[int, int]] = {}

    def produce(self, count: int) -> None:
        for n in range(count):
            self.topic.produce(0, f"k{n % 64}".encode())

    def write(self, message: Message) -> None:
        self.log.append(HOME, encode(message))

    def member_heartbeat(self, client: str, active: int = 1) -> None:
        self.write(MemberHeartbeat(self.clock() // 1000, f"0000000{client}", client, GROUP,
                                   TOPIC, active, -1, HI))

    def claim(self, client: str, slots: str) -> None:
        self.write(ClaimingKeyRanges(self.clock() // 1000, f"0000000{client}", client, GROUP,
                                     TOPIC, 0, slots))

    def heartbeat(self, client: str) -> None:
        self.write(KeyRangesHeartbeat(self.clock() // 1000, f"0000000{client}", client, GROUP,
                                      TOPIC, 0, 0))

    def release(self, client: str, slots: str, offset: int) -> None:
        self.write(ReleasingKeyRanges(self.clock() // 1000, f"0000000{client}", client, GROUP,
                                      TOPIC, 0, slots, offset))

    def owner(self, slot: int) -> Owner | None:
        catch_up(self.log, self.auditor, list(range(COORDINATION_PARTITIONS)))
        state = self.auditor.key_shared_partition(GROUP, TOPIC, 0)
        return None if state is None else state.owner(slot)

    def consume(self, limit: int = 200) -> list[tuple[int, int]]:
        """Fetch per ``a``'s plan and offer the records (committing at once); the
        (offset, slot) handed out, each checked against the log's owner of its slot."""
        out = []
        for tp, (epoch, position) in self.a.fetch_plan().items():
            mine, cursor = self.fetched.get(tp, (-1, 0))
            if mine != epoch:
                cursor = position
            records = self.topic.records[tp[1]]
            for offset in range(cursor, min(cursor + limit, len(records))):
                slot = key_slot(records[offset])
                cursor = offset + 1
                if self.a.deliver(tp[0], tp[1], epoch, offset, slot):
                    owner = self.owner(slot)
                    assert owner == self.a.me, (
                        f"a handed out offset {offset} of slot {slot}, owned in the log by "
                        f"{owner}")
                    self.a.commit(tp[0], tp[1], offset)
                    out.append((offset, slot))
                if self.a.fetch_plan().get(tp, (None, 0))[0] != epoch:
                    break
            self.fetched[tp] = (epoch, cursor)
        return out


def test_a_claim_read_back_drops_slots_taken_while_stale_before_renewing_the_lease() -> None:
    scene = Scene()
    a = scene.a
    # c holds the upper half and stays alive; a takes the lower half.
    scene.member_heartbeat("c")
    scene.claim("c", f"{KEY_SLOTS // 2}-{KEY_SLOTS - 1}")
    a.start()
    for _ in range(20):
        scene.clock.advance(100)
        scene.heartbeat("c")
        scene.member_heartbeat("c")
        a.tick()
        scene.consume(20)
    assert a.slots(TOPIC, 0) == set(range(KEY_SLOTS // 2))
    assert a.may_deliver(TOPIC, 0, 0)

    # The outage: a cannot write. c leaves, releasing its half; a keeps trying (and failing)
    # to heartbeat, to announce itself and to claim c's half; its lease lapses after 1 HI,
    # its slots go stale after 2 HI.
    scene.a_log.down = True
    scene.clock.advance(50)
    scene.release("c", f"{KEY_SLOTS // 2}-{KEY_SLOTS - 1}", len(scene.topic.records[0]))
    scene.member_heartbeat("c", active=0)
    outage = scene.clock()
    for _ in range(25):
        scene.clock.advance(100)
        a.tick()
        handed = scene.consume()
        assert not (handed and scene.clock() - outage > HI), "handed out with a lapsed lease"
    assert a.stats.heartbeat_failures > 0

    # Writes come back 50 ms after a failed heartbeat (its retry is due after 100 ms): in
    # its next tick a sends no heartbeat but claims c's free half. Right before that claim
    # lands, b joins and takes 64 of a's stale slots (those of keys k24, k34, k51, k53).
    taken = range(0, 64)
    assert {key_slot(f"k{n}".encode()) for n in range(64)} & set(taken)
    scene.produce(300)

    def b_takes_over() -> None:
        scene.member_heartbeat("b")
        scene.claim("b", f"{taken[0]}-{taken[-1]}")

    scene.a_log.down = False
    scene.a_log.before_claim = b_takes_over
    scene.clock.advance(50)
    a.tick()
    assert scene.a_log.before_claim is None, "a made no claim in that tick"
    assert all(scene.owner(s) is not None and scene.owner(s).client_id == "b" for s in taken)
    assert any(scene.owner(s) == a.me for s in range(KEY_SLOTS // 2, KEY_SLOTS)), \
        "a's claim of the free half was not granted"

    # a's claim renewed its lease; it must not cover b's new slots.
    for slot in taken:
        assert not a.may_deliver(TOPIC, 0, slot), f"a may still deliver slot {slot} of b"
    handed = scene.consume(400)  # each hand-out asserts the log's owner
    assert handed, "a handed nothing out with its renewed lease"
    assert not {s for _, s in handed} & set(taken)
