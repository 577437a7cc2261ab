"""Is a KafkaLog's topic still the one it opened? Deleted, recreated, or grown.

A deleted topic answers no request: reads of its ends and writes wait out their whole timeout
and then look like a broker that is away. :class:`TopicWatch` asks the brokers instead (a
metadata request, answered at once), on the coordination thread's cadence and whenever a
request to the topic has waited a while (:func:`patiently`), so a member stops within about
one heartbeat interval of the deletion.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kafka.errors import KafkaTimeoutError

from marshal_py.errors import CoordinationLogLostError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How often (seconds, at most) a KafkaLog asks whether its topic is still the one it opened
#: (a Marshaler asks more often when its heartbeat interval is short).
IDENTITY_CHECK_S = 2.0
#: A missing topic is asked about this many times more, this far apart, before it counts as
#: deleted (in a cluster, one broker's metadata may lag a moment behind another's).
CONFIRMATIONS = 2
CONFIRM_PAUSE_S = 0.2

_NO_TOPIC_ID = "00000000-0000-0000-0000-000000000000"
_CANNOT_TELL = object()


def topic_id_of(described: dict[str, Any]) -> str | None:
    """The topic id in a describe_topics entry (None from a broker without topic ids)."""
    value = described.get("topic_id")
    text = str(value) if value is not None else None
    return None if text in (None, "", _NO_TOPIC_ID) else text


class TopicWatch:
    """Raises :class:`~marshal_py.errors.CoordinationLogLostError` when ``topic`` is gone or
    has another id than ``topic_id``, and reports its partition count to ``on_count``.

    ``describe()`` returns the topic's describe_topics entry, None when the brokers do not
    know it, and raises when they cannot be asked. ``every_s``: the least time between two
    checks that are not forced.
    """

    def __init__(self, topic: str, topic_id: str | None,
                 describe: Callable[[], dict[str, Any] | None],
                 on_count: Callable[[int], None], every_s: float = IDENTITY_CHECK_S) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.every_s = every_s
        self._describe = describe
        self._on_count = on_count
        self._checked_at = time.monotonic()

    def check(self, *, force: bool = False) -> None:
        """Ask the brokers now if ``force`` or :attr:`every_s` has passed since the last
        time; silent while they cannot be asked."""
        now = time.monotonic()
        if self.topic_id is None or (not force and now - self._checked_at < self.every_s):
            return
        self._checked_at = now
        described = self._ask()
        for _ in range(CONFIRMATIONS):
            if described is not None:
                break
            time.sleep(CONFIRM_PAUSE_S)
            described = self._ask()
        if described is _CANNOT_TELL:
            return
        if described is None:
            raise CoordinationLogLostError(
                f"coordination topic {self.topic!r} was deleted under this member, "
                f"{CoordinationLogLostError.ADVICE}")
        assert isinstance(described, dict)
        now_id = topic_id_of(described)
        if now_id is not None and now_id != self.topic_id:
            raise CoordinationLogLostError(
                f"coordination topic {self.topic!r} was deleted and recreated under this "
                f"member (topic id {self.topic_id} is now {now_id}), "
                f"{CoordinationLogLostError.ADVICE}")
        self._on_count(len(described.get("partitions") or ()))

    def _ask(self) -> object:
        try:
            return self._describe()
        except Exception as exc:  # the brokers cannot say now; ask again later
            log.debug("cannot check the identity of %s: %s", self.topic, exc)
            return _CANNOT_TELL


def patiently(watch: TopicWatch, call: Callable[[float], T], timeout_s: float) -> T:
    """``call(timeout_s)`` in slices of at most ``watch.every_s`` seconds, checking between
    two that the topic is still there (a deleted one would keep the request waiting for the
    whole timeout); KafkaTimeoutError once ``timeout_s`` has passed in all."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return call(max(0.05, min(left, max(watch.every_s, 0.25))))
        except KafkaTimeoutError:
            if deadline - time.monotonic() <= 0.01:
                raise
            watch.check(force=True)
