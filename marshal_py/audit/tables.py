"""The audit's tables and the rows its observer emits: the columns and types of every table
both engines write (:data:`TABLES`), the names of end reasons and invariants, the four kinds
of observation rows (:class:`RecordRow`, :class:`StintRow`, :class:`ShareRangeRow`,
:class:`ShareStateRow`) and the sink they go to, the "wide" row the Spark engine carries them
in, the result (:class:`AuditTables`) and how rows print. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

# -- table schemas ----------------------------------------------------------------------------
#: Column types, as names both engines map to Arrow / Spark types: ``str``, ``int32``, ``int64``.
ColumnSpec = tuple[tuple[str, str], ...]

OWNERSHIP: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("client_id", "str"), ("instance_id", "str"),
    ("start_ms", "int64"), ("end_ms", "int64"), ("last_heartbeat_ms", "int64"),
    ("end_reason", "str"), ("first_committed", "int64"), ("last_committed", "int64"),
)
PARTITIONS: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("claims_won", "int64"), ("claims_lost", "int64"), ("takeovers", "int64"),
    ("reclaims", "int64"), ("releases", "int64"), ("heartbeats", "int64"),
    ("max_heartbeat_gap_ms", "int64"), ("gaps_over_hi", "int64"),
    ("amo_first_confirmed", "int64"), ("amo_last_confirmed", "int64"),
)
AMO_RANGES: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("client_id", "str"), ("instance_id", "str"),
    ("first_confirmed", "int64"), ("last_confirmed", "int64"), ("batches", "int64"),
)
SHARE_HISTORY: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"), ("offset", "int64"),
    ("acquisitions", "int64"), ("accepts", "int64"), ("releases", "int64"),
    ("rejects", "int64"), ("last_delivery_count", "int64"), ("final_state", "str"),
)
VIOLATIONS: ColumnSpec = (
    ("invariant", "str"), ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("detail", "str"), ("at_ms", "int64"),
)
SUMMARY: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partitions", "int64"), ("records", "int64"),
    ("owners", "int64"), ("takeovers", "int64"), ("violations", "int64"),
)
COORDINATION: ColumnSpec = (
    ("coordination_partition", "int32"), ("records", "int64"), ("malformed", "int64"),
    ("unknown_type", "int64"), ("unknown_version", "int64"), ("tombstones", "int64"),
    ("misplaced", "int64"), ("duplicates", "int64"), ("rejected", "int64"),
)

#: Every table the audit writes (to ``OUTPUT/<name>/``), in this order.
TABLES: dict[str, ColumnSpec] = {
    "ownership": OWNERSHIP,
    "partitions": PARTITIONS,
    "amo_ranges": AMO_RANGES,
    "share_history": SHARE_HISTORY,
    "violations": VIOLATIONS,
    "summary": SUMMARY,
    "coordination": COORDINATION,
}

#: End reasons of an ownership stint.
RELEASED, TAKEN_OVER, RECLAIMED, OPEN = "released", "taken_over", "reclaimed", "open"
#: A stint ended because its group's offsets expired (KIP-211: Empty past the retention).
EXPIRED = "expired"

#: Invariant names of the ``violations`` table.
OVERLAPPING_OWNERS = "overlapping_owners"
AMO_REGRESSED = "amo_regressed"
AMO_RECONFIRMED = "amo_reconfirmed"
SHARE_ACCEPTED_TWICE = "share_accepted_twice"

# -- observation rows -------------------------------------------------------------------------


class RecordRow(NamedTuple):
    """One per coordination record: its verdict and what it did to its partition."""

    coordination_partition: int
    position: int
    timestamp_ms: int
    group: str | None
    topic: str | None
    partition: int | None
    verdict: str
    client_id: str | None
    instance_id: str | None
    #: The message's offset: heartbeat / release offset, ClaimingMessages' proposed last.
    offset: int | None
    #: Liveness records of an owner (renewal, heartbeat): ms since its previous one.
    gap_ms: int | None
    hi_ms: int | None
    #: The partition's AMO-confirmed offset before and after (exclusive messages only).
    amo_before: int | None
    amo_after: int | None
    #: ClaimingMessages: the AMO-confirmed offset its owner's stint began with (C0).
    amo_floor: int | None
    #: How this record ended the previous stint (taken_over / reclaimed / released), if so.
    ended: str | None


class StintRow(NamedTuple):
    """One ownership stint, emitted when it ends (or at the end of the log, open)."""

    group: str
    topic: str
    partition: int
    client_id: str
    instance_id: str
    start_ms: int
    end_ms: int | None
    last_heartbeat_ms: int
    end_reason: str
    first_committed: int | None
    last_committed: int | None
    hi_ms: int
    amo_floor: int | None
    first_confirmed: int | None
    last_confirmed: int | None
    batches: int
    coordination_partition: int
    position: int


class ShareRangeRow(NamedTuple):
    """Offsets one share record applied to: granted (``grant``), ``accept``, ``release``,
    ``reject``. ``epoch`` counts the share-partition's resets before it."""

    group: str
    topic: str
    partition: int
    coordination_partition: int
    position: int
    timestamp_ms: int
    action: str
    first: int
    last: int
    epoch: int
    client_id: str
    instance_id: str


class ShareStateRow(NamedTuple):
    """A share-partition at the end of its records: SPSO, SPEO and one run of in-flight
    records in one state (``first``/``last``/``state`` null when nothing is in flight)."""

    group: str
    topic: str
    partition: int
    spso: int
    speo: int
    first: int | None
    last: int | None
    state: str | None


class ObservationSink(Protocol):
    """Where an :class:`AuditObserver` sends its rows."""

    def record(self, row: RecordRow) -> None: ...

    def stint(self, row: StintRow) -> None: ...

    def share_range(self, row: ShareRangeRow) -> None: ...

    def share_state(self, row: ShareStateRow) -> None: ...


#: Columns of the single "wide" row the Spark engine carries all four kinds in, with a
#: leading ``kind`` column (``record``, ``stint``, ``share_range``, ``share_state``).
ROW_KINDS: dict[str, type[tuple[object, ...]]] = {
    "record": RecordRow,
    "stint": StintRow,
    "share_range": ShareRangeRow,
    "share_state": ShareStateRow,
}
_WIDE_TYPES = {
    "coordination_partition": "int32", "partition": "int32", "group": "str", "topic": "str",
    "verdict": "str", "client_id": "str", "instance_id": "str", "ended": "str",
    "end_reason": "str", "action": "str", "state": "str",
}
WIDE_COLUMNS: ColumnSpec = (("kind", "str"), *(
    (name, _WIDE_TYPES.get(name, "int64"))
    for name in dict.fromkeys(
        f for row_type in ROW_KINDS.values() for f in row_type._fields  # type: ignore[attr-defined]
    )
))


@dataclass
class AuditTables:
    """The audit's result: rows of every table of :data:`TABLES`, as tuples in column order.

    ``share_history`` may be a generator (it is expanded from ranges as it is written).
    """

    ownership: Sequence[tuple[object, ...]]
    partitions: Sequence[tuple[object, ...]]
    amo_ranges: Sequence[tuple[object, ...]]
    share_history: Iterable[tuple[object, ...]]
    violations: Sequence[tuple[object, ...]]
    summary: Sequence[tuple[object, ...]]
    coordination: Sequence[tuple[object, ...]]

    def table(self, name: str) -> Iterable[tuple[object, ...]]:
        """Rows of the table called ``name``."""
        rows: Iterable[tuple[object, ...]] = getattr(self, name)
        return rows


# -- printing and comparing rows --------------------------------------------------------------


def sorted_rows(rows: Iterable[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Rows in a canonical order (every column, None first), to compare two engines."""
    return sorted(rows, key=lambda row: tuple((v is not None, v) for v in row))


def summary_lines(summary: Iterable[tuple[object, ...]]) -> list[str]:
    """The summary as an aligned text table."""
    return aligned([name for name, _ in SUMMARY], summary)


def aligned(columns: list[str], rows: Iterable[Iterable[object]]) -> list[str]:
    """Rows as left-aligned columns, '-' for None."""
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
              for r in cells]
    return lines


def as_dicts(spec: ColumnSpec, rows: Iterable[tuple[object, ...]]) -> list[dict[str, object]]:
    """Rows as JSON-ready mappings keyed by column name."""
    names = [name for name, _ in spec]
    return [dict(zip(names, row, strict=True)) for row in rows]


def wide_row(kind: str, row: tuple[object, ...]) -> dict[str, object]:
    """One observation row as a mapping over :data:`WIDE_COLUMNS` (absent columns omitted)."""
    fields: tuple[str, ...] = ROW_KINDS[kind]._fields  # type: ignore[attr-defined]
    out: dict[str, object] = {"kind": kind}
    out.update(zip(fields, row, strict=True))
    return out
