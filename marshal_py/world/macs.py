"""Keyed HMAC-SHA256 states of an authenticated group's keys, ready for the signed fast path.
Pure.

Apart from :mod:`marshal_py.world.signed_path` so that a (group, topic) pair
(:mod:`marshal_py.world.pairs`) can hold its group's tables without importing the path that
reads them.
"""

from __future__ import annotations

import hashlib

__all__ = ["Macs", "mac_keys"]

#: Key id bytes -> for each of its secrets, the HMAC's inner and outer SHA-256 states, the
#: inner one already fed the version 3 MAC input's fixed start.
Macs = dict[bytes, list[tuple["hashlib._Hash", "hashlib._Hash"]]]
_BLOCK = 64  # SHA-256's block size


def mac_keys(keys: tuple[tuple[str, bytes], ...]) -> Macs:
    """(key id, secret) pairs -> the keyed HMAC-SHA256 states (RFC 2104) of each key id.

    Copying two keyed hash states per record costs about half of what keying an HMAC (or
    copying a :class:`hmac.HMAC`) does; the MAC is the same."""
    table: Macs = {}
    for key_id, secret in keys:
        raw_id = key_id.encode("utf-8")
        if len(secret) > _BLOCK:
            secret = hashlib.sha256(secret).digest()
        padded = secret.ljust(_BLOCK, b"\0")
        inner = hashlib.sha256(bytes(b ^ 0x36 for b in padded))
        inner.update(b"marshal-signed-v3\n" + raw_id + b"\n")
        outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))
        table.setdefault(raw_id, []).append((inner, outer))
    return table
