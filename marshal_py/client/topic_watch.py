"""Consumed topics that are deleted, and come back, under a running member.

A member asks for its topics' metadata (one request for all of them) every half heartbeat
interval, on its coordination thread, never on the data path. A topic that is gone is said
once, in a warning, and given up: the member releases what it holds of it (so it holds
nothing it cannot deliver) and waits for it to come back, as Kafka's own consumers on manual
assignment do (a topic recreated by infrastructure-as-code comes back). A topic that comes
back with another topic id is another log: the offsets the group committed point into the
old one, so the member stops with :class:`~marshal_py.errors.TopicRecreatedError`, which says
to reset them.
"""

from __future__ import annotations

import logging

from marshal_py.client.engine_types import PartitionSource
from marshal_py.errors import ConfigurationError, MarshalError, TopicRecreatedError

log = logging.getLogger(__name__)


class TopicWatch:
    """Tells a member which of its ``topics`` were deleted since it last asked."""

    def __init__(self, group: str, topics: tuple[str, ...], source: PartitionSource,
                 every_ms: int) -> None:
        self.group = group
        self.topics = topics
        self.source = source
        self.every_ms = max(1, every_ms)
        #: Topics gone from the cluster's metadata (the member holds nothing of them).
        self.missing: set[str] = set()
        self._ids: dict[str, str] = {}
        self._next_ms = 0

    @property
    def next_due_ms(self) -> int:
        """When the next check is due (broker time)."""
        return self._next_ms

    def note_ids(self) -> None:
        """Remember the topics' ids as they are now (when the member starts)."""
        for topic in self.topics:
            topic_id = self.source.topic_id(topic)
            if topic_id is not None:
                self._ids.setdefault(topic, topic_id)

    def check(self, now_ms: int) -> list[str]:
        """When due, ask for the topics' metadata; return the topics found deleted since
        the last check (warned about once). Raises TopicRecreatedError for a topic that has
        another id than when the member started, and a ConfigurationError for refused
        ACLs; a broker that cannot be asked now is asked again at the next check."""
        if now_ms < self._next_ms:
            return []
        self._next_ms = now_ms + self.every_ms
        try:
            self.source.refresh(self.topics)
        except ConfigurationError:
            raise
        except MarshalError as exc:
            log.debug("cannot check the consumed topics now: %s", exc)
            return []
        gone = []
        for topic in self.topics:
            if self.source.partition_count(topic) is None:
                if topic not in self.missing:
                    self.missing.add(topic)
                    gone.append(topic)
                    log.warning(
                        "%s: topic %r was deleted (it is gone from the cluster's metadata): "
                        "released its partitions, waiting for it to come back (as a new "
                        "topic, its committed offsets would point into another log: this "
                        "member then stops)", self.group, topic)
                continue
            self._check_id(topic)
            if topic in self.missing:
                self.missing.discard(topic)
                log.warning("%s: topic %r is back (the same topic): consuming it again",
                            self.group, topic)
        return gone

    def _check_id(self, topic: str) -> None:
        now_id = self.source.topic_id(topic)
        if now_id is None:
            return
        known = self._ids.setdefault(topic, now_id)
        if known != now_id:
            raise TopicRecreatedError(
                f"topic {topic!r} was deleted and created again under this member (topic id "
                f"{known} is now {now_id}): the offsets group {self.group!r} committed point "
                "into the old topic's log. Stop every member of the group, reset its offsets "
                f"(`marshal reset-offsets --group {self.group} --topic {topic} --to-earliest`, "
                "or --to-datetime), then start them again")
