"""CoordinationChannel: what every kind of member does with the coordination log.

Places each topic on its coordination partition, replays the window on start, catches up,
and appends messages while teaching the clock the broker's time. Shared by the exclusive
engine and the share engine; single-threaded like them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from marshal_py.client.engine_types import EngineClock
from marshal_py.errors import MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.log.checkpoints import start_from_checkpoints
from marshal_py.log.replay import catch_up, replay_start
from marshal_py.protocol import Checkpoint, Message, coordination_partition, encode, sign
from marshal_py.world import Owner, Rationalizer

log = logging.getLogger(__name__)

#: How often a live group's checkpoint is re-written (PROTOCOL.md, checkpoints).
DEFAULT_CHECKPOINT_INTERVAL_MS = 60_000


class CoordinationChannel:
    """One member's reading and writing of the coordination partitions of its topics.

    With ``group``, the replay on :meth:`open` starts from the group's newest checkpoint on
    each topic (falling back to the replay window), and :meth:`maybe_checkpoint` writes the
    group's checkpoints when they are due.
    """

    def __init__(self, log_: CoordinationLog, rationalizer: Rationalizer, clock: EngineClock,
                 topics: Iterable[str], *, group: str | None = None,
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS) -> None:
        self.log = log_
        self.rationalizer = rationalizer
        self.clock = clock
        self.topics = tuple(topics)
        self.group = group
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.partitions: dict[str, int] = {}
        self.records_written = 0
        self.checkpoints_written = 0
        #: Records the first replay started after (where it began, per partition).
        self.replay_starts: dict[int, int] = {}

    def open(self, replay_window_ms: int) -> None:
        """Place the topics and replay from the newest checkpoints or the window (unless
        the rationalizer already has)."""
        count = self.log.partition_count()
        self.partitions = {t: coordination_partition(t, count) for t in self.topics}
        wanted = sorted(set(self.partitions.values()))
        if self.rationalizer.next_position(wanted[0]) == 0:
            now = self.clock.now_ms()
            for partition in wanted:
                window_start = replay_start(self.log, partition, now, replay_window_ms)
                if self.group is None:
                    self.rationalizer.skip_to(partition, window_start)
                    start = window_start
                else:
                    topics = [t for t, p in self.partitions.items() if p == partition]
                    start = start_from_checkpoints(self.log, self.rationalizer, partition,
                                                   self.group, topics, window_start)
                self.replay_starts[partition] = start
        self.catch_up()

    def maybe_checkpoint(self, me: Owner) -> int:
        """Write the group's checkpoint on each topic where one is due; return how many.

        Due when the newest checkpoint in the log is at least one interval old and this
        member is the first live member (lowest instance id), or two intervals old and this member
        is live at all (the first one may be stuck). Call with the log caught up.
        """
        if self.group is None:
            return 0
        written = 0
        now = self.clock.now_ms()
        for topic, partition in self.partitions.items():
            members = self.rationalizer.members(self.group, topic, now)
            mine = [m for m in members if m.client_id == me.client_id]
            if not mine:
                continue
            last = self.rationalizer.last_checkpoint_ms(self.group, topic)
            age = None if last is None else now - last
            first = members[0].client_id == me.client_id
            due = age is None or age >= (self.checkpoint_interval_ms if first
                                         else 2 * self.checkpoint_interval_ms)
            if not due:
                continue
            message = Checkpoint(now // 1000, me.instance_id, me.client_id, self.group, topic,
                                 self.rationalizer.next_position(partition),
                                 self.rationalizer.snapshot(self.group, topic))
            try:
                self.append(message)
            except MarshalError as exc:
                log.warning("could not write the checkpoint of %s/%s: %s", self.group, topic,
                            exc)
                continue
            written += 1
            self.checkpoints_written += 1
        if written:
            self.catch_up()  # read them back: the newest checkpoint's time is now ours
        return written

    def catch_up(self) -> None:
        """Apply every record up to the current end of our coordination partitions."""
        catch_up(self.log, self.rationalizer, sorted(set(self.partitions.values())))

    def append(self, message: Message) -> int:
        """Write a message to its topic's coordination partition; return its broker time.
        A message about an authenticated group is signed with the group's first key."""
        partition = self.partitions[message.topic]
        sent = self.clock.now_ms()
        value = encode(message)
        keys = self.rationalizer.config.group_keys.get(message.group_id)
        if keys:
            value = sign(value, keys[0])
        record = self.log.append(partition, value)
        self.clock.observe(record.timestamp_ms, sent, self.clock.now_ms())
        self.records_written += 1
        return record.timestamp_ms
