"""What the three consumers share: a data consumer, a coordination thread, and closing.

Each consumer (exclusive, share, key-shared) fetches records with a data fetcher (kafka-python,
or librdkafka with ``fetcher="confluent"``) on manually assigned partitions (no Kafka consumer
group) while a background thread drives its engine. :class:`MemberConsumer` owns those two
parts and the order in which they shut down; :meth:`MemberConsumer._follow_plan` keeps the
data consumer on the partitions and positions an engine's fetch plan names, seeking whenever
a partition's fetch epoch changes.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from marshal_py.client.coordinator import CoordinationThread
from marshal_py.client.delivery import DeliveryLoop, warn_suspended
from marshal_py.client.fetchers import DataFetcher, FetchedBatch, KafkaPythonFetcher, OpeningFetcher
from marshal_py.client.member_base import MemberConfig
from marshal_py.log.kafka import KafkaLogConfig

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

log = logging.getLogger(__name__)

R = TypeVar("R")


class SuspendableEngine(Protocol):
    """What the max_poll_interval watch needs of an engine."""

    suspended: bool

    @property
    def config(self) -> MemberConfig: ...

    def suspend(self) -> None: ...

    def resume(self) -> None: ...
TP = tuple[str, int]


class MemberConsumer(DeliveryLoop[R], Generic[R]):
    """A consumer's data client, coordination thread and shutdown.

    Subclasses build their own state, then call :meth:`_start_coordination`; they provide
    :meth:`_step` (one coordination step, called with the lock held) and
    :meth:`_close_engine` (called with the lock held while closing).
    """

    #: The engine (set by the subclass, which narrows the type).
    _engine: SuspendableEngine
    #: Fetched records waiting to be handed out (the subclass's own shape).
    _buffer: deque[Any]

    def __init__(self, host: MemberHost, kafka: KafkaLogConfig,
                 fetcher: OpeningFetcher | None = None) -> None:
        super().__init__()
        self._host = host
        self._lock = host.lock
        self._kafka = kafka
        #: The data fetcher: the one ``fetcher`` opened (it connected while the member
        #: joined), else kafka-python's.
        self._fetcher: DataFetcher = KafkaPythonFetcher(kafka) if fetcher is None \
            else fetcher.result()
        #: The fetch epoch the data consumer was positioned for, per partition it reads.
        self._epochs: dict[TP, int] = {}
        self._thread: CoordinationThread | None = None

    def _start_coordination(self, name: str, interval_s: float) -> None:
        """Start the background thread that calls :meth:`_step` every ``interval_s``."""
        self._thread = CoordinationThread(
            name=name, lock=self._lock, step=self._step, stop=self._stop,
            interval_s=interval_s, is_closed=lambda: self._closed, on_fatal=self._set_error)
        self._thread.start()

    def _step(self) -> None:
        raise NotImplementedError

    # -- the bound on processing time (max_poll_interval) ----------------------------------

    def _watch_poll_interval(self, what: str) -> None:
        """Suspend the engine when the application has asked for no records for longer than
        max_poll_interval (call from :meth:`_step`, with the lock held): its work goes to
        other members, as a Kafka consumer leaves its group (KIP-62)."""
        watch, engine = self._watch, self._engine
        if watch is None or engine.suspended or not watch.expired(self.records_delivered):
            return
        watch.timed_out = True
        warn_suspended(engine.config.group_id, watch, what)
        self._before_suspend()
        engine.suspend()

    def _before_suspend(self) -> None:
        """What the consumer does with the lock held right before its engine suspends."""

    def _rejoin_if_suspended(self) -> None:
        watch = self._watch
        if watch is None or not self._engine.suspended:
            return
        with self._lock:
            self._engine.resume()
            self._after_rejoin()
        watch.timed_out = False
        log.info("%s: the application asks for records again: joining the group",
                 self._engine.config.group_id)

    def _after_rejoin(self) -> None:
        """Forget what was handed out before the suspension (called with the lock held)."""

    def _poll_buffer(self, timeout_s: float, max_records: int,
                     settle: Callable[[], None]) -> list[R]:
        """A ``poll()``: count the request (rejoining if the work was given up), ``settle``
        what the previous call handed out, then up to ``max_records`` buffered records,
        fetching first (up to ``timeout_s``) when none is buffered."""
        self._raise_background_error()
        watch = self._watch
        assert watch is not None
        watch.asks += 1
        self._rejoin_if_suspended()
        settle()
        watch.asking = True
        try:
            if not self._buffer and not self._closed:
                self._fetch(timeout_s)
            return self._drain(max_records)
        finally:
            watch.asking = False

    def _close_engine(self) -> None:
        raise NotImplementedError

    def _before_close(self) -> None:
        """Runs after the coordination thread stopped, before the lock is taken."""

    def _other_clients(self) -> list[Any]:
        """Kafka clients besides the data consumer to close last."""
        return []

    # -- fetching -------------------------------------------------------------------------------

    def _follow_plan(self, wanted: dict[TP, tuple[int, int]]) -> bool:
        """Assign the partitions of a fetch plan (partition -> (epoch, position)) and seek each
        whose epoch changed; True when any partition moved, was added or was dropped."""
        if set(wanted) != self._fetcher.assignment():
            self._fetcher.assign(wanted)
        moved = False
        for key, (epoch, position) in wanted.items():
            if self._epochs.get(key) != epoch:
                self._epochs[key] = epoch
                self._fetcher.seek(*key, position)
                moved = True
        for key in [k for k in self._epochs if k not in wanted]:
            del self._epochs[key]
            moved = True
        return moved

    def _current(self, buffer: deque[tuple[Any, int]]) -> deque[tuple[Any, int]]:
        """The buffered (record, epoch) pairs still of their partition's current epoch."""
        return deque((r, e) for r, e in buffer if self._epochs.get((r.topic, r.partition)) == e)

    def _poll_data(self, timeout_s: float, max_records: int) -> list[FetchedBatch]:
        """Fetch with the data consumer; a Kafka failure becomes a MarshalError."""
        return self._fetcher.poll(timeout_s, max_records)

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The end of ``topic``/``partition`` as the last fetch saw it (no request)."""
        return self._fetcher.high_watermark(topic, partition)

    # -- shutdown -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the coordination thread, close the engine (it releases what this member holds
        and leaves the group), then the Kafka clients. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._before_close()
        with self._lock:
            self._closed = True
            try:
                self._close_engine()
            finally:
                for client in [self._fetcher, *self._other_clients()]:
                    try:
                        client.close()
                    except Exception:  # closing must not mask the error that led here
                        log.debug("error closing a Kafka client", exc_info=True)
                self._host.member_closed(self)
