"""What every batch member shares: planned ranges, the share holder's identity, the budget
split, and the background thread that keeps a member alive. See
:mod:`marshal_py.client.batch_member`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marshal_py.client.coordinator import CoordinationThread
from marshal_py.protocol.auth import GroupKey

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ShareHolder:
    """Share mode: the member holding a batch's records, as the workers reading them need
    it to acknowledge offsets that hold no record (``gap``) in its name.

    ``partitions``: (data topic, coordination partition) of each consumed topic.
    ``declaration_key``: in an authenticated group, the holder key that signs gap
    declarations in this member's name (PROTOCOL.md 12.1; derived from the group's first
    key, so the workers never see the group secret); None otherwise.
    """

    instance_id: str
    client_id: str
    group_id: str
    partitions: tuple[tuple[str, int], ...]
    declaration_key: GroupKey | None = None

    def coordination_partition(self, topic: str) -> int:
        """Where acknowledgements about ``topic`` are written."""
        return dict(self.partitions)[topic]


@dataclass(frozen=True, slots=True)
class PlannedRange:
    """Records ``[start, end)`` of one partition, planned for a batch.

    ``delivery_count`` is 1 in the exclusive modes; in share mode a range holds records of
    one delivery count (a batch may hold several ranges of one partition).

    Key-shared mode: ``slots`` (key slots as inclusive ranges, ascending) says whose records
    the range delivers: only those whose key hashes into one of them (None: every record).
    ``slot_starts`` lists (slot, offset) for slots whose records below that offset are not
    delivered (they were handed out by an earlier batch).
    """

    topic: str
    partition: int
    start: int
    end: int
    delivery_count: int = 1
    slots: tuple[tuple[int, int], ...] | None = None
    slot_starts: tuple[tuple[int, int], ...] = ()

    @property
    def size(self) -> int:
        """How many offsets the range spans."""
        return self.end - self.start


def share_budget(available: Mapping[TP, int], budget: int | None) -> dict[TP, int]:
    """Split ``budget`` records over partitions with ``available`` records each.

    Water-filling: every partition gets an equal share, and what a partition cannot use goes
    to the others; ties broken by partition order so the split is deterministic. ``None``:
    everything available.
    """
    wanted = {tp: max(0, n) for tp, n in available.items()}
    if budget is None:
        return wanted
    out = dict.fromkeys(wanted, 0)
    left = max(0, budget)
    # Smallest first: each takes an equal share of what is left, or all it can use; so
    # partitions that could use more all end within one record of each other.
    ordered = sorted(wanted, key=lambda tp: (wanted[tp], tp))
    for i, tp in enumerate(ordered):
        give = min(wanted[tp], left // (len(ordered) - i))
        out[tp] = give
        left -= give
    return out


class BackgroundMember:
    """The thread that keeps a member alive (ticks its engine) while the caller plans."""

    def __init__(self, host: MemberHost, tick: Callable[[], None], close: Callable[[], None],
                 tick_interval_s: float) -> None:
        self._host = host
        self._lock = host.lock
        self._close_engine = close
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = CoordinationThread(
            name="marshal-batch-member", lock=self._lock, step=tick, stop=self._stop,
            interval_s=tick_interval_s, is_closed=lambda: self._closed,
            on_fatal=self._set_error)
        self._thread.start()

    def _set_error(self, exc: BaseException) -> None:
        self._error = exc

    def _raise_background_error(self) -> None:
        if self._error is not None:
            raise self._error

    def wait_ticks(self, count: int, timeout_s: float) -> None:
        """Wait until the background thread has run ``count`` more steps."""
        self._thread.wait_ticks(count, timeout_s)
        self._raise_background_error()

    def _wait_until_settled(self, timeout_s: float, hi_s: float,
                            pending: Callable[[], object],
                            holds_target: Callable[[], bool]) -> None:
        """Wait until a step leaves nothing to claim back (``pending`` empty) and the member
        holding its target (``holds_target``; both called under the lock), else at most
        three steps once nothing is pending."""
        deadline = time.monotonic() + timeout_s
        self.wait_ticks(1, timeout_s)
        steps = 1
        while time.monotonic() < deadline:
            with self._lock:
                waiting = bool(pending())
                settled = not waiting and holds_target()
            if settled or (steps >= 3 and not waiting):
                break
            self.wait_ticks(1, min(hi_s, max(0.0, deadline - time.monotonic())))
            steps += 1

    def close(self) -> None:
        """Stop the thread, then release everything held and leave the group. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._closed = True
            try:
                self._close_engine()
            finally:
                self._host.member_closed(self)
