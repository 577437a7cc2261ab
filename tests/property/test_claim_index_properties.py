"""The index of claimable partitions agrees with a scan of every claim, after every record.

:class:`~marshal_py.world.claim_index.ClaimIndex` answers a member's questions (which
partitions nobody holds, how many each client id holds, what a client id owns) from
structures the rules keep as records arrive, re-armed lazily as time passes. Under the golden
corpus's logs (claims, heartbeats, releases, resets, membership with announced intervals,
expiry, garbage, signed records, checkpoint restores, broker clocks that step back) and under
random exclusive traffic with mixed intervals, each answer at the record's time, at 1 and 2 HI
later and before it must equal the one a scan of :meth:`Rationalizer.claim` gives.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.protocol import ClaimingPartition, Heartbeat, MemberHeartbeat, Message, encode
from marshal_py.protocol.messages import Checkpoint, ReleasingPartition
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world import Rationalizer, RationalizerConfig
from marshal_py.world.checkpoint import CheckpointError
from tests.golden.corpus import golden_log
from tests.tiers import sized

#: Partitions asked about: beyond what the corpus's topics have (their count is a reader's).
COUNT = 6
#: Golden logs replayed (seeds 0..): all eight in the full run, the first three under
#: ``bin/test --fast``.
SEEDS = sized(8, 3)


def check(r: Rationalizer, now: int, count: int = COUNT) -> None:
    """Every index answer of every pair equals the scan's, at ``now``."""
    for group, topic in r.groups():
        claims = {p: r.claim(group, topic, p) for p in range(count)}
        free = sorted(p for p, c in claims.items() if not c.is_held(now))
        start = now % (count + 1)
        got = list(r.claimable(group, topic, count, now, start))
        assert sorted(got) == free, (group, topic, now)
        assert len(got) == len(set(got))
        held: Counter[str] = Counter(c.owner.client_id for c in r.claims(group, topic)
                                     if c.owner is not None and c.is_held(now))
        assert r.held_counts(group, topic, now) == dict(held)
        owned: dict[str, list[int]] = {}
        for c in r.claims(group, topic):
            if c.owner is not None:
                owned.setdefault(c.owner.client_id, []).append(c.key.partition)
        for client in {*owned, "nobody"}:
            assert r.owned_by(group, topic, client) == sorted(owned.get(client, []))


def times(ts: int, hi: int) -> list[int]:
    return [ts, ts + hi, ts + 2 * hi, ts + 2 * hi + 1, ts - hi]


def test_the_index_agrees_with_a_scan_on_the_golden_corpus() -> None:
    for seed in range(SEEDS):
        log = golden_log(seed, 400)
        s = log.settings
        config = RationalizerConfig(s.coordination_partitions, s.heartbeat_interval_ms,
                                    s.group_heartbeat_intervals, s.offsets_retention_ms,
                                    s.keys(), s.auth_max_skew_ms)  # type: ignore[arg-type]
        reader = Rationalizer(config)
        restored: list[Rationalizer] = []
        for i, record in enumerate(log.records):
            for plan in log.restores:
                if plan.index != i:
                    continue
                checkpoint = Checkpoint(0, "i", "c", plan.group, plan.topic, plan.position,
                                        plan.state)
                second = Rationalizer(config)
                try:
                    second.restore(plan.partition, checkpoint)
                    reader.restore(plan.partition, checkpoint)  # over a state that has it
                except CheckpointError:
                    continue
                second.skip_to(plan.partition, plan.start)
                for partition, start in plan.others:
                    second.skip_to(partition, start)
                restored.append(second)
            for r in (reader, *restored):
                r.apply(record)
                for now in times(record.timestamp_ms, s.heartbeat_interval_ms):
                    check(r, now)


HI = 1_000
SENDERS = [("i1", "a"), ("i2", "b"), ("i3", "c"), ("i4", "a")]

action = st.tuples(
    st.sampled_from(["claim", "claim", "beat", "beat", "release", "member", "leave"]),
    st.integers(0, len(SENDERS) - 1),
    st.integers(0, 4),  # partition
    st.integers(-2 * HI, 3 * HI),  # time step (negative: the broker clock stepped back)
    st.sampled_from([HI // 2, HI, 3 * HI]),  # an announced interval
)


@settings(max_examples=150, deadline=None)
@given(st.lists(action, min_size=1, max_size=80), st.integers(0, 2**16))
def test_the_index_agrees_with_a_scan_under_mixed_intervals(
        actions: list[tuple[str, int, int, int, int]], seed: int) -> None:
    r = Rationalizer(RationalizerConfig(1, HI))
    rng = random.Random(seed)
    now = 10_000_000
    for position, (kind, who, partition, step, interval) in enumerate(actions):
        now += step
        instance, client = SENDERS[who]
        sent = now // 1000
        message: Message
        if kind == "claim":
            message = ClaimingPartition(sent, instance, client, "g", "t", partition)
        elif kind == "beat":
            message = Heartbeat(sent, instance, client, "g", "t", partition, rng.randrange(99))
        elif kind == "release":
            message = ReleasingPartition(sent, instance, client, "g", "t", partition,
                                         rng.randrange(99))
        else:
            message = MemberHeartbeat(sent, instance, client, "g", "t", int(kind == "member"),
                                      -1, interval)
        r.apply(CoordinationRecord(0, position, now, encode(message)))
        for at in (now, now + HI // 2, now + 2 * HI + 1, now + 6 * HI + 1, now - HI):
            check(r, at, 6)
