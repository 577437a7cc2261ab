"""One reader of the overhead suite in its own process (``python -m bench.overhead_worker
--worker``): it connects as its order says, reads from *go* until told to stop, and reports
its progress per partition every 0.2 s as JSON lines (see :mod:`bench.suite_overhead`)."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from typing import Any

from bench.harness import BenchError
from bench.overhead_readers import (
    CK_TUNING,
    CONFLUENT_MISSING,
    HI_S,
    KINDS,
    POLL_RECORDS,
    POLL_TIMEOUT_S,
    PROGRESS_S,
    ReaderKind,
)


def _say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


def _one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


class _Reader:
    """Per-partition progress of one reader: the next offset after the highest one handed out,
    and when a record reaching it was last handed out (wall time). A record handed out again
    below it (a lease lapsed and renewed, rewound to the committed offset) does not move
    ``next`` back, so a partition once read to its end stays there."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.last_at: dict[int, float] = {}
        #: Records handed out per partition (at most once: every offset once at most).
        self.counts: dict[int, int] = {}
        self.first_at: float | None = None
        self.count = 0
        self.lock = threading.Lock()

    def see(self, partition: int, offset: int) -> None:
        with self.lock:
            if self.first_at is None:
                self.first_at = time.time()
            if offset >= self.next.get(partition, 0):
                self.next[partition] = offset + 1
                self.last_at[partition] = time.time()
            self.counts[partition] = self.counts.get(partition, 0) + 1
            self.count += 1

    def report(self, key: str) -> None:
        with self.lock:
            _say(**{key: True, "count": self.count, "first_at": self.first_at,
                    "next": {str(p): n for p, n in self.next.items()},
                    "counts": {str(p): n for p, n in self.counts.items()},
                    "last_at": {str(p): t for p, t in self.last_at.items()}})


def worker_main() -> None:
    """Orders on stdin: a ``prepare`` JSON line, then ``go``, then ``stop``."""
    order = json.loads(sys.stdin.readline())
    stop = threading.Event()
    reader = _Reader()
    try:
        poll = _prepare(order)
    except Exception as exc:  # reported to the parent, which raises
        _say(error=_one_line(exc))
        return
    _say(ready=True)
    if sys.stdin.readline().strip() != "go":
        return

    def wait_for_stop() -> None:
        for line in sys.stdin:
            if line.strip() in ("stop", "exit"):
                break
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()

    def progress() -> None:
        while not stop.wait(PROGRESS_S):
            reader.report("progress")

    threading.Thread(target=progress, daemon=True).start()
    error = None
    try:
        poll(reader, stop)
    except Exception as exc:  # reported to the parent, which raises
        error = _one_line(exc)
    stop.set()
    if error:
        _say(error=error)
    reader.report("done")


def _confluent_kafka(reader: str) -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise BenchError(f"reader {reader} needs {CONFLUENT_MISSING}") from None
    return confluent_kafka


def _prepare(order: dict[str, Any]) -> Any:
    """Connect as ``order`` says; return ``read(reader, stop)`` that reads until stopped."""
    kind = KINDS.get(order.get("kind", ""))
    if kind is None:
        raise BenchError(f"unknown reader kind {order.get('kind')!r}; the kinds are "
                         f"{', '.join(KINDS)}")
    if kind.client == "confluent":
        _confluent_kafka(kind.name)
    if kind.mode is not None:
        return _prepare_marshal(kind, order)
    if kind.client == "confluent":
        return _prepare_confluent(order)
    return _prepare_kafka_python(kind, order)


def _prepare_kafka_python(kind: ReaderKind, order: dict[str, Any]) -> Any:
    from kafka import KafkaConsumer, TopicPartition

    topic = order["topic"]
    # consumer_timeout_ms: iteration ends after 200 ms without a record (then stop is checked)
    extra = {"consumer_timeout_ms": POLL_TIMEOUT_S * 1000} if kind.loop == "iter" else {}
    consumer = KafkaConsumer(bootstrap_servers=order["bootstrap"], group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", **extra)
    tps = [TopicPartition(topic, p) for p in order["partitions"]]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    consumer.beginning_offsets(tps)  # connected before go

    def iterate(reader: _Reader, stop: threading.Event) -> None:
        see = reader.see
        try:
            while not stop.is_set():
                for record in consumer:
                    see(record.partition, record.offset)
        finally:
            consumer.close()

    def poll(reader: _Reader, stop: threading.Event) -> None:
        see, fetch = reader.see, consumer.poll
        try:
            while not stop.is_set():
                for batch in fetch(timeout_ms=POLL_TIMEOUT_S * 1000,
                                   max_records=POLL_RECORDS).values():
                    for record in batch:
                        see(record.partition, record.offset)
        finally:
            consumer.close()

    return iterate if kind.loop == "iter" else poll


def _prepare_confluent(order: dict[str, Any]) -> Any:
    ck = _confluent_kafka("ck")
    topic = order["topic"]
    consumer = ck.Consumer({"bootstrap.servers": order["bootstrap"],
                            "group.id": f"bench.overhead.ck.{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, **CK_TUNING})
    try:
        consumer.list_topics(topic, timeout=15)  # connected (and the topic known) before go
    except Exception:
        consumer.close()
        raise
    tps = [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in order["partitions"]]

    def consume(reader: _Reader, stop: threading.Event) -> None:
        see, fetch = reader.see, consumer.consume
        try:
            consumer.assign(tps)  # inside the clock: librdkafka fetches from here on
            while not stop.is_set():
                # What is there, else wait for one record (as our fetcher does): consume(500,
                # 0.2) would wait the whole 0.2 s for a batch that cannot fill at the end.
                msgs = fetch(POLL_RECORDS, 0) or fetch(1, POLL_TIMEOUT_S)
                for m in msgs:
                    if m.error() is None:
                        see(m.partition(), m.offset())
        finally:
            consumer.close()

    return consume


def _prepare_marshal(kind: ReaderKind, order: dict[str, Any]) -> Any:
    from marshal_py import Marshaler

    mode = kind.mode
    assert mode is not None
    marshaler = Marshaler(order["bootstrap"], group_id=order["group"],
                          client_id=order["client_id"], heartbeat_interval=HI_S,
                          fetcher=kind.client)
    alo = mode == "alo"

    def read(reader: _Reader, stop: threading.Event) -> None:
        see = reader.see
        try:
            consumer = marshaler.consumer([order["topic"]], mode, offset_reset="earliest")
            try:
                commit, commit_batch, poll = consumer.commit, consumer.commit_batch, consumer.poll
                if kind.loop == "iter":
                    def stop_iteration() -> None:
                        stop.wait()
                        consumer.stop()

                    threading.Thread(target=stop_iteration, daemon=True).start()
                    if alo:
                        for record in consumer:
                            see(record.partition, record.offset)
                            commit(record)
                    else:
                        for record in consumer:
                            see(record.partition, record.offset)
                elif kind.loop == "batch":
                    while not stop.is_set():
                        records = poll(timeout_s=POLL_TIMEOUT_S, max_records=POLL_RECORDS)
                        for record in records:
                            see(record.partition, record.offset)
                        commit_batch(records)
                elif alo:
                    while not stop.is_set():
                        for record in poll(timeout_s=POLL_TIMEOUT_S, max_records=POLL_RECORDS):
                            see(record.partition, record.offset)
                            commit(record)
                else:
                    while not stop.is_set():
                        for record in poll(timeout_s=POLL_TIMEOUT_S, max_records=POLL_RECORDS):
                            see(record.partition, record.offset)
            finally:
                consumer.close()
        finally:
            marshaler.close()

    return read


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    worker_main()
