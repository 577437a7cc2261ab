"""The rationalizer's input: one record of a coordination partition."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CoordinationRecord:
    """A record as the coordination log returned it.

    ``position`` is its offset in the coordination partition; ``timestamp_ms`` the broker's
    log-append time in milliseconds; ``value`` the raw bytes (``None`` for a tombstone).
    """

    partition: int
    position: int
    timestamp_ms: int
    value: bytes | None
