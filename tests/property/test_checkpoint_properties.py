"""A replay that starts at a checkpoint reaches exactly the state of a full replay.

Random logs mix every kind of record (exclusive claims, heartbeats, releases, at-most-once
confirmations, member heartbeats and departures, share acquisitions and acknowledgements,
key-range claims, heartbeats and releases, offset resets, checkpoints, garbage), with time
gaps long enough for groups to go Empty and Dead under a short offset retention. At a random
cut, every (group, topic) pair is checkpointed; a fresh rationalizer restores those
checkpoints and replays only the rest. After every later record both agree on every pair's state.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.protocol import Checkpoint, ClaimingPartition, encode
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig
from marshal_py.world.checkpoint import decode_state, encode_state
from tests.property.streams import KINDS, message_for

HI = 1_000
RETENTION = 20 * HI
SENDERS = [("i1", "a"), ("i2", "a"), ("i3", "b")]
PAIRS = [("g1", "t"), ("g2", "t")]

op = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(SENDERS),
    st.sampled_from(PAIRS),
    st.integers(0, 1),                                     # partition
    st.integers(0, 40).map(lambda n: 30 * HI if n == 0 else n * 70),  # time since the last
    st.integers(0, 40),                                    # an offset or slot
    st.integers(0, 1023),                                  # another slot
)


def build(ops: list[tuple[str, tuple[str, str], tuple[str, str], int, int, int, int]]
          ) -> list[CoordinationRecord]:
    records = []
    now = 1_000_000
    for i, (kind, sender, pair, partition, dt, a, b) in enumerate(ops):
        now += dt
        message = message_for(kind, sender, pair, partition, a, b)
        value = encode(message) if message is not None else b"junk/1/" + bytes([a])
        records.append(CoordinationRecord(0, i, now, value))
    return records


def rationalizer() -> Rationalizer:
    return Rationalizer(RationalizerConfig(1, HI, offsets_retention_ms=RETENTION))


def states(r: Rationalizer) -> dict[tuple[str, str], str]:
    return {pair: r.snapshot(*pair) for pair in r.groups()}


@settings(max_examples=300, deadline=None)
@given(st.lists(op, min_size=1, max_size=120), st.data())
def test_a_replay_from_checkpoints_agrees_with_a_full_replay(ops: list, data: st.DataObject,
                                                             ) -> None:
    records = build(ops)
    cut = data.draw(st.integers(0, len(records)))
    full = rationalizer()
    full.apply_all(records[:cut])
    resumed = rationalizer()
    for (group, topic), text in states(full).items():
        resumed.restore(0, Checkpoint(0, "i", "c", group, topic, cut, text))
    resumed.skip_to(0, cut)
    assert states(resumed) == states(full)
    for record in records[cut:]:
        full.apply(record)
        resumed.apply(record)
        assert states(resumed) == states(full)
        now = record.timestamp_ms + data.draw(st.integers(0, 3 * RETENTION))
        for group, topic in full.groups():
            assert resumed.group_state(group, topic, now) == full.group_state(group, topic, now)
            assert resumed.members(group, topic, now) == full.members(group, topic, now)
    assert full.claims() == resumed.claims()


@settings(max_examples=200, deadline=None)
@given(st.lists(op, min_size=1, max_size=80))
def test_checkpoint_text_round_trips(ops: list) -> None:
    full = rationalizer()
    full.apply_all(build(ops))
    for pair, text in states(full).items():
        assert encode_state(decode_state(text)) == text, pair


def test_garbage_checkpoint_text_is_refused_and_changes_nothing() -> None:
    import pytest

    from marshal_py.world.checkpoint import CheckpointError

    r = rationalizer()
    r.apply(CoordinationRecord(0, 0, 1_000_000, encode(ClaimingPartition(0, "i", "c", "g",
                                                                          "t", 0))))
    before = states(r)
    for text in ("", "[]", '{"v":2}', '{"v":1}', '{"v":1,"owners":[],"life":[[],null,null,null]'
                 ',"claims":[["x"]],"shares":[],"keys":[]}', "{" * 10_000):
        with pytest.raises(CheckpointError):
            r.restore(0, Checkpoint(0, "i", "c", "g", "t", 5, text))
    assert states(r) == before
