"""Simulation on MemoryLog with a virtual clock: a bounded replay never loses a live claim.

Members claim partitions, heartbeat every HI and renew their claims every window/4; some
crash and others take over; retention deletes old records. At every step, a reader that
replays only the window agrees with a reader that replayed everything (and kept up while
retention deleted records) on the owner and committed offset of every live claim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import ClaimingPartition, Heartbeat, coordination_partition, encode
from marshal_py.replay import catch_up, seek_to_window
from marshal_py.world import Owner, Rationalizer, RationalizerConfig, Verdict

HI = 1_000
WINDOW = 40 * HI
PARTITIONS = 6
COORD = 2
TOPIC = "orders"


@dataclass
class Member:
    client: str
    instance: str
    alive: bool = True
    last_renewal: dict[int, int] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)


def fresh_rationalizer() -> Rationalizer:
    return Rationalizer(RationalizerConfig(COORD, HI))


@pytest.mark.parametrize("seed", range(8))
def test_window_replay_agrees_with_full_replay_on_every_live_claim(seed: int) -> None:
    rng = random.Random(seed)
    clock = VirtualClock()
    log = MemoryLog(partitions=COORD, clock=clock)
    cp = coordination_partition(TOPIC, COORD)
    members = [Member(f"c{i}", f"{i:08x}") for i in range(4)]
    full = fresh_rationalizer()  # follows the log from the very start, forever

    def send(member: Member, message: object) -> None:
        log.append(cp, encode(message))  # type: ignore[arg-type]

    checked = 0
    takeovers = 0
    for step in range(600):
        clock.advance(rng.randint(50, 400))
        now = clock()
        catch_up(log, full, [cp])
        for member in members:
            if not member.alive:
                if rng.random() < 0.02:  # restart with a new instance id
                    member.alive = True
                    member.instance = f"{rng.getrandbits(32):08x}"
                continue
            if rng.random() < 0.005:
                member.alive = False  # crash: stops writing anything
                continue
            for p in range(PARTITIONS):
                claim = full.claim("g", TOPIC, p)
                me = Owner(member.instance, member.client)
                base = (now // 1000, member.instance, member.client, "g", TOPIC, p)
                if claim.owner == me:
                    offset = member.offsets.get(p, claim.committed_offset or 0) + rng.randint(0, 5)
                    member.offsets[p] = offset
                    renew = now - member.last_renewal.get(p, 0) >= WINDOW // 4
                    if renew:  # a renewal is always followed by a heartbeat
                        send(member, ClaimingPartition(*base))
                        member.last_renewal[p] = now
                    if renew or rng.random() < 0.5:
                        send(member, Heartbeat(*base, offset))
                elif (claim.owner is None or not claim.is_held(now)
                      or claim.owner.client_id == member.client) and rng.random() < 0.3:
                    send(member, ClaimingPartition(*base))
                    member.last_renewal[p] = now
        # Retention: drop what is older than twice the window.
        log.delete_before(cp, log.position_for_time(cp, now - 2 * WINDOW))
        if step % 25 == 0 and step > 0:
            catch_up(log, full, [cp])
            bounded = fresh_rationalizer()
            seek_to_window(log, bounded, [cp], now, WINDOW)
            catch_up(log, bounded, [cp])
            for p in range(PARTITIONS):
                truth = full.claim("g", TOPIC, p)
                counters = full.counters
                takeovers = counters[Verdict.CLAIM_WON] + counters[Verdict.CLAIM_RECLAIMED]
                if truth.is_held(now):
                    seen = bounded.claim("g", TOPIC, p)
                    assert seen.owner == truth.owner, (step, p)
                    assert seen.is_held(now)
                    assert seen.committed_offset == truth.committed_offset
                    checked += 1
    assert checked > 50  # the scenario really had live claims to compare
    assert takeovers > PARTITIONS  # and ownership moved after crashes and restarts
    assert log.start_position(cp) > 0  # and retention deleted the oldest records
