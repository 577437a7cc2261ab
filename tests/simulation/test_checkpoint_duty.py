"""Who writes a pair's checkpoint (PROTOCOL.md 11.3), on the in-memory log: the member that
joined first, at once when the pair has none; any other live member only once the newest
checkpoint (or, with none, the pair's Stable period) is two intervals old."""

from __future__ import annotations

from marshal_py.client.channel import CoordinationChannel
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import MemberHeartbeat, coordination_partition, encode
from marshal_py.world import Owner, Rationalizer, RationalizerConfig
from tests.simulation.harness import SimClock

HI = 10_000
INTERVAL = 20_000
WINDOW = 7 * 86_400_000
FIRST = Owner("zz-instance", "first")  # joins first; its instance id sorts last
LATER = Owner("aa-instance", "later")


class Pair:
    """Two members of group g on topic t, heartbeating on a one-partition log."""

    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.log = MemoryLog(1, self.clock)
        self.partition = coordination_partition("t", 1)

    def beat(self, member: Owner) -> None:
        message = MemberHeartbeat(self.clock() // 1000, member.instance_id, member.client_id,
                                  "g", "t", 1, -1, 0)
        self.log.append(self.partition, encode(message))

    def channel(self) -> CoordinationChannel:
        channel = CoordinationChannel(self.log, Rationalizer(RationalizerConfig(1, HI)),
                                      SimClock(self.clock), ["t"], group="g",
                                      checkpoint_interval_ms=INTERVAL)
        channel.open(WINDOW)
        return channel


def test_members_joining_a_new_group_together_write_one_checkpoint_the_first_ones() -> None:
    pair = Pair()
    pair.beat(FIRST)
    pair.clock.advance(10)
    pair.beat(LATER)
    first, later = pair.channel(), pair.channel()
    # The later member sorts first by instance id, but joined second: not its duty yet.
    assert later.maybe_checkpoint(LATER) == 0
    assert first.maybe_checkpoint(FIRST) == 1
    later.catch_up()
    assert later.last_checkpoint_ms("t") is not None
    assert later.maybe_checkpoint(LATER) == 0  # a fresh checkpoint is due for nobody
    assert first.maybe_checkpoint(FIRST) == 0


def test_when_the_first_member_writes_none_another_does_after_two_intervals_of_stability(
        ) -> None:
    pair = Pair()
    pair.beat(FIRST)
    pair.clock.advance(10)
    pair.beat(LATER)
    later = pair.channel()
    stable_from = pair.clock()
    while pair.clock() - stable_from < 2 * INTERVAL - HI // 2:
        pair.clock.advance(HI // 2)
        pair.beat(FIRST)  # live, but it never checkpoints (stuck, or an older version)
        pair.beat(LATER)
        later.catch_up()
        assert later.maybe_checkpoint(LATER) == 0
    pair.clock.advance(HI // 2)
    pair.beat(FIRST)
    pair.beat(LATER)
    later.catch_up()
    assert later.maybe_checkpoint(LATER) == 1
