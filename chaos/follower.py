"""The runner's own reader of a run's coordination log: where the run stands, and the log's
dump for the checker."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from chaos.logview import group_keys
from chaos.rundir import coordination_row
from chaos.settings import RunError
from marshal_py.errors import MarshalError

log = logging.getLogger("chaos")


class Follower:
    """Replays the run's coordination partition (the data topic's home) with a rationalizer."""

    def __init__(self, bootstrap: str, coordination_topic: str, group: str, topic: str,
                 heartbeat_interval_ms: int, auth_key: dict[str, str] | None = None) -> None:
        from marshal_py.log import KafkaLog, KafkaLogConfig
        from marshal_py.protocol import coordination_partition
        from marshal_py.world import Rationalizer, RationalizerConfig

        self.log = KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap,
                                           topic=coordination_topic))  # creates it
        self.count = self.log.partition_count()
        self.home = coordination_partition(topic, self.count)
        self.group, self.topic = group, topic
        self.rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=self.count, heartbeat_interval_ms=heartbeat_interval_ms,
            group_keys=group_keys(group, auth_key)))

    def poll(self) -> None:
        """Apply what was appended since the last call (a broker hiccup is retried later)."""
        from marshal_py.replay import catch_up

        try:
            catch_up(self.log, self.rationalizer, [self.home], fetch_timeout_s=0.5)
        except MarshalError as exc:
            log.debug("following the coordination log: %s", exc)

    def committed(self, partition: int) -> int:
        """The committed offset of a partition (exclusive modes), 0 when none."""
        return self.rationalizer.claim(self.group, self.topic, partition).committed_offset or 0

    def spso(self, partition: int) -> int:
        """The share-partition's start offset, 0 when not initialized."""
        share = self.rationalizer.share_partition(self.group, self.topic, partition)
        return 0 if share is None else share.spso

    def dump(self) -> list[dict[str, Any]]:
        """Every record of every coordination partition, as ``coordination.jsonl`` rows."""
        rows: list[dict[str, Any]] = []
        for partition in range(self.count):
            position = self.log.start_position(partition)
            end = self.log.end_position(partition)
            empty = 0
            while position < end and empty < 20:
                batch = [r for r in self.log.fetch({partition: position}, 1.0)
                         if r.partition == partition and r.position >= position]
                empty = 0 if batch else empty + 1
                for record in sorted(batch, key=lambda r: r.position):
                    if record.position >= end:
                        break
                    rows.append(coordination_row(record))
                    position = record.position + 1
                if not batch:  # passed positions without records (transaction markers)
                    reached = self.log.read_position(partition)
                    if reached is not None and reached > position:
                        position, empty = reached, 0
            if position < end:
                raise RunError(f"could not read the coordination partition {partition} to its "
                               f"end ({position} of {end})")
        return rows

    def close(self) -> None:
        """Close the coordination log's clients."""
        with contextlib.suppress(Exception):
            self.log.close()
