"""What consumers share: stopping and errors of the coordination thread (every consumer), and
blocking iteration over a buffer that a fetch loop fills (share and key-shared consumers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

R = TypeVar("R")


class StopAndErrors:
    """Stopping and background-error plumbing every consumer has.

    The coordination thread reports a fatal error with :meth:`_set_error` (and sets
    ``_stop``); the application's thread raises it at its next call.
    """

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._closed = False
        self._error: BaseException | None = None
        #: Records handed out to the application so far (read by marshal_py.metrics).
        self.records_delivered = 0

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
        while True:
            record = self._next_buffered()
            if record is not None:
                self.records_delivered += 1
                return record
            self._raise_background_error()
            if self._stop.is_set() or self._closed:
                raise StopIteration
            self._fetch(timeout_s=0.2)

