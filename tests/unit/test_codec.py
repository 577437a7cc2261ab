"""The wire format: the original text form bit for bit, escaping, and typed decode errors."""

from __future__ import annotations

import pytest

from marshal_py.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    DecodeErrorKind,
    Heartbeat,
    ReleasingPartition,
    decode,
    encode,
    escape_field,
    unescape_field,
    wire_version,
)

BASE = dict(sent_at=1700000000, instance_id="ab12cd34", client_id="worker-1",
            group_id="team.job", topic="events", partition=3)

HB = b"Heartbeat/1/1700000000/ab12cd34/worker-1/team.job/events"
MAL = DecodeErrorKind.MALFORMED

VECTORS = [
    (Heartbeat(**BASE, offset=5), b"Heartbeat/1/1700000000/ab12cd34/worker-1/team.job/events/3/5"),
    (ClaimingPartition(**BASE),
     b"ClaimingPartition/1/1700000000/ab12cd34/worker-1/team.job/events/3"),
    (ReleasingPartition(**BASE, offset=42),
     b"ReleasingPartition/1/1700000000/ab12cd34/worker-1/team.job/events/3/42"),
    (ClaimingMessages(**BASE, proposed_last_offset=99),
     b"ClaimingMessages/1/1700000000/ab12cd34/worker-1/team.job/events/3/99"),
]


@pytest.mark.parametrize(("message", "wire"), VECTORS)
def test_base_messages_encode_to_the_original_text_form(message: object, wire: bytes) -> None:
    assert encode(message) == wire  # type: ignore[arg-type]
    assert decode(wire) == message


def test_ids_with_a_slash_use_version_2_escaping_and_round_trip() -> None:
    message = Heartbeat(**{**BASE, "client_id": "a/b%c", "group_id": "g/%2F"}, offset=1)
    wire = encode(message)
    assert wire == b"Heartbeat/2/1700000000/ab12cd34/a%2Fb%25c/g%2F%252F/events/3/1"
    assert wire_version(message) == 2
    assert decode(wire) == message


def test_percent_without_slash_stays_version_1_literal() -> None:
    message = Heartbeat(**{**BASE, "client_id": "100%"}, offset=1)
    assert encode(message) == b"Heartbeat/1/1700000000/ab12cd34/100%/team.job/events/3/1"
    assert decode(encode(message)) == message


def test_version_2_of_a_base_message_decodes_the_same_fields() -> None:
    assert decode(b"Heartbeat/2/1700000000/ab12cd34/worker-1/team.job/events/3/5") == VECTORS[0][0]


def test_escape_helpers() -> None:
    assert escape_field("%/x") == "%25%2Fx"
    assert unescape_field("%25%2f%2Fx") == "%//x"


@pytest.mark.parametrize(
    ("wire", "kind"),
    [
        (b"", MAL),
        (b"Heartbeat", MAL),
        (HB + b"/3", MAL),
        (HB + b"/3/5/6", MAL),
        (HB + b"/x/5", MAL),
        (HB + b"/3/5.0", MAL),
        (HB + b"/+3/5", MAL),
        (HB + b"/03/5", MAL),
        (HB + b"/-1/5", MAL),
        (HB + b"/3/99999999999999999999",
         MAL),
        (b"Heartbeat/x/1700000000/ab12cd34/worker-1/team.job/events/3/5", MAL),
        (b"Heartbeat/2/1700000000/ab12cd34/bad%zz/team.job/events/3/5", MAL),
        (b"Heartbeat/2/1700000000/ab12cd34/bad%/team.job/events/3/5", MAL),
        (b"\xff\xfe", MAL),
        (b"Heartbeat/3/1700000000/ab12cd34/worker-1/team.job/events/3/5",
         DecodeErrorKind.UNKNOWN_VERSION),
        (b"Heartbeat/0/1700000000/ab12cd34/worker-1/team.job/events/3/5",
         DecodeErrorKind.UNKNOWN_VERSION),
        (b"ClaimingEverything/1/1700000000/ab12cd34/worker-1/team.job/events/3",
         DecodeErrorKind.UNKNOWN_TYPE),
    ],
)
def test_bad_records_raise_a_typed_decode_error(wire: bytes, kind: DecodeErrorKind) -> None:
    with pytest.raises(DecodeError) as info:
        decode(wire)
    assert info.value.kind is kind


def test_encode_refuses_unregistered_types() -> None:
    from marshal_py.protocol.messages import PartitionMessage

    class Unregistered(PartitionMessage):
        __slots__ = ()

    Unregistered.TYPE = "Unregistered"
    with pytest.raises(ValueError):
        encode(Unregistered(**BASE))


def test_member_heartbeat_is_a_version_2_extension() -> None:
    from marshal_py.protocol import MemberHeartbeat

    message = MemberHeartbeat(1700000000, "ab12cd34", "worker/1", "team.job", "events", 1, 4)
    wire = encode(message)
    assert wire == b"MemberHeartbeat/2/1700000000/ab12cd34/worker%2F1/team.job/events/1/4"
    assert decode(wire) == message
    unlimited = MemberHeartbeat(1700000000, "ab12cd34", "w", "g", "events", 0)
    assert encode(unlimited) == b"MemberHeartbeat/2/1700000000/ab12cd34/w/g/events/0/-1"
    with pytest.raises(DecodeError) as info:
        decode(b"MemberHeartbeat/1/1700000000/ab12cd34/worker-1/team.job/events/1/-1")
    assert info.value.kind is DecodeErrorKind.UNKNOWN_VERSION


def test_member_heartbeat_version_3_announces_the_heartbeat_interval() -> None:
    from marshal_py.protocol import MemberHeartbeat

    message = MemberHeartbeat(1700000000, "ab12cd34", "worker/1", "team.job", "events", 1, 4,
                              10_000)
    wire = encode(message)
    assert wire == b"MemberHeartbeat/3/1700000000/ab12cd34/worker%2F1/team.job/events/1/4/10000"
    assert decode(wire) == message
    for bad in (b"MemberHeartbeat/3/1700000000/ab12cd34/w/g/events/1/4",  # field count
                b"MemberHeartbeat/2/1700000000/ab12cd34/w/g/events/1/4/10000",
                b"MemberHeartbeat/3/1700000000/ab12cd34/w/g/events/1/4/-1",
                b"MemberHeartbeat/3/1700000000/ab12cd34/w/g/events/1/4/3600001"):
        with pytest.raises(DecodeError) as info:
            decode(bad)
        assert info.value.kind is DecodeErrorKind.MALFORMED, bad


def test_share_message_vectors_and_validation() -> None:
    from marshal_py.protocol import (
        AcknowledgingRecords,
        AcquiringRecords,
        InitializingSharePartition,
        RenewingLocks,
    )

    base = (0, "ab12cd34", "w1", "jobs.g", "jobs", 0)
    vectors = [
        (InitializingSharePartition(*base, 100, 5, 2000),
         b"InitializingSharePartition/2/0/ab12cd34/w1/jobs.g/jobs/0/100/5/2000"),
        (AcquiringRecords(*base, "100-109,111", 30000),
         b"AcquiringRecords/2/0/ab12cd34/w1/jobs.g/jobs/0/100-109,111/30000"),
        (AcknowledgingRecords(*base, "100-104", "accept"),
         b"AcknowledgingRecords/2/0/ab12cd34/w1/jobs.g/jobs/0/100-104/accept"),
        (RenewingLocks(*base, "105-109", 30000),
         b"RenewingLocks/2/0/ab12cd34/w1/jobs.g/jobs/0/105-109/30000"),
    ]
    for message, wire in vectors:
        assert encode(message) == wire
        assert decode(wire) == message
    prefix = b"AcquiringRecords/2/0/ab12cd34/w1/jobs.g/jobs/0/"
    for bad in (b"109-100/30000", b"1-5,3/30000", b"/30000", b"01/30000", b"1/999",
                b"1/3600001"):
        with pytest.raises(DecodeError) as info:
            decode(prefix + bad)
        assert info.value.kind is DecodeErrorKind.MALFORMED
    with pytest.raises(ValueError):
        encode(AcknowledgingRecords(*base, "1-2", "maybe"))
    with pytest.raises(DecodeError):
        decode(b"InitializingSharePartition/2/0/a/b/c/d/0/0/11/10")  # limit outside 2..10


def test_key_shared_reset_and_checkpoint_vectors_and_validation() -> None:
    from marshal_py.protocol import (
        Checkpoint,
        ClaimingKeyRanges,
        KeyRangesHeartbeat,
        ReleasingKeyRanges,
        ResettingOffsets,
    )

    base = (0, "ab12cd34", "w1", "orders.g", "orders", 0)
    vectors = [
        (ClaimingKeyRanges(*base, "0-341,853-1023"),
         b"ClaimingKeyRanges/2/0/ab12cd34/w1/orders.g/orders/0/0-341,853-1023"),
        (KeyRangesHeartbeat(*base, 1200),
         b"KeyRangesHeartbeat/2/0/ab12cd34/w1/orders.g/orders/0/1200"),
        (ReleasingKeyRanges(*base, "342-511", 1187),
         b"ReleasingKeyRanges/2/0/ab12cd34/w1/orders.g/orders/0/342-511/1187"),
        (ResettingOffsets(0, "00000000", "marshal-admin", "orders.g", "orders", 0, 500),
         b"ResettingOffsets/2/0/00000000/marshal-admin/orders.g/orders/0/500"),
        (Checkpoint(0, "ab12cd34", "w1", "orders.g", "orders", 4711, '{"v":1}'),
         b'Checkpoint/2/0/ab12cd34/w1/orders.g/orders/4711/{"v":1}'),
    ]
    for message, wire in vectors:
        assert encode(message) == wire
        assert decode(wire) == message
    prefix = b"ClaimingKeyRanges/2/0/ab12cd34/w1/orders.g/orders/0/"
    for bad in (b"0-1024", b"5-3", b"", b"1,1"):
        with pytest.raises(DecodeError) as info:
            decode(prefix + bad)
        assert info.value.kind is DecodeErrorKind.MALFORMED
    for bad_wire in (b"KeyRangesHeartbeat/2/0/a/b/c/d/0/-1",
                     b"ResettingOffsets/2/0/a/b/c/d/0/-5",
                     b"Checkpoint/2/0/a/b/c/d/-1/{}",
                     b"ClaimingKeyRanges/1/0/a/b/c/d/0/0-5"):
        with pytest.raises(DecodeError):
            decode(bad_wire)


def test_key_slot_vectors() -> None:
    from marshal_py.protocol import key_hash, key_slot

    assert key_slot(None) == key_slot(b"") == 180  # no key: the empty key's slot
    assert key_hash(b"order-42") == 0x79CCA5910B9ACE3C and key_slot(b"order-42") == 487
    assert key_hash(b"customer-7") == 0xFBEA082C2997EE28 and key_slot(b"customer-7") == 1007
