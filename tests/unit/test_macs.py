"""The C build of the signed records' MAC check (marshal_py.world._macs) against its Python
build and against the signer (marshal_py.protocol.auth.sign): the same answer for every MAC,
genuine or not, under short keys, long keys (hashed first, RFC 2104) and several keys per id.

bin/setup builds the extension; a test here fails when it is missing, so the suite never
passes on the Python build alone without saying so."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from marshal_py.protocol.auth import SIGNED_DOMAIN, GroupKey, sign, split_signed
from marshal_py.world import macs

ROOT = Path(__file__).resolve().parents[2]
_compiled: Any = macs.compiled_module()


def test_the_extension_is_built() -> None:
    assert _compiled is not None, "bin/setup builds marshal_py.world._macs: run it again"
    assert macs.COMPILED


def _parts(record: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """Key id, sequence number, MAC and body of a version 3 signed record, as the fast path
    splits them."""
    _, _, raw_id, rest = record.split(b"/", 3)
    raw_seq, raw_mac, body = rest.split(b"/", 2)
    return raw_id, raw_seq, raw_mac, body


def _both(keys: list[GroupKey]) -> tuple[Any, Any]:
    pairs = tuple((k.key_id, k.secret) for k in keys)
    py = {}
    for key_id, secret in pairs:
        raw_id = key_id.encode()
        py.setdefault(raw_id, []).append(macs._py_keyed(secret, SIGNED_DOMAIN + raw_id + b"\n"))
    return macs.mac_keys(pairs), py


@pytest.mark.parametrize("secret_bytes", [16, 32, 64, 65, 200])
def test_both_builds_accept_what_the_signer_signs_and_nothing_else(secret_bytes: int) -> None:
    rng = random.Random(secret_bytes)
    keys = [GroupKey("k1", rng.randbytes(secret_bytes)), GroupKey("k1", rng.randbytes(32)),
            GroupKey("other", rng.randbytes(secret_bytes))]
    c_table, py_table = _both(keys)
    for n in range(200):
        key = rng.choice(keys)
        body = f"Heartbeat/1/1700000000/0{n:07x}/worker-{n}/group/events/{n % 7}/{n}".encode()
        if n % 5 == 0:
            body += rng.randbytes(rng.randrange(200))  # any bytes, any length
        record = sign(body, key, rng.randrange(1, 2**63))
        assert split_signed(record).body == body
        raw_id, raw_seq, raw_mac, signed_body = _parts(record)
        for table, check in ((c_table, _compiled.matches), (py_table, macs._py_matches)):
            keyed = table[raw_id]
            assert check(keyed, raw_seq, signed_body, raw_mac)
            assert not check(keyed, raw_seq, signed_body + b"x", raw_mac)
            assert not check(keyed, raw_seq + b"1", signed_body, raw_mac)
            flipped = bytes([raw_mac[0] ^ 1]) + raw_mac[1:]
            assert not check(keyed, raw_seq, signed_body, flipped)
            assert not check(keyed, raw_seq, signed_body, raw_mac[:-1])
            assert not check(keyed, raw_seq, signed_body, raw_mac + b"A")
            assert not check([], raw_seq, signed_body, raw_mac)
        # A key id's other secrets do not sign for it.
        other = b"other" if raw_id == b"k1" else b"k1"
        assert not _compiled.matches(c_table[other], raw_seq, signed_body, raw_mac)
        assert not macs._py_matches(py_table[other], raw_seq, signed_body, raw_mac)


def test_the_c_build_refuses_what_is_not_a_prepared_key() -> None:
    with pytest.raises(TypeError):
        _compiled.matches([b"short"], b"1", b"body", b"A" * 43)
    with pytest.raises(TypeError):
        _compiled.matches(None, b"1", b"body", b"A" * 43)
    with pytest.raises(TypeError):
        _compiled.matches([], "1", b"body", b"A" * 43)
    with pytest.raises(TypeError):
        _compiled.matches([], b"1", b"body")


def test_a_process_with_marshal_py_pure_uses_the_python_builds() -> None:
    """Of the MAC check and of the record loop's heartbeats (world/_feed.c)."""
    env = {**os.environ, "MARSHAL_PY_PURE": "1"}
    code = ("import marshal_py.world.macs as m, marshal_py.world.fast_beats as f;"
            "assert not m.COMPILED and m.mac_matches is m._py_matches;"
            "assert f.run_beats is None")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT)
