"""Encoding and decoding of coordination records.

Framing: ``Type/version/field/field/...`` in UTF-8, ``/`` separated. Version 1 is the original
Marshal text form, fields written literally (so an id cannot contain ``/``). Version 2 and
later escape every field: ``%`` is written ``%25`` and ``/`` is written ``%2F``, so ids may hold
any character. The encoder writes base messages as version 1 whenever that is exact (no field
contains ``/``), which keeps us readable by the original Go implementation, and as version 2
otherwise. Extension message types are always version 2 or later.

Decoding never raises anything but :class:`DecodeError`, whose ``kind`` says why.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable
from typing import Any

from tests.golden.frozen.protocol.auth import Signature, is_signed, split_signed
from tests.golden.frozen.protocol.messages import (
    BASE_MESSAGE_TYPES,
    EXTENSION_MESSAGE_TYPES,
    Message,
    id_problem,
)

SEPARATOR = "/"
ESCAPED_VERSION = 2
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")
_ESCAPE = re.compile(r"%(..)?", re.DOTALL)
_ESCAPES = {"25": "%", "2F": "/", "2f": "/"}


class DecodeErrorKind(enum.Enum):
    """Why a record could not be decoded."""

    MALFORMED = "malformed"
    UNKNOWN_TYPE = "unknown_type"
    UNKNOWN_VERSION = "unknown_version"


class DecodeError(ValueError):
    """A coordination record that is not a message this implementation understands."""

    def __init__(self, kind: DecodeErrorKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail


_REGISTRY: dict[str, type[Message]] = {}
#: (name, is_int) for each wire field of each registered type and version, in order.
_FIELD_KINDS: dict[tuple[type[Message], int], tuple[tuple[str, bool], ...]] = {}


def register(message_type: type[Message]) -> type[Message]:
    """Make a message type known to the codec (extensions register themselves)."""
    if not message_type.TYPE or SEPARATOR in message_type.TYPE:
        raise ValueError(f"bad message type name {message_type.TYPE!r}")
    existing = _REGISTRY.get(message_type.TYPE)
    if existing is not None and existing is not message_type:
        raise ValueError(f"message type {message_type.TYPE!r} is registered twice")
    _REGISTRY[message_type.TYPE] = message_type
    fields = dataclasses.fields(message_type)
    added = message_type.FIELD_VERSIONS
    _DEFAULTS[message_type] = {f.name: f.default for f in fields if f.name in added}
    if any(d is dataclasses.MISSING for d in _DEFAULTS[message_type].values()) or any(
            name not in added for name in [f.name for f in fields][len(fields) - len(added):]):
        raise ValueError(f"{message_type.TYPE}: fields added by later versions come last and "
                         "have defaults")
    for version in message_type.VERSIONS:
        _FIELD_KINDS[(message_type, version)] = tuple(
            (f.name, f.type in ("int", int)) for f in fields if added.get(f.name, 0) <= version
        )
    return message_type


#: The default of each field added by a later version (written only when it differs).
_DEFAULTS: dict[type[Message], dict[str, Any]] = {}


for _known in (*BASE_MESSAGE_TYPES, *EXTENSION_MESSAGE_TYPES):
    register(_known)


def escape_field(value: str) -> str:
    """Escape one field for version >= 2 framing."""
    return value.replace("%", "%25").replace("/", "%2F")


def unescape_field(value: str) -> str:
    """Undo :func:`escape_field`; any ``%`` not starting ``%25`` or ``%2F`` is malformed."""
    if "%" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code is None or code not in _ESCAPES:
            raise DecodeError(DecodeErrorKind.MALFORMED, f"bad escape in field {value!r}")
        return _ESCAPES[code]

    return _ESCAPE.sub(replace, value)


def _field_kinds(message_type: type[Message], version: int) -> tuple[tuple[str, bool], ...]:
    """(name, is_int) for each wire field of a registered type's version, in order."""
    return _FIELD_KINDS[(message_type, version)]


def _format_field(value: object) -> str:
    return str(value)


def wire_version(message: Message) -> int:
    """The version :func:`encode` writes for this message: the lowest that carries every
    field whose value is not its default (and, for base messages, 1 unless a field needs
    escaping)."""
    message_type = type(message)
    lowest = min(message_type.VERSIONS)
    if lowest >= ESCAPED_VERSION:
        defaults = _DEFAULTS[message_type]
        return max([lowest] + [since for name, since in message_type.FIELD_VERSIONS.items()
                               if getattr(message, name) != defaults[name]])
    needs_escaping = any(
        isinstance(getattr(message, name), str) and SEPARATOR in getattr(message, name)
        for name, _ in _field_kinds(message_type, lowest)
    )
    return ESCAPED_VERSION if needs_escaping else 1


def encode(message: Message) -> bytes:
    """The record value for ``message``."""
    message_type = type(message)
    if _REGISTRY.get(message_type.TYPE) is not message_type:
        raise ValueError(f"{message_type.__name__} is not a registered message type")
    validate = getattr(message, "validate", None)
    if validate is not None:
        validate()  # ValueError: refuse to write what no reader would accept
    for kind, value in _ids(message):
        problem = id_problem(kind, value)
        if problem is not None:
            raise ValueError(f"{message_type.TYPE}: {problem}")
    version = wire_version(message)
    fields = [_format_field(getattr(message, name))
              for name, _ in _field_kinds(message_type, version)]
    if version >= ESCAPED_VERSION:
        fields = [escape_field(f) for f in fields]
    return SEPARATOR.join([message_type.TYPE, str(version), *fields]).encode("utf-8")


def _parse_int(text: str, name: str) -> int:
    if not _CANONICAL_INT.fullmatch(text):
        raise DecodeError(DecodeErrorKind.MALFORMED, f"{name} is not an integer: {text!r}")
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"{name} is out of range: {text}")
    return value


def decode(data: bytes) -> Message:
    """Parse a record value; raises :class:`DecodeError` and nothing else. A signed record
    gives the message it wraps, unverified (see :func:`decode_signed`)."""
    return decode_signed(data)[0]


def decode_signed(data: bytes) -> tuple[Message, Signature | None]:
    """Parse a record value, signed or not: the message and its signature (None when the
    record is not signed). Raises :class:`DecodeError` and nothing else; verifying the
    signature is the reader's business (:func:`tests.golden.frozen.protocol.auth.verify`)."""
    if isinstance(data, bytes) and is_signed(data):
        try:
            signature = split_signed(data)
        except ValueError as exc:
            raise DecodeError(DecodeErrorKind.MALFORMED, str(exc)) from exc
        return _decode_message(signature.body), signature
    return _decode_message(data), None


def _decode_message(data: bytes) -> Message:
    try:
        text = data.decode("utf-8")
    except (UnicodeDecodeError, AttributeError) as exc:
        raise DecodeError(DecodeErrorKind.MALFORMED, "record is not UTF-8 text") from exc
    parts = text.split(SEPARATOR)
    if len(parts) < 2:
        raise DecodeError(DecodeErrorKind.MALFORMED, "no type/version header")
    type_name, version_text = parts[0], parts[1]
    message_type = _REGISTRY.get(type_name)
    if message_type is None:
        raise DecodeError(DecodeErrorKind.UNKNOWN_TYPE, f"unknown message type {type_name[:40]!r}")
    if not _CANONICAL_INT.fullmatch(version_text):
        raise DecodeError(DecodeErrorKind.MALFORMED, f"version is not an integer: {version_text!r}")
    version = int(version_text)
    if version not in message_type.VERSIONS:
        raise DecodeError(
            DecodeErrorKind.UNKNOWN_VERSION, f"{type_name} version {version} is not supported"
        )
    kinds = _field_kinds(message_type, version)
    raw_fields = parts[2:]
    if len(raw_fields) != len(kinds):
        raise DecodeError(
            DecodeErrorKind.MALFORMED,
            f"{type_name} has {len(raw_fields)} fields, expected {len(kinds)}",
        )
    if version >= ESCAPED_VERSION:
        raw_fields = [unescape_field(f) for f in raw_fields]
    values: dict[str, Any] = {
        name: _parse_int(raw, name) if is_int else raw
        for (name, is_int), raw in zip(kinds, raw_fields, strict=True)
    }
    _check_ranges(type_name, values)
    message = message_type(**values)
    validate = getattr(message, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as exc:
            raise DecodeError(DecodeErrorKind.MALFORMED, f"{type_name}: {exc}") from exc
    return message


def _ids(message: Message) -> tuple[tuple[str, str], ...]:
    return (("group_id", message.group_id), ("client_id", message.client_id),
            ("instance_id", message.instance_id), ("topic", message.topic))


def _check_ranges(type_name: str, values: dict[str, Any]) -> None:
    for kind in ("group_id", "client_id", "instance_id", "topic"):
        value = values.get(kind)
        problem = None if not isinstance(value, str) else id_problem(kind, value)
        if problem is not None:
            raise DecodeError(DecodeErrorKind.MALFORMED, f"{type_name} {problem}")
    partition = values.get("partition")
    if isinstance(partition, int) and not 0 <= partition <= _INT32_MAX:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"{type_name} partition {partition} < 0")
    sent_at = values.get("sent_at")
    if isinstance(sent_at, int) and sent_at < 0:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"{type_name} timestamp {sent_at} < 0")


def registered_types() -> Iterable[type[Message]]:
    """Every message type the codec knows, base and extensions."""
    return tuple(_REGISTRY.values())
