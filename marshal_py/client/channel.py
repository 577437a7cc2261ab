"""CoordinationChannel: what every kind of member does with the coordination log.

Places each topic on its coordination partition, replays the window on start, catches up,
and appends messages while teaching the clock the broker's time. Shared by the exclusive
engine and the share engine; single-threaded like them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from marshal_py.client.engine_types import EngineClock
from marshal_py.errors import CoordinationLogLostError, MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.log.checkpoints import start_from_checkpoints
from marshal_py.log.replay import catch_up, follow_once, read_through, replay_start
from marshal_py.log.signing import MessageWriter
from marshal_py.protocol import Checkpoint, Message, coordination_partition
from marshal_py.world import CoordinationRecord, Owner, Rationalizer

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
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS,
                 checkpoints: bool = True) -> None:
        self.log = log_
        self.rationalizer = rationalizer
        self.clock = clock
        self.topics = tuple(topics)
        self.group = group
        self.checkpoint_interval_ms = checkpoint_interval_ms
        #: False: never write checkpoints (compatibility mode: the original cannot read them).
        self.checkpoints = checkpoints
        self.partitions: dict[str, int] = {}
        #: Signs the records of an authenticated group (with the process's sequence
        #: numbers, in the order they are appended).
        self.writer = MessageWriter(log_, rationalizer.config.group_keys)
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
        if self.group is None or not self.checkpoints:
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
            except CoordinationLogLostError:
                raise
            except MarshalError as exc:
                log.warning("could not write the checkpoint of %s/%s: %s", self.group, topic,
                            exc)
                continue
            written += 1
            self.checkpoints_written += 1
        if written:
            self.catch_up()  # read them back: the newest checkpoint's time is now ours
        return written

    def next_checkpoint_ms(self) -> int | None:
        """When :meth:`maybe_checkpoint` may next have something to write (None: never)."""
        if self.group is None or not self.checkpoints:
            return None
        now = self.clock.now_ms()
        due: list[int] = []
        for topic in self.partitions:
            last = self.rationalizer.last_checkpoint_ms(self.group, topic)
            # Unknown or failed: look again in a second.
            due.append(now + 1000 if last is None else last + self.checkpoint_interval_ms)
        return min(due) if due else None

    def catch_up(self) -> None:
        """Apply every record up to the current end of our coordination partitions."""
        catch_up(self.log, self.rationalizer, sorted(set(self.partitions.values())))

    def follow(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for new records on our coordination partitions (a long
        poll: it returns as soon as any arrive) and apply them; return how many."""
        return follow_once(self.log, self.rationalizer, self.partitions.values(), timeout_s)

    def read_back(self, records: Iterable[CoordinationRecord]) -> None:
        """Apply the log up to and including ``records`` (ours, just appended): what the
        log decided about them is then known. One fetch when they are there."""
        targets: dict[int, int] = {}
        for record in records:
            targets[record.partition] = max(targets.get(record.partition, 0),
                                            record.position + 1)
        read_through(self.log, self.rationalizer, targets)

    def append(self, message: Message) -> int:
        """Write a message to its topic's coordination partition; return its broker time.
        A message about an authenticated group is signed with the group's first key and the
        next sequence number of this process."""
        return self.append_all([message])[0].timestamp_ms

    def append_all(self, messages: Sequence[Message]) -> list[CoordinationRecord]:
        """Write several messages, all sent before any is awaited (one round trip); return
        them as stored. Raises :class:`MarshalError` if any was not written."""
        if not messages:
            return []
        items = [(self.partitions[m.topic], m) for m in messages]
        sent = self.clock.now_ms()
        written = self.writer.write(items)
        acked = self.clock.now_ms()
        # One sample per round trip: each observation moves the estimate by its residual.
        self.clock.observe(written[0].timestamp_ms, sent, acked)
        self.records_written += len(written)
        return written
