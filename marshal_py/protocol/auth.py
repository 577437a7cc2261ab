"""Signed coordination records: an HMAC over a record's content with a group secret. Pure.

A group may require that every record about it be signed with one of its keys. A signed
record wraps the encoded message (see PROTOCOL.md, authenticated groups)::

    Signed/3/<key id>/<seq>/<mac>/<the encoded message, byte for byte>

``key id`` names the key; ``seq`` is the writer's sequence number (canonical decimal), which
grows with every record the writing process signs, so a reader can tell a record copied back
into the log from its original; ``mac`` is the unpadded base64url HMAC-SHA256, keyed with the
key's secret, of ``marshal-signed-v3\\n<key id>\\n<seq>\\n<message bytes>``. The key id lets a
reader pick the key (a group holds two while it rotates), and binding it and the sequence
number into the MAC stops a signature from being presented under another id or number.

Version 2 (``Signed/2/<key id>/<mac>/<message>``, MAC over
``marshal-signed-v2\\n<key id>\\n<message>``) is what marshal_py wrote before sequence numbers;
it is still read (:func:`split_signed`, :func:`verify`), and written only by :func:`sign_v2`.

A record numbered 0 (:data:`DECLARATION_SEQ`) is a **gap declaration**: an
``AcknowledgingRecords`` of kind ``gap`` signed with the sender's :func:`holder_key`, which
the replay guard leaves alone (PROTOCOL.md 12.2).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: The wrapper's type name, the version written, and the older version still read.
SIGNED_TYPE = "Signed"
SIGNED_VERSION = 3
UNSEQUENCED_VERSION = 2
_PREFIXES = {version: f"{SIGNED_TYPE}/{version}/".encode()
             for version in (UNSEQUENCED_VERSION, SIGNED_VERSION)}
_DOMAINS = {version: f"marshal-signed-v{version}\n".encode() for version in _PREFIXES}
#: What a version 3 (sequenced) MAC input starts with, before the key id.
SIGNED_DOMAIN = _DOMAINS[SIGNED_VERSION]
#: Bounds that keep keys meaningful and ids printable.
MIN_SECRET_BYTES = 16
MAX_KEY_ID_CHARS = 64
MAC_CHARS = 43  # 32 bytes of HMAC-SHA256 in unpadded base64url
#: Sequence numbers are canonical decimals in 0..2^63-1.
MAX_SEQUENCE = 2**63 - 1
#: The number of a gap declaration (PROTOCOL.md 12.1): writers number their own records from
#: 1, so 0 is free to mark a record outside the replay guard.
DECLARATION_SEQ = 0
_HOLDER_DOMAIN = b"marshal-holder-v1\n"
_CANONICAL_SEQUENCE = re.compile(rb"0|[1-9][0-9]{0,18}")


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
    """The signature part of a signed record, and the message bytes it covers.

    ``seq`` is the writer's sequence number; None in a version 2 record, which has none."""

    key_id: str
    mac: str
    body: bytes
    seq: int | None = None

    @property
    def version(self) -> int:
        """The wrapper version the signature was read from (2 or 3)."""
        return UNSEQUENCED_VERSION if self.seq is None else SIGNED_VERSION


def _mac(key: GroupKey, body: bytes, seq: int | None) -> str:
    version = UNSEQUENCED_VERSION if seq is None else SIGNED_VERSION
    signed = _DOMAINS[version] + key.key_id.encode("utf-8") + b"\n"
    if seq is not None:
        signed += str(seq).encode("ascii") + b"\n"
    digest = hmac.new(key.secret, signed + body, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def sign(body: bytes, key: GroupKey, seq: int) -> bytes:
    """The signed record (version 3) for an encoded message ``body``, carrying the writer's
    sequence number ``seq`` (0..2^63-1; see PROTOCOL.md for what writers must guarantee)."""
    if not 0 <= seq <= MAX_SEQUENCE:
        raise ValueError(f"sequence number {seq} outside 0..2^63-1")
    return (_PREFIXES[SIGNED_VERSION] + key.key_id.encode("utf-8") + b"/"
            + str(seq).encode("ascii") + b"/" + _mac(key, body, seq).encode("ascii") + b"/"
            + body)


def sign_v2(body: bytes, key: GroupKey) -> bytes:
    """The version 2 signed record, without a sequence number, as marshal_py wrote before
    version 3: readers reject it in a group whose members sign with sequence numbers."""
    return (_PREFIXES[UNSEQUENCED_VERSION] + key.key_id.encode("utf-8") + b"/"
            + _mac(key, body, None).encode("ascii") + b"/" + body)


def is_signed(data: bytes) -> bool:
    """Does the record value start like a signed record (version 2 or 3)?"""
    return any(data.startswith(prefix) for prefix in _PREFIXES.values())


def split_signed(data: bytes) -> Signature:
    """The parts of a signed record (:func:`is_signed` must hold). Raises ValueError when the
    wrapper is malformed; the body is not decoded here."""
    sequenced = data.startswith(_PREFIXES[SIGNED_VERSION])
    rest = data[len(_PREFIXES[SIGNED_VERSION if sequenced else UNSEQUENCED_VERSION]):]
    parts = rest.split(b"/", 3 if sequenced else 2)
    if len(parts) != (4 if sequenced else 3):
        raise ValueError("a signed record needs a key id, "
                         + ("a sequence number, " if sequenced else "") + "a MAC and a message")
    seq: int | None = None
    if sequenced:
        raw_id, raw_seq, raw_mac, body = parts
        if not _CANONICAL_SEQUENCE.fullmatch(raw_seq) or int(raw_seq) > MAX_SEQUENCE:
            raise ValueError(f"bad sequence number {raw_seq[:24]!r} in a signed record")
        seq = int(raw_seq)
    else:
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
    return Signature(key_id, mac, body, seq)


def holder_key(key: GroupKey, instance_id: str, client_id: str) -> GroupKey:
    """The key that signs gap declarations in the name of one sender (instance, client): its
    secret is HMAC-SHA256(``key``'s secret, ``marshal-holder-v1`` LF instance LF client), its
    id ``key``'s. Whoever holds it (a Spark task reading a driver's share records) can declare
    gaps among that sender's locked records and nothing else, without the group secret."""
    label = _HOLDER_DOMAIN + instance_id.encode("utf-8") + b"\n" + client_id.encode("utf-8")
    return GroupKey(key.key_id, hmac.new(key.secret, label, hashlib.sha256).digest())


def verify_declaration(signature: Signature, keys: Sequence[GroupKey], instance_id: str,
                       client_id: str) -> bool:
    """True when the holder key (:func:`holder_key`) of the sender (``instance_id``,
    ``client_id``) derived from one of ``keys`` with the signature's key id made its MAC."""
    return verify(signature, [holder_key(key, instance_id, client_id) for key in keys
                              if key.key_id == signature.key_id])


def verify(signature: Signature, keys: Sequence[GroupKey]) -> bool:
    """True when one of ``keys`` with the signature's key id made its MAC."""
    for key in keys:
        if key.key_id == signature.key_id and hmac.compare_digest(
                _mac(key, signature.body, signature.seq), signature.mac):
            return True
    return False
