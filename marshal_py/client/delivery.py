"""What consumers share: stopping and errors of the coordination thread, the bound on
processing time (every consumer), and blocking iteration over a buffer that a fetch loop fills
(share and key-shared consumers)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Generic, TypeVar

from marshal_py.errors import CommitFailedError

R = TypeVar("R")

log = logging.getLogger(__name__)


class PollWatch:
    """Whether the application still asks for records (max_poll_interval, as Kafka's
    ``max.poll.interval.ms``, KIP-62).

    The application's thread counts its requests (``asks``; records iterated count too, via
    the consumer's ``records_delivered``) and says when it waits inside one (``asking``);
    the coordination thread calls :meth:`expired`. ``timed_out`` is set by the consumer when
    it gave its work up, and cleared when the application asks again.
    """

    def __init__(self, max_poll_interval_ms: int) -> None:
        self.max_poll_s = max_poll_interval_ms / 1000
        self.asks = 0
        self.asking = False
        self.timed_out = False
        self._seen = -1
        self._idle_since = time.monotonic()

    def expired(self, delivered: int) -> bool:
        """True when the application has not asked (nor taken a record) for longer than
        max_poll_interval and is not waiting inside a request now."""
        now = time.monotonic()
        asks = self.asks + delivered
        if self.asking or asks != self._seen:
            self._seen, self._idle_since = asks, now
            return False
        return now - self._idle_since > self.max_poll_s

    def idle_s(self) -> float:
        """Seconds since the application was last seen asking."""
        return time.monotonic() - self._idle_since

    def left_s(self) -> float:
        """Seconds until :meth:`expired` may turn true."""
        return self._idle_since + self.max_poll_s - time.monotonic()

    def failure(self, what: str) -> CommitFailedError:
        """The error for a late commit or acknowledgement."""
        return CommitFailedError(
            f"{what} refused: this consumer gave its work up because the application asked "
            f"for no records for longer than max_poll_interval ({self.max_poll_s:g} s); it "
            "goes to other members. Poll more often, process less per poll, or raise "
            "max_poll_interval")


def warn_suspended(group_id: str, watch: PollWatch, what: str) -> None:
    """The one warning a consumer logs when it gives its work up (max_poll_interval)."""
    log.warning("%s: the application asked for no records for %.0f s (max_poll_interval "
                "%g s): giving up %s; the next poll() or next() joins again", group_id,
                watch.idle_s(), watch.max_poll_s, what)


class StopAndErrors:
    """Stopping and background-error plumbing every consumer has.

    The coordination thread reports a fatal error with :meth:`_set_error` (and sets
    ``_stop``); the application's thread raises it at its next call.
    """

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._closed = False
        self._error: BaseException | None = None
        #: Records handed out to the application so far (read by marshal_py.client.metrics).
        self.records_delivered = 0
        #: The max_poll_interval watch, for consumers that have one.
        self._watch: PollWatch | None = None

    def _set_error(self, exc: BaseException) -> None:
        """Report a fatal error of the coordination thread to the iterating thread."""
        self._error = exc

    def _raise_background_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def stop(self) -> None:
        """End iteration soon; safe from any thread and from signal handlers."""
        self._stop.set()

    def close(self) -> None:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        self.close()


class DeliveryLoop(StopAndErrors, Generic[R]):
    """Iteration over a buffer that a fetch loop fills.

    Subclasses provide ``_next_buffered()`` (a record that may be handed out now, or None),
    ``_fetch(timeout_s)`` (fill the buffer) and ``close()``.
    """

    def _next_buffered(self) -> R | None:
        raise NotImplementedError

    def _fetch(self, timeout_s: float) -> None:
        raise NotImplementedError

    def _drain(self, max_records: int) -> list[R]:
        """Up to ``max_records`` buffered records that may be handed out now."""
        out: list[R] = []
        while len(out) < max_records:
            record = self._next_buffered()
            if record is None:
                break
            out.append(record)
        self.records_delivered += len(out)
        return out

    def __iter__(self) -> Iterator[R]:
        return self

    def __next__(self) -> R:
        watch = self._watch
        while True:
            record = self._next_buffered()
            if record is not None:
                self.records_delivered += 1
                if watch is not None:
                    watch.asking = False
                return record
            if watch is not None:
                watch.asking = True
                self._rejoin_if_suspended()
            self._raise_background_error()
            if self._stop.is_set() or self._closed:
                if watch is not None:
                    watch.asking = False
                raise StopIteration
            self._fetch(timeout_s=0.2)

    def _rejoin_if_suspended(self) -> None:
        """Join again if the work was given up (max_poll_interval); subclasses that watch."""

