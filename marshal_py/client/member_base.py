"""What every kind of group member shares: its base settings and its plumbing.

:class:`MemberConfig` holds and checks the settings every mode has (group, client and
instance ids, topics, heartbeat interval, offset reset, replay window, checkpoint interval);
:class:`GroupMember` holds the coordination channel and writes the messages every mode writes
(membership heartbeats) with the same error handling. The exclusive, share and key-shared
engines build on both.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from marshal_py.client.channel import DEFAULT_CHECKPOINT_INTERVAL_MS, CoordinationChannel
from marshal_py.client.engine_types import EngineClock, OffsetReset, PartitionSource
from marshal_py.client.topic_watch import TopicWatch
from marshal_py.errors import (
    ClientIdInUseError,
    ConfigurationError,
    CoordinationLogLostError,
    MarshalError,
)
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import MemberHeartbeat, Message
from marshal_py.protocol.messages import id_problem
from marshal_py.protocol.original import original_can_read
from marshal_py.replay.reading import DEFAULT_REPLAY_WINDOW_MS
from marshal_py.world import Outcome, Owner, Rationalizer

log = logging.getLogger(__name__)

#: Bounds of the heartbeat interval: below 10 ms the log would be flooded; above an hour a
#: crashed member would hold its work for hours.
MIN_HEARTBEAT_INTERVAL_MS = 10
MAX_HEARTBEAT_INTERVAL_MS = 3_600_000


def check_group_settings(group_id: str, client_id: str, heartbeat_interval_ms: int,
                         replay_window_ms: int, checkpoint_interval_ms: int) -> None:
    """The rules of the settings every member of a group has (times in milliseconds);
    raises :class:`ConfigurationError` naming the first one broken."""
    if not group_id:
        raise ConfigurationError("group_id is required: name the consumer group")
    if not client_id:
        raise ConfigurationError("client_id is empty")
    for kind, value in (("group_id", group_id), ("client_id", client_id)):
        problem = id_problem(kind, value)
        if problem is not None:
            raise ConfigurationError(problem)
    if not MIN_HEARTBEAT_INTERVAL_MS <= heartbeat_interval_ms <= MAX_HEARTBEAT_INTERVAL_MS:
        raise ConfigurationError(
            f"heartbeat_interval must be between {MIN_HEARTBEAT_INTERVAL_MS / 1000:g} and "
            f"{MAX_HEARTBEAT_INTERVAL_MS / 1000:g} seconds, not {heartbeat_interval_ms / 1000}")
    if replay_window_ms < 0:
        raise ConfigurationError("replay_window must be >= 0 seconds (0: everything)")
    if 0 < replay_window_ms < 4 * heartbeat_interval_ms:
        raise ConfigurationError(
            "replay_window must be 0 (everything) or at least 4 heartbeat intervals, or "
            "readers can miss live claims (PROTOCOL.md, bounded replay)")
    if checkpoint_interval_ms < 1000:
        raise ConfigurationError("checkpoint_interval must be at least 1 second")


def check_original_ids(compat: str, group_id: str, client_id: str,
                       topics: tuple[str, ...] = ()) -> None:
    """Compatibility mode: ids the original implementation can read (its records are
    slash-separated text with literal fields, so no id may hold a ``/``)."""
    if compat not in COMPAT_MODES:
        raise ConfigurationError(f"compat must be one of {', '.join(map(repr, COMPAT_MODES))} "
                                 f"or None, not {compat!r}")
    for kind, value in (("group_id", group_id), ("client_id", client_id),
                        *(("topic", t) for t in topics)):
        if "/" in value:
            raise ConfigurationError(
                f"compat={compat!r}: {kind} {value!r} holds a '/', which the original "
                "implementation cannot read; choose another name")


#: Default bound on the time between two requests of the application for records (Kafka's
#: max.poll.interval.ms default, KIP-62).
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000

#: ``compat="v1"``: write only what the original implementation reads (PROTOCOL.md 13.1).
Compat = Literal["v1"]
COMPAT_MODES: tuple[str, ...] = ("v1",)


@dataclass(frozen=True)
class MemberConfig:
    """Settings every member has, whatever its mode. Times in milliseconds."""

    group_id: str
    client_id: str
    instance_id: str
    topics: tuple[str, ...]
    heartbeat_interval_ms: int = 10_000
    offset_reset: OffsetReset = "latest"
    replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS
    checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS
    #: An application that asks for no records for longer than this gives its work up (its
    #: consumer watches; the engine suspends).
    max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    #: "v1": a group shared with the original implementation (writes only its four record
    #: types, in its text form: no membership heartbeats, no checkpoints).
    compat: Compat | None = None

    def __post_init__(self) -> None:
        check_group_settings(self.group_id, self.client_id, self.heartbeat_interval_ms,
                             self.replay_window_ms, self.checkpoint_interval_ms)
        if self.compat is not None:
            check_original_ids(self.compat, self.group_id, self.client_id, self.topics)
        if self.max_poll_interval_ms < 1:
            raise ConfigurationError("max_poll_interval must be > 0 seconds")
        if not self.instance_id:
            raise ConfigurationError("instance_id is empty")
        if not self.topics or any(not t for t in self.topics):
            raise ConfigurationError("give at least one topic to consume, none empty")
        for kind, value in (("instance_id", self.instance_id),
                            *(("topic", t) for t in self.topics)):
            problem = id_problem(kind, value)
            if problem is not None:
                raise ConfigurationError(problem)
        if self.offset_reset not in ("latest", "earliest"):
            raise ConfigurationError(
                f"offset_reset must be 'latest' or 'earliest', not {self.offset_reset!r}"
            )

    @property
    def renew_interval_ms(self) -> int:
        """How often an owner re-sends its claim (PROTOCOL.md, bounded replay)."""
        if self.replay_window_ms <= 0:
            return DEFAULT_REPLAY_WINDOW_MS // 4
        return max(self.heartbeat_interval_ms, self.replay_window_ms // 4)


ConfigT = TypeVar("ConfigT", bound=MemberConfig)


class GroupMember(Generic[ConfigT]):
    """The plumbing of one member: channel, identity, membership heartbeats, writing.

    Never starts a thread and never reads a clock or a random source of its own: the caller
    passes them. Not thread-safe.
    """

    def __init__(self, config: ConfigT, log_: CoordinationLog, rationalizer: Rationalizer,
                 source: PartitionSource, clock: EngineClock, rng: random.Random) -> None:
        self.config = config
        self.log = log_
        self.rationalizer = rationalizer
        self.source = source
        self.clock = clock
        self.rng = rng
        self.me = Owner(config.instance_id, config.client_id)
        self.channel = CoordinationChannel(log_, rationalizer, clock, config.topics,
                                           group=config.group_id,
                                           checkpoint_interval_ms=config.checkpoint_interval_ms,
                                           checkpoints=config.compat is None,
                                           compat=config.compat is not None)
        #: Broker time of this process's first membership heartbeat (set by :meth:`_join`).
        self._joined_ms: int | None = None
        self._next_member_heartbeat_ms = 0
        #: Set by the engine's ``suspend()`` (the application stopped asking for records, see
        #: max_poll_interval): it holds and claims nothing until :meth:`resume`.
        self.suspended = False
        self._closed = False
        #: Partition count of each topic when this member started (see _reset_position).
        self._first_counts: dict[str, int] = {}
        self._told_unreadable = False
        #: Consumed topics deleted (and recreated) under this member.
        self.topic_watch = TopicWatch(config.group_id, config.topics, source,
                                      config.heartbeat_interval_ms // 2)

    @property
    def hi(self) -> int:
        """Heartbeat interval in milliseconds."""
        return self.config.heartbeat_interval_ms

    @property
    def closed(self) -> bool:
        """True once the member closed."""
        return self._closed

    def _jittered(self) -> int:
        """The next heartbeat's delay: 0.6 to 0.8 HI, so members do not beat in step."""
        return int(self.hi * self.rng.uniform(0.6, 0.8))

    def _note_partition_counts(self) -> None:
        """Remember how many partitions each topic has as this member starts (and its id)."""
        for topic in self.config.topics:
            self._first_counts.setdefault(topic, self.source.partition_count(topic) or 0)
        self.topic_watch.note_ids()

    def _watch_topics(self) -> None:
        """Every half heartbeat interval, give up what is held of topics that were deleted
        (see :mod:`~marshal_py.client.topic_watch`); TopicRecreatedError for one that came
        back as another topic."""
        for topic in self.topic_watch.check(self.clock.now_ms()):
            self._forget_topic(topic)

    def _forget_topic(self, topic: str) -> None:
        """Release everything held of ``topic``, which was deleted (subclasses)."""

    def _reset_position(self, topic: str, partition: int, beginning: int, end: int) -> int:
        """Where a partition that never committed starts: ``offset_reset`` — except a
        partition added to the topic while this member ran, which starts at its beginning,
        so nothing produced to it before the group noticed it is skipped."""
        first = self._first_counts.get(topic)
        if first is not None and partition >= first:
            log.info("%s/%d was added to the topic while the group ran: starting at its "
                     "beginning (%d)", topic, partition, beginning)
            return beginning
        return end if self.config.offset_reset == "latest" else beginning

    def _join(self) -> None:
        """Replay the log and announce this member on every topic (in compatibility mode,
        which has no membership heartbeats: only note when it joined)."""
        if self.config.compat is not None:
            self.rationalizer.observe(self._note_unreadable_for_original)
        self.channel.open(self.config.replay_window_ms)
        # After the replay: the data topics' source connects meanwhile (and says here when a
        # topic does not exist, before this member writes anything).
        self._note_partition_counts()
        self._check_group()
        if self.config.compat is not None:
            self._joined_ms = self.clock.now_ms()
            return
        joined = [self._append(self._member_heartbeat(t, active=True)) for t in self.config.topics]
        self._joined_ms = min(joined)
        self._next_member_heartbeat_ms = self.clock.now_ms() + self._jittered()

    def _note_unreadable_for_original(self, outcome: Outcome) -> None:
        """Compatibility mode: warn once when a coordination partition of this member holds
        a record the original implementation cannot read (its members stop replaying there,
        believing themselves caught up)."""
        record = outcome.record
        if (self._told_unreadable or record.partition not in self.channel.partitions.values()
                or original_can_read(record.value)):
            return
        self._told_unreadable = True
        what = type(outcome.message).__name__ if outcome.message is not None \
            else outcome.verdict.value
        log.warning("coordination partition %d holds a record the original implementation "
                    "cannot read (position %d: %s): its members placed there stop replaying "
                    "at it. Give groups shared with it a coordination topic of their own, or "
                    "run every marshal_py member on it with compat='v1' (PROTOCOL.md 13.1)",
                    record.partition, record.position, what)

    def _check_group(self) -> None:
        """Stop (ConfigurationError) when this member cannot safely take part in its group
        (see :meth:`_check_authentication` and :meth:`_check_heartbeat_interval`). Called
        with the log caught up: as the member joins (before it writes anything), and on
        every step."""
        self._check_authentication()
        self._check_heartbeat_interval()

    def _check_heartbeat_interval(self) -> None:
        """Stop when the group runs with another heartbeat interval than this member's.

        The group's interval is the one its longest-running live member announced
        (:meth:`Rationalizer.group_interval`). Joining, this member compares with the live
        members of other client ids; later, it stops when the group's interval is another
        member's and differs (two members that joined at the same moment: the later one
        stops). Adopting the group's interval silently would ignore an explicit setting;
        running with both would let each judge the other's claims by its own clock."""
        group = self.config.group_id
        now = self.clock.now_ms()
        joining = self._joined_ms is None
        for topic in self.config.topics:
            found = self.rationalizer.group_interval(
                group, topic, now, excluding_client=self.me.client_id if joining else None)
            if found is None:
                continue
            first, interval = found
            if first.client_id == self.me.client_id or interval == self.hi:
                continue
            raise ConfigurationError(
                f"group {group!r} runs with a heartbeat interval of {interval / 1000:g} s "
                f"(announced on {topic} by {first.client_id}, instance {first.instance_id}), "
                f"and this member's is {self.hi / 1000:g} s: give every member of a group the "
                f"same heartbeat interval (heartbeat_interval={interval / 1000:g}, marshal "
                f"consume --heartbeat-interval {interval / 1000:g}); to change it, stop every "
                "member of the group first")

    def _check_authentication(self) -> None:
        """Stop (ConfigurationError) when this member cannot safely take part in its group:
        the log shows the group is authenticated (its records are signed) and this member has
        no key -- it would accept records the others reject, and both sides could believe
        they own the same work -- or members of an older marshal_py, which sign without
        sequence numbers and cannot read what this version writes, are in the group."""
        group = self.config.group_id
        r = self.rationalizer
        if group not in r.config.group_keys:
            if group in r.signed_groups:
                raise ConfigurationError(
                    f"group {group!r} is authenticated (its coordination records are signed) "
                    "but this member has no key; pass the group's keys "
                    "(Marshaler(auth_keys=...), marshal ... --auth-keys FILE, the Spark "
                    "source's option auth.keys)")
            return
        upgrade = ("the versions cannot share an authenticated group: stop every member of "
                   "the group, upgrade them all, then start them (PROTOCOL.md, "
                   "authenticated groups)")
        if self._joined_ms is None:
            now = self.clock.now_ms()
            for topic in self.config.topics:
                older = [] if r.sequenced(group, topic) else r.members(group, topic, now)
                if older:
                    names = ", ".join(f"{m.client_id} (instance {m.instance_id})"
                                      for m in older)
                    raise ConfigurationError(
                        f"group {group!r} has live members that sign without sequence numbers "
                        f"(an older marshal_py) on {topic}: {names}; {upgrade} (a member that "
                        "crashed counts as live for 2 heartbeat intervals after its last "
                        "record)")
            return
        older_ms = r.unsequenced_ms.get(group)
        if older_ms is not None and older_ms > self._joined_ms:
            raise ConfigurationError(
                f"a member of group {group!r} that signs without sequence numbers (an older "
                f"marshal_py) wrote to the coordination log after this member joined; "
                f"{upgrade}")

    def resume(self) -> None:
        """Join again after ``suspend()``: announce at the next step, then claim."""
        if self.suspended:
            self.suspended = False
            self._next_member_heartbeat_ms = 0

    def _announce_if_due(self, now: int, *, strict: bool = False) -> None:
        """Write the periodic membership heartbeats when due (``strict``: errors propagate)."""
        if now < self._next_member_heartbeat_ms or self.config.compat is not None:
            return
        for topic in self.config.topics:
            message = self._member_heartbeat(topic, active=True)
            if strict:
                self._append(message)
            else:
                self._try_append(message)
        self._next_member_heartbeat_ms = now + self._jittered()

    def _leave(self) -> None:
        """Announce on every topic that this member left (errors are logged)."""
        if self.config.compat is not None:
            return  # no membership heartbeats in the original's protocol
        for topic in self.config.topics:
            try:
                self._append(self._member_heartbeat(topic, active=False))
            except MarshalError as exc:
                log.warning("could not announce leaving %s: %s", topic, exc)

    def _members(self, topic: str, now: int) -> list[Owner]:
        """Live members (one per client id: this process stands for its own client)."""
        members = {m for m in self.rationalizer.members(self.config.group_id, topic, now)
                   if m.client_id != self.me.client_id}
        members.add(self.me)
        return sorted(members, key=lambda o: (o.client_id, o.instance_id))

    def _refuse_live_namesake(self, owner: Owner) -> None:
        """Raise :class:`ClientIdInUseError` if ``owner`` (another instance of our client id)
        wrote a membership heartbeat after this process joined: it is alive."""
        assert self._joined_ms is not None
        for topic in self.config.topics:
            seen = self.rationalizer.member_last_seen(self.config.group_id, topic).get(owner)
            if seen is not None and seen > self._joined_ms:
                raise ClientIdInUseError(
                    f"client id {self.me.client_id!r} of group {self.config.group_id!r} is in "
                    f"use by a live process (instance {owner.instance_id}); give every "
                    "process its own client id"
                )

    def _announced_capacity(self) -> int:
        """The capacity a membership heartbeat announces (-1: no limit)."""
        return -1

    def _member_heartbeat(self, topic: str, *, active: bool) -> Message:
        return MemberHeartbeat(self.clock.now_ms() // 1000, self.me.instance_id,
                               self.me.client_id, self.config.group_id, topic, int(active),
                               self._announced_capacity(), self.hi)

    def _catch_up(self) -> None:
        """Read the log to its end (see :meth:`_stopping_if_log_lost`)."""
        with self._stopping_if_log_lost():
            self.channel.catch_up()

    def _try_catch_up(self, read: Callable[[], object] | None = None) -> bool:
        """:meth:`_catch_up` (or ``read``); False (logged) when the log cannot be read now.
        A recreated log and refused credentials or ACLs stay fatal."""
        try:
            (read or self._catch_up)()
        except (CoordinationLogLostError, ConfigurationError):
            raise
        except MarshalError as exc:
            log.warning("cannot read the coordination log: %s", exc)
            return False
        return True

    @contextmanager
    def _stopping_if_log_lost(self) -> Iterator[None]:
        """If the coordination log turns out recreated (or truncated) under this member,
        forget every claim at once -- nothing more is handed out -- and stop for good; the
        error propagates, and a later close writes nothing to the new topic."""
        try:
            yield
        except CoordinationLogLostError:
            self._drop_all()
            self._closed = True
            # The error itself says what happened and what to do (the one line to show).
            log.info("%s: the coordination log was lost under this member; it stopped "
                     "delivering and stops", self.config.group_id)
            raise

    def _drop_all(self) -> None:
        """Forget everything this member holds, without writing (subclasses)."""

    def _append(self, message: Message) -> int:
        """Write a message to its topic's coordination partition; return its broker time."""
        return self.channel.append(message)

    def _try_append(self, message: Message) -> bool:
        """:meth:`_append`, logging a failure instead of raising; True when written."""
        try:
            self._append(message)
        except (ConfigurationError, CoordinationLogLostError):
            raise  # refused credentials or ACLs, or the log is gone: retrying cannot help
        except MarshalError as exc:
            log.warning("could not write %s for %s: %s", type(message).__name__,
                        message.topic, exc)
            return False
        return True
