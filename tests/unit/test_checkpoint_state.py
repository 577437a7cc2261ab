"""The checkpoint state text: the vector of PROTOCOL.md section 11.1, and older versions."""

from __future__ import annotations

from marshal_py.protocol import ClaimingKeyRanges, ClaimingPartition, Heartbeat, MemberHeartbeat
from marshal_py.protocol import encode as encode_message
from marshal_py.world import CoordinationRecord, Owner, Rationalizer, RationalizerConfig
from marshal_py.world.checkpoint import decode_state, encode_state

T0 = 1_700_000_000_000
W1 = Owner("ab12cd34", "w1")
VECTOR = ('{"auth":[0,[]],"claims":[[0,0,1700000000001,1700000000002,42,null,null,null,10000]],'
          '"keys":[[1,[[0,511,0,null],[512,1023,null,null]],[[0,1700000000003,10000]]]],'
          '"life":[[[0,1700000000003,-1,10000,1700000000000]],null,null,1700000000000],'
          '"owners":[["ab12cd34","w1"]],"shares":[],"v":2}')
#: The same state as marshal_py wrote it before announced intervals and the replay guard.
VERSION_1 = ('{"claims":[[0,0,1700000000001,1700000000002,42,null,null,null]],'
             '"keys":[[1,[[0,511,0,null],[512,1023,null,null]],[[0,1700000000003]]]],'
             '"life":[[[0,1700000000003,-1]],null,null,1700000000000],'
             '"owners":[["ab12cd34","w1"]],"shares":[],"v":1}')


def test_the_protocol_example_is_what_a_member_checkpoints() -> None:
    me = (W1.instance_id, W1.client_id, "orders.g", "orders")
    r = Rationalizer(RationalizerConfig(1, 10_000))
    for i, message in enumerate([MemberHeartbeat(0, *me, 1, -1, 10_000),
                                 ClaimingPartition(0, *me, 0), Heartbeat(0, *me, 0, 42),
                                 ClaimingKeyRanges(0, *me, 1, "0-511")]):
        r.apply(CoordinationRecord(0, i, T0 + i, encode_message(message)))
    assert r.snapshot("orders.g", "orders") == VECTOR
    assert encode_state(decode_state(VECTOR)) == VECTOR


def test_version_1_is_still_read() -> None:
    state = decode_state(VERSION_1)
    assert not state.sequences.sequenced and not state.sequences.last
    assert state.claims[0].committed_offset == 42
    assert state.claims[0].heartbeat_interval_ms is None  # judged by the configured HI
    assert state.life.intervals == {} and state.life.joined == {W1: 1_700_000_000_003}
    assert state.key_shared[1].intervals == {}
    assert encode_state(state) == (
        VECTOR.replace(",10000]]", ",null]]", 1).replace("1700000000003,10000", "1700000000003,0")
        .replace("-1,10000,1700000000000", "-1,0,1700000000003"))


def test_announced_intervals_and_the_replay_guard_round_trip() -> None:
    with_guard = VECTOR.replace('"auth":[0,[]]', '"auth":[1,[[0,17,1700000000002]]]')
    state = decode_state(with_guard)
    assert state.sequences.sequenced
    assert state.sequences.last == {W1: (17, 1_700_000_000_002)}
    assert state.life.intervals == {W1: 10_000} and state.claims[0].heartbeat_interval_ms == 10_000
    assert state.key_shared[1].intervals == {W1: 10_000}
    assert encode_state(state) == with_guard
