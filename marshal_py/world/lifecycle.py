"""Group membership and the group offset lifecycle (after KIP-211). Pure.

The rationalizer keeps one :class:`GroupLife` per (group, topic): every record about a topic
lives on one coordination partition, so that pair is the unit every reader agrees on. A pair
is **Stable** while any member is live, **Empty** from the moment its last member left or went
stale, and **Dead** once it has been Empty for longer than the offset retention: then all its
offsets expire together (the rationalizer forgets the pair before applying the next record
about it). A group consuming several topics is Stable when any of its pairs is.

Cost: the rationalizer asks before every record about a pair whether one of its members went
stale or the pair died. Each member's staleness deadline (last sign of life + 2 HI) sits in a
min-heap, re-armed lazily: a sign of life only moves the member's time, and when its heap
entry comes due the entry is pushed again at the member's current deadline. So the question
costs one comparison with the heap's top (:attr:`GroupLife.due`) until a deadline passes, and
a member costs O(log M) about once per 2 HI, whatever the group's size M.

The views members ask for on every step are kept as cheap: the sorted client ids of the
tracked members (:meth:`GroupLife.rank`: how many live client ids, and where one stands among
them, by bisection), the live list (cached until the membership changes) and the member that
joined first among those that announced a heartbeat interval (a lazily cleaned min-heap of
join times). They are exact whenever every tracked member is live at the asked time, which
the deadline heap tells in O(1) after re-arming the entries that came due (a view never
forgets a member: only a record does); otherwise they fall back to a scan.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort

from marshal_py.world.group_views import GroupLifecycle, GroupState, MemberRank
from marshal_py.world.state import Owner

__all__ = ["DEFAULT_OFFSETS_RETENTION_MS", "NEVER", "GroupLife", "GroupLifecycle",
           "GroupState", "MemberRank"]

#: Default offset retention: an Empty group's offsets live this long (Kafka's default too).
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000
#: Later than any broker time.
NEVER = 2**63


class GroupLife:
    """Members of one (group, topic) pair and when the pair last had one.

    ``members`` maps each tracked member to its last sign of life (broker time);
    ``capacities`` the most partitions it announced it would hold; ``intervals`` the
    heartbeat interval it announced (members that announced none — Go members, older
    marshal_py versions — are judged by the reader's configured interval ``hi``); ``joined``
    the first sign of life since it became tracked. ``gone_at_ms`` is the latest time a
    member that is no longer tracked stopped being live (it left, or went stale and was
    pruned). ``last_checkpoint_ms`` is the broker time of the newest Checkpoint record of the
    pair; ``stable_since_ms`` when it last turned Stable.

    ``hi`` (the configured interval of the group) and ``retention_ms`` are fixed for the
    life of the object: every reader of the pair judges by the same ones.
    """

    __slots__ = (
        "_armed",
        "_by_join",
        "_clients",
        "_first",
        "_heap",
        "_instances",
        "_live_cache",
        "_version",
        "capacities",
        "due",
        "gone_at_ms",
        "hi",
        "intervals",
        "joined",
        "last_checkpoint_ms",
        "members",
        "min_interval",
        "retention_ms",
        "shared",
        "stable_since_ms",
    )

    def __init__(self, hi: int = 10_000,
                 retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS) -> None:
        self.members: dict[Owner, int] = {}
        self.capacities: dict[Owner, int] = {}
        self.intervals: dict[Owner, int] = {}
        self.joined: dict[Owner, int] = {}
        self.gone_at_ms: int | None = None
        self.last_checkpoint_ms: int | None = None
        self.stable_since_ms: int | None = None
        self.hi = hi
        self.retention_ms = retention_ms
        #: The shortest interval a member announced in this life (NEVER: none).
        self.min_interval = NEVER
        #: Until this broker time (inclusive) no member goes stale and the pair cannot die:
        #: :meth:`settle` has nothing to do. (Conservative: it may be earlier.)
        self.due = NEVER
        #: (deadline, member) entries; ``_armed[member]`` is the deadline of the member's one
        #: live entry, never later than its true deadline (others are left-overs, skipped).
        self._heap: list[tuple[int, Owner]] = []
        self._armed: dict[Owner, int] = {}
        #: Bumped whenever the set of members (or an interval) changes: keys ``_live_cache``.
        self._version = 0
        self._live_cache: tuple[int, tuple[Owner, ...]] | None = None
        #: (live tuple, the same members by join time): :meth:`live_by_join`'s last answer.
        self._by_join: tuple[tuple[Owner, ...], tuple[Owner, ...]] = ((), ())
        #: Tracked instances per client id, and how many client ids have more than one (only
        #: then does a sign of life change which instance :meth:`live` shows).
        self._instances: dict[str, set[Owner]] = {}
        self.shared = 0
        #: The keys of ``_instances``, sorted (the client ids of the tracked members).
        self._clients: list[str] = []
        #: (joined, member) of members that announced an interval; entries of members
        #: forgotten, re-joined or without an interval since are left-overs, skipped.
        self._first: list[tuple[int, Owner]] = []

    def configure(self, hi: int, retention_ms: int) -> None:
        """Judge by ``hi`` and ``retention_ms`` (a life read from a checkpoint)."""
        self.hi, self.retention_ms = hi, retention_ms
        self.rebuild()

    # -- the deadline index ------------------------------------------------------------------

    def deadline(self, member: Owner) -> int:
        """The last broker time at which ``member`` is live."""
        return self.members[member] + 2 * self.intervals.get(member, self.hi)

    def _arm(self, member: Owner) -> None:
        """(Re-)arm ``member`` at its deadline if that is earlier than its armed entry."""
        deadline = self.deadline(member)
        armed = self._armed.get(member)
        if armed is None or deadline < armed:
            self._armed[member] = deadline
            heapq.heappush(self._heap, (deadline, member))
            if deadline < self.due:
                self.due = deadline

    def _refresh_due(self) -> None:
        if self._heap:
            self.due = self._heap[0][0]
        elif self.gone_at_ms is not None:
            self.due = self.gone_at_ms + self.retention_ms
        else:
            self.due = NEVER

    def rebuild(self) -> None:
        """Index the members from scratch (after they were set from a checkpoint)."""
        self._heap = sorted((self.deadline(m), m) for m in self.members)
        self._armed = {m: d for d, m in self._heap}
        self._instances = {}
        for member in self.members:
            self._instances.setdefault(member.client_id, set()).add(member)
        self.shared = sum(1 for n in self._instances.values() if len(n) > 1)
        self._clients = sorted(self._instances)
        self.min_interval = min(self.intervals.values(), default=NEVER)
        self._index_first()
        self._version += 1
        self._refresh_due()

    def _index_first(self) -> None:
        self._first = [(self.joined[m], m) for m in self.intervals
                       if m in self.members and m in self.joined]
        heapq.heapify(self._first)

    def _all_live(self, now_ms: int, hi: int) -> bool:
        """True when every tracked member is live at ``now_ms`` judged by ``hi`` (then the
        indexed views are exact). Re-arms the entries that came due for members seen since:
        the index only, no member is forgotten (records do that, in :meth:`settle`)."""
        if hi != self.hi or len(self._armed) != len(self.members):
            return False
        heap, armed = self._heap, self._armed
        while heap and heap[0][0] < now_ms:
            entry, member = heap[0]
            if armed.get(member) != entry:
                heapq.heappop(heap)
                continue
            deadline = self.deadline(member)
            if deadline < now_ms:
                return False  # stale by now; forgotten at the pair's next record
            armed[member] = deadline
            heapq.heapreplace(heap, (deadline, member))
        return True

    def next_deadline(self, now_ms: int, hi: int) -> int | None:
        """The earliest last live time at or after ``now_ms`` of a tracked member (judged by
        the interval it announced, else ``hi``); None: none. Exactly what a scan of every
        member gives, in O(log M) amortised: entries that came due or lag their member's
        deadline are re-armed there (the index only; members stale by ``now_ms`` are
        stepped over, forgotten at the pair's next record as before)."""
        if hi != self.hi or len(self._armed) != len(self.members):
            later = [d for m, seen in self.members.items()
                     if (d := seen + 2 * self.intervals.get(m, hi)) >= now_ms]
            return min(later) if later else None
        heap, armed = self._heap, self._armed
        stale: list[tuple[int, Owner]] = []
        found: int | None = None
        while heap:
            entry, member = heap[0]
            if armed.get(member) != entry:
                heapq.heappop(heap)  # a left-over
                continue
            deadline = self.deadline(member)
            if deadline < now_ms:
                stale.append(heapq.heappop(heap))  # put back below, entry unchanged
            elif deadline == entry:
                found = entry  # every other entry is at or before its own deadline
                break
            else:
                armed[member] = deadline
                heapq.heapreplace(heap, (deadline, member))
        for item in stale:
            heapq.heappush(heap, item)
        return found

    def settle(self, now_ms: int) -> bool:
        """Before a record at ``now_ms``: stop tracking the members stale by then, and say
        whether the pair is Dead (Empty for longer than the retention), in which case the
        caller forgets it. Only needed when ``now_ms > due``."""
        heap, armed, members = self._heap, self._armed, self.members
        while heap and heap[0][0] < now_ms:
            entry, member = heapq.heappop(heap)
            if armed.get(member) != entry:
                continue  # a left-over: the member was forgotten or re-armed earlier
            deadline = self.deadline(member)
            if deadline < now_ms:
                self._forget(member)
                self.gone_at_ms = deadline if self.gone_at_ms is None \
                    else max(self.gone_at_ms, deadline)
            else:
                armed[member] = deadline
                heapq.heappush(heap, (deadline, member))
        self._refresh_due()
        # Every member left is live at ``now_ms``. With none, the pair turned Empty at
        # ``gone_at_ms`` (the latest end of a member), so it is Dead past the retention.
        return not members and self.gone_at_ms is not None and \
            now_ms - self.gone_at_ms > self.retention_ms

    # -- transitions -------------------------------------------------------------------------

    def interval_of(self, member: Owner, hi: int) -> int:
        """``member``'s heartbeat interval: the one it announced, else ``hi``."""
        return self.intervals.get(member, hi)

    def seen(self, member: Owner, ts: int) -> None:
        """``member`` showed a sign of life at ``ts`` (right after :meth:`settle` at ``ts``:
        every tracked member is live then)."""
        previous = self.members.get(member)
        if previous is None:
            if not self.members:
                self.stable_since_ms = ts
            self.joined[member] = ts
            self.members[member] = ts
            instances = self._instances.get(member.client_id)
            if instances is None:
                instances = self._instances[member.client_id] = set()
                insort(self._clients, member.client_id)
            instances.add(member)
            if len(instances) == 2:
                self.shared += 1
            self._version += 1
            self._arm(member)
            return
        self.members[member] = ts
        if ts < previous:  # a broker clock that went back: the deadline moved earlier
            self._arm(member)
        if self.shared:
            self._live_cache = None  # which instance of a client was seen last may change

    def announced(self, member: Owner, interval_ms: int) -> None:
        """``member`` announced its heartbeat interval (0: none)."""
        if interval_ms > 0:
            if self.intervals.get(member) == interval_ms:
                return
            self.intervals[member] = interval_ms
            if interval_ms < self.min_interval:
                self.min_interval = interval_ms
            joined = self.joined.get(member)
            if joined is not None and member in self.members:
                heapq.heappush(self._first, (joined, member))
                if len(self._first) > 2 * len(self.members) + 16:
                    self._index_first()  # drop the left-overs
        elif self.intervals.pop(member, None) is None:
            return
        self._version += 1
        if member in self.members:
            self._arm(member)

    def _forget(self, member: Owner) -> int | None:
        """Stop tracking ``member``; its last sign of life, or None if it was not tracked."""
        self.capacities.pop(member, None)
        self.intervals.pop(member, None)
        self.joined.pop(member, None)
        self._armed.pop(member, None)
        seen = self.members.pop(member, None)
        if seen is not None:
            self._version += 1
            instances = self._instances[member.client_id]
            instances.discard(member)
            if not instances:
                del self._instances[member.client_id]
                del self._clients[bisect_left(self._clients, member.client_id)]
            elif len(instances) == 1:
                self.shared -= 1
        return seen

    def left(self, member: Owner, ts: int) -> None:
        """``member`` announced it left at ``ts``."""
        if self._forget(member) is not None:
            self.gone_at_ms = ts if self.gone_at_ms is None else max(self.gone_at_ms, ts)
            if not self.members:
                self._refresh_due()

    def replaced(self, member: Owner) -> None:
        """A newer process of ``member``'s client took over: the old one is not a member."""
        self._forget(member)

    def instances_of(self, client_id: str) -> list[Owner]:
        """The tracked members (processes) of ``client_id``."""
        return list(self._instances.get(client_id, ()))

    def gone(self, ts: int) -> None:
        """The pair's retention clock restarts at ``ts`` (an administrator's reset)."""
        self.gone_at_ms = ts if self.gone_at_ms is None else max(self.gone_at_ms, ts)
        if not self.members:
            self._refresh_due()

    def forget_live_view(self) -> None:
        """A sign of life may change which instance of a client :meth:`live` shows."""
        self._live_cache = None

    # -- views -------------------------------------------------------------------------------

    def _live_at(self, member: Owner, seen: int, now_ms: int, hi: int) -> bool:
        return now_ms - seen <= 2 * self.intervals.get(member, hi)

    def live(self, now_ms: int, hi: int) -> list[Owner]:
        """Live members at ``now_ms``: one per client id (the one seen last), sorted."""
        return list(self.live_tuple(now_ms, hi))

    def live_tuple(self, now_ms: int, hi: int) -> tuple[Owner, ...]:
        """:meth:`live` as a tuple, the same object while the live members stay the same
        (callers may key their own caches on it)."""
        everyone = bool(self._heap) and self._all_live(now_ms, hi)
        if everyone:
            # Every tracked member is live, and which instance of a client was seen last
            # changes only with a new sign of life.
            cached = self._live_cache
            if cached is not None and cached[0] == self._version:
                return cached[1]
        newest: dict[str, tuple[int, Owner]] = {}
        for member, ts in self.members.items():
            if self._live_at(member, ts, now_ms, hi) and (
                    member.client_id not in newest or (ts, member) > newest[member.client_id]):
                newest[member.client_id] = (ts, member)
        found = tuple(sorted(member for _, member in newest.values()))
        if everyone:
            self._live_cache = (self._version, found)
        return found

    def live_by_join(self, now_ms: int, hi: int) -> tuple[Owner, ...]:
        """The members of :meth:`live_tuple`, in the order they joined (the first sign of
        life since tracked; ties: the lowest owner). Sorted once per live tuple."""
        live = self.live_tuple(now_ms, hi)
        cached = self._by_join
        if cached[0] is live:
            return cached[1]
        joined, members = self.joined, self.members
        ordered = tuple(sorted(live, key=lambda m: (joined.get(m, members[m]), m)))
        self._by_join = (live, ordered)
        return ordered

    def rank(self, client_id: str, now_ms: int, hi: int) -> MemberRank:
        """Where ``client_id`` stands among the client ids live at ``now_ms`` (see
        :class:`MemberRank`). O(log M) while every tracked member is live."""
        if self._all_live(now_ms, hi):
            clients = self._clients
        else:
            clients = sorted({m.client_id for m in self.live_tuple(now_ms, hi)})
        at = bisect_left(clients, client_id)
        present = at < len(clients) and clients[at] == client_id
        return MemberRank(len(clients) + (0 if present else 1), at, present)

    def first_announced(self, now_ms: int, hi: int,
                        excluding_client: str | None = None) -> Owner | None:
        """Of the live members at ``now_ms`` that announced a heartbeat interval (leaving
        ``excluding_client``'s out), the one that joined first (ties: the lowest), or None."""
        first = self._first
        joined, members, intervals = self.joined, self.members, self.intervals
        while first:
            at, member = first[0]
            if member in intervals and member in members and joined.get(member) == at:
                break
            heapq.heappop(first)  # a left-over
        if not self.shared and len(joined) == len(members) and self._all_live(now_ms, hi):
            if not first:
                return None  # nobody tracked announced one
            if first[0][1].client_id != excluding_client:
                return first[0][1]
        live = [m for m in self.live_tuple(now_ms, hi)
                if m in intervals and m.client_id != excluding_client]
        if not live:
            return None
        return min(live, key=lambda m: (joined.get(m, members[m]), m))

    def empty_since(self, now_ms: int, hi: int) -> int | None:
        """When the pair turned Empty, or None while a member is live at ``now_ms``."""
        if any(self._live_at(m, ts, now_ms, hi) for m, ts in self.members.items()):
            return None
        ends = [ts + 2 * self.interval_of(m, hi) for m, ts in self.members.items()]
        if self.gone_at_ms is not None:
            ends.append(self.gone_at_ms)
        return max(ends) if ends else None

    def last_sign_ms(self) -> int | None:
        """The newest sign of life or departure (a lower bound of :meth:`empty_since`)."""
        times = list(self.members.values())
        if self.gone_at_ms is not None:
            times.append(self.gone_at_ms)
        return max(times) if times else None

    def is_dead(self, now_ms: int, hi: int, retention_ms: int) -> bool:
        """Empty for longer than ``retention_ms`` at ``now_ms``."""
        last = self.last_sign_ms()
        if last is None or now_ms - last <= retention_ms:
            return False  # fast path: never Dead within the retention of the newest sign
        since = self.empty_since(now_ms, hi)
        return since is not None and now_ms - since > retention_ms

    def view(self, group: str, topic: str, now_ms: int, hi: int,
             retention_ms: int) -> GroupLifecycle:
        """The pair's lifecycle as of ``now_ms``."""
        live = self.live(now_ms, hi)
        if live:
            return GroupLifecycle(group, topic, GroupState.STABLE, tuple(live),
                                  self.stable_since_ms, None,
                                  tuple(self.intervals.get(m) for m in live))
        since = self.empty_since(now_ms, hi)
        expires = since + retention_ms if since is not None else None
        state = (GroupState.DEAD if since is not None and now_ms - since > retention_ms
                 else GroupState.EMPTY)
        return GroupLifecycle(group, topic, state, (), since, expires)
