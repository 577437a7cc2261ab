"""MemberHost: what a consumer may use of the marshaler that created it, and nothing more."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MemberHost:
    """The narrow interface a :class:`~marshal_py.client.marshaler.Marshaler` gives its
    consumer (and micro-batch member).

    ``lock`` guards the marshaler's coordination log and rationalizer, which the consumer's
    coordination thread shares with the marshaler's own queries (``claims``, ``members``):
    hold it for every use of the engine, never on the path that hands records out.
    ``member_closed(member)`` tells the marshaler that ``member`` closed, so it can open
    another and close the member's topic source.
    """

    lock: threading.RLock
    member_closed: Callable[[object], None]
