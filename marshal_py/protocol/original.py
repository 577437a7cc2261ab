"""What the original Marshal implementation (Go, 2015-2018) can read. Pure.

A member in compatibility mode (``compat="v1"``, PROTOCOL.md section 13.1) shares its group
with original members, which read every record of their coordination partition with the
original's own parser: slash-separated text, the four base message types only, each with its
exact number of fields and integer fields where it expects them. That parser stops a member's
catch-up at the first record it cannot read, so a compat member warns when its coordination
partitions hold one.
"""

from __future__ import annotations

#: The original's message types and how many slash-separated fields each has (type and
#: version included).
ORIGINAL_TYPES = {"Heartbeat": 9, "ClaimingPartition": 8, "ReleasingPartition": 9,
                  "ClaimingMessages": 9}
#: The heartbeat interval the original implementation uses (a constant of its code), seconds.
ORIGINAL_HEARTBEAT_INTERVAL_S = 60
#: Field positions the original parses as integers: version, timestamp, partition, and the
#: offset of the types that carry one.
_INT_FIELDS = (1, 2, 7)


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit()


def original_can_read(value: bytes | None) -> bool:
    """True when ``value`` is a message in the original's form: one of its four types,
    version 1 (fields literal, as it reads them), every field it parses as an integer one.
    (Its parser would also take a version 2 base record, but read escaped ids wrongly.)"""
    if value is None:
        return False
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    parts = text.split("/")
    length = ORIGINAL_TYPES.get(parts[0])
    if length is None or len(parts) != length:
        return False
    fields = _INT_FIELDS + ((8,) if length == 9 else ())
    return parts[1] == "1" and all(_is_int(parts[i]) for i in fields)
