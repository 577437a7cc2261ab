"""The share benchmark's observer: a replay of the run's coordination partition (what the
members acquired and acknowledged, and when), and the machine's CPU between two moments."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from marshal_py.log.kafka import KafkaLog, KafkaLogConfig
from marshal_py.protocol import coordination_partition
from marshal_py.world import Rationalizer, RationalizerConfig
from marshal_py.world.rationalizer import Outcome


class Observer:
    """Follows one share-partition in a run's coordination topic (reads only)."""

    def __init__(self, bootstrap: str, coordination_topic: str, group: str, topic: str,
                 target_spso: int, heartbeat_interval_s: float) -> None:
        self.log = KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap,
                                           topic=coordination_topic))  # creates it
        count = self.log.partition_count()
        self.partition = coordination_partition(topic, count)
        self.rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=count,
            heartbeat_interval_ms=int(heartbeat_interval_s * 1000)))
        self.group, self.topic, self.target = group, topic, target_spso
        self.by_type: Counter[str] = Counter()
        self.verdicts: Counter[str] = Counter()
        self.first_acquired_ms: int | None = None
        self.done_ms: int | None = None  # broker time of the record that moved SPSO to N
        self.done_position: int | None = None
        #: Every coordination record of the run's partition (position, broker time, type,
        #: sender, verdict, detail): the evidence kept when a run delivers a record twice.
        self.journal: list[tuple[int, int, str, str, str, str]] = []
        self.rationalizer.observe(self._see)

    def _see(self, outcome: Outcome) -> None:
        record = outcome.record
        if record.partition != self.partition or self.done_position is not None:
            return
        kind = type(outcome.message).__name__ if outcome.message is not None else "undecoded"
        sender = (f"{outcome.message.client_id}/{outcome.message.instance_id}"
                  if outcome.message is not None else "")
        self.journal.append((record.position, record.timestamp_ms, kind, sender,
                             outcome.verdict.value, outcome.detail))
        self.by_type[kind] += 1
        self.verdicts[outcome.verdict.value] += 1
        if self.first_acquired_ms is None and outcome.verdict.value == "records_acquired":
            self.first_acquired_ms = record.timestamp_ms
        share = self.rationalizer.share_partition(self.group, self.topic, 0)
        if share is not None and share.spso >= self.target:
            self.done_ms = record.timestamp_ms
            self.done_position = record.position

    def end_position(self) -> int:
        return self.log.end_position(self.partition)

    def poll(self) -> bool:
        from marshal_py.replay.reading import catch_up

        catch_up(self.log, self.rationalizer, [self.partition])
        return self.done_position is not None

    def spso(self) -> int | None:
        share = self.rationalizer.share_partition(self.group, self.topic, 0)
        return None if share is None else share.spso

    def close(self) -> None:
        self.log.close()


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine since boot (Linux), or None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_between(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
