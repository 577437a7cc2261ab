"""BrokerClock: this machine's clock corrected towards the broker's."""

from __future__ import annotations

import threading
import time


class BrokerClock:
    """Milliseconds on the broker's clock, estimated from our own produce responses.

    Each coordination record we append comes back with the broker's LogAppendTime. Relative
    to the midpoint of send and acknowledgement, that gives the broker's offset from our
    clock, with an error of at most half the round trip. As NTP does, the estimate trusts
    the samples with the shortest round trips: a sample is taken only when its round trip is
    within 1.5x (+1 ms) of the best one seen, and the best slowly ages so that the estimate
    can follow drift. The first append, which also opens the connection, therefore counts
    for little. Decisions in the log never depend on this clock: it only answers "is that
    claim fresh now?" more accurately on a machine whose clock is off.
    """

    def __init__(self) -> None:
        self._offset_ms = 0.0
        self._best_rtt_ms: float | None = None
        self._lock = threading.Lock()

    @property
    def offset_ms(self) -> float:
        """Current estimate of broker time minus local time."""
        return self._offset_ms

    def now_ms(self) -> int:
        """The estimated broker time now."""
        return int(time.time() * 1000 + self._offset_ms)

    def monotonic_ms(self) -> float:
        """Milliseconds of a clock that never jumps (for durations only)."""
        return time.monotonic() * 1000

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        """Learn from a record stamped ``broker_ms`` (``sent_ms``/``acked_ms`` from now_ms())."""
        rtt = max(0.0, float(acked_ms - sent_ms))
        residual = broker_ms - (sent_ms + acked_ms) / 2
        with self._lock:
            best = self._best_rtt_ms
            if best is None or rtt <= best * 1.5 + 1:
                self._offset_ms += residual
            self._best_rtt_ms = rtt if best is None else min(rtt, best * 1.05 + 0.1)
