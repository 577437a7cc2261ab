"""The Spark source's offsets and task splitting: pure functions, no Spark, no Kafka.

Spark writes every micro-batch's end offset to its checkpoint before running the batch, and
hands it back to us on restart. Ours (:class:`BatchOffset`) is self-describing:

``{"v": 1, "planner": "<instance id>", "batch": 7, "next": {"events": {"0": 120}},
"ranges": [["events", 0, 100, 120, 1]]}``

* ``ranges``: exactly what the batch reads: ``[topic, partition, start, end, delivery count]``
  (``end`` exclusive); in key-shared mode two more items, the key slots whose records the
  range delivers (range text, ``"0-511"``) and ``{slot: offset}`` for slots delivered only
  from that offset on. A re-run of the batch after a crash reads from this, never from a
  recomputation.
* ``next``: for every partition this query has read, the offset after the last record of it
  that a batch planned (exclusive modes). When ``latestOffset(start)`` is called, every batch
  up to ``start`` is complete, so ``start.next`` is a floor: a partition is never planned
  below it again.
* ``planner`` / ``batch``: which process planned the batch (its member instance id), and a
  counter. A batch planned by another process is a re-run after a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from marshal_py.client.batch_member import PlannedRange, ShareHolder
from marshal_py.errors import MarshalError
from marshal_py.protocol.ranges import format_ranges, parse_ranges, ranges_of

OFFSET_VERSION = 1
TP = tuple[str, int]


class OffsetFormatError(MarshalError):
    """A checkpointed offset is not one this version of the source wrote."""


@dataclass(frozen=True)
class BatchOffset:
    """One micro-batch's end offset (see the module docstring)."""

    planner: str = ""
    batch: int = 0
    next: Mapping[TP, int] = field(default_factory=dict)
    ranges: tuple[PlannedRange, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        """Identifies the batch: (planner, batch)."""
        return (self.planner, self.batch)

    def to_json(self) -> dict[str, Any]:
        """The dict Spark stores (primitive types only)."""
        nested: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.next.items()):
            nested.setdefault(topic, {})[str(partition)] = offset
        return {
            "v": OFFSET_VERSION,
            "planner": self.planner,
            "batch": self.batch,
            "next": nested,
            "ranges": [_range_json(r) for r in self.ranges],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchOffset:
        """Read an offset back; :class:`OffsetFormatError` names what is wrong."""
        try:
            version = data["v"]
            if version != OFFSET_VERSION:
                raise OffsetFormatError(
                    f"checkpointed offset has version {version!r}, this marshal_py reads "
                    f"version {OFFSET_VERSION}; start the query with a new checkpoint location"
                )
            nexts = {(str(topic), int(p)): int(o)
                     for topic, parts in dict(data["next"]).items()
                     for p, o in dict(parts).items()}
            ranges = tuple(_range_of(item) for item in data["ranges"])
            return cls(str(data["planner"]), int(data["batch"]), nexts, ranges)
        except OffsetFormatError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, MarshalError) as exc:
            raise OffsetFormatError(
                f"checkpointed offset {dict(data)!r} is not a marshal source offset ({exc}); "
                "was the checkpoint written by another source? Use a new checkpoint location"
            ) from None

    def following(self, planner: str, batch: int, ranges: Iterable[PlannedRange]
                  ) -> BatchOffset:
        """The offset of the next batch, reading ``ranges``."""
        planned = tuple(ranges)
        nexts = dict(self.next)
        for r in planned:
            key = (r.topic, r.partition)
            nexts[key] = max(nexts.get(key, 0), r.end)
        return BatchOffset(planner, batch, nexts, planned)


def _range_json(r: PlannedRange) -> list[Any]:
    item: list[Any] = [r.topic, r.partition, r.start, r.end, r.delivery_count]
    if r.slots is not None:
        item += [format_ranges(r.slots), {str(s): o for s, o in r.slot_starts}]
    return item


def _range_of(item: Any) -> PlannedRange:
    topic, partition, start, end, count, *keyed = item
    slots: tuple[tuple[int, int], ...] | None = None
    starts: tuple[tuple[int, int], ...] = ()
    if keyed:
        text, froms = keyed
        slots = parse_ranges(str(text))
        starts = tuple(sorted((int(s), int(o)) for s, o in dict(froms).items()))
    return PlannedRange(str(topic), int(partition), int(start), int(end), int(count), slots,
                        starts)


@dataclass(frozen=True, slots=True)
class ReadTask:
    """What one Spark task reads: one or more ranges (several partitions share a task when
    they are small: every task costs a Python worker round on an executor).

    ``holder`` (share mode): the member holding the records, in whose name the task writes
    ``gap`` for offsets of its ranges that hold no record (see :mod:`marshal_py.spark.gaps`).
    """

    ranges: tuple[PlannedRange, ...]
    holder: ShareHolder | None = None

    @property
    def size(self) -> int:
        """Offsets spanned by the task's ranges."""
        return sum(r.size for r in self.ranges)


def split_ranges(ranges: Iterable[PlannedRange], max_per_task: int,
                 min_tasks: int | None = None) -> list[ReadTask]:
    """Plan tasks of at most ``max_per_task`` offsets: ranges larger than that are cut evenly,
    smaller ones share tasks (first fit, largest first). With ``min_tasks``, the limit drops so
    that there are at least about that many. Deterministic; never an empty task.

    Key-shared ranges (with ``slots``) are cut by key slots, not by offsets: each piece reads
    the whole range and keeps the records of its share of the slots, so that the records of
    one key are all read by one task, in offset order; two pieces of one partition never
    share a task.
    """
    planned = [r for r in ranges if r.end > r.start]
    total = sum(r.size for r in planned)
    if total == 0:
        return []
    limit = max(1, max_per_task)
    if min_tasks is not None and min_tasks > 0:
        limit = min(limit, max(1, -(-total // min_tasks)))
    pieces = []
    for r in planned:
        count = -(-r.size // limit)
        if r.slots is not None:
            pieces += _slot_pieces(r, count)
            continue
        base, extra = divmod(r.size, count)
        start = r.start
        for i in range(count):
            end = start + base + (1 if i < extra else 0)
            pieces.append(PlannedRange(r.topic, r.partition, start, end, r.delivery_count))
            start = end
    pieces.sort(key=lambda r: (-r.size, r.topic, r.partition, r.start, r.slots or ()))
    bins: list[list[PlannedRange]] = []
    room: list[int] = []
    for piece in pieces:
        for i, left in enumerate(room):
            if piece.size <= left and not (piece.slots is not None and any(
                    (r.topic, r.partition) == (piece.topic, piece.partition) for r in bins[i])):
                bins[i].append(piece)
                room[i] -= piece.size
                break
        else:
            bins.append([piece])
            room.append(limit - piece.size)
    return [ReadTask(tuple(sorted(b, key=lambda r: (r.topic, r.partition, r.start))))
            for b in bins]


def _slot_pieces(r: PlannedRange, count: int) -> list[PlannedRange]:
    """``r`` cut into at most ``count`` ranges over the same offsets, each with about as many
    of its key slots."""
    assert r.slots is not None
    slots = [s for first, last in r.slots for s in range(first, last + 1)]
    count = max(1, min(count, len(slots)))
    base, extra = divmod(len(slots), count)
    pieces, at = [], 0
    for i in range(count):
        mine = slots[at:at + base + (1 if i < extra else 0)]
        at += len(mine)
        chosen = set(mine)
        pieces.append(PlannedRange(
            r.topic, r.partition, r.start, r.end, r.delivery_count, ranges_of(mine),
            tuple((s, o) for s, o in r.slot_starts if s in chosen)))
    return pieces
