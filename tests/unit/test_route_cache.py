"""The rationalizer's routes cache each partition's claim: that cache must never outlive the
claims it points at (a pair that expired, a pair restored from a checkpoint)."""

from __future__ import annotations

from marshal_py.protocol import (
    Checkpoint,
    ClaimingPartition,
    Heartbeat,
    coordination_partition,
    encode,
)
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig, Verdict

HI = 1_000
TOPIC = "events"
CP = coordination_partition(TOPIC, 1)


def _record(position: int, ts: int, message: object) -> CoordinationRecord:
    return CoordinationRecord(CP, position, ts, encode(message))  # type: ignore[arg-type]


def test_a_heartbeat_after_its_pair_expired_finds_no_claim_of_the_sender() -> None:
    r = Rationalizer(RationalizerConfig(1, HI, offsets_retention_ms=5_000))
    r.apply(_record(0, 1_000, ClaimingPartition(1, "i-a", "a", "g", TOPIC, 0)))
    assert r.apply(_record(1, 1_500, Heartbeat(1, "i-a", "a", "g", TOPIC, 0, 7))).verdict \
        is Verdict.HEARTBEAT
    # Silent past 2 HI (stale) and then past the retention: the pair's offsets expire.
    late = r.apply(_record(2, 60_000, Heartbeat(60, "i-a", "a", "g", TOPIC, 0, 9)))
    assert late.verdict is Verdict.NOT_OWNER
    assert r.claim("g", TOPIC, 0).owner is None
    assert r.claim("g", TOPIC, 0).committed_offset is None


def test_a_pair_expired_by_a_record_about_another_partition_forgets_every_claim() -> None:
    r = Rationalizer(RationalizerConfig(1, HI, offsets_retention_ms=5_000))
    for position, partition in enumerate((0, 1)):
        r.apply(_record(position, 1_000, ClaimingPartition(1, "i-a", "a", "g", TOPIC,
                                                           partition)))
    assert r.apply(_record(2, 1_500, Heartbeat(1, "i-a", "a", "g", TOPIC, 1, 7))).verdict \
        is Verdict.HEARTBEAT
    # The pair expires on a record about partition 0; partition 1's route was used before.
    r.apply(_record(3, 60_000, ClaimingPartition(60, "i-b", "b", "g", TOPIC, 0)))
    late = r.apply(_record(4, 60_100, Heartbeat(60, "i-a", "a", "g", TOPIC, 1, 9)))
    assert late.verdict is Verdict.NOT_OWNER
    assert r.claim("g", TOPIC, 1).committed_offset is None


def test_a_heartbeat_after_a_restore_is_judged_by_the_restored_claims() -> None:
    config = RationalizerConfig(1, HI)
    other = Rationalizer(config)
    other.apply(_record(0, 1_000, ClaimingPartition(1, "i-b", "b", "g", TOPIC, 0)))
    state = other.snapshot("g", TOPIC)
    r = Rationalizer(config)
    r.apply(_record(0, 1_000, ClaimingPartition(1, "i-a", "a", "g", TOPIC, 0)))
    r.apply(_record(1, 1_100, Heartbeat(1, "i-a", "a", "g", TOPIC, 0, 5)))
    r.restore(CP, Checkpoint(1, "i-b", "b", "g", TOPIC, 2, state))
    r.skip_to(CP, 2)
    beat = r.apply(_record(2, 1_200, Heartbeat(1, "i-a", "a", "g", TOPIC, 0, 6)))
    assert beat.verdict is Verdict.NOT_OWNER
    assert r.claim("g", TOPIC, 0).owner is not None
    assert r.claim("g", TOPIC, 0).owner.client_id == "b"  # type: ignore[union-attr]
    assert r.claim("g", TOPIC, 0).committed_offset is None


def test_a_heartbeat_at_an_earlier_broker_time_makes_the_claim_stale_sooner_signed_or_not(
) -> None:
    """A broker clock that went back: the heartbeat's earlier time is the claim's last one,
    and the index of claimable partitions must see it stale 2 HI after it, whether the
    record took the unsigned or the signed fast path."""
    from marshal_py.protocol import GroupKey, sign

    key = GroupKey("k1", b"0123456789abcdef0123456789abcdef")
    for signed in (False, True):
        for together in (False, True):  # record by record, or a fetch at once (fast paths)
            config = RationalizerConfig(1, HI, group_keys={"g": (key,)} if signed else {})
            r = Rationalizer(config)
            messages = [(10_000, ClaimingPartition(10, "i-a", "a", "g", TOPIC, 0)),
                        (20_000, Heartbeat(20, "i-a", "a", "g", TOPIC, 0, 5)),
                        (12_000, Heartbeat(12, "i-a", "a", "g", TOPIC, 0, 6))]
            records = []
            for position, (ts, message) in enumerate(messages):
                value = encode(message)
                if signed:
                    value = sign(value, key, position + 1)
                records.append(CoordinationRecord(CP, position, ts, value))
            if together:
                r.apply_all(records[:2])
                assert list(r.claimable("g", TOPIC, 1, 20_500)) == []  # armed: fresh
                r.apply_all(records[2:])
            else:
                for record in records:
                    assert r.apply(record).verdict in (Verdict.CLAIM_WON, Verdict.HEARTBEAT)
                    if record.position == 1:
                        assert list(r.claimable("g", TOPIC, 1, 20_500)) == []
            assert r.claim("g", TOPIC, 0).last_heartbeat_ms == 12_000, (signed, together)
            assert list(r.claimable("g", TOPIC, 1, 15_000)) == [0], (signed, together)
