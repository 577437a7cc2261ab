"""What a campaign run left behind (:class:`RunData`) and the checker's verdict on it
(:class:`RunResult`): plain data, read by :mod:`chaos.rundir`, judged by :mod:`chaos.checker`."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from marshal_py.world import CoordinationRecord

TP = tuple[int, int]
#: Examples kept per violation kind.
EXAMPLES = 10


# -- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunMeta:
    """What the checker needs to know about a run."""

    mode: str
    group: str
    topic: str
    partitions: int
    coordination_partitions: int
    heartbeat_interval_ms: int
    delivery_limit: int = 5
    #: Signed runs: the group's key (``key_id``, hex ``secret``).
    auth_key: dict[str, str] | None = None

    @staticmethod
    def from_dict(data: dict[str, Any]) -> RunMeta:
        """From ``meta.json``."""
        return RunMeta(data["mode"], data["group"], data["topic"], int(data["partitions"]),
                       int(data["coordination_partitions"]),
                       int(data["heartbeat_interval_ms"]), int(data.get("delivery_limit", 5)),
                       data.get("auth_key"))


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A record of the data topic after the run."""

    partition: int
    offset: int
    key: str | None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A hand-out journalled by a consumer incarnation (``index``: its place in the journal)."""

    inc: str
    instance: str
    index: int
    partition: int
    offset: int
    key: str | None
    count: int
    t0: float  # seconds
    t1: float


@dataclass(frozen=True, slots=True)
class Done:
    """A record processed, journalled before it was committed or acknowledged."""

    inc: str
    instance: str
    index: int
    partition: int
    offset: int
    t: float


@dataclass
class Incarnation:
    """One consumer process: its journal."""

    name: str
    client_id: str = ""
    instance_id: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    dones: list[Done] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    closed: bool = False

    @staticmethod
    def from_events(name: str, events: Iterable[dict[str, Any]]) -> Incarnation:
        """Build an incarnation from its journal's events."""
        inc = Incarnation(name)
        for index, event in enumerate(events):
            kind = event.get("e")
            if kind == "start":
                inc.client_id = str(event.get("client", ""))
                inc.instance_id = str(event.get("instance", ""))
            elif kind == "d":
                inc.deliveries.append(Delivery(
                    name, inc.instance_id, index, int(event["p"]), int(event["o"]),
                    event.get("k"), int(event.get("c", 1)), float(event["t0"]),
                    float(event["t1"])))
            elif kind == "x":
                inc.dones.append(Done(name, inc.instance_id, index, int(event["p"]),
                                      int(event["o"]), float(event["t"])))
            elif kind == "error":
                inc.errors.append(str(event.get("msg", "")))
            elif kind == "closed":
                inc.closed = True
        return inc


@dataclass
class RunData:
    """Everything one run left behind."""

    meta: RunMeta
    topic_records: list[TopicRecord]
    produced: list[TP]
    incarnations: list[Incarnation]
    faults: list[dict[str, Any]]
    coordination: list[CoordinationRecord]
    #: When the broker acknowledged each produced record (seconds), if known.
    produced_at: list[float] = field(default_factory=list)
    #: ``eos`` runs: the input record (partition, offset) of every record of the output
    #: topic, read read_committed after the run.
    outputs: list[TP] = field(default_factory=list)


# -- output -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    """A broken guarantee: its kind (see :mod:`chaos.checker`) and what happened."""

    kind: str
    detail: str


@dataclass
class RunResult:
    """The checker's verdict on one run."""

    mode: str
    records: int = 0
    handed_out: int = 0
    processed: int = 0
    lost: int = 0
    duplicated: int = 0
    redeliveries: int = 0
    archived: int = 0
    unconsumed: int = 0
    late_completions: int = 0
    consumer_errors: int = 0
    incarnations: int = 0
    #: Records the producer was told were written (committed, with transactional input) that
    #: the topic no longer holds when the run is checked: the broker lost them (a single
    #: node killed -9 may come back without its last acknowledged writes).
    broker_lost: int = 0
    #: Per broker restart: seconds from the broker answering again to the next hand-out,
    #: and to the next record the producer got acknowledged.
    resumed_after_broker_s: list[float] = field(default_factory=list)
    producer_resumed_after_broker_s: list[float] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no guarantee of the mode was violated."""
        return not self.violations

    def violation_counts(self) -> Counter[str]:
        """Violations per kind."""
        return Counter(v.kind for v in self.violations)

    def to_dict(self, examples: int = EXAMPLES) -> dict[str, Any]:
        """A JSON-ready summary with up to ``examples`` details per violation kind."""
        shown: dict[str, list[str]] = defaultdict(list)
        for v in self.violations:
            if len(shown[v.kind]) < examples:
                shown[v.kind].append(v.detail)
        return {
            "mode": self.mode, "records": self.records, "handed_out": self.handed_out,
            "processed": self.processed, "lost": self.lost, "duplicated": self.duplicated,
            "redeliveries": self.redeliveries, "archived": self.archived,
            "unconsumed": self.unconsumed, "late_completions": self.late_completions,
            "consumer_errors": self.consumer_errors, "incarnations": self.incarnations,
            "broker_lost": self.broker_lost, "faults": dict(self.faults),
            "resumed_after_broker_s": [round(x, 2) for x in self.resumed_after_broker_s],
            "producer_resumed_after_broker_s": [
                round(x, 2) for x in self.producer_resumed_after_broker_s],
            "violations": len(self.violations),
            "violation_kinds": dict(self.violation_counts()), "examples": dict(shown),
            "warnings": self.warnings,
        }


# -- the truth --------------------------------------------------------------------------------


class Truth:
    """The topic's records, with successor lookups per partition and per key."""

    def __init__(self, records: Sequence[TopicRecord]) -> None:
        self.key: dict[TP, str | None] = {(r.partition, r.offset): r.key for r in records}
        self.by_partition: dict[int, list[int]] = defaultdict(list)
        self.by_key: dict[tuple[int, str | None], list[int]] = defaultdict(list)
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            self.by_partition[r.partition].append(r.offset)
            self.by_key[(r.partition, r.key)].append(r.offset)

    def __contains__(self, tp: TP) -> bool:
        return tp in self.key

    def index(self, sequence: list[int], offset: int) -> int:
        """Position of ``offset`` in ``sequence`` (which holds it)."""
        return bisect.bisect_left(sequence, offset)
