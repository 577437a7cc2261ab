"""The checkpoint state text: the vector of PROTOCOL.md section 11.1, and older versions."""

from __future__ import annotations

from marshal_py.protocol import ClaimingKeyRanges, ClaimingPartition, Heartbeat, MemberHeartbeat
from marshal_py.protocol import encode as encode_message
from marshal_py.world import CoordinationRecord, Owner, Rationalizer, RationalizerConfig
from marshal_py.world.checkpoint import decode_state, encode_state

T0 = 1_700_000_000_000
VECTOR = ('{"auth":[0,[]],"claims":[[0,0,1700000000001,1700000000002,42,null,null,null]],'
          '"keys":[[1,[[0,511,0,null],[512,1023,null,null]],[[0,1700000000003]]]],'
          '"life":[[[0,1700000000003,-1]],null,null,1700000000000],'
          '"owners":[["ab12cd34","w1"]],"shares":[],"v":2}')


def test_the_protocol_example_is_what_a_member_checkpoints() -> None:
    me = ("ab12cd34", "w1", "orders.g", "orders")
    r = Rationalizer(RationalizerConfig(1, 10_000))
    for i, message in enumerate([MemberHeartbeat(0, *me, 1, -1), ClaimingPartition(0, *me, 0),
                                 Heartbeat(0, *me, 0, 42),
                                 ClaimingKeyRanges(0, *me, 1, "0-511")]):
        r.apply(CoordinationRecord(0, i, T0 + i, encode_message(message)))
    assert r.snapshot("orders.g", "orders") == VECTOR
    assert encode_state(decode_state(VECTOR)) == VECTOR


def test_version_1_without_the_replay_guard_is_still_read() -> None:
    version_1 = VECTOR.replace('"auth":[0,[]],', "").replace('"v":2', '"v":1')
    state = decode_state(version_1)
    assert not state.sequences.sequenced and not state.sequences.last
    assert state.claims[0].committed_offset == 42
    assert encode_state(state) == VECTOR


def test_the_replay_guard_round_trips() -> None:
    with_guard = VECTOR.replace('"auth":[0,[]]', '"auth":[1,[[0,17,1700000000002]]]')
    state = decode_state(with_guard)
    assert state.sequences.sequenced
    assert state.sequences.last == {Owner("ab12cd34", "w1"): (17, 1_700_000_000_002)}
    assert encode_state(state) == with_guard
