"""CoordinationChannel: what every kind of member does with the coordination log.

Places each topic on its coordination partition, replays the window on start, catches up,
and appends messages while teaching the clock the broker's time. Shared by the exclusive
engine and the share engine; single-threaded like them.
"""

from __future__ import annotations

from collections.abc import Iterable

from marshal_py.client.engine_types import EngineClock
from marshal_py.log.base import CoordinationLog
from marshal_py.log.replay import catch_up, seek_to_window
from marshal_py.protocol import Message, coordination_partition, encode
from marshal_py.world import Rationalizer


class CoordinationChannel:
    """One member's reading and writing of the coordination partitions of its topics."""

    def __init__(self, log_: CoordinationLog, rationalizer: Rationalizer, clock: EngineClock,
                 topics: Iterable[str]) -> None:
        self.log = log_
        self.rationalizer = rationalizer
        self.clock = clock
        self.topics = tuple(topics)
        self.partitions: dict[str, int] = {}
        self.records_written = 0

    def open(self, replay_window_ms: int) -> None:
        """Place the topics and replay the window (unless the rationalizer already has)."""
        count = self.log.partition_count()
        self.partitions = {t: coordination_partition(t, count) for t in self.topics}
        wanted = sorted(set(self.partitions.values()))
        if self.rationalizer.next_position(wanted[0]) == 0:
            seek_to_window(self.log, self.rationalizer, wanted, self.clock.now_ms(),
                           replay_window_ms)
        self.catch_up()

    def catch_up(self) -> None:
        """Apply every record up to the current end of our coordination partitions."""
        catch_up(self.log, self.rationalizer, sorted(set(self.partitions.values())))

    def append(self, message: Message) -> int:
        """Write a message to its topic's coordination partition; return its broker time."""
        partition = self.partitions[message.topic]
        sent = self.clock.now_ms()
        record = self.log.append(partition, encode(message))
        self.clock.observe(record.timestamp_ms, sent, self.clock.now_ms())
        self.records_written += 1
        return record.timestamp_ms
