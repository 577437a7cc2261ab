"""BrokerClock: this machine's clock corrected towards the broker's."""

from __future__ import annotations

import threading
import time


class BrokerClock:
    """Milliseconds on the broker's clock, estimated from our own produce responses.

    Each coordination record we append comes back with the broker's LogAppendTime. Relative
    to the midpoint of send and acknowledgement, that gives the broker's offset from our
    clock; the estimate follows it with an exponential moving average (the first sample is
    taken whole). Decisions in the log never depend on it: it only answers "is that claim
    fresh now?" a little more accurately on a machine whose clock drifts.
    """

    def __init__(self, smoothing: float = 0.2) -> None:
        self._offset_ms = 0.0
        self._samples = 0
        self._smoothing = smoothing
        self._lock = threading.Lock()

    @property
    def offset_ms(self) -> float:
        """Current estimate of broker time minus local time."""
        return self._offset_ms

    def now_ms(self) -> int:
        """The estimated broker time now."""
        return int(time.time() * 1000 + self._offset_ms)

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        """Learn from a record stamped ``broker_ms`` (``sent_ms``/``acked_ms`` from now_ms())."""
        residual = broker_ms - (sent_ms + acked_ms) / 2
        with self._lock:
            if self._samples == 0:
                self._offset_ms += residual
            else:
                self._offset_ms += self._smoothing * residual
            self._samples += 1
