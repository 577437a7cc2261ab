"""Commit tracking: out-of-order commits advance the committed offset only over a contiguous run."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class CommitTracker:
    """Tracks which delivered offsets of one partition are done.

    ``committed`` (the next offset to consume, Kafka's convention) is the oldest delivered
    offset not yet done, or the fetch position when everything delivered is done. So commits
    out of order advance it only over the contiguous run of done records, and offsets Kafka
    never delivers (compaction, transaction markers) do not hold it back.
    """

    def __init__(self, start: int) -> None:
        self._position = start
        self._outstanding: deque[int] = deque()
        self._done: set[int] = set()

    @property
    def committed(self) -> int:
        """The offset a successor should start from."""
        return self._outstanding[0] if self._outstanding else self._position

    @property
    def position(self) -> int:
        """The next offset to fetch."""
        return self._position

    def delivered(self, offsets: Iterable[int], next_position: int) -> None:
        """Record a batch handed to the application; fetching continues at ``next_position``."""
        for offset in offsets:
            if offset >= self._position:
                self._outstanding.append(offset)
        self._position = max(self._position, next_position)

    def mark(self, offset: int) -> int:
        """Mark a delivered ``offset`` done; return the committed offset."""
        if self._outstanding and offset >= self._outstanding[0]:
            self._done.add(offset)
            while self._outstanding and self._outstanding[0] in self._done:
                self._done.discard(self._outstanding.popleft())
        return self.committed

    def mark_through(self, offset: int) -> int:
        """Count everything delivered up to and including ``offset`` as done (at-most-once:
        handing a record out is its commit, and nothing before it will be handed out)."""
        while self._outstanding and self._outstanding[0] <= offset:
            self._done.discard(self._outstanding.popleft())
        return self.committed

    def rewind(self, offset: int) -> None:
        """Delivered offsets from ``offset`` on never reached the application: fetch again."""
        if offset < self.committed:
            offset = self.committed
        while self._outstanding and self._outstanding[-1] >= offset:
            self._done.discard(self._outstanding.pop())
        self._position = min(self._position, offset)

    def mark_all(self) -> int:
        """Mark everything delivered done (at-most-once, or auto-commit)."""
        self._outstanding.clear()
        self._done.clear()
        return self.committed
