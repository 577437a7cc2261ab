"""Telling a group's coordination records from its neighbours' without decoding them.

Every group placed on a coordination partition shares it with the groups whose topics hash
there. A member replays and follows only its own group: a record about another group cannot
change anything it reads (the rules act per (group, topic) pair), so it is read past without
being decoded, by one substring search on the raw bytes.

Every message names its group in a field that a ``/`` precedes and follows (the topic comes
next): ``Type/version/sent_at/instance/client/<group>/<topic>/...``, also inside a signed
record, which carries the message byte for byte. Version 1 writes the field literally,
version 2 and later escaped (``%`` as ``%25``, ``/`` as ``%2F``, which a reader also accepts
as ``%2f``; PROTOCOL.md 2.1), and ``/`` never occurs inside a multi-byte UTF-8 character. So
a record whose value decodes to a message of group ``g`` contains ``/g/`` (literal) or
``/escape(g)/``; for a group holding ``/`` it may spell an escape ``%2f``, so such records
are kept too. The test is one-sided: a record it keeps may still be of another group (the
rationalizer decides), a record it drops cannot be of the group.
"""

from __future__ import annotations

from collections.abc import Iterable

from marshal_py.protocol.codec import escape_field


class RecordFilter:
    """``filter(value)`` is True for every record value that may be about one of
    ``groups`` (tombstones never are)."""

    __slots__ = ("groups", "needles")

    def __init__(self, groups: Iterable[str]) -> None:
        self.groups = tuple(sorted(set(groups)))
        if not self.groups:
            raise ValueError("a record filter needs at least one group")
        needles: set[bytes] = set()
        for group in self.groups:
            needles.add(b"/" + group.encode("utf-8") + b"/")
            needles.add(b"/" + escape_field(group).encode("utf-8") + b"/")
            if "/" in group:
                needles.add(b"%2f")
        self.needles = tuple(sorted(needles))

    def __call__(self, value: bytes | None) -> bool:
        if value is None:
            return False
        return any(needle in value for needle in self.needles)

    def __repr__(self) -> str:
        return f"RecordFilter({list(self.groups)!r})"
