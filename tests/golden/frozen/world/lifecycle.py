"""Group membership and the group offset lifecycle (after KIP-211). Pure.

The rationalizer keeps one :class:`GroupLife` per (group, topic): every record about a topic
lives on one coordination partition, so that pair is the unit every reader agrees on. A pair
is **Stable** while any member is live, **Empty** from the moment its last member left or went
stale, and **Dead** once it has been Empty for longer than the offset retention: then all its
offsets expire together (the rationalizer forgets the pair before applying the next record
about it). A group consuming several topics is Stable when any of its pairs is.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tests.golden.frozen.world.state import Owner

#: Default offset retention: an Empty group's offsets live this long (Kafka's default too).
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000


class GroupState(enum.Enum):
    """Where a (group, topic) pair is in its lifecycle at some time."""

    STABLE = "stable"
    EMPTY = "empty"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class GroupLifecycle:
    """A view of a (group, topic) pair at ``now_ms``.

    ``since_ms``: when the pair entered its state (Stable: the first sign of life after it
    was Empty; Empty and Dead: when it turned Empty). ``expires_at_ms``: when an Empty pair
    turns (or turned) Dead; None while Stable. ``intervals``: the heartbeat interval each
    live member announced, aligned with ``members`` (None: it announced none).
    """

    group: str
    topic: str
    state: GroupState
    members: tuple[Owner, ...]
    since_ms: int | None
    expires_at_ms: int | None
    intervals: tuple[int | None, ...] = ()


@dataclass(slots=True)
class GroupLife:
    """Members of one (group, topic) pair and when the pair last had one.

    ``members`` maps each tracked member to its last sign of life (broker time);
    ``capacities`` the most partitions it announced it would hold; ``intervals`` the
    heartbeat interval it announced (members that announced none — Go members, older
    marshal_py versions — are judged by the reader's configured interval, the ``hi``
    argument of the methods below); ``joined`` the first sign of life since it became
    tracked. ``gone_at_ms`` is the latest time a member that is no longer tracked stopped
    being live (it left, or went stale and was pruned). ``last_checkpoint_ms`` is the broker
    time of the newest Checkpoint record of the pair; ``stable_since_ms`` when it last turned
    Stable.
    """

    members: dict[Owner, int] = field(default_factory=dict)
    capacities: dict[Owner, int] = field(default_factory=dict)
    intervals: dict[Owner, int] = field(default_factory=dict)
    joined: dict[Owner, int] = field(default_factory=dict)
    gone_at_ms: int | None = None
    last_checkpoint_ms: int | None = None
    stable_since_ms: int | None = None

    def interval_of(self, member: Owner, hi: int) -> int:
        """``member``'s heartbeat interval: the one it announced, else ``hi``."""
        return self.intervals.get(member, hi)

    def _live_at(self, member: Owner, seen: int, now_ms: int, hi: int) -> bool:
        return now_ms - seen <= 2 * self.intervals.get(member, hi)

    def seen(self, member: Owner, ts: int, hi: int) -> None:
        """``member`` showed a sign of life at ``ts``."""
        if not any(self._live_at(m, seen, ts, hi) for m, seen in self.members.items()):
            self.stable_since_ms = ts
        if member not in self.members:
            self.joined[member] = ts
        self.members[member] = ts

    def announced(self, member: Owner, interval_ms: int) -> None:
        """``member`` announced its heartbeat interval (0: none)."""
        if interval_ms > 0:
            self.intervals[member] = interval_ms
        else:
            self.intervals.pop(member, None)

    def _forget(self, member: Owner) -> int | None:
        """Stop tracking ``member``; its last sign of life, or None if it was not tracked."""
        self.capacities.pop(member, None)
        self.intervals.pop(member, None)
        self.joined.pop(member, None)
        return self.members.pop(member, None)

    def left(self, member: Owner, ts: int) -> None:
        """``member`` announced it left at ``ts``."""
        if self._forget(member) is not None:
            self.gone_at_ms = ts if self.gone_at_ms is None else max(self.gone_at_ms, ts)

    def replaced(self, member: Owner) -> None:
        """A newer process of ``member``'s client took over: the old one is not a member."""
        self._forget(member)

    def prune(self, now_ms: int, hi: int) -> None:
        """Stop tracking members stale at ``now_ms`` (remembering when they went stale)."""
        stale = [m for m, ts in self.members.items() if not self._live_at(m, ts, now_ms, hi)]
        for member in stale:
            gone = self.members[member] + 2 * self.interval_of(member, hi)
            self._forget(member)
            self.gone_at_ms = gone if self.gone_at_ms is None else max(self.gone_at_ms, gone)

    def live(self, now_ms: int, hi: int) -> list[Owner]:
        """Live members at ``now_ms``: one per client id (the one seen last), sorted."""
        newest: dict[str, tuple[int, Owner]] = {}
        for member, ts in self.members.items():
            if self._live_at(member, ts, now_ms, hi) and (
                    member.client_id not in newest or (ts, member) > newest[member.client_id]):
                newest[member.client_id] = (ts, member)
        return sorted(member for _, member in newest.values())

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
