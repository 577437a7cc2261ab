"""Authenticated groups: signing, verification, the rationalizer's rejections (forgeries and
replays), key rotation, forged checkpoints, version 2 records, and the key file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from marshal_py.config.group_keys import load_group_keys
from marshal_py.errors import ConfigurationError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.log.signing import MessageWriter
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    Checkpoint,
    ClaimingKeyRanges,
    ClaimingPartition,
    DecodeError,
    GroupKey,
    Heartbeat,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    decode,
    decode_signed,
    encode,
    sign,
    sign_v2,
    verify,
)
from marshal_py.protocol.auth import DECLARATION_SEQ, holder_key, split_signed
from marshal_py.replay.checkpoints import start_from_checkpoints
from marshal_py.world import Owner, Rationalizer, RationalizerConfig, Verdict
from marshal_py.world.checkpoint import decode_state

HI = 1_000
T0 = 1_700_000_000_000
K1 = GroupKey("2026-11", b"0123456789abcdef0123456789abcdef")
K2 = GroupKey("2026-12", b"fedcba9876543210fedcba9876543210")
FORGER = GroupKey("2026-11", b"not-the-groups-secret-at-all-000")
OWNER = Owner("aaaa0001", "worker-1")
THIEF = Owner("ffff0001", "thief")


def test_the_signature_vector_is_hmac_sha256_over_the_key_id_the_seq_and_the_message() -> None:
    # Independently: printf 'marshal-signed-v3\n2026-11\n7\n<message>' |
    #   openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef -binary | base64url
    body = encode(Heartbeat(1700000000, "a1b2c3d4", "worker-1", "orders.team", "orders", 3, 42))
    assert body == b"Heartbeat/1/1700000000/a1b2c3d4/worker-1/orders.team/orders/3/42"
    record = sign(body, K1, 7)
    assert record == b"Signed/3/2026-11/7/MUMt0EkorDlb3vaSHpYPFDngJYLDDkELysD0-7kewDU/" + body
    message, signature = decode_signed(record)
    assert message == decode(body) and signature is not None and signature.seq == 7
    assert signature.version == 3
    assert verify(signature, [K1]) and verify(signature, [K2, K1])
    assert not verify(signature, [K2]) and not verify(signature, [FORGER])


def test_the_version_2_vector_still_verifies_and_has_no_sequence_number() -> None:
    # printf 'marshal-signed-v2\n2026-11\n<message>' | openssl dgst -sha256 -hmac ... as above
    body = encode(Heartbeat(1700000000, "a1b2c3d4", "worker-1", "orders.team", "orders", 3, 42))
    record = sign_v2(body, K1)
    assert record == b"Signed/2/2026-11/S0BacUQs52t6YdrikBAbqgxgkAmGKch9T6t2hyNlvZU/" + body
    message, signature = decode_signed(record)
    assert message == decode(body) and signature is not None
    assert signature.seq is None and signature.version == 2 and verify(signature, [K1])
    assert decode(sign(body, K1, 7)) == decode(record)  # readers without keys read both


def test_a_mac_made_with_one_key_does_not_pass_under_another_key_id() -> None:
    body = encode(ClaimingPartition(1, "i", "c", "g", "t", 0))
    relabelled = sign(body, K2, 1).replace(b"/2026-12/", b"/2026-11/")
    assert not verify(split_signed(relabelled), [K1, K2])


def test_the_mac_binds_the_sequence_number() -> None:
    body = encode(ClaimingPartition(1, "i", "c", "g", "t", 0))
    renumbered = sign(body, K1, 5).replace(b"/5/", b"/6/", 1)
    assert split_signed(renumbered).seq == 6
    assert not verify(split_signed(renumbered), [K1])
    as_v2 = b"Signed/2/2026-11/" + sign(body, K1, 5).split(b"/", 5)[4] + b"/" + body
    assert not verify(split_signed(as_v2), [K1])  # nor can it be presented without one
    with pytest.raises(ValueError, match="outside"):
        sign(body, K1, -1)


MAC = b"A" * 43


@pytest.mark.parametrize("raw", [
    b"Signed/2/k1/short/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/2/k1",
    b"Signed/2//" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/2/k1/" + MAC + b"/Signed/2/k1/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/2/k1/" + MAC + b"/not a message",
    b"Signed/2/\xff\xfe/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/3/k1/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",  # no sequence number
    b"Signed/3/k1/07/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/3/k1/-1/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/3/k1/9223372036854775808/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/3/k1/1/" + MAC + b"/Signed/3/k1/2/" + MAC + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/3/k1/1/short/Heartbeat/1/1/i/c/g/t/0/1",
])
def test_malformed_signed_records_are_decode_errors(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_signed(raw)


def test_group_keys_refuse_short_secrets_and_bad_ids_and_hide_the_secret() -> None:
    with pytest.raises(ValueError, match="at least 16 random bytes"):
        GroupKey("k", b"short")
    with pytest.raises(ValueError, match="without '/'"):
        GroupKey("a/b", b"0" * 16)
    with pytest.raises(ValueError, match="1 to 64 characters"):
        GroupKey("k" * 65, b"0" * 16)
    assert "0123" not in repr(K1) and "32 bytes" in repr(K1)


# -- the rationalizer ------------------------------------------------------------------------


class World:
    """One coordination partition, a rationalizer of the authenticated group "g"."""

    def __init__(self, keys: tuple[GroupKey, ...] = (K1,)) -> None:
        self.clock = VirtualClock(T0)
        self.log = MemoryLog(partitions=1, clock=self.clock)
        self.r = Rationalizer(RationalizerConfig(1, HI, group_keys={"g": keys}))
        self.seq = 0
        #: The value of every record written, by position (what a thief can copy).
        self.values: list[bytes] = []

    def write(self, message: Message, key: GroupKey | None, advance: int = 10) -> Verdict:
        body = encode(message)
        if key is not None:
            self.seq += 1
            body = sign(body, key, self.seq)
        return self.append(body, advance)

    def append(self, value: bytes, advance: int = 10) -> Verdict:
        """Append a record value as it is (a copy of an earlier one, say)."""
        self.clock.advance(advance)
        self.values.append(value)
        return self.r.apply(self.log.append(0, value)).verdict

    def detail(self, value: bytes, advance: int = 10) -> str:
        """Append ``value``; the rationalizer's detail on it."""
        self.clock.advance(advance)
        self.values.append(value)
        return self.r.apply(self.log.append(0, value)).detail


def ids(owner: Owner) -> tuple[str, str]:
    return owner.instance_id, owner.client_id


def now_s(world: World) -> int:
    return world.clock() // 1000


def test_unsigned_and_forged_records_of_an_authenticated_group_have_no_effect() -> None:
    w = World()
    assert w.write(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0), K1) \
        is Verdict.CLAIM_WON
    assert w.write(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 7), K1) \
        is Verdict.HEARTBEAT
    before = w.r.snapshot("g", "t")
    # A client without the key: an unsigned release of the owner, a claim signed with a
    # wrong secret under the right key id, and after 2 HI a claim of the "stale" partition.
    assert w.write(ReleasingPartition(now_s(w), *ids(OWNER), "g", "t", 0, 0), None) \
        is Verdict.REJECTED
    assert w.write(ClaimingPartition(now_s(w), *ids(THIEF), "g", "t", 0), FORGER) \
        is Verdict.REJECTED
    assert w.write(Heartbeat(now_s(w), *ids(THIEF), "g", "t", 0, 999), FORGER,
                   advance=3 * HI) is Verdict.REJECTED
    assert w.r.snapshot("g", "t") == before
    assert w.r.claim("g", "t", 0).owner == OWNER
    assert w.r.claim("g", "t", 0).committed_offset == 7
    assert w.r.rejected_count("g") == 3 and w.r.rejected_count() == 3
    assert w.r.members("g", "t", w.clock()) == []  # the forger never became a member


def test_other_groups_are_not_authenticated_and_not_affected() -> None:
    w = World()
    assert w.write(ClaimingPartition(now_s(w), *ids(THIEF), "open", "t", 0), None) \
        is Verdict.CLAIM_WON
    assert w.r.rejected_count() == 0


def test_during_a_rotation_records_signed_with_either_key_are_accepted() -> None:
    w = World(keys=(K2, K1))
    assert w.write(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0), K1) \
        is Verdict.CLAIM_WON
    assert w.write(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 3), K2) \
        is Verdict.HEARTBEAT
    # Once the rotation is over, a rationalizer that no longer knows K1 refuses its records.
    after = Rationalizer(RationalizerConfig(1, HI, group_keys={"g": (K2,)}))
    outcomes = [after.apply(record).verdict for record in w.log.fetch({0: 0}, 0)]
    assert outcomes == [Verdict.REJECTED, Verdict.NOT_OWNER]  # its claim no longer counts


def test_a_replayed_signed_record_far_from_its_own_time_is_rejected() -> None:
    w = World()
    assert w.write(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0), K1) \
        is Verdict.CLAIM_WON
    release = ReleasingPartition(now_s(w), *ids(OWNER), "g", "t", 0, 5)
    assert w.write(release, K1) is Verdict.RELEASED
    # The same message signed anew much later (a captured body with a fresh number cannot
    # be made without the key; this stands for a copy of the record): refused by its time.
    assert w.write(release, K1, advance=w.r.config.auth_max_skew_ms + 5_000) \
        is Verdict.REJECTED


def owner_heartbeat_captured() -> tuple[World, bytes]:
    """A world where OWNER claimed and heartbeat 5 then 9; the signed heartbeat of 5."""
    w = World()
    assert w.write(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0), K1) \
        is Verdict.CLAIM_WON
    assert w.write(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 5), K1) is Verdict.HEARTBEAT
    captured = w.values[-1]
    assert w.write(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 9), K1) is Verdict.HEARTBEAT
    return w, captured


def test_a_replayed_heartbeat_moves_no_offset_back_and_refreshes_no_claim() -> None:
    w, captured = owner_heartbeat_captured()
    last_beat = w.clock()
    detail = w.detail(captured)  # within the skew bound: only the number tells it apart
    assert "sequence number 2 is not above 3" in detail and "replayed" in detail
    claim = w.r.claim("g", "t", 0)
    assert claim.committed_offset == 9 and claim.last_heartbeat_ms == last_beat
    # The owner crashed. Copies of its heartbeat keep its claim alive no longer than 2 HI:
    # a copy at 2 HI is refused, and a claim just after 2 HI takes the partition over.
    assert w.append(captured, advance=2 * HI - 10) is Verdict.REJECTED
    assert w.write(ClaimingPartition(now_s(w), *ids(THIEF), "g", "t", 0), K1, advance=11) \
        is Verdict.CLAIM_WON
    assert w.r.claim("g", "t", 0).committed_offset == 9
    assert w.r.rejected_count("g") == 2


def test_replays_of_every_kind_of_record_change_nothing() -> None:
    w = World()
    me = ids(OWNER)
    records = [
        MemberHeartbeat(now_s(w), *me, "g", "t", 1, -1),
        ClaimingPartition(now_s(w), *me, "g", "t", 0),
        Heartbeat(now_s(w), *me, "g", "t", 0, 3),
        ReleasingPartition(now_s(w), *me, "g", "t", 0, 4),
        InitializingSharePartition(now_s(w), *me, "g", "t", 1, 0, 5, 100),
        AcquiringRecords(now_s(w), *me, "g", "t", 1, "0-9", 30_000),
        AcknowledgingRecords(now_s(w), *me, "g", "t", 1, "0-4", "accept"),
        ClaimingKeyRanges(now_s(w), *me, "g", "t", 2, "0-511"),
        KeyRangesHeartbeat(now_s(w), *me, "g", "t", 2, 17),
        MemberHeartbeat(now_s(w), *me, "g", "t", 0, -1),
    ]
    for message in records:
        assert w.write(message, K1).applied
    assert w.write(Checkpoint(now_s(w), *me, "g", "t", w.r.next_position(0),
                              w.r.snapshot("g", "t")), K1) is Verdict.CHECKPOINT
    before = w.r.snapshot("g", "t")
    last_checkpoint = w.r.last_checkpoint_ms("g", "t")
    for value in list(w.values):
        assert w.append(value) is Verdict.REJECTED, value
    assert w.r.snapshot("g", "t") == before
    assert w.r.last_checkpoint_ms("g", "t") == last_checkpoint
    assert w.r.members("g", "t", w.clock()) == []  # the copied join did not bring it back
    assert w.r.rejected_count("g") == len(records) + 1


def test_the_gap_declaration_vector_is_signed_with_the_holder_key() -> None:
    """PROTOCOL.md 12.1's vector of a gap declaration (checked there with openssl)."""
    message = AcknowledgingRecords(1_700_000_000, "a1b2c3d4", "driver-1", "orders.team",
                                   "orders", 3, "41-42", "gap")
    holder = holder_key(K1, "a1b2c3d4", "driver-1")
    assert holder.key_id == K1.key_id and holder.secret.hex() == (
        "0895508363bf39c3334ff0ae11a4b9dc3c588d3b5dfcaedd2236438d2dacf25e")
    assert sign(encode(message), holder, DECLARATION_SEQ) == (
        b"Signed/3/2026-11/0/5kcgTMivBruOBNCr8amrhDPTV5TXklqy_8w5ohMKzfU/"
        b"AcknowledgingRecords/2/1700000000/a1b2c3d4/driver-1/orders.team/orders/3/41-42/gap")


def shared_world() -> World:
    """OWNER holds offsets 0-9 of share-partition t/1 of the authenticated group."""
    w = World()
    me = ids(OWNER)
    assert w.write(InitializingSharePartition(now_s(w), *me, "g", "t", 1, 0, 5, 100), K1).applied
    assert w.write(AcquiringRecords(now_s(w), *me, "g", "t", 1, "0-9", 30_000), K1).applied
    return w


def declaration(w: World, owner: Owner, ranges: str, key: GroupKey,
                kind: str = "gap") -> bytes:
    """A record numbered 0 acknowledging ``ranges`` in ``owner``'s name, signed with ``key``."""
    return sign(encode(AcknowledgingRecords(now_s(w), *ids(owner), "g", "t", 1, ranges, kind)),
                key, DECLARATION_SEQ)


def test_a_gap_declaration_signed_with_the_holder_key_archives_without_a_delivery() -> None:
    w = shared_world()
    assert w.append(declaration(w, OWNER, "3-4", holder_key(K1, *ids(OWNER)))).applied
    share = w.r.share_partition("g", "t", 1)
    assert share is not None
    gapped = [share.record(o) for o in (3, 4)]
    assert [(r.state.name, r.delivery_count) for r in gapped] == [("ARCHIVED", 0)] * 2
    # The replay guard was left alone: the holder's own next record (number 3) counts.
    assert w.write(AcknowledgingRecords(now_s(w), *ids(OWNER), "g", "t", 1, "0-2", "accept"),
                   K1).applied
    assert share.spso == 5
    # A copy of the declaration declares the same fact: those offsets are done, it is ignored.
    before = w.r.snapshot("g", "t")
    assert not w.append(w.values[2]).applied
    assert w.r.snapshot("g", "t") == before
    assert w.r.rejected_count("g") == 0


def test_records_numbered_0_other_than_a_holders_gap_declaration_are_rejected() -> None:
    w = shared_world()
    before = w.r.snapshot("g", "t")
    forged = [
        declaration(w, OWNER, "3-4", K1),  # the group key itself does not sign declarations
        declaration(w, OWNER, "3-4", holder_key(K1, *ids(THIEF))),  # another sender's key
        declaration(w, OWNER, "3-4", holder_key(FORGER, *ids(OWNER))),
        declaration(w, OWNER, "0-9", holder_key(K1, *ids(OWNER)), kind="accept"),
        sign(encode(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 1)),
             holder_key(K1, *ids(OWNER)), DECLARATION_SEQ),
    ]
    details = [w.detail(value) for value in forged]
    assert w.r.rejected_count("g") == len(forged)
    assert w.r.snapshot("g", "t") == before
    assert "bad signature of a gap declaration" in details[0]
    assert "bad signature of a gap declaration" in details[1] and details[2] == details[1]
    assert "not an acknowledgement of kind 'accept'" in details[3]
    assert "not a Heartbeat record" in details[4]


def test_a_replay_after_a_checkpoint_is_refused_by_a_reader_that_started_there() -> None:
    w, captured = owner_heartbeat_captured()
    assert w.write(Checkpoint(now_s(w), *ids(OWNER), "g", "t", w.r.next_position(0),
                              w.r.snapshot("g", "t")), K1) is Verdict.CHECKPOINT
    assert w.append(captured) is Verdict.REJECTED
    joiner = Rationalizer(RationalizerConfig(1, HI, group_keys={"g": (K1,)}))
    start = start_from_checkpoints(w.log, joiner, 0, "g", ["t"], 0)
    assert start == 3  # the checkpoint's position: its state holds the sequence numbers
    outcomes = [joiner.apply(r).verdict for r in w.log.fetch({0: start}, 0)]
    assert outcomes == [Verdict.CHECKPOINT, Verdict.REJECTED]
    assert joiner.claim("g", "t", 0).committed_offset == 9
    assert joiner.snapshot("g", "t") == w.r.snapshot("g", "t")


def test_the_replay_guard_forgets_senders_two_skew_bounds_after_their_last_record() -> None:
    w = World()
    skew = w.r.config.auth_max_skew_ms
    assert w.write(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0), K1).applied
    assert [o for o, _, _ in _guard(w)] == [OWNER]
    w.clock.advance(2 * skew - 10)  # the next record lands 2 skew bounds after the first
    assert w.write(ClaimingPartition(now_s(w), *ids(THIEF), "g", "t", 1), K1).applied
    assert {o for o, _, _ in _guard(w)} == {OWNER, THIEF}  # exactly 2 skew bounds: kept
    assert w.write(Heartbeat(now_s(w), *ids(THIEF), "g", "t", 1, 1), K1, advance=1).applied
    assert [o for o, _, _ in _guard(w)] == [THIEF]


def _guard(w: World) -> list[tuple[Owner, int, int]]:
    """The replay guard of ("g", "t") as the checkpoint holds it."""
    state = decode_state(w.r.snapshot("g", "t"))
    return [(o, seq, ts) for o, (seq, ts) in sorted(state.sequences.last.items())]


def test_version_2_records_count_until_the_first_version_3_record_of_the_pair() -> None:
    w = World()
    # A group of an older marshal_py: its history (offsets included) is read as before.
    assert w.append(sign_v2(encode(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0)),
                            K1)) is Verdict.CLAIM_WON
    assert w.append(sign_v2(encode(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 7)), K1)) \
        is Verdict.HEARTBEAT
    assert not w.r.sequenced("g", "t")
    # Upgraded: the first record with a sequence number ends version 2 for the pair.
    assert w.write(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 8), K1) is Verdict.HEARTBEAT
    assert w.r.sequenced("g", "t")
    old = sign_v2(encode(Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, 1)), K1)
    detail = w.detail(old)
    assert "without a sequence number (Signed/2" in detail and "same version" in detail
    assert w.r.claim("g", "t", 0).committed_offset == 8
    assert w.r.unsequenced_ms == {"g": w.clock()}
    # Another pair of the group has its own history.
    assert w.append(sign_v2(encode(ClaimingPartition(now_s(w), *ids(OWNER), "g", "u", 0)),
                            K1)) is Verdict.CLAIM_WON


def test_a_writer_numbers_records_in_the_order_it_appends_them() -> None:
    w = World()
    writer = MessageWriter(w.log, {"g": (K1,)})
    messages = [(0, Heartbeat(now_s(w), *ids(OWNER), "g", "t", 0, n)) for n in range(5)]
    written = writer.write(messages) + writer.write(messages[:1])
    numbers = [split_signed(r.value or b"").seq for r in written]
    assert numbers == sorted(numbers) and len(set(numbers)) == 6
    assert MessageWriter(w.log, {}).write(messages[:1])[0].value == encode(messages[0][1])
    other = MessageWriter(w.log, {"g": (K1,)}).write(messages[:1])[0]  # a second channel
    assert (split_signed(other.value or b"").seq or 0) > max(n or 0 for n in numbers)


def test_a_forged_checkpoint_is_never_a_starting_point() -> None:
    w = World()
    assert w.write(ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0), K1) \
        is Verdict.CLAIM_WON
    genuine = Checkpoint(now_s(w), *ids(OWNER), "g", "t", w.r.next_position(0),
                         w.r.snapshot("g", "t"))
    assert w.write(genuine, K1) is Verdict.CHECKPOINT
    thief_state = World()
    thief_state.write(ClaimingPartition(now_s(w), *ids(THIEF), "g", "t", 0), K1)
    forged = Checkpoint(now_s(w), *ids(THIEF), "g", "t", w.r.next_position(0) + 1,
                        thief_state.r.snapshot("g", "t"))
    assert w.write(forged, FORGER) is Verdict.REJECTED
    joiner = Rationalizer(RationalizerConfig(1, HI, group_keys={"g": (K1,)}))
    start = start_from_checkpoints(w.log, joiner, 0, "g", ["t"], 0)
    assert start == genuine.position  # the signed one, not the newer forged one
    joiner.apply_all(w.log.fetch({0: start}, 0))
    assert joiner.claim("g", "t", 0).owner == OWNER


# -- the key file ----------------------------------------------------------------------------


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "keys"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_the_key_file_lists_each_groups_keys_in_order(tmp_path: Path) -> None:
    path = key_file(tmp_path, "# group key secret\n\n"
                    "orders 2026-12 ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n"
                    "orders 2026-11 MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"
                    "billing b1 MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")
    keys = load_group_keys(path)
    assert keys == {"orders": (K2, K1), "billing": (GroupKey("b1", K1.secret),)}


@pytest.mark.parametrize(("text", "mode", "message"), [
    ("g k1 MDEy\n", 0o600, r"keys:1: the secret of key 'k1' has 3 bytes"),
    ("g k1 not*base64\n", 0o600, r"keys:1: the secret is not base64"),
    ("g k1\n", 0o600, r"keys:1: expected 'GROUP KEY_ID SECRET', found 2 fields"),
    ("g k1 " + "QUFBQUFBQUFBQUFBQUFBQQ==" + "\ng k1 " + "QUFBQUFBQUFBQUFBQUFBQQ==\n", 0o600,
     r"keys:2: group 'g' lists key id 'k1' twice"),
    ("# nothing\n", 0o600, r"lists no key"),
    ("g k1 QUFBQUFBQUFBQUFBQUFBQQ==\n", 0o644, r"readable by other users; run `chmod 600"),
])
def test_key_file_mistakes_name_the_file_and_line(tmp_path: Path, text: str, mode: int,
                                                  message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_group_keys(key_file(tmp_path, text, mode))


def test_a_missing_key_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read the key file"):
        load_group_keys(tmp_path / "absent")
