"""Keyed HMAC-SHA256 states of an authenticated group's keys, and the MAC check of the signed
fast path. Pure.

Apart from :mod:`marshal_py.world.signed_path` so that a (group, topic) pair
(:mod:`marshal_py.world.pairs`) can hold its group's tables without importing the path that
reads them.

Two builds of one check: ``marshal_py.world._macs`` (``_macs.c``, OpenSSL's SHA-256 on keyed
states kept as plain structs; built by ``pip install`` where a C compiler and the OpenSSL
headers are present) and the Python build below (two keyed :mod:`hashlib` states copied per
record). Both compute RFC 2104's HMAC; ``tests/unit/test_macs.py`` checks that they agree.
:data:`COMPILED` says which is in use; ``MARSHAL_PY_PURE=1`` makes a process use the Python
build although the C one is there.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from marshal_py.lazy import compiled_extension
from marshal_py.protocol.auth import MAC_CHARS, SIGNED_DOMAIN

__all__ = ["COMPILED", "Macs", "mac_keys", "mac_matches"]

_BLOCK = 64  # SHA-256's block size
#: base64 -> base64url.
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def compiled_module() -> ModuleType | None:
    """``marshal_py.world._macs``, or None when it was not built or ``MARSHAL_PY_PURE`` is
    set (to anything but "" or "0")."""
    return compiled_extension("marshal_py.world._macs")


_compiled = compiled_module()
#: True when the C build checks the MACs.
COMPILED = _compiled is not None

#: Key id bytes -> one keyed entry per secret of the id: what :func:`mac_matches` takes.
Macs = dict[bytes, list[Any]]


def _py_keyed(secret: bytes, prefix: bytes) -> tuple[Any, Any]:
    """The HMAC's inner state (fed the ipad block and ``prefix``) and outer state."""
    if len(secret) > _BLOCK:
        secret = hashlib.sha256(secret).digest()
    padded = secret.ljust(_BLOCK, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in padded))
    inner.update(prefix)
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))
    return inner, outer


def _py_matches(keyed: Sequence[Any], raw_seq: bytes, body: bytes, raw_mac: bytes) -> bool:
    """Is ``raw_mac`` the MAC of ``raw_seq + "\\n" + body`` under one of ``keyed``?"""
    signed = raw_seq + b"\n" + body
    for keyed_inner, keyed_outer in keyed:
        inner = keyed_inner.copy()
        inner.update(signed)
        outer = keyed_outer.copy()
        outer.update(inner.digest())
        text = binascii.b2a_base64(outer.digest(), newline=False)[:MAC_CHARS]
        if hmac.compare_digest(text.translate(_URLSAFE), raw_mac):
            return True
    return False


_keyed: Callable[[bytes, bytes], Any] = (_compiled.prepare if _compiled is not None
                                         else _py_keyed)
#: ``mac_matches(keyed, raw_seq, body, raw_mac)``: is ``raw_mac`` (unpadded base64url) the
#: HMAC-SHA256 of the version 3 MAC input ending in ``raw_seq + "\\n" + body`` under one of
#: ``keyed`` (a :data:`Macs` entry)?
mac_matches: Callable[[Sequence[Any], bytes, bytes, bytes], bool] = (
    _compiled.matches if _compiled is not None else _py_matches)


def mac_keys(keys: tuple[tuple[str, bytes], ...]) -> Macs:
    """(key id, secret) pairs -> the keyed HMAC-SHA256 states (RFC 2104) of each key id, the
    inner one already fed the version 3 MAC input's fixed start and the key id.

    Keying an HMAC costs two block compressions; done once per key here, a record's MAC
    costs the rest only."""
    table: Macs = {}
    for key_id, secret in keys:
        raw_id = key_id.encode("utf-8")
        table.setdefault(raw_id, []).append(_keyed(secret, SIGNED_DOMAIN + raw_id + b"\n"))
    return table
