"""Authenticated groups: signing, verification, the rationalizer's rejections, key rotation,
forged checkpoints, and the key file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from marshal_py.auth_keys import load_group_keys
from marshal_py.errors import ConfigurationError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.log.checkpoints import start_from_checkpoints
from marshal_py.protocol import (
    Checkpoint,
    ClaimingPartition,
    DecodeError,
    GroupKey,
    Heartbeat,
    Message,
    ReleasingPartition,
    decode,
    decode_signed,
    encode,
    sign,
    verify,
)
from marshal_py.protocol.auth import split_signed
from marshal_py.world import Owner, Rationalizer, RationalizerConfig, Verdict

HI = 1_000
T0 = 1_700_000_000_000
K1 = GroupKey("2026-11", b"0123456789abcdef0123456789abcdef")
K2 = GroupKey("2026-12", b"fedcba9876543210fedcba9876543210")
FORGER = GroupKey("2026-11", b"not-the-groups-secret-at-all-000")
OWNER = Owner("aaaa0001", "worker-1")
THIEF = Owner("ffff0001", "thief")


def test_the_signature_vector_is_hmac_sha256_over_the_key_id_and_the_message() -> None:
    # Independently: printf 'marshal-signed-v2\n2026-11\n<message>' |
    #   openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef -binary | base64url
    body = encode(Heartbeat(1700000000, "a1b2c3d4", "worker-1", "orders.team", "orders", 3, 42))
    assert body == b"Heartbeat/1/1700000000/a1b2c3d4/worker-1/orders.team/orders/3/42"
    assert sign(body, K1) == (b"Signed/2/2026-11/S0BacUQs52t6YdrikBAbqgxgkAmGKch9T6t2hyNlvZU/"
                              + body)
    message, signature = decode_signed(sign(body, K1))
    assert message == decode(body) and signature is not None
    assert verify(signature, [K1]) and verify(signature, [K2, K1])
    assert not verify(signature, [K2]) and not verify(signature, [FORGER])


def test_a_mac_made_with_one_key_does_not_pass_under_another_key_id() -> None:
    body = encode(ClaimingPartition(1, "i", "c", "g", "t", 0))
    relabelled = sign(body, K2).replace(b"/2026-12/", b"/2026-11/")
    assert not verify(split_signed(relabelled), [K1, K2])


@pytest.mark.parametrize("raw", [
    b"Signed/2/k1/short/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/2/k1",
    b"Signed/2//" + b"A" * 43 + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/2/k1/" + b"A" * 43 + b"/Signed/2/k1/" + b"A" * 43 + b"/Heartbeat/1/1/i/c/g/t/0/1",
    b"Signed/2/k1/" + b"A" * 43 + b"/not a message",
    b"Signed/2/\xff\xfe/" + b"A" * 43 + b"/Heartbeat/1/1/i/c/g/t/0/1",
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

    def write(self, message: Message, key: GroupKey | None, advance: int = 10) -> Verdict:
        self.clock.advance(advance)
        body = encode(message)
        return self.r.apply(self.log.append(0, body if key is None else sign(body, key))).verdict


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
    claim = ClaimingPartition(now_s(w), *ids(OWNER), "g", "t", 0)
    assert w.write(claim, K1) is Verdict.CLAIM_WON
    release = ReleasingPartition(now_s(w), *ids(OWNER), "g", "t", 0, 5)
    assert w.write(release, K1) is Verdict.RELEASED
    assert w.write(claim, K1) is Verdict.CLAIM_WON  # within the skew: accepted (documented)
    # The same signed release copied back much later: refused as a replay.
    assert w.write(release, K1, advance=w.r.config.auth_max_skew_ms + 5_000) \
        is Verdict.REJECTED
    assert w.r.claim("g", "t", 0).owner == OWNER


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
