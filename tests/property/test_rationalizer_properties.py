"""Invariants of the rationalizer under random interleavings of every client's records.

Checked after every record: an owner changes only through a valid claim (the old owner was
released, stale for more than 2 HI at the claim's timestamp — the HI the owner announced in
its membership heartbeats, else the configured one — or the same client restarted);
only the owner moves the committed offset; the AMO-confirmed offset only grows, except that
the owner's release lowers it to its released offset - 1; replays are deterministic whatever
the chunking, re-deliveries and query times.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    coordination_partition,
    decode,
    encode,
)
from marshal_py.world import (
    CoordinationRecord,
    Owner,
    PartitionClaim,
    Rationalizer,
    RationalizerConfig,
    Verdict,
)

HI = 1_000
COORD = 2
SENDERS = [("i1", "a"), ("i2", "a"), ("i3", "b"), ("i4", "c")]
KEYS = [("g1", "t", 0), ("g1", "t", 1), ("g2", "t", 0), ("g1", "u", 0)]

op = st.tuples(
    st.sampled_from(["claim", "claim", "heartbeat", "heartbeat", "release", "messages",
                     "member", "junk"]),
    st.sampled_from(SENDERS),
    st.sampled_from(KEYS),
    st.integers(0, 3 * HI),   # time since the previous record
    st.integers(0, 100),      # offset
)


def build(ops: list[tuple[str, tuple[str, str], tuple[str, str, int], int, int]]
          ) -> list[CoordinationRecord]:
    records: list[CoordinationRecord] = []
    positions = [0] * COORD
    now = 1_000_000
    for kind, (instance, client), (group, topic, partition), dt, offset in ops:
        now += dt
        base = (0, instance, client, group, topic, partition)
        message: Message | None
        if kind == "claim":
            message = ClaimingPartition(*base)
        elif kind == "heartbeat":
            message = Heartbeat(*base, offset)
        elif kind == "release":
            message = ReleasingPartition(*base, offset)
        elif kind == "messages":
            message = ClaimingMessages(*base, offset)
        elif kind == "member":  # announces one of several intervals (0: none)
            message = MemberHeartbeat(*base[:5], 1, -1, (0, HI // 2, HI, 3 * HI)[offset % 4])
        else:
            message = None
        cp = coordination_partition(topic, COORD)
        value = encode(message) if message is not None else b"junk/1/" + bytes([offset])
        records.append(CoordinationRecord(cp, positions[cp], now, value))
        positions[cp] += 1
    return records


def snapshot(r: Rationalizer) -> dict[tuple[str, str, int], PartitionClaim]:
    return {(c.key.group, c.key.topic, c.key.partition): c for c in r.claims()}


ops_lists = st.lists(op, min_size=1, max_size=80)


@settings(max_examples=400, deadline=None)
@given(ops_lists)
def test_ownership_changes_only_through_valid_claims_and_releases(ops: list) -> None:
    records = build(ops)
    r = Rationalizer(RationalizerConfig(COORD, HI))
    before = snapshot(r)
    for record in records:
        outcome = r.apply(record)
        after = snapshot(r)
        message = outcome.message
        for key, now in after.items():
            old = before.get(key)
            old_owner = old.owner if old else None
            old_offset = old.committed_offset if old else None
            touched = message is not None and (  # a membership heartbeat touches no claim
                message.group_id, message.topic, getattr(message, "partition", None)) == key
            if not touched:
                assert old == now, "a record changed a partition it is not about"
                continue
            assert message is not None
            sender = Owner(message.instance_id, message.client_id)
            if now.owner != old_owner:
                if now.owner is None:
                    assert isinstance(message, ReleasingPartition) and sender == old_owner
                else:
                    assert isinstance(message, ClaimingPartition) and now.owner == sender
                    if old_owner is not None and old_owner.client_id != sender.client_id:
                        assert old is not None and old.last_heartbeat_ms is not None
                        # stale by the interval its owner announced (else the configured)
                        assert record.timestamp_ms - old.last_heartbeat_ms \
                            > 2 * old.heartbeat_interval_ms
            if now.committed_offset != old_offset:
                assert isinstance(message, (Heartbeat, ReleasingPartition))
                assert sender == old_owner
            if old is not None and old.amo_claimed_offset is not None:
                assert now.amo_claimed_offset is not None
                if isinstance(message, ReleasingPartition) and sender == old_owner:
                    # The owner's release is its last word: confirmed-but-unhanded offsets
                    # from the released offset on become free again.
                    assert now.amo_claimed_offset == min(old.amo_claimed_offset,
                                                         message.offset - 1)
                else:
                    assert now.amo_claimed_offset >= old.amo_claimed_offset
        # At most one owner per partition, and every owner holds through a winning claim.
        owners = [(k, c.owner) for k, c in after.items() if c.owner is not None]
        assert len({k for k, _ in owners}) == len(owners)
        before = after


@settings(max_examples=300, deadline=None)
@given(ops_lists, st.data())
def test_replay_is_deterministic_under_chunking_and_redelivery(ops: list,
                                                              data: st.DataObject) -> None:
    records = build(ops)
    straight = Rationalizer(RationalizerConfig(COORD, HI))
    straight.apply_all(records)

    shuffled = Rationalizer(RationalizerConfig(COORD, HI))
    delivered: list[CoordinationRecord] = []
    # Interleave the coordination partitions differently, and re-deliver earlier records
    # (as a consumer does after a reconnect): the world must not change.
    queues = {p: [r for r in records if r.partition == p] for p in range(COORD)}
    while any(queues.values()):
        p = data.draw(st.sampled_from([p for p, q in queues.items() if q]))
        take = data.draw(st.integers(1, 5))
        chunk, queues[p] = queues[p][:take], queues[p][take:]
        if delivered and data.draw(st.booleans()):
            shuffled.apply_all(delivered[-data.draw(st.integers(1, len(delivered))):])
        shuffled.apply_all(chunk)
        delivered.extend(chunk)
    assert snapshot(shuffled) == snapshot(straight)
    for verdict in Verdict:
        if verdict is not Verdict.DUPLICATE:
            assert shuffled.counters[verdict] == straight.counters[verdict]


@settings(max_examples=200, deadline=None)
@given(ops_lists)
def test_every_applied_record_is_a_decodable_message(ops: list) -> None:
    r = Rationalizer(RationalizerConfig(COORD, HI))
    for record in build(ops):
        outcome = r.apply(record)
        if outcome.verdict.applied:
            assert record.value is not None
            assert decode(record.value) == outcome.message
