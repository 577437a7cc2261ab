"""What a run's coordination log says, for the checker (pure: no I/O, no clock).

The log is replayed with one :class:`~marshal_py.world.Rationalizer` -- the same pure function
every member runs -- and observed:

* exclusive modes (``alo``, ``amo``, ``eos``): the ownership stints of every partition, from
  the audit (:func:`marshal_py.audit.observer.audit_records`), its invariant violations, and
  each partition's final position (where a next owner would start);
* ``key-shared``: the ownership stints of every key slot of every partition
  (:class:`SlotStints`, from the applied ``ClaimingKeyRanges`` and ``ReleasingKeyRanges``);
* ``share``: every acquisition, renewal and acknowledgement that applied, per record
  (:class:`ShareHistory`), and each share-partition's final state.

All times are broker timestamps in milliseconds (LogAppendTime: the machine's wall clock, as
the broker runs on the same machine as the journals' writers).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from marshal_py.audit.observer import OWNERSHIP, audit_records, topic_filter
from marshal_py.protocol import AcknowledgingRecords, GroupKey, KeySharedMessage, parse_ranges
from marshal_py.protocol.messages import ShareMessage
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig, Verdict
from marshal_py.world.rationalizer import Outcome

TP = tuple[int, int]  # (partition, offset) of a data record

#: End reasons of a stint. ``taken_over``: another member claimed it from a stale owner;
#: ``reclaimed``: a restarted process of the same client id took it back; ``open``: held at
#: the end of the log; ``expired`` / ``reset``: the group's offsets expired or were reset.
RELEASED, TAKEN_OVER, RECLAIMED, OPEN = "released", "taken_over", "reclaimed", "open"


@dataclass(frozen=True, slots=True)
class Stint:
    """One owner's uninterrupted ownership of a unit: a partition (exclusive modes; ``unit``
    is the partition) or a key slot of a partition (key-shared; ``unit`` is the slot)."""

    partition: int
    unit: int
    client_id: str
    instance_id: str
    start_ms: int
    end_ms: int | None
    end_reason: str


@dataclass
class Acquisition:
    """One applied acquisition of a share record: the delivery it allows."""

    ts: int
    instance_id: str
    client_id: str
    renewals: list[int] = field(default_factory=list)


@dataclass
class ShareRecordHistory:
    """Everything the log did to one share record."""

    acquisitions: list[Acquisition] = field(default_factory=list)
    accepts: list[tuple[int, str]] = field(default_factory=list)  # (ts, instance)
    releases: int = 0
    rejects: int = 0


@dataclass
class LogView:
    """The checker's view of one run's coordination log (one group, one topic)."""

    records: int = 0
    #: (partition, unit, instance) -> that instance's stints on the unit, by start.
    stints: dict[tuple[int, int, str], list[Stint]] = field(default_factory=dict)
    #: (partition, unit) -> every stint on the unit, by start.
    unit_stints: dict[TP, list[Stint]] = field(default_factory=dict)
    #: Invariant violations the audit found: (invariant, detail).
    violations: list[tuple[str, str]] = field(default_factory=list)
    #: Exclusive modes: where a next owner of each partition would start.
    final_position: dict[int, int] = field(default_factory=dict)
    #: Share mode: per record, and each share-partition's final SPSO and in-flight states.
    share: dict[TP, ShareRecordHistory] = field(default_factory=dict)
    spso: dict[int, int] = field(default_factory=dict)
    in_flight: dict[TP, str] = field(default_factory=dict)
    delivery_limit: dict[int, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)

    def add_stints(self, stints: Iterable[Stint]) -> None:
        """Index stints by owner and by unit, each list by start."""
        by_owner: dict[tuple[int, int, str], list[Stint]] = defaultdict(list)
        by_unit: dict[TP, list[Stint]] = defaultdict(list)
        for stint in sorted(stints, key=lambda s: (s.start_ms, s.end_ms or 2**62)):
            by_owner[(stint.partition, stint.unit, stint.instance_id)].append(stint)
            by_unit[(stint.partition, stint.unit)].append(stint)
        self.stints.update(by_owner)
        self.unit_stints.update(by_unit)


def in_log_order(records: Iterable[CoordinationRecord]) -> list[CoordinationRecord]:
    """Records of every coordination partition merged by broker time, each partition's own
    order kept (the rationalizer needs each partition in position order)."""
    per_partition: dict[int, list[CoordinationRecord]] = defaultdict(list)
    for record in records:
        per_partition[record.partition].append(record)
    lists = [sorted(rows, key=lambda r: r.position) for rows in per_partition.values()]
    return list(heapq.merge(*lists, key=lambda r: r.timestamp_ms))


class SlotStints:
    """Observer of key slot ownership: call it with every outcome (``rationalizer.observe``)."""

    def __init__(self, group: str, topic: str) -> None:
        self.group, self.topic = group, topic
        self._open: dict[TP, tuple[str, str, int]] = {}  # (partition, slot) -> owner, start
        self.stints: list[Stint] = []

    def _close(self, key: TP, end_ms: int | None, reason: str) -> None:
        client, instance, start = self._open.pop(key)
        self.stints.append(Stint(key[0], key[1], client, instance, start, end_ms, reason))

    def __call__(self, outcome: Outcome) -> None:
        message = outcome.message
        if message is None or message.group_id != self.group or message.topic != self.topic:
            return
        ts = outcome.record.timestamp_ms
        if outcome.expired or outcome.verdict is Verdict.OFFSETS_RESET:
            for key in list(self._open):
                self._close(key, ts, "expired" if outcome.expired else "reset")
        if not isinstance(message, KeySharedMessage) or outcome.verdict not in (
                Verdict.KEY_RANGES_CLAIMED, Verdict.KEY_RANGES_RELEASED):
            return
        partition = message.partition
        slots = parse_ranges(outcome.detail.removeprefix("slots ").split(" ", 1)[0])
        for first, last in slots:
            for slot in range(first, last + 1):
                key = (partition, slot)
                current = self._open.get(key)
                if outcome.verdict is Verdict.KEY_RANGES_RELEASED:
                    if current is not None and current[1] == message.instance_id:
                        self._close(key, ts, RELEASED)
                    continue
                if current is not None and current[1] == message.instance_id:
                    continue  # a renewal of its own claim
                if current is not None:
                    reason = RECLAIMED if current[0] == message.client_id else TAKEN_OVER
                    self._close(key, ts, reason)
                self._open[key] = (message.client_id, message.instance_id, ts)

    def finish(self) -> list[Stint]:
        """Every stint, the open ones closed as ``open``."""
        for key in list(self._open):
            self._close(key, None, OPEN)
        return self.stints


class ShareHistory:
    """Observer of share records: every applied acquisition, renewal and acknowledgement."""

    def __init__(self, group: str, topic: str) -> None:
        self.group, self.topic = group, topic
        self.records: dict[TP, ShareRecordHistory] = defaultdict(ShareRecordHistory)

    def __call__(self, outcome: Outcome) -> None:
        message = outcome.message
        if (not isinstance(message, ShareMessage) or message.group_id != self.group
                or message.topic != self.topic):
            return
        verdict = outcome.verdict
        if verdict not in (Verdict.RECORDS_ACQUIRED, Verdict.RECORDS_ACKNOWLEDGED,
                           Verdict.LOCKS_RENEWED):
            return
        ts = outcome.record.timestamp_ms
        for first, last in parse_ranges(outcome.detail.split(" ", 1)[0]):
            for offset in range(first, last + 1):
                history = self.records[(message.partition, offset)]
                if verdict is Verdict.RECORDS_ACQUIRED:
                    history.acquisitions.append(
                        Acquisition(ts, message.instance_id, message.client_id))
                elif verdict is Verdict.LOCKS_RENEWED:
                    if history.acquisitions:
                        history.acquisitions[-1].renewals.append(ts)
                elif isinstance(message, AcknowledgingRecords):
                    if message.kind == "accept":
                        history.accepts.append((ts, message.instance_id))
                    elif message.kind == "release":
                        history.releases += 1
                    else:
                        history.rejects += 1


def group_keys(group: str, auth_key: dict[str, str] | None
               ) -> dict[str, tuple[GroupKey, ...]]:
    """The rationalizer's ``group_keys`` for a run (signed runs: the run's key)."""
    if not auth_key:
        return {}
    return {group: (GroupKey(auth_key["key_id"], bytes.fromhex(auth_key["secret"])),)}


def build_view(records: Sequence[CoordinationRecord], *, mode: str, group: str, topic: str,
               partitions: int, coordination_partitions: int,
               heartbeat_interval_ms: int, auth_key: dict[str, str] | None = None) -> LogView:
    """Replay ``records`` (every record of the run's coordination topic) and observe them
    (verifying signatures with ``auth_key`` in a signed run)."""
    rationalizer = Rationalizer(RationalizerConfig(
        coordination_partitions=coordination_partitions,
        heartbeat_interval_ms=heartbeat_interval_ms, group_keys=group_keys(group, auth_key)))
    ordered = in_log_order(records)
    view = LogView(records=len(ordered))
    slots = SlotStints(group, topic)
    share = ShareHistory(group, topic)
    if mode == "key-shared":
        rationalizer.observe(slots)
    if mode == "share":
        rationalizer.observe(share)
    tables = audit_records(ordered, rationalizer, keep=topic_filter(group, topic))
    view.verdicts = {v.value: n for v, n in rationalizer.counters.items()}
    view.violations = [(str(row[0]), f"partition {row[3]}: {row[4]} (at {row[5]} ms)")
                       for row in tables.violations]
    columns = [name for name, _ in OWNERSHIP]
    if mode in ("alo", "amo", "eos"):
        stints = []
        for row in tables.ownership:
            values = dict(zip(columns, row, strict=True))
            if values["group"] != group or values["topic"] != topic:
                continue
            partition, start, end = (values["partition"], values["start_ms"],
                                     values["end_ms"])
            assert isinstance(partition, int) and isinstance(start, int)
            assert end is None or isinstance(end, int)
            stints.append(Stint(partition, partition, str(values["client_id"]),
                                str(values["instance_id"]), start, end,
                                str(values["end_reason"])))
        view.add_stints(stints)
        for partition in range(partitions):
            claim = rationalizer.claim(group, topic, partition)
            position = claim.committed_offset or 0
            if claim.amo_claimed_offset is not None:
                position = max(position, claim.amo_claimed_offset + 1)
            view.final_position[partition] = position
    elif mode == "key-shared":
        view.add_stints(slots.finish())
    elif mode == "share":
        view.share = dict(share.records)
        for partition in range(partitions):
            state = rationalizer.share_partition(group, topic, partition)
            if state is None:
                continue
            view.spso[partition] = state.spso
            view.delivery_limit[partition] = state.delivery_limit
            for rec in state.in_flight():
                view.in_flight[(partition, rec.offset)] = rec.state.value
    return view
