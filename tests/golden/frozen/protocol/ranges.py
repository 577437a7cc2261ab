"""Offset ranges as they travel in share-mode messages: ``100-109,112,120-121``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

OffsetRange = tuple[int, int]  # first and last offset, inclusive

_PART = re.compile(r"(0|[1-9][0-9]*)(?:-(0|[1-9][0-9]*))?")
MAX_OFFSET = 2**63 - 1


def parse_ranges(text: str) -> tuple[OffsetRange, ...]:
    """Parse canonical ranges: ascending, disjoint, non-empty, each ``first[-last]``."""
    if not text:
        raise ValueError("no offset ranges")
    ranges: list[OffsetRange] = []
    for part in text.split(","):
        match = _PART.fullmatch(part)
        if match is None:
            raise ValueError(f"bad offset range {part!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first or last > MAX_OFFSET:
            raise ValueError(f"bad offset range {part!r}")
        if ranges and first <= ranges[-1][1]:
            raise ValueError(f"offset ranges overlap or are out of order at {part!r}")
        ranges.append((first, last))
    return tuple(ranges)


def format_ranges(ranges: Iterable[OffsetRange]) -> str:
    """The canonical text of ``ranges`` (validated like :func:`parse_ranges`)."""
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
    parse_ranges(text)
    return text


def ranges_of(offsets: Iterable[int]) -> tuple[OffsetRange, ...]:
    """Collapse offsets into ascending disjoint ranges."""
    ranges: list[list[int]] = []
    for offset in sorted(set(offsets)):
        if ranges and offset == ranges[-1][1] + 1:
            ranges[-1][1] = offset
        else:
            ranges.append([offset, offset])
    return tuple((a, b) for a, b in ranges)


def offsets_in(ranges: Iterable[OffsetRange]) -> Iterator[int]:
    """Every offset of ``ranges``, ascending."""
    for first, last in ranges:
        yield from range(first, last + 1)
