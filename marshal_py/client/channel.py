"""CoordinationChannel: what every kind of member does with the coordination log.

Places each topic on its coordination partition, replays from the group's newest checkpoints
(or where its history begins, or the window) on start, catches up reading only its group's
records, and appends messages while teaching the clock the broker's time. Shared by the
exclusive engine and the share engine; single-threaded like them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from marshal_py.client.engine_types import EngineClock
from marshal_py.errors import CoordinationLogLostError, MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.log.checkpoint_chunks import split_checkpoint
from marshal_py.log.history import read_index_view, record_history
from marshal_py.log.record_filter import RecordFilter
from marshal_py.log.signing import MessageWriter
from marshal_py.protocol import Checkpoint, Message, coordination_partition
from marshal_py.protocol.index import CheckpointAt, IndexView, checkpoint_key, encode_entry
from marshal_py.protocol.messages import CheckpointChunk
from marshal_py.replay.checkpoints import history_floor, start_from_checkpoints
from marshal_py.replay.reading import (
    apply_appended,
    catch_up,
    follow_once,
    read_through,
    replay_start,
)
from marshal_py.world import CoordinationRecord, Outcome, Owner, Rationalizer
from marshal_py.world.rationalizer import Verdict

log = logging.getLogger(__name__)

#: How often a live group's checkpoint is re-written (PROTOCOL.md, checkpoints).
DEFAULT_CHECKPOINT_INTERVAL_MS = 60_000
#: The parts of a large checkpoint are sent this many bytes at a time (then awaited).
_PARTS_IN_FLIGHT_BYTES = 8 * 1024 * 1024


class CoordinationChannel:
    """One member's reading and writing of the coordination partitions of its topics.

    With ``group``, the replay on :meth:`open` starts from the group's newest checkpoint on
    each topic (falling back to where the group's history begins, or to the replay window;
    PROTOCOL.md sections 6 and 11), only the group's records are read (others are read past
    undecoded), and :meth:`maybe_checkpoint` writes the group's checkpoints when they are
    due. ``compat``: the group is shared with the original implementation, whose members
    record no history in the index: its replay trusts no absence there, and reads every
    record (the member watches for records the original cannot read).
    """

    def __init__(self, log_: CoordinationLog, rationalizer: Rationalizer, clock: EngineClock,
                 topics: Iterable[str], *, group: str | None = None,
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS,
                 checkpoints: bool = True, compat: bool = False) -> None:
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
        self.compat = compat
        #: Which records this channel applies: its group's (None: all).
        self.keep = RecordFilter([group]) if group is not None and not compat else None
        #: The index as :meth:`open` read it (None before, or without a group).
        self.index: IndexView | None = None
        #: Broker time of the newest chunked checkpoint of each of the group's topics (the
        #: rationalizer counts only whole Checkpoint records as checkpoints).
        self._chunked_ms: dict[str, int] = {}
        # Only checkpoint records' outcomes: every other record stays on the rationalizer's
        # fast path (an observer of every outcome makes it apply record by record).
        rationalizer.observe(self._note_chunk, (Verdict.CHECKPOINT, Verdict.BEFORE_CHECKPOINT))

    @property
    def trusts_index(self) -> bool:
        """True when the index's history records bound this member's replay: not for an
        authenticated group (the index is not signed: a forged or deleted record could hide
        history) nor in compatibility mode (the original records none)."""
        return (self.group is not None and not self.compat
                and self.group not in self.rationalizer.config.group_keys)

    def open(self, replay_window_ms: int) -> None:
        """Place the topics and replay from the newest checkpoints or the window (unless
        the rationalizer already has)."""
        count = self.log.partition_count()
        self.partitions = {t: coordination_partition(t, count) for t in self.topics}
        wanted = sorted(set(self.partitions.values()))
        if self.rationalizer.next_position(wanted[0]) == 0:
            now = self.clock.now_ms()
            # The ends first, then the index: a pair with a record below an end had its
            # History in the index before that record was appended (PROTOCOL.md 6).
            ends = {p: self.log.end_position(p) for p in wanted}
            if self.group is not None:
                self.index = read_index_view(self.log)
            for partition in wanted:
                # Never past the end read before the index: with no record in the window,
                # the lookup answers a later end (PROTOCOL.md 6.1, rule 4).
                window_start = replay_start(self.log, partition, now, replay_window_ms,
                                            end=ends[partition])
                if self.group is None:
                    self.rationalizer.skip_to(partition, window_start)
                    start = window_start
                else:
                    topics = [t for t, p in self.partitions.items() if p == partition]
                    # The pairs' History bounds the replay (PROTOCOL.md 6.1): a pair without
                    # one on a declared topic begins at the end read before the index.
                    floors: dict[str, int] | None = None
                    if self.trusts_index:
                        floors = {t: history_floor(self.index, self.group, t, window_start,
                                                   ends[partition]) for t in topics}
                    start = start_from_checkpoints(self.log, self.rationalizer, partition,
                                                   self.group, topics, window_start,
                                                   index=self.index, floors=floors)
                    log.debug("replaying %s partition %d for %s from %d (end %d, window from "
                              "%d, floors %s)", self.log.topic, partition, self.group, start,
                              ends[partition], window_start, floors)
                self.replay_starts[partition] = start
            self._record_history(ends)
        self.catch_up()

    def _record_history(self, ends: dict[int, int]) -> None:
        """A writer's duty before its first record about a pair: when the index holds no
        History of it, write one saying its records are all at or after the end read
        before the index (PROTOCOL.md section 6)."""
        if self.group is None or self.index is None:
            return
        for topic, partition in self.partitions.items():
            record_history(self.log, self.group, topic, index=self.index, end=ends[partition])

    def maybe_checkpoint(self, me: Owner) -> int:
        """Write the group's checkpoint on each topic where one is due; return how many.

        Due when the newest checkpoint in the log is at least one interval old and this
        member is the first live member (the one that joined first), or two intervals old and
        this member is live at all (the first one may be stuck). A pair with no checkpoint:
        due at once for the first member, for the others once the pair has been Stable for
        two intervals (members joining a new group together write one checkpoint, not one
        each: a joining member sees those that joined before it). Call with the log caught
        up.
        """
        if self.group is None or not self.checkpoints:
            return 0
        written = 0
        now = self.clock.now_ms()
        for topic, partition in self.partitions.items():
            last = self.last_checkpoint_ms(topic)
            age = None if last is None else now - last
            if age is not None and age < self.checkpoint_interval_ms:
                continue  # not due for anyone (asked first: the rest looks at the members)
            if not self.rationalizer.member_rank(self.group, topic, me.client_id, now).live:
                continue
            members = self.rationalizer.members_by_join(self.group, topic, now)
            first = members[0].client_id == me.client_id
            needed = self.checkpoint_interval_ms if first else 2 * self.checkpoint_interval_ms
            if age is None:
                # None yet: due at once for the first member; the others count from when
                # the pair turned Stable.
                since = None if first else self.rationalizer.stable_since(self.group, topic)
                due = first or (since is not None and now - since >= needed)
            else:
                due = age >= needed
            if not due:
                continue
            message = Checkpoint(now // 1000, me.instance_id, me.client_id, self.group, topic,
                                 self.rationalizer.next_position(partition),
                                 self.rationalizer.snapshot(self.group, topic))
            try:
                at = self._write_checkpoint(message)
            except CoordinationLogLostError:
                raise
            except (MarshalError, ValueError) as exc:
                log.warning("could not write the checkpoint of %s/%s: %s", self.group, topic,
                            exc)
                continue
            written += 1
            self.checkpoints_written += 1
            self._point_at(topic, at)
        if written:
            self.catch_up()  # read them back: the newest checkpoint's time is now ours
        return written

    def _write_checkpoint(self, checkpoint: Checkpoint) -> int:
        """Append ``checkpoint``, in parts when it does not fit one record (a few MiB sent
        at a time); return the position of its (first) record."""
        messages = split_checkpoint(checkpoint, self.log.max_value_bytes)
        if len(messages) > 1:
            log.info("the checkpoint of %s/%s takes %d records of at most %d bytes",
                     checkpoint.group_id, checkpoint.topic, len(messages),
                     self.log.max_value_bytes)
        first: int | None = None
        group: list[Message] = []
        size = 0
        for message in messages:
            piece = len(message.data) if isinstance(message, CheckpointChunk) else 0
            if group and size + piece > _PARTS_IN_FLIGHT_BYTES:
                first = self.append_all(group)[0].position if first is None else first
                group, size = [], 0
            group.append(message)
            size += piece
        written = self.append_all(group)[0].position
        return written if first is None else first

    def _point_at(self, topic: str, record_position: int) -> None:
        """Record in the index where the pair's newest checkpoint is (a hint for joiners;
        a failure only makes them look for it)."""
        assert self.group is not None
        entry = CheckpointAt(self.log.topic, self.log.index_topic_id, self.group, topic,
                             record_position)
        try:
            self.log.append_index(checkpoint_key(self.group, topic), encode_entry(entry))
        except CoordinationLogLostError:
            raise
        except MarshalError as exc:
            log.warning("could not record the checkpoint of %s/%s in the index: %s",
                        self.group, topic, exc)

    def _note_chunk(self, outcome: Outcome) -> None:
        """The last part of a chunked checkpoint of the group counts as a checkpoint (the
        rationalizer calls this for checkpoint records only: not rejected, not misplaced)."""
        message = outcome.message
        if (isinstance(message, CheckpointChunk) and message.group_id == self.group
                and message.part == message.parts - 1):
            previous = self._chunked_ms.get(message.topic, 0)
            self._chunked_ms[message.topic] = max(previous, outcome.record.timestamp_ms)

    def last_checkpoint_ms(self, topic: str) -> int | None:
        """Broker time of the group's newest checkpoint on ``topic`` (whole or chunked)."""
        assert self.group is not None
        times = [t for t in (self.rationalizer.last_checkpoint_ms(self.group, topic),
                             self._chunked_ms.get(topic)) if t is not None]
        return max(times) if times else None

    def next_checkpoint_ms(self) -> int | None:
        """When :meth:`maybe_checkpoint` may next have something to write (None: never)."""
        if self.group is None or not self.checkpoints:
            return None
        now = self.clock.now_ms()
        due: list[int] = []
        for topic in self.partitions:
            last = self.last_checkpoint_ms(topic)
            # Unknown or failed: look again in a second.
            due.append(now + 1000 if last is None else last + self.checkpoint_interval_ms)
        return min(due) if due else None

    def catch_up(self) -> None:
        """Apply every record up to the current end of our coordination partitions."""
        catch_up(self.log, self.rationalizer, sorted(set(self.partitions.values())),
                 keep=self.keep)

    def follow(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for new records on our coordination partitions (a long
        poll: it returns as soon as any arrive) and apply them; return how many."""
        return follow_once(self.log, self.rationalizer, self.partitions.values(), timeout_s,
                           keep=self.keep)

    def read_back(self, records: Iterable[CoordinationRecord]) -> None:
        """Apply the log up to and including ``records`` (ours, just appended by
        :meth:`append_all`, outside any transaction): what the log decided about them is
        then known. No fetch when they directly follow what was read (they are applied as
        the append answered), else one fetch when they are there."""
        records = list(records)
        targets: dict[int, int] = {}
        for record in records:
            targets[record.partition] = max(targets.get(record.partition, 0),
                                            record.position + 1)
        read_through(self.log, self.rationalizer, targets, keep=self.keep, appended=records)

    def apply_own(self, records: Sequence[CoordinationRecord]) -> bool:
        """Apply ``records`` (ours, just appended by :meth:`append_all`) where they directly
        follow what was read, with no fetch; the others wait for the next read. True when
        every one of them was applied."""
        apply_appended(self.rationalizer, records, self.keep)
        return all(r.position < self.rationalizer.next_position(r.partition) for r in records)

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
