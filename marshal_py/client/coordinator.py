"""The background threads that keep a member alive.

:class:`CoordinationThread` (share and key-shared consumers, the batch members of the Spark
source): take the marshaler's lock, run one step of the engine (claims, heartbeats, balance,
lock renewals), sleep a tick, until told to stop. :class:`FollowingCoordinator` (exclusive
consumers): run a step only when something is due, the log brought records or the delivering
thread asked, and otherwise wait. Both share :class:`_MemberThread`: the thread, what is fatal
and what is retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from marshal_py.errors import (
    ClientIdInUseError,
    ConfigurationError,
    CoordinationLogLostError,
    MarshalError,
    TopicRecreatedError,
)

log = logging.getLogger(__name__)


class _MemberThread:
    """A daemon thread running ``_run`` for one member, and how its failures end.

    A :class:`~marshal_py.errors.MarshalError` from a step (a broker hiccup) is logged and the
    step retried. :class:`~marshal_py.errors.ClientIdInUseError`, a ConfigurationError, a
    recreated log and any unexpected exception are fatal: they are handed to ``on_fatal``
    (the owner re-raises them in the application's thread) and ``stop`` is set. ``is_closed``
    is checked under the lock before each step, so a step never runs on an engine that was
    closed meanwhile.
    """

    def __init__(self, *, name: str, lock: threading.RLock, step: Callable[[], None],
                 stop: threading.Event, is_closed: Callable[[], bool],
                 on_fatal: Callable[[BaseException], None]) -> None:
        self._lock = lock
        self._step = step
        self._stop = stop
        self._is_closed = is_closed
        self._on_fatal = on_fatal
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def is_current(self) -> bool:
        """True when called on this thread."""
        return threading.current_thread() is self._thread

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait for the thread to end (call after setting ``stop``)."""
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        raise NotImplementedError

    def _survived(self, run: Callable[[], None]) -> bool:
        """Run ``run``; True unless it failed (retryable failures are logged, fatal ones
        stop the thread)."""
        try:
            run()
            return True
        except (ClientIdInUseError, ConfigurationError, CoordinationLogLostError,
                TopicRecreatedError) as exc:
            # Retrying cannot help: another process has our id, the settings are wrong
            # (a keyless member of an authenticated group), the log was recreated, or a
            # consumed topic was (its offsets must be reset).
            self._fail(exc)
        except MarshalError as exc:
            log.warning("coordination step failed (will retry): %s", exc)
        except Exception as exc:
            log.exception("coordination thread failed")
            self._fail(exc)
        return False

    def _fail(self, exc: BaseException) -> None:
        self._on_fatal(exc)
        self._stop.set()


class CoordinationThread(_MemberThread):
    """Runs ``step`` under ``lock`` every ``interval_s`` seconds until ``stop`` is set."""

    def __init__(self, *, name: str, lock: threading.RLock, step: Callable[[], None],
                 stop: threading.Event, interval_s: float, is_closed: Callable[[], bool],
                 on_fatal: Callable[[BaseException], None]) -> None:
        super().__init__(name=name, lock=lock, step=step, stop=stop, is_closed=is_closed,
                         on_fatal=on_fatal)
        self._interval_s = interval_s
        self._ticked = threading.Condition()
        self._ticks = 0
        self._woken = threading.Event()

    def wake(self) -> None:
        """Run the next step now instead of at the end of the interval (any thread)."""
        self._woken.set()

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait for the thread to end (call after setting ``stop``)."""
        self._woken.set()
        super().join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            closed = False

            def step() -> None:
                nonlocal closed
                with self._lock:
                    closed = self._is_closed()
                    if not closed:
                        self._step()

            self._survived(step)
            if closed:
                return
            with self._ticked:
                self._ticks += 1
                self._ticked.notify_all()
            if not self._stop.is_set():
                self._woken.wait(self._interval_s)
                self._woken.clear()
        with self._ticked:  # wake anyone waiting for ticks that will not come
            self._ticked.notify_all()

    def wait_ticks(self, count: int, timeout_s: float) -> None:
        """Wait until ``count`` more steps have run, the thread stopped, or the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._ticked:
            goal = self._ticks + count
            while self._ticks < goal and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ticked.wait(left)


class FollowingCoordinator(_MemberThread):
    """The quiet coordination loop of an exclusive consumer.

    Instead of a fixed tick, it runs a step (``step``) only when something is due
    (``next_due_ms``), the coordination log brought records, or the delivering thread asked
    (:meth:`wake`, at-most-once windows), and otherwise waits. ``wake_driven=False``: it waits
    in a long poll of the log (``follow(timeout_s)`` returns as soon as records arrive), at
    most ``poll_cap_s`` so that ``stop`` is noticed. ``wake_driven=True`` (at-most-once, where
    the delivering thread waits for the next window): it waits on the wake-up itself, which
    costs nothing and answers at once, and reads the log without waiting after each wait, so
    new records are seen within ``poll_cap_s``. ``lock`` (the marshaler's, which guards the
    shared coordination log) is held only by this thread and by the marshaler's own queries,
    never by the delivering thread.
    """

    def __init__(self, *, name: str, lock: threading.RLock, step: Callable[[], None],
                 follow: Callable[[float], int], next_due_ms: Callable[[], int],
                 now_ms: Callable[[], int], stop: threading.Event, poll_cap_s: float,
                 retry_s: float, is_closed: Callable[[], bool],
                 on_fatal: Callable[[BaseException], None], wake_driven: bool = False) -> None:
        super().__init__(name=name, lock=lock, step=step, stop=stop, is_closed=is_closed,
                         on_fatal=on_fatal)
        self._follow = follow
        self._next_due_ms = next_due_ms
        self._now_ms = now_ms
        self._cap_s = poll_cap_s
        self._retry_s = retry_s
        self._wake_driven = wake_driven
        self._woken = threading.Event()
        #: Set after every step: the delivering thread waits on it for confirmations.
        self.stepped = threading.Event()

    def wake(self) -> None:
        """Run a step soon (safe from any thread)."""
        self._woken.set()

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait for the loop to end (call after setting ``stop``)."""
        self._woken.set()
        super().join(timeout_s)

    def _run(self) -> None:
        self._due = 0
        self._arrived = 0
        self._closed = False
        while not self._stop.is_set() and not self._closed:
            if not self._survived(self._turn):
                self._due = 0
                self._stop.wait(self._retry_s)
        self.stepped.set()  # wake a delivering thread waiting for a step that will not come

    def _turn(self) -> None:
        """One step if one is due, then one wait."""
        with self._lock:
            if self._is_closed():
                self._closed = True
                return
            if self._arrived or self._woken.is_set() or self._now_ms() >= self._due:
                self._woken.clear()
                self._step()
                self.stepped.set()
                self._due = self._next_due_ms()
            wait_s = min(self._cap_s, max(0.0, (self._due - self._now_ms()) / 1000))
            if not self._wake_driven:
                self._arrived = self._follow(0.0 if self._woken.is_set() else wait_s)
                return
        if self._woken.wait(wait_s):
            self._arrived = 0  # the step reads the log back after what it writes
            return
        with self._lock:
            if self._is_closed():
                self._closed = True
                return
            self._arrived = self._follow(0.0)
