"""How much a share consumer acquires at a time, and how many members share a partition. Pure
(time is an input, in monotonic seconds).

Two figures are measured from the consumer's own hand-outs:

* its **rate**: records handed out per second of wall time, first measured as soon as
  :data:`PACE_SAMPLE_RECORDS` were handed out, then every :data:`RATE_SAMPLE_S`. An
  acquisition covers about :data:`ACQUIRE_AHEAD_S` of it (at least ``batch_size``, at most
  one region); until the pace is known, :data:`PACE_SAMPLE_RECORDS` (at most
  ``batch_size``), and the consumer acquires nothing ahead;
* its application's **pace**: records handed out per second of the application's own time,
  that is wall time minus the time the consumer spent fetching (waiting for records,
  acquiring, reading them). It tells what a record costs the handler, whatever the rest of
  the group does.

When the handler takes records faster than :data:`ONE_MEMBER_PACE` (under 0.2 ms each), a
partition is better read by one member than shared: sharing it costs every member
coordination per record (the hand-over of each region, reading the others' acquisitions)
that exceeds what the handler itself spends, so eight members sharing one partition at zero
work read a sixth of what one reads (BENCHMARKS.md, section 3). Such a member then (until
its pace falls under half of that) counts one member per partition (``sharing`` 1: the
regions of a partition are all preferred by one member, a different one per partition) and
acquires up to half the in-flight limit at a time. A slower handler shares every partition
with every live member, as before. The choice is a preference only (PROTOCOL.md 8.3):
members that choose differently for a moment race for some records, and the log decides.

A member that ran dry and acquired nothing several times in a row (the window held by
others, as when another member reads the partition alone) looks at the log less often: it
waits :data:`STARVED_WAIT_S`, doubling each time up to one tick, instead of waking for every
coordination record.
"""

from __future__ import annotations

#: How much consumption one acquisition covers (at the measured rate), and how often the rate
#: is sampled.
ACQUIRE_AHEAD_S = 0.2
RATE_SAMPLE_S = 0.1
#: Hand-outs a pace sample needs (fewer say little about the handler).
PACE_SAMPLE_RECORDS = 50
#: Records/s of the application's own time at or above which one member reads a partition;
#: a member that chose so shares again only below half of it (no flapping near the line).
ONE_MEMBER_PACE = 5_000.0
#: How long the coordination thread first waits on the log for records that free the
#: in-flight window when its member ran dry and could acquire nothing.
STARVED_WAIT_S = 0.05


class AcquisitionWindow:
    """The measured rate and pace of one share consumer, and what follows from them. The
    fetching thread brackets each fetch with :meth:`fetch_began` / :meth:`fetch_ended`; the
    sizing calls come with the consumer's lock held."""

    def __init__(self, now_s: float) -> None:
        #: Hand-outs per second of wall time (smoothed), None before the first sample.
        self.rate: float | None = None
        #: Hand-outs per second of the application's own time (smoothed), None before the
        #: first sample.
        self.pace: float | None = None
        self._rate_mark = (now_s, 0)
        self._pace_mark = (now_s, 0, 0.0)
        self._fetch_s = 0.0
        self._fetching_since: float | None = None
        #: Acquisitions in a row that found nothing while nothing was waiting to be fetched.
        self.empty_streak = 0
        #: Whether the pace last crossed ONE_MEMBER_PACE upwards (one member per partition).
        self._alone = False

    # -- measuring ------------------------------------------------------------------------------

    def fetch_began(self, now_s: float) -> None:
        """The fetching thread starts a fetch (waiting for records counts as fetching)."""
        self._fetching_since = now_s

    def fetch_ended(self, now_s: float) -> None:
        """The fetch started by :meth:`fetch_began` ended."""
        if self._fetching_since is not None:
            self._fetch_s += now_s - self._fetching_since
            self._fetching_since = None

    def _fetch_time(self, now_s: float) -> float:
        """Seconds spent fetching so far, the fetch under way included."""
        since = self._fetching_since
        return self._fetch_s + (now_s - since if since is not None else 0.0)

    def sample(self, now_s: float, delivered: int) -> None:
        """Take a sample of the rate (every :data:`RATE_SAMPLE_S`) and of the pace (every
        :data:`PACE_SAMPLE_RECORDS` hand-outs) when due (``delivered``: records handed out
        so far). Both count from the first hand-out: the time before it (joining, the
        first acquisition, others holding the records) is nobody's handling, and says
        nothing of how fast records are taken."""
        fetch_s = self._fetch_time(now_s)
        if delivered == 0:
            self._rate_mark = (now_s, 0)
            self._pace_mark = (now_s, 0, fetch_s)
            return
        mark_s, mark_n = self._rate_mark
        elapsed = now_s - mark_s
        # The first sample as soon as a pace sample's worth was handed out: a fast
        # application need not wait RATE_SAMPLE_S in batches of batch_size.
        first = self.rate is None and delivered - mark_n >= PACE_SAMPLE_RECORDS
        if elapsed >= RATE_SAMPLE_S or (first and elapsed > 0):
            rate = (delivered - mark_n) / elapsed
            self.rate = rate if self.rate is None else 0.5 * self.rate + 0.5 * rate
            self._rate_mark = (now_s, delivered)
        pace_s, pace_n, pace_fetch = self._pace_mark
        handed = delivered - pace_n
        own_s = (now_s - pace_s) - (fetch_s - pace_fetch)
        if handed >= PACE_SAMPLE_RECORDS and own_s > 0:
            pace = handed / own_s
            self.pace = pace if self.pace is None else 0.5 * self.pace + 0.5 * pace
            self._pace_mark = (now_s, delivered, fetch_s)
            if self.pace >= ONE_MEMBER_PACE:
                self._alone = True
            elif self.pace < ONE_MEMBER_PACE / 2:
                self._alone = False

    # -- what follows -----------------------------------------------------------------------------

    def sharing(self, members: int) -> int:
        """How many members share each partition: one when the application is fast, every
        live member otherwise (and until its pace is known)."""
        return 1 if self._alone else max(1, members)

    @property
    def paced(self) -> bool:
        """Whether the application's pace is known (a sample of hand-outs was taken)."""
        return self.pace is not None

    def size(self, batch_size: int, inflight_limit: int, members: int) -> int:
        """Records to acquire at a time: about ``ACQUIRE_AHEAD_S`` of the measured rate, at
        least ``batch_size``, at most one region (the member's share of half the in-flight
        limit among the members sharing a partition). Until the pace is known, just enough
        to learn it (``PACE_SAMPLE_RECORDS``, at most ``batch_size``): a member that will
        turn out to stand by then holds few records that the member reading the partition
        waits for."""
        if self.pace is None:
            return max(1, min(batch_size, PACE_SAMPLE_RECORDS))
        ceiling = max(batch_size, inflight_limit // (2 * self.sharing(members)))
        wanted = int((self.rate or 0.0) * ACQUIRE_AHEAD_S)
        return max(batch_size, min(ceiling, wanted))

    def acquired(self, anything: bool) -> None:
        """Note whether a round of acquisitions found anything (or left anything to fetch)."""
        self.empty_streak = 0 if anything else self.empty_streak + 1

    def starved_pause(self, tick_s: float) -> float:
        """How long a member run dry waits before looking at the log again."""
        return min(tick_s, STARVED_WAIT_S * (1 << min(self.empty_streak, 8)))
