"""HandOut: the delivering side of an exclusive consumer, with no I/O and no clock of its own.

It holds the fetched batches of every leased partition and hands them to the application
under the rules of PROTOCOL.md section 7, doing its checks once per batch, not per record:

* a batch is handed out only while its partition's lease covers it (``now < deadline``); a
  lease that lapses stops hand-out at the lapse: what was not handed out is dropped and
  fetched again once the lease is renewed (or forgotten if the claim is gone);
* at-most-once hands out only records the log has confirmed (``lease.amo_confirmed``), and
  asks for the next window as soon as it starts on the last confirmed one, so the
  confirmation of window k+1 travels while window k is handed out; a crash loses at most
  the rest of one window and the whole next one;
* windows are sized by time as well as count: about ``window_ms`` of this partition's
  measured hand-out rate, at most ``window_records``;
* it tells the fetching shell which partitions to read and where to seek (:attr:`plan`).

The caller passes the time (``now``, on the engine's monotonic clock) into every call.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from marshal_py.client.lease import PartitionLease, offset_of

TP = tuple[str, int]

#: The first at-most-once window of a partition, before its hand-out rate is known.
FIRST_WINDOW_RECORDS = 16


class _Feed:
    """Fetched, not yet handed-out records of one leased partition."""

    __slots__ = (
        "asked_at",
        "asked_from",
        "batches",
        "expect",
        "handed_since_ask",
        "i",
        "known_last",
        "lapsed",
        "lease",
        "next_position",
        "records",
        "resume_at",
        "stalled_at",
        "waited",
        "window",
    )

    def __init__(self, lease: PartitionLease, first_window: int) -> None:
        self.lease = lease
        #: Further fetched batches: (records, next position).
        self.batches: deque[tuple[Sequence[Any], int]] = deque()
        #: The batch being handed out and the index of its next record.
        self.records: Sequence[Any] = ()
        self.i = 0
        self.next_position = lease.start
        #: The offset the next fetched record must have at least: a fetcher that goes back
        #: (a seek it lost) never makes a record go out twice.
        self.expect = lease.start
        #: The lease lapsed: nothing is fetched until it is renewed; fetching then resumes
        #: at ``resume_at``.
        self.lapsed = False
        self.resume_at = lease.start
        #: The highest offset known to exist (fetched, or below the high watermark).
        self.known_last = lease.start - 1
        # At-most-once window sizing.
        self.window = first_window
        self.asked_from = lease.amo_confirmed
        self.asked_at = 0.0
        self.handed_since_ask = 0
        #: When hand-out began waiting for a confirmation (None: it is not waiting), and how
        #: long it waited since the last ask: the rate of a window leaves that time out.
        self.stalled_at: float | None = None
        self.waited = 0.0

    def has_records(self) -> bool:
        return self.i < len(self.records) or bool(self.batches)

    def current(self) -> bool:
        """Make ``records[i]`` the next record to hand out; False when none is buffered."""
        if self.i < len(self.records):
            return True
        while self.batches:
            self.records, self.next_position = self.batches.popleft()
            self.i = 0
            if self.records:
                return True
            # Offsets that hold no record (transaction markers, aborted or compacted records)
            # and come after every record handed out: the position passes them.
            self.lease.cursor.handed((), self.next_position)
        self.records, self.i = (), 0
        return False

    def untaken_from(self) -> int:
        """The offset of the first buffered record not handed out (or where fetching is)."""
        if self.current():
            return offset_of(self.records[self.i])
        return max(self.next_position, self.lease.cursor.position)

    def drop_buffer(self) -> None:
        self.batches.clear()
        self.records, self.i = (), 0


class HandOut:
    """Fetched records of the leased partitions, handed out batch by batch.

    ``mode``: ``"alo"`` or ``"amo"``. ``wake``: called when at-most-once wants a window
    confirmed (the coordination side confirms it). Single-threaded: the delivering thread.
    """

    def __init__(self, mode: str, *, window_records: int, window_ms: int,
                 wake: Callable[[], None] = lambda: None) -> None:
        self.amo = mode == "amo"
        self.window_records = window_records
        self.window_ms = window_ms
        self.wake = wake
        self.feeds: dict[TP, _Feed] = {}
        self._version = -1
        #: What the fetching shell must do next: (partitions to read, seeks), or None.
        self.plan: tuple[set[TP], list[tuple[TP, int]]] | None = None
        #: How many feeds are paused because their lease lapsed.
        self.lapses = 0
        #: What the last :meth:`take` handed out: (lease, first offset, last offset) per
        #: partition, so a commit of the whole batch costs O(partitions).
        self.slices: list[tuple[PartitionLease, int, int]] = []
        self._seeks: list[tuple[TP, int]] = []
        #: The turn of the partitions with buffered records (:meth:`take` drops the others
        #: from it, :meth:`add` puts them back): a take when nothing is buffered is O(1).
        self._order: deque[TP] = deque()

    # -- following the engine's leases ----------------------------------------------------------

    def is_current(self, version: int) -> bool:
        """True when the leases of ``version`` are those followed last."""
        return version == self._version

    def follow(self, leases: dict[TP, PartitionLease], version: int) -> None:
        """Take the engine's current leases (``version`` changes with every new dict)."""
        if version == self._version:
            return
        self._version = version
        changed = False
        for key in [k for k, f in self.feeds.items() if leases.get(k) is not f.lease]:
            del self.feeds[key]
            changed = True
        self.lapses = sum(1 for f in self.feeds.values() if f.lapsed)
        for key, lease in leases.items():
            if key not in self.feeds and not lease.revoked:
                self.feeds[key] = _Feed(lease, min(self.window_records, FIRST_WINDOW_RECORDS))
                self._seeks.append((key, lease.start))
                changed = True
        if changed:
            self._replan()

    def _replan(self) -> None:
        reading = {k for k, f in self.feeds.items() if not f.lapsed}
        # Seeks of a plan not taken yet stay in it (a later seek of a partition wins): two
        # changes between two takes must not lose the first one's seeks.
        pending = self.plan[1] if self.plan is not None else []
        self.plan = (reading, pending + self._seeks)
        self._seeks = []
        self._order = deque(k for k in self._order if k in self.feeds)

    def take_plan(self) -> tuple[set[TP], list[tuple[TP, int]]] | None:
        """The pending change of what to fetch (partitions, seeks), once."""
        plan, self.plan = self.plan, None
        return plan

    # -- fetched records ----------------------------------------------------------------------

    def add(self, key: TP, records: Sequence[Any], next_position: int,
            high_watermark: int | None = None) -> None:
        """A fetched batch of ``key`` (records in offset order; none when the fetch only
        passed offsets that hold no record, up to ``next_position``)."""
        feed = self.feeds.get(key)
        if feed is None or feed.lapsed or feed.lease.revoked:
            return  # fetched before the plan changed: not ours to hand out
        if records and offset_of(records[0]) < feed.expect:
            records = records[bisect_left(records, feed.expect, key=offset_of):]
            next_position = max(next_position, feed.expect)
        if records:
            feed.expect = max(feed.expect, offset_of(records[-1]) + 1, next_position)
            feed.batches.append((records, next_position))
            feed.known_last = max(feed.known_last, offset_of(records[-1]))
            if key not in self._order:
                self._order.append(key)
        elif next_position > feed.expect:
            # The fetch passed offsets that hold no record: the committed position may pass
            # them once everything buffered before them is handed out (and committed).
            feed.expect = next_position
            if feed.has_records():
                feed.batches.append(((), next_position))
            else:
                feed.next_position = max(feed.next_position, next_position)
                feed.lease.cursor.handed((), next_position)
        if high_watermark is not None:
            feed.known_last = max(feed.known_last, high_watermark - 1)

    def buffered(self) -> bool:
        """True while some fetched record waits to be handed out (it may wait for a lease
        renewal or an at-most-once confirmation)."""
        return any(f.has_records() for f in self.feeds.values())

    # -- handing out ----------------------------------------------------------------------------

    def take(self, max_records: int, now: float) -> list[Any]:
        """Up to ``max_records`` records that may be handed out at ``now``, committed as
        handed out in at-most-once mode. O(partitions) Python work, none per record."""
        out: list[Any] = []
        slices: list[tuple[PartitionLease, int, int]] = []
        self.slices = slices
        order = self._order
        for _ in range(len(order)):
            if len(out) >= max_records:
                break
            key = order.popleft()
            feed = self.feeds.get(key)
            if feed is None or not feed.current():
                continue  # out of the turn until :meth:`add` brings records
            order.append(key)
            if not self._lease_covers(feed, now):
                continue
            limit = len(feed.records)
            if self.amo:
                limit = self._confirmed_end(feed, limit)
            end = min(limit, feed.i + max_records - len(out))
            if end <= feed.i:
                if self.amo:  # all that was confirmed is out: the next window is due now
                    self._stall(feed, now)
                continue
            batch = feed.records[feed.i:end]
            next_position = feed.next_position if end == len(feed.records) \
                else offset_of(feed.records[end])
            if self.amo:
                feed.lease.cursor.handed_done(batch, next_position)
                feed.handed_since_ask += len(batch)
                self._unstall(feed, now)
            else:
                feed.lease.cursor.handed(batch, next_position)
            feed.i = end
            out.extend(batch)
            slices.append((feed.lease, offset_of(batch[0]), offset_of(batch[-1])))
            if self.amo:
                self._ask_window(feed, now, offset_of(batch[-1]))
        return out

    def take_partition(self, max_records: int, now: float
                       ) -> tuple[PartitionLease, list[Any], int] | None:
        """Exactly-once: up to ``max_records`` records of ONE partition (the next in turn
        whose lease covers ``now``), with its lease and the position after them; None when
        none may go out. They count as handed out (committed by a transaction, or given
        back with :meth:`give_back`)."""
        for _ in range(len(self._order)):
            key = self._order[0]
            self._order.rotate(-1)
            feed = self.feeds.get(key)
            if feed is None or not feed.current() or not self._lease_covers(feed, now):
                continue
            out: list[Any] = []
            next_position = feed.next_position
            while len(out) < max_records and feed.current():
                end = min(len(feed.records), feed.i + max_records - len(out))
                chunk = feed.records[feed.i:end]
                next_position = feed.next_position if end == len(feed.records) \
                    else offset_of(feed.records[end])
                feed.lease.cursor.handed(chunk, next_position)
                feed.i = end
                out.extend(chunk)
            return feed.lease, out, next_position
        return None

    def give_back(self, lease: PartitionLease, offset: int) -> None:
        """Records of ``lease`` from ``offset`` on were handed out and not committed (an
        aborted transaction): fetch and hand them out again, if the claim is still held."""
        lease.cursor.rewind(offset)
        key = (lease.topic, lease.partition)
        feed = self.feeds.get(key)
        if feed is None or feed.lease is not lease:
            return  # gone: its next owner starts at the committed offset
        if feed.lapsed:
            feed.resume_at = min(feed.resume_at, offset)  # fetched again once renewed
            return
        feed.drop_buffer()
        feed.expect = feed.next_position = offset
        self._seeks.append((key, offset))
        self._replan()

    def next_batch(self, now: float) -> tuple[_Feed, int] | None:
        """For iteration: the feed whose records may go out now and the index past the last
        of them (the lease is checked again per record by the caller)."""
        for _ in range(len(self._order)):
            key = self._order[0]
            self._order.rotate(-1)
            feed = self.feeds.get(key)
            if feed is None or not feed.current() or not self._lease_covers(feed, now):
                continue
            limit = len(feed.records)
            if self.amo:
                limit = self._confirmed_end(feed, limit)
                if limit <= feed.i:
                    self._stall(feed, now)
                    continue
                self._unstall(feed, now)
                self._ask_window(feed, now, offset_of(feed.records[feed.i]))
            return feed, limit
        return None

    def _lease_covers(self, feed: _Feed, now: float) -> bool:
        """True when the feed's lease lets records out at ``now``; otherwise the lapse is
        handled (buffer dropped, fetching paused or stopped)."""
        if now < feed.lease.deadline:
            return True
        self.lapse(feed)
        return False

    def lapse(self, feed: _Feed) -> None:
        """The lease of ``feed`` stopped covering it: drop what was not handed out."""
        key = (feed.lease.topic, feed.lease.partition)
        if feed.lease.revoked:
            self.feeds.pop(key, None)
        else:
            feed.resume_at = feed.untaken_from()
            feed.lapsed = True
            self.lapses += 1
        feed.drop_buffer()
        self._replan()

    def renew_lapsed(self, now: float) -> None:
        """Resume fetching partitions whose lease was renewed after a lapse."""
        resumed = False
        for key, feed in list(self.feeds.items()):
            if feed.lapsed and now < feed.lease.deadline:
                feed.lapsed = False
                feed.expect = feed.resume_at
                self._seeks.append((key, feed.resume_at))
                resumed = True
            elif feed.lapsed and feed.lease.revoked:
                del self.feeds[key]
                resumed = True
        if resumed:
            self._replan()
        self.lapses = sum(1 for f in self.feeds.values() if f.lapsed)

    # -- at-most-once windows ---------------------------------------------------------------

    @staticmethod
    def _confirmed_end(feed: _Feed, limit: int) -> int:
        """Index past the last buffered record the log confirmed."""
        confirmed = feed.lease.amo_confirmed
        if offset_of(feed.records[limit - 1]) <= confirmed:
            return limit
        return bisect_right(feed.records, confirmed, lo=feed.i, hi=limit, key=offset_of)

    def _ask_window(self, feed: _Feed, now: float, begun: int) -> None:
        """Ask for the next window once the last asked one is confirmed and its hand-out
        has begun (``begun``: the offset being or last handed out), so at most two windows
        are ever confirmed ahead of hand-out."""
        lease = feed.lease
        if lease.amo_wanted > lease.amo_confirmed:
            return  # a request is on its way
        if lease.amo_wanted >= lease.start and begun <= feed.asked_from:
            return  # the last confirmed window has not begun: it is the second one ahead
        want = min(feed.known_last, lease.amo_confirmed + self._window_size(feed, now))
        if want <= lease.amo_confirmed:
            return
        feed.asked_from = lease.amo_confirmed
        lease.amo_wanted = want
        self.wake()

    def _stall(self, feed: _Feed, now: float) -> None:
        """Records wait for a confirmation: ask for the window now, note since when."""
        if feed.stalled_at is None:
            feed.stalled_at = now
        self._ask_window(feed, now, feed.lease.amo_confirmed + 1)

    @staticmethod
    def _unstall(feed: _Feed, now: float) -> None:
        if feed.stalled_at is not None:
            feed.waited += now - feed.stalled_at
            feed.stalled_at = None

    def _window_size(self, feed: _Feed, now: float) -> int:
        """About ``window_ms`` of this partition's hand-out rate, at most ``window_records``
        and at most eight times the previous window. The rate leaves out the time hand-out
        waited for confirmations (a window too small for the round trip would otherwise stay
        small), but not the time it waited for records (a partition that trickles keeps
        small windows, so a crash loses little of it)."""
        elapsed = now - feed.asked_at - feed.waited
        if feed.asked_at and feed.handed_since_ask:
            by_rate = int(feed.handed_since_ask * self.window_ms / max(elapsed, 1e-3))
            feed.window = max(1, min(self.window_records, by_rate, 8 * feed.window))
        feed.asked_at = now
        feed.handed_since_ask = 0
        feed.waited = 0.0
        return feed.window

    def buffered_count(self) -> int:
        """How many fetched records wait to be handed out."""
        return sum(len(f.records) - f.i + sum(len(b) for b, _ in f.batches)
                   for f in self.feeds.values())

    def waiting_for_confirmation(self) -> bool:
        """At-most-once: some buffered records wait for the log to confirm them."""
        return self.amo and any(
            f.has_records() and f.lease.amo_wanted > f.lease.amo_confirmed
            for f in self.feeds.values())
