"""ShareConsumer: share-group consumption (KIP-932 semantics) through the coordination log.

A background thread drives the :class:`~marshal_py.client.share_engine.ShareEngine`: it
announces membership, renews locks, writes acknowledgements, and acquires the next range of
records ahead of time (pre-claiming), so the coordination round trip is hidden while the
application processes the current batch. The iterating thread fetches the acquired offsets
with a kafka-python consumer and hands them out, each with its delivery count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from marshal_py.client.dead_letters import DeadLetterWriter
from marshal_py.client.delivery import PollWatch
from marshal_py.client.fetchers import OpeningFetcher
from marshal_py.client.member_consumer import MemberConsumer
from marshal_py.client.share_engine import ShareEngine, ShareStats
from marshal_py.client.share_handout import ShareRecord, share_batch
from marshal_py.client.share_window import STARVED_WAIT_S, AcquisitionWindow
from marshal_py.errors import BrokerUnavailableError, ConfigurationError, MarshalError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.protocol.messages import APPLICATION_ACK_KINDS

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

__all__ = ["AckMode", "ShareConsumer", "ShareRecord"]

log = logging.getLogger(__name__)

AckMode = Literal["implicit", "explicit"]
#: A fetch position more than this many offsets before the next acquired one seeks forward
#: (other members hold what lies between) instead of reading through it.
SEEK_AHEAD = 100
TP = tuple[str, int]


class ShareConsumer(MemberConsumer[ShareRecord]):
    """Iterate to receive :class:`ShareRecord`\\ s; acknowledge them with :meth:`ack`.

    ``acknowledgement="implicit"`` (default): every record handed out is accepted when the
    next batch is fetched or the consumer closes. ``"explicit"``: call ``ack(record, kind)``
    (``"accept"``, ``"release"`` or ``"reject"``) for every record before the next batch;
    fetching with records unacknowledged raises :class:`~marshal_py.errors.MarshalError`.
    Records of one partition come in increasing offset order within a batch. Close releases
    what was acquired and not yet acknowledged, so others get it at once.

    Dead letters: a share-partition initialized with a dead-letter topic (the first
    member's ``dead_letter_topic``, kept in the log) owes every record that reaches the
    delivery limit — released at its last attempt, its lock elapsed (a crashed or hung
    holder), or given up after max_poll_interval — one letter there, with headers
    ``marshal.group``, ``marshal.original.topic``, ``.partition``, ``.offset``,
    ``marshal.delivery.count`` and ``marshal.reason``. The log charges one member at a time
    with writing it (a *duty*, acquired like a record but never handed out); a member that
    crashes with a duty passes it on, and its successor looks for the letter before writing
    it again. ``dead_lettered`` counts the letters this member wrote.
    """

    _engine: ShareEngine

    def __init__(self, host: MemberHost, engine: ShareEngine, kafka: KafkaLogConfig,
                 tick_interval_s: float, acknowledgement: AckMode = "implicit",
                 dead_letter_topic: str | None = None,
                 fetcher: OpeningFetcher | None = None) -> None:
        if acknowledgement not in ("implicit", "explicit"):
            raise ConfigurationError("acknowledgement must be 'implicit' or 'explicit'")
        super().__init__(host, kafka, fetcher)
        self._engine = engine
        self.topics = engine.config.topics
        self.acknowledgement = acknowledgement
        self._tick_interval_s = tick_interval_s
        self._kafka = kafka
        self.dead_letter_topic = dead_letter_topic
        self._letters = DeadLetterWriter(kafka, engine.config.group_id)
        self.dead_lettered = 0
        self._to_fetch: dict[TP, dict[int, int]] = {}  # acquired, not fetched: offset -> count
        #: How many of each partition's ``_to_fetch`` the poll under way is fetching: the
        #: window acquired ahead is counted without them.
        self._in_poll: dict[TP, int] = {}
        #: The measured rate and pace: how much to acquire, how many share a partition.
        self._sizing = AcquisitionWindow(time.monotonic())
        #: Fetched records with the monotonic time their lock surely holds until (a copy of
        #: the lock's expiry when fetched: renewals only extend it).
        #: (The engine's ``drops`` count is kept with it: a copy is no proof of holding once
        #: the engine let records go.)
        self._buffer: deque[tuple[ShareRecord, float, int]] = deque()
        self._unacked: dict[tuple[TP, int], tuple[ShareRecord, float, int]] = {}
        #: Acknowledgements taken without the lock, handed to the engine at its next step
        #: (or before the next acquisition, which writes them in the same round trip).
        self._acks: deque[tuple[str, int, int, str]] = deque()
        self._watch = PollWatch(engine.config.max_poll_interval_ms)
        #: True while the coordination thread's acquisition travels with the lock let go;
        #: the fetching thread, run dry, waits for it (``_acquired``) instead of acquiring.
        self._acquiring = False
        self._acquired = threading.Condition(self._lock)
        engine.appending = self._appending
        #: Set by the fetching thread when it wakes the coordination thread to acquire
        #: ahead; the full tick (catch-up, renewals, membership) then waits until it is due.
        self._acquire_ahead = False
        #: Set by the fetching thread when it ran dry and nothing could be acquired.
        self._starved = False
        self._tick_s = tick_interval_s
        self._next_tick = 0.0
        #: Members sharing a partition when the window was last sized.
        self._sharing = 1
        self._start_coordination("marshal-share", tick_interval_s)

    # -- background: membership, renewals, acknowledgements, pre-claiming -----------------------

    def _step(self) -> None:
        self._hand_acks_over()
        self._watch_poll_interval("its acquired records")
        now = time.monotonic()
        ahead, self._acquire_ahead = self._acquire_ahead, False
        starved, self._starved = self._starved, False
        if (ahead or starved) and now < self._next_tick:
            # Woken by the fetching thread, its window running low: acquire first (the
            # acquisition's read-back catches up), the rest of a tick when it is due. Run
            # dry with nothing to acquire: first wait (briefly) for the log to bring what
            # frees the in-flight window.
            if not self._engine.suspended:
                if starved:
                    # What was acknowledged goes out first: the SPSO moves now, not after
                    # the wait (the last records of a burst, others' window).
                    self._engine.flush()
                    self._engine.channel.follow(STARVED_WAIT_S)
                self._preclaim()
            self._engine.flush()
            return
        self._next_tick = now + self._tick_s
        # Queued acknowledgements ride with this step's acquisitions (one round trip);
        # whatever no acquisition carried is written after them, and a checkpoint due
        # after both (the first step follows the join: its acquisition goes first).
        self._engine.tick(flush=False, checkpoint=False)
        if not self._engine.suspended:
            self._preclaim()
        self._engine.flush()
        self._engine.checkpoint()

    def _hand_acks_over(self) -> None:
        """Give the engine the acknowledgements taken without the lock (lock held), a run
        of one partition and kind at a time."""
        acks, engine = self._acks, self._engine
        key: tuple[str, int, str] | None = None
        run: list[int] = []
        while acks:
            topic, partition, offset, kind = acks.popleft()
            if (topic, partition, kind) != key:
                if key is not None:
                    engine.ack_many(key[0], key[1], run, key[2])
                key, run = (topic, partition, kind), []
            run.append(offset)
        if key is not None:
            engine.ack_many(key[0], key[1], run, key[2])

    def _before_suspend(self) -> None:
        """Drop what was acquired and not fetched (the engine releases it; a record released
        at its last attempt is owed a dead letter, which the log gives someone to write)."""
        self._hand_acks_over()
        self._to_fetch.clear()

    def _after_rejoin(self) -> None:
        self._unacked.clear()  # released when the work was given up

    @contextmanager
    def _appending(self) -> Iterator[None]:
        """Around an acquisition's append: on the coordination thread, let the lock go for
        the round trip, so that the fetching thread goes on handing out, acknowledging and
        buffering what it fetched (it neither acquires nor reads the log meanwhile: a
        read of the log before this acquisition's read-back would race it). On the
        fetching thread (run dry), keep it: the coordination thread may read the log."""
        if self._thread is None or not self._thread.is_current():
            yield
            return
        self._acquiring = True
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._acquiring = False
            self._acquired.notify_all()

    def _preclaim(self) -> None:
        """Keep about one window per partition acquired ahead of the application (call with
        the lock held), not counting what the poll under way is fetching: the coordination
        thread does it each tick and whenever the fetching thread wakes it (as a poll takes
        up what was acquired), the fetching thread itself when it runs dry with no
        acquisition under way."""
        self._hand_acks_over()
        window = self._window()
        for topic in self.topics:
            count = self._engine.source.partition_count(topic) or 0
            for partition in range(count):
                waiting = self._to_fetch.setdefault((topic, partition), {})
                # Nothing ahead of the poll under way until the pace is known (above).
                in_poll = self._in_poll.get((topic, partition), 0) if self._sizing.paced else 0
                if len(waiting) - in_poll < window:
                    for offset, delivery_count in self._engine.acquire(
                            topic, partition, window, duties=True, sharing=self._sharing):
                        waiting[offset] = delivery_count
        self._sizing.acquired(any(self._to_fetch.values()))
        self._acquired.notify_all()  # a fetching thread run dry waits for this

    def _window(self) -> int:
        """Records to acquire at a time (:mod:`marshal_py.client.share_window`); also sets
        how many members share a partition. Lock held."""
        self._sizing.sample(time.monotonic(), self.records_delivered)
        config = self._engine.config
        members = max(1, len(self._engine.rationalizer.members(
            config.group_id, self.topics[0], self._engine.clock.now_ms())))
        self._sharing = self._sizing.sharing(members)
        return self._sizing.size(config.batch_size, config.inflight_limit, members)

    # -- fetching --------------------------------------------------------------------------------

    def _fetch(self, timeout_s: float) -> None:
        self._sizing.fetch_began(time.monotonic())
        try:
            self._fetch_and_buffer(timeout_s)
        finally:
            self._sizing.fetch_ended(time.monotonic())

    def _fetch_and_buffer(self, timeout_s: float) -> None:
        self._settle_previous_batch()
        with self._lock:
            if not any(self._to_fetch.values()) and self._acquiring:
                self._acquired.wait_for(lambda: not self._acquiring, timeout_s)
            # Never while the coordination thread's append travels (a slow broker can hold
            # it past the wait): this thread would read the log past the record it awaits.
            if not any(self._to_fetch.values()) and not self._acquiring:
                try:
                    self._preclaim()  # ran dry before the coordination thread's next tick
                except BrokerUnavailableError as exc:
                    # The broker is away for a moment (restarting, electing a leader): the
                    # coordination thread keeps trying; this poll just returns nothing.
                    log.warning("cannot acquire share records now: %s", exc)
            wanted = {tp: min(offsets) for tp, offsets in self._to_fetch.items() if offsets}
            # Fetch the first run of consecutive acquired offsets of each partition: what
            # lies past it (other members' regions) is skipped by a seek, not parsed.
            runs = {tp: _run_from(self._to_fetch[tp], first) for tp, first in wanted.items()}
            span = sum(runs.values())
            self._in_poll = runs
            # This poll takes what was acquired; the next window is acquired meanwhile
            # (while these records are fetched and handed out), not once they are gone.
            left = sum(len(offsets) for offsets in self._to_fetch.values()) - span
            ahead = bool(wanted) and left * 2 < self._window()
        if not wanted:
            self._await_records(min(timeout_s, self._sizing.starved_pause(self._tick_s)))
            return
        if ahead and self._thread is not None:
            self._acquire_ahead = True
            self._thread.wake()
        assigned = self._fetcher.assignment()
        if set(wanted) != assigned:
            self._fetcher.assign(wanted)
        starts: dict[TP, int] = {}
        for tp, first in wanted.items():
            position = self._fetcher.position(*tp) if tp in assigned else None
            if position is None or position > first or position < first - SEEK_AHEAD:
                self._fetcher.seek(*tp, first)
                position = first
            starts[tp] = position
        # Fetch only as far as the acquired offsets reach: the rest belongs to others (sized
        # in bytes too, or each region costs the broker a full-size fetch). Reading a
        # partition alone, a member's next run follows this one: a full-size fetch reads
        # ahead usefully.
        self._fetcher.expect_records(max(runs.values()) if self._sharing > 1 else None)
        try:
            polled = self._poll_data(timeout_s, max(1, min(1_000, span)))
        finally:
            self._in_poll = {}  # (a plain swap: the other thread reads it under the lock)
        duties: list[tuple[Any, int]] = []
        for batch in polled:
            tp, records = (batch.topic, batch.partition), batch.records
            start = starts.get(tp)
            with self._lock:
                waiting = self._to_fetch.get(tp, {})
                owed = self._engine.duties.get(tp, {})
                expiries = self._engine.lock_expiries(*tp)
                drops = self._engine.drops
                # Broker milliseconds to this process's monotonic seconds, once per batch.
                shift = time.monotonic() - self._engine.clock.now_ms() / 1000
                duties += share_batch(records if type(records) is list else list(records),
                                      waiting, owed, expiries, shift, drops,
                                      self._buffer.append, ShareRecord)
                if start is None:
                    continue
                # Acquired offsets this poll passed over that hold no record this member may
                # be delivered (transaction markers, aborted records under read_committed,
                # compaction) are gaps: the log archives them without counting a delivery,
                # and the SPSO moves past them. Offsets below where the poll started
                # (redeliveries acquired meanwhile) wait for the next fetch, which seeks back.
                # (Every offset fetched was taken out of ``waiting`` above.)
                gaps = [o for o in waiting if start <= o < batch.next_position]
                for offset in gaps:
                    del waiting[offset]
                    self._engine.ack(tp[0], tp[1], offset, "gap")
        for record, count in duties:
            self._do_duty(record, count)

    def _await_records(self, timeout_s: float) -> None:
        """Nothing could be acquired (the in-flight window is full of others' records, or
        the partition is at its end): have the coordination thread wait on the log for
        what frees the window (others' acknowledgements) and acquire at once, and wait for
        that rather than for a clock."""
        if self._thread is None:
            self._stop.wait(timeout_s)
            return
        self._starved = True
        self._thread.wake()
        with self._lock:
            self._acquired.wait_for(
                lambda: any(self._to_fetch.values()) or self._stop.is_set(), timeout_s)

    def _do_duty(self, record: Any, delivery_count: int) -> None:
        """Write the dead letter the log charged this member with, then say so; on failure
        release the duty (someone writes it later)."""
        tp = (record.topic, record.partition)
        with self._lock:
            owed = self._engine.duties.get(tp, {}).get(record.offset)
            topic = self._engine.dead_letter_topic(*tp)
            if owed is None or not topic or not self._engine.holds(*tp, record.offset):
                return  # the duty's lock elapsed meanwhile: it goes to someone else
        try:
            written = owed.duties > 1 and owed.owed_since_ms is not None and \
                self._letters.already_written(topic, record.topic, record.partition,
                                              record.offset, owed.owed_since_ms)
            if written:
                log.info("%s/%d@%d: a previous holder of its dead-letter duty wrote it",
                         record.topic, record.partition, record.offset)
            else:
                self._letters.write(topic, record, delivery_count, "delivery-limit")
                self.dead_lettered += 1
        except MarshalError as exc:
            log.warning("dead letter of %s/%d@%d not written (another try later): %s",
                        record.topic, record.partition, record.offset, exc)
            with self._lock:
                self._engine.ack(*tp, record.offset, "release")
            return
        with self._lock:
            self._engine.ack(*tp, record.offset, "dead-lettered")

    def _settle_previous_batch(self) -> None:
        if not self._unacked:
            return
        if self.acknowledgement == "explicit":
            raise MarshalError(
                f"{len(self._unacked)} delivered records are not acknowledged; call "
                "ack(record, 'accept'|'release'|'reject') for each before fetching more "
                "(or use acknowledgement='implicit')"
            )
        with self._lock:
            self._hand_acks_over()
            self._accept_unacked()
        self._unacked.clear()

    def _accept_unacked(self) -> None:
        """Accept every record handed out and not acknowledged (lock held)."""
        by_partition: dict[TP, list[int]] = {}
        for (tp, offset) in self._unacked:
            by_partition.setdefault(tp, []).append(offset)
        for (topic, partition), offsets in by_partition.items():
            self._engine.ack_many(topic, partition, offsets, "accept")

    # -- the public surface ------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[ShareRecord]:
        """Up to ``max_records`` records. Implicit mode first accepts what the previous poll
        handed out; explicit mode first requires it to be acknowledged."""
        return self._poll_buffer(timeout_s, max_records, self._settle_previous_batch)

    def _next_buffered(self) -> ShareRecord | None:
        while self._buffer:
            record, surely_until, drops = self._buffer.popleft()
            deliverable = time.monotonic() < surely_until and drops == self._engine.drops
            if not deliverable:  # the copy of the lock ran out, or the engine let records go
                with self._lock:
                    deliverable = self._engine.holds(record.topic, record.partition,
                                                     record.offset, record.delivery_count)
                surely_until = -1.0
            if deliverable:
                self._unacked[((record.topic, record.partition), record.offset)] = \
                    (record, surely_until, drops)
                return record
            # The lock elapsed before the record was handed out: someone else may have it,
            # or, at its last attempt, the log owes it a dead letter (someone's duty).
        return None

    def ack(self, record: ShareRecord, kind: str = "accept") -> bool:
        """Acknowledge a delivered record: ``"accept"`` (done), ``"release"`` (deliver it
        again, to anyone) or ``"reject"`` (unprocessable: archive it). False if its lock had
        already elapsed (the acknowledgement would be ignored)."""
        if kind not in APPLICATION_ACK_KINDS:
            raise ConfigurationError(f"acknowledgement kind must be one of "
                                     f"{', '.join(sorted(APPLICATION_ACK_KINDS))}, not {kind!r}")
        if self._watch is not None and self._watch.timed_out:
            raise self._watch.failure("acknowledgement")
        key = ((record.topic, record.partition), record.offset)
        handed = self._unacked.pop(key, None)
        if handed is not None and time.monotonic() < handed[1] \
                and handed[2] == self._engine.drops:
            # The lock holds: the engine takes it at its next step (no lock taken here).
            self._acks.append((record.topic, record.partition, record.offset, kind))
            return True
        with self._lock:
            self._hand_acks_over()
            return self._engine.ack(record.topic, record.partition, record.offset, kind)

    @property
    def stats(self) -> ShareStats:
        """The share engine's counters (acquisitions, records acquired, ...)."""
        return self._engine.stats

    def _close_engine(self) -> None:
        """Accept (implicit mode) what was handed out, release the rest, leave."""
        self._hand_acks_over()
        if self.acknowledgement == "implicit":
            self._accept_unacked()
        self._unacked.clear()
        self._engine.close()

    def _other_clients(self) -> list[Any]:
        return [self._letters]

    def __enter__(self) -> ShareConsumer:
        return self


def _run_from(offsets: dict[int, int], first: int) -> int:
    """How many consecutive offsets of ``offsets`` begin at ``first``."""
    n = 1
    while first + n in offsets:
        n += 1
    return n
