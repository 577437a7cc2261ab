"""The consumer engine's rules, one at a time, on MemoryLog with a virtual clock."""

from __future__ import annotations

import random

import pytest

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.errors import BrokerUnavailableError, ClientIdInUseError, ConfigurationError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import (
    ClaimingPartition,
    GroupKey,
    MemberHeartbeat,
    coordination_partition,
    encode,
    sign_v2,
)
from marshal_py.replay import catch_up
from marshal_py.world import Rationalizer, RationalizerConfig, Verdict
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000


class FlakyLog(MemoryLog):
    """A MemoryLog whose appends can be made to fail (broker unreachable)."""

    failing = False

    def append(self, partition: int, value: bytes):  # type: ignore[no-untyped-def]
        if self.failing:
            raise BrokerUnavailableError("broker down (test)")
        return super().append(partition, value)


class World:
    def __init__(self, partitions: int = 12) -> None:
        self.clock = VirtualClock()
        self.log = FlakyLog(partitions=2, clock=self.clock)
        self.topic = MemoryTopic("orders", partitions)
        self.rng = random.Random(1)

    def member(self, client: str, instance: str | None = None,
               keys: tuple[GroupKey, ...] = (), hi: int = HI, start: bool = True,
               **options: object) -> MemberEngine:
        config = EngineConfig(group_id="g", client_id=client,
                              instance_id=instance or f"{self.rng.getrandbits(32):08x}",
                              topics=("orders",), heartbeat_interval_ms=hi, **options)  # type: ignore[arg-type]
        r = Rationalizer(RationalizerConfig(2, hi, group_keys={"g": keys} if keys else {}))
        engine = MemberEngine(config, self.log, r, self.topic, SimClock(self.clock),
                              random.Random(self.rng.random()))
        if start:
            engine.start()
        return engine

    def run(self, engines: list[MemberEngine], ms: int, step: int = 100) -> None:
        for _ in range(ms // step):
            self.clock.advance(step)
            for engine in engines:
                engine.tick()

    def owners(self) -> dict[int, str | None]:
        r = Rationalizer(RationalizerConfig(2, HI))
        catch_up(self.log, r, [0, 1])
        return {c.key.partition: (c.owner.client_id if c.owner and c.is_held(self.clock())
                                  else None) for c in r.claims("g", "orders")}


def held(engine: MemberEngine) -> list[int]:
    return sorted(p for _, p in engine.holdings)


def test_three_members_settle_on_fair_shares_and_a_joiner_gets_its_share() -> None:
    w = World()
    a = w.member("a")
    w.run([a], 500)
    assert len(held(a)) == 12  # alone: everything
    b, c = w.member("b"), w.member("c")
    w.run([a, b, c], 20 * HI)
    assert sorted(len(held(e)) for e in (a, b, c)) == [4, 4, 4]
    d = w.member("d")
    w.run([a, b, c, d], 20 * HI)
    assert sorted(len(held(e)) for e in (a, b, c, d)) == [3, 3, 3, 3]
    assert set(w.owners().values()) == {"a", "b", "c", "d"}


def test_greedy_and_max_claims() -> None:
    w = World()
    a = w.member("a", balance="greedy")
    b = w.member("b", max_claims=2)
    w.run([a, b], 5 * HI)
    assert len(held(a)) + len(held(b)) == 12
    assert len(held(b)) <= 2
    w2 = World()
    solo = w2.member("s", max_claims=5)
    w2.run([solo], 5 * HI)
    assert len(held(solo)) == 5


def test_a_partition_count_increase_is_noticed() -> None:
    w = World(partitions=4)
    a = w.member("a")
    w.run([a], HI)
    w.topic.add_partitions(2)
    w.run([a], HI)
    assert held(a) == [0, 1, 2, 3, 4, 5]


def test_close_releases_with_the_offset_and_others_take_over_at_once() -> None:
    w = World(partitions=2)
    a = w.member("a", offset_reset="earliest")
    for _ in range(10):
        w.topic.produce(0, b"x")
    w.run([a], 300)
    epoch, position = a.assignments()[("orders", 0)]
    assert a.accept("orders", 0, epoch, list(range(position, 10)), 10)
    for offset in range(10):
        a.commit("orders", 0, offset, epoch)
    b = w.member("b")
    w.run([b], 300)
    assert held(b) == []  # a holds them fresh
    a.close()
    w.run([b], 300)  # far less than 2 HI
    assert held(b) == [0, 1]
    assert b.assignments()[("orders", 0)][1] == 10  # continues after a's commit


def test_a_claim_that_cannot_heartbeat_for_one_interval_releases_itself() -> None:
    w = World(partitions=2)
    a = w.member("a")
    w.run([a], 300)
    assert held(a) == [0, 1]
    w.log.failing = True
    w.run([a], HI // 2)
    assert held(a) == [0, 1]
    w.run([a], HI)
    assert held(a) == []  # gave up after one HI without a confirmed heartbeat


def test_a_member_that_lost_its_claim_stops_and_never_heartbeats_it_again() -> None:
    w = World(partitions=1)
    a = w.member("a")
    w.run([a], 300)
    epoch = a.assignments()[("orders", 0)][0]
    # a is paused for 3 HI; b takes over
    b = w.member("b")
    w.run([b], 3 * HI)
    assert held(b) == [0]
    assert not a.holds("orders", 0, epoch)  # lease lapsed while paused: nothing delivered
    a.tick()
    assert held(a) == []
    w.run([a, b], 2 * HI)
    r = Rationalizer(RationalizerConfig(2, HI))
    catch_up(w.log, r, [0, 1])
    assert r.counters[Verdict.NOT_OWNER] == 0  # a never wrote for the lost partition


def test_a_restarted_client_reclaims_after_one_interval_without_waiting_for_staleness() -> None:
    w = World(partitions=3)
    old = w.member("a", instance="00000001")
    w.run([old], 300)
    assert held(old) == [0, 1, 2]
    # old dies (kill -9); a new process of the same client starts at once
    new = w.member("a", instance="00000002")
    w.run([new], HI // 2)
    assert held(new) == []  # waits one HI to be sure the old one is dead
    w.run([new], HI)
    assert held(new) == [0, 1, 2]
    assert w.clock() - new._joined_ms < 2 * HI  # type: ignore[operator]
    r = Rationalizer(RationalizerConfig(2, HI))
    catch_up(w.log, r, [0, 1])
    assert r.counters[Verdict.CLAIM_RECLAIMED] == 3


def test_two_live_processes_with_one_client_id_is_an_error() -> None:
    w = World(partitions=2)
    first = w.member("a")
    w.run([first], 300)
    second = w.member("a")
    with pytest.raises(ClientIdInUseError, match="client id 'a'"):
        w.run([first, second], 2 * HI)


KEY = GroupKey("k1", b"a-group-secret-of-32-bytes-00001")


def _older_member_writes(w: World, client: str) -> None:
    """A member of an older marshal_py (Signed/2 records, no sequence numbers) joins "g"."""
    cp = coordination_partition("orders", 2)
    now = w.clock() // 1000
    for message in (MemberHeartbeat(now, "0ld00001", client, "g", "orders", 1, -1),
                    ClaimingPartition(now, "0ld00001", client, "g", "orders", 0)):
        w.log.append(cp, sign_v2(encode(message), KEY))


def test_a_member_refuses_to_join_an_authenticated_group_run_by_an_older_version() -> None:
    w = World(partitions=2)
    _older_member_writes(w, "old")
    with pytest.raises(ConfigurationError, match=r"live members that sign without sequence "
                       r"numbers \(an older marshal_py\) on orders: old \(instance 0ld00001\)"
                       r"; .*stop every member of the group, upgrade them all"):
        w.member("new", keys=(KEY,))
    w.clock.advance(2 * HI + 1)  # the old member stopped (stale): the upgraded one starts
    upgraded = w.member("new", keys=(KEY,))
    w.run([upgraded], 3 * HI)
    assert held(upgraded) == [0, 1]


def test_a_member_stops_when_an_older_version_writes_to_its_group() -> None:
    w = World(partitions=2)
    upgraded = w.member("new", keys=(KEY,))
    w.run([upgraded], HI)
    _older_member_writes(w, "old")
    with pytest.raises(ConfigurationError, match=r"signs without sequence numbers \(an older "
                       r"marshal_py\) wrote to the coordination log after this member joined"):
        w.run([upgraded], 200)


def test_a_member_with_another_heartbeat_interval_refuses_to_join() -> None:
    w = World(partitions=4)
    first = w.member("a", hi=10 * HI)
    w.run([first], HI)
    with pytest.raises(ConfigurationError, match=r"group 'g' runs with a heartbeat interval of "
                       r"10 s \(announced on orders by a, instance \w+\), and this member's "
                       r"is 1 s: give every member of a group the same heartbeat interval "
                       r"\(heartbeat_interval=10, marshal consume --heartbeat-interval 10\)"):
        w.member("b", hi=HI)
    assert w.owners() == {p: "a" for p in range(4)}  # b wrote nothing: a keeps its share
    same = w.member("c", hi=10 * HI)  # the group's own interval: welcome
    w.run([first, same], 30 * HI)
    assert sorted(held(first) + held(same)) == [0, 1, 2, 3] and held(same)


def test_of_two_members_that_joined_at_once_with_different_intervals_the_later_stops() -> None:
    w = World(partitions=4)
    first = w.member("a", hi=10 * HI)
    second = w.member("b", hi=HI, start=False)
    # b joins at the same moment: it cannot have read a's announcement yet.
    second._check_heartbeat_interval = lambda: None  # type: ignore[method-assign]
    second.start()
    del second._check_heartbeat_interval
    stopped: ConfigurationError | None = None
    for _ in range(20):
        w.clock.advance(100)
        first.tick()  # never stops: it joined first
        try:
            second.tick()
        except ConfigurationError as exc:
            stopped = exc
            break
    assert stopped is not None and "runs with a heartbeat interval of 10 s" in str(stopped)
    assert "by a, " in str(stopped) and "this member's is 1 s" in str(stopped)
    second.close()  # what the consumer does with a fatal error: b leaves
    w.run([first], 30 * HI)  # a never stopped: it holds everything
    assert held(first) == [0, 1, 2, 3]


def test_amo_starts_after_the_highest_confirmed_offset() -> None:
    w = World(partitions=1)
    for _ in range(20):
        w.topic.produce(0, b"x")
    a = w.member("a", mode="amo", offset_reset="earliest")
    w.run([a], 300)
    epoch, position = a.assignments()[("orders", 0)]
    assert position == 0
    assert a.accept("orders", 0, epoch, list(range(0, 8)), 8)  # confirmed 0..7, processing
    # a crashes mid-batch; b takes over after 2 HI and starts at 8
    b = w.member("b", mode="amo")
    w.run([b], 3 * HI)
    assert b.assignments()[("orders", 0)][1] == 8


@pytest.mark.parametrize(("reset", "expected"), [("latest", 5), ("earliest", 0)])
def test_offset_reset_for_a_group_without_commits(reset: str, expected: int) -> None:
    w = World(partitions=1)
    for _ in range(5):
        w.topic.produce(0, b"x")
    a = w.member("a", offset_reset=reset)
    w.run([a], 300)
    assert a.assignments()[("orders", 0)][1] == expected
    # and the reset position is committed at once, so a successor starts there too
    r = Rationalizer(RationalizerConfig(2, HI))
    catch_up(w.log, r, [0, 1])
    assert r.claim("g", "orders", 0).committed_offset == expected


def test_released_partitions_are_not_reclaimed_by_the_releaser_within_one_interval() -> None:
    w = World(partitions=4)
    a = w.member("a")
    w.run([a], 300)
    b = w.member("b")
    w.run([a, b], 300)
    # a released one partition for b; it must not grab it back
    w.run([a, b], 10 * HI)
    assert sorted(len(held(e)) for e in (a, b)) == [2, 2]


def test_a_greedy_member_behind_releases_only_when_another_member_could_take_it() -> None:
    w = World(partitions=4)
    for p in range(4):
        for _ in range(50):
            w.topic.produce(p, b"x")
    a = w.member("a", balance="greedy", release_lag=10, offset_reset="earliest")
    w.run([a], 5 * HI)
    assert held(a) == [0, 1, 2, 3]  # behind by 50 everywhere, but alone: keeps them all
    b = w.member("b", balance="greedy", release_lag=10, offset_reset="earliest")
    w.run([a, b], 5 * HI)
    # a released lagging partitions one per interval to b, which had room
    assert len(held(a)) < 4
    assert len(held(a)) + len(held(b)) == 4


def test_amo_close_hands_over_exactly_what_was_not_handed_out() -> None:
    w = World(partitions=1)
    for _ in range(20):
        w.topic.produce(0, b"x")
    a = w.member("a", mode="amo", offset_reset="earliest")
    w.run([a], 300)
    epoch, _ = a.assignments()[("orders", 0)]
    assert a.accept("orders", 0, epoch, list(range(0, 8)), 8)  # confirmed 0..7
    assert all(a.deliver("orders", 0, epoch, offset) for offset in range(3))  # handed out 0..2
    a.close()
    b = w.member("b", mode="amo")
    w.run([b], 300)
    assert b.assignments()[("orders", 0)][1] == 3  # 3..7 were never handed out: not lost


def test_capacities_announced_by_members_are_filled_by_the_others() -> None:
    w = World(partitions=12)
    a = w.member("a")
    b = w.member("b", max_claims=4)
    c = w.member("c")
    w.run([a, b, c], 10 * HI)
    assert len(held(b)) == 4
    assert sorted([len(held(a)), len(held(c))]) == [4, 4]
    d = w.member("d", max_claims=1)
    w.run([a, b, c, d], 10 * HI)
    assert len(held(d)) == 1
    assert len(held(a)) + len(held(b)) + len(held(c)) + len(held(d)) == 12
    assert None not in w.owners().values()


def test_a_restarted_member_takes_all_its_partitions_back_among_others() -> None:
    w = World(partitions=12)
    a, b = w.member("a"), w.member("b")
    c_old = w.member("c", instance="000000c1")
    w.run([a, b, c_old], 10 * HI)
    before = held(c_old)
    assert len(before) == 4
    c_new = w.member("c", instance="000000c2")  # c_old was killed
    w.run([a, b, c_new], 2 * HI)
    assert held(c_new) == before
    assert sorted(len(held(e)) for e in (a, b)) == [4, 4]


def test_amo_delivers_a_batch_whose_last_offset_is_zero() -> None:
    w = World(partitions=1)
    w.topic.produce(0, b"only")
    a = w.member("a", mode="amo", offset_reset="earliest")
    w.run([a], 300)
    epoch, position = a.assignments()[("orders", 0)]
    assert position == 0
    assert a.accept("orders", 0, epoch, [0], 1)
    assert a.deliver("orders", 0, epoch, 0)
    assert a.stats.amo_batches_refused == 0


def test_records_not_handed_out_during_a_lapsed_lease_are_fetched_again() -> None:
    w = World(partitions=1)
    for _ in range(5):
        w.topic.produce(0, b"x")
    a = w.member("a", offset_reset="earliest")
    w.run([a], 300)
    epoch, _ = a.assignments()[("orders", 0)]
    assert a.accept("orders", 0, epoch, [0, 1, 2, 3, 4], 5)
    for offset in (0, 1):
        assert a.deliver("orders", 0, epoch, offset)
        a.commit("orders", 0, offset, epoch)
    w.clock.advance(HI)  # the coordination thread was slow: the lease lapsed
    assert not a.deliver("orders", 0, epoch, 2)
    assert a.rewind("orders", 0, epoch, 2) == 2
    a.tick()  # heartbeats, reads it back: the lease is renewed under the same claim
    assert a.assignments()[("orders", 0)] == (epoch, 2)
    assert a.accept("orders", 0, epoch, [2, 3, 4], 5)
    for offset in (2, 3, 4):
        assert a.deliver("orders", 0, epoch, offset)
        a.commit("orders", 0, offset, epoch)
    assert a.committed("orders", 0) == 5


def test_a_won_claim_whose_take_up_failed_is_claimed_again_at_the_next_step() -> None:
    w = World(partitions=2)
    lookups = {"fail": 1}
    real = w.topic.offset_bounds_of

    def flaky(partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        if lookups["fail"]:
            lookups["fail"] -= 1
            raise BrokerUnavailableError("ListOffsets failed (test)")
        return real(partitions)

    w.topic.offset_bounds_of = flaky  # type: ignore[method-assign]
    a = w.member("a", start=False)
    a.start()
    with pytest.raises(BrokerUnavailableError):
        a.tick()  # the claims are won in the log, taking them up fails
    assert held(a) == []
    w.clock.advance(100)
    a.tick()  # claims its own claims again (a renewal) and takes them up
    assert held(a) == [0, 1]


def test_a_process_restarted_right_after_a_clean_close_waits_to_take_back_what_it_released(
        ) -> None:
    """A client claims what it released only one HI later (PROTOCOL.md 7); a batch member
    restarted at once under the same client id (a Spark stream run again in its driver)
    counts those partitions as still to be taken back, so its wait_settled does not end
    holding none."""
    w = World(partitions=3)
    old = w.member("a", instance="00000001")
    w.run([old], 300)
    assert held(old) == [0, 1, 2]
    old.close()  # releases every partition
    new = w.member("a", instance="00000002")
    w.run([new], HI // 2)
    assert held(new) == []  # not within one HI of the release
    assert new.reclaim_pending()
    w.run([new], HI)
    assert held(new) == [0, 1, 2]
    assert not new.reclaim_pending()
