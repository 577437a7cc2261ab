"""Signed coordination records: an HMAC over a record's content with a group secret. Pure.

A group may require that every record about it be signed with one of its keys. A signed
record wraps the encoded message (see PROTOCOL.md, authenticated groups)::

    Signed/2/<key id>/<mac>/<the encoded message, byte for byte>

``key id`` is escaped as any version 2 field; ``mac`` is the unpadded base64url HMAC-SHA256,
keyed with the key's secret, of ``marshal-signed-v2\\n<key id>\\n<message bytes>``. The key id
lets a reader pick the key (a group holds two while it rotates), and binding it into the MAC
stops a signature made with one key from being presented under another id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

#: The wrapper's type name and its only version.
SIGNED_TYPE = "Signed"
SIGNED_VERSION = 2
_PREFIX = f"{SIGNED_TYPE}/{SIGNED_VERSION}/".encode()
_DOMAIN = b"marshal-signed-v2\n"
#: Bounds that keep keys meaningful and ids printable.
MIN_SECRET_BYTES = 16
MAX_KEY_ID_CHARS = 64
MAC_CHARS = 43  # 32 bytes of HMAC-SHA256 in unpadded base64url


@dataclass(frozen=True)
class GroupKey:
    """One secret of an authenticated group, named by ``key_id`` (written in each record)."""

    key_id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not self.key_id or len(self.key_id) > MAX_KEY_ID_CHARS:
            raise ValueError(f"a key id has 1 to {MAX_KEY_ID_CHARS} characters, "
                             f"not {len(self.key_id)}")
        if not self.key_id.isprintable() or "/" in self.key_id or "%" in self.key_id:
            raise ValueError(f"key id {self.key_id!r} must be printable, without '/' or '%'")
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the secret of key {self.key_id!r} has {len(self.secret)} bytes; "
                             f"use at least {MIN_SECRET_BYTES} random bytes")

    def __repr__(self) -> str:  # never print the secret
        return f"GroupKey(key_id={self.key_id!r}, secret=<{len(self.secret)} bytes>)"


@dataclass(frozen=True, slots=True)
class Signature:
    """The signature part of a signed record, and the message bytes it covers."""

    key_id: str
    mac: str
    body: bytes


def _mac(key: GroupKey, body: bytes) -> str:
    digest = hmac.new(key.secret, _DOMAIN + key.key_id.encode("utf-8") + b"\n" + body,
                      hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def sign(body: bytes, key: GroupKey) -> bytes:
    """The signed record for an encoded message ``body``."""
    return _PREFIX + key.key_id.encode("utf-8") + b"/" + _mac(key, body).encode("ascii") + b"/" \
        + body


def is_signed(data: bytes) -> bool:
    """Does the record value start like a signed record?"""
    return data.startswith(_PREFIX)


def split_signed(data: bytes) -> Signature:
    """The parts of a signed record (:func:`is_signed` must hold). Raises ValueError when the
    wrapper is malformed; the body is not decoded here."""
    rest = data[len(_PREFIX):]
    parts = rest.split(b"/", 2)
    if len(parts) != 3:
        raise ValueError("a signed record needs a key id, a MAC and a message")
    raw_id, raw_mac, body = parts
    try:
        key_id = raw_id.decode("utf-8")
        mac = raw_mac.decode("ascii")
    except UnicodeDecodeError as exc:
        raise ValueError("the key id or MAC of a signed record is not text") from exc
    if not key_id or len(key_id) > MAX_KEY_ID_CHARS or "%" in key_id:
        raise ValueError(f"bad key id {key_id[:MAX_KEY_ID_CHARS]!r} in a signed record")
    if len(mac) != MAC_CHARS:
        raise ValueError(f"the MAC of a signed record has {len(mac)} characters, not {MAC_CHARS}")
    if is_signed(body):
        raise ValueError("a signed record wraps another signed record")
    return Signature(key_id, mac, body)


def verify(signature: Signature, keys: Sequence[GroupKey]) -> bool:
    """True when one of ``keys`` with the signature's key id made its MAC."""
    for key in keys:
        if key.key_id == signature.key_id and hmac.compare_digest(
                _mac(key, signature.body), signature.mac):
            return True
    return False
