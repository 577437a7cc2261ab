"""The signed fast path checks MACs exactly as :func:`marshal_py.protocol.auth.verify` does."""

from __future__ import annotations

import pytest

from marshal_py.protocol import GroupKey, Heartbeat, encode, sign
from marshal_py.protocol.auth import split_signed, verify
from marshal_py.world.macs import Macs, mac_keys, mac_matches


def _authentic(macs: Macs, raw_id: bytes, raw_seq: bytes, raw_mac: bytes, body: bytes) -> bool:
    """The fast path's check: a key of the id whose MAC the record carries."""
    keyed = macs.get(raw_id)
    return keyed is not None and mac_matches(keyed, raw_seq, body, raw_mac)


@pytest.mark.parametrize("secret_bytes", [16, 63, 64, 65, 200])
def test_the_fast_mac_check_agrees_with_verify_for_any_secret_length(secret_bytes: int) -> None:
    key = GroupKey("k1", bytes(range(256))[:secret_bytes])
    other = GroupKey("k1", b"another-secret-0123456789")
    body = encode(Heartbeat(1_700_000_000, "i1", "c1", "g", "t", 3, 42))
    macs = mac_keys(((key.key_id, key.secret),))
    for signer, seq in ((key, 7), (other, 7), (key, 123456789)):
        record = sign(body, signer, seq)
        signature = split_signed(record)
        raw_id, raw_seq, raw_mac, raw_body = record.split(b"/", 5)[2:]
        assert _authentic(macs, raw_id, raw_seq, raw_mac, raw_body) == \
            verify(signature, (key,)) == (signer is key)
        tampered = raw_body[:-1] + b"3"
        assert not _authentic(macs, raw_id, raw_seq, raw_mac, tampered)
        assert not _authentic(macs, b"k2", raw_seq, raw_mac, raw_body)
