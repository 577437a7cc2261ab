"""The producer process of a fault campaign: ``python -m chaos.producer --worker``.

It reads one JSON line of settings on stdin, then produces ``records`` records at about
``rate`` records/s (value: the sequence number; key: ``k<seq mod keys>``, so the default
partitioner keeps each key on one partition) with ``acks=all`` and idempotence, and journals
each record the broker acknowledged (``p``: sequence, partition, offset, key). A send that
fails (the broker was down longer than the delivery timeout) is journalled as ``f`` and sent
again. It says ``{"ready": true}`` when connected and ``{"done": true, "acked": N}`` at the
end; ``stop`` on stdin (or SIGTERM) ends it early. With ``transactional`` (share-mode runs)
it writes one transaction per batch and aborts every fourth (:func:`produce_transactions`).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from chaos.journal import Journal, now
from chaos.worker import ERROR_EXIT, say

log = logging.getLogger("chaos.producer")

#: Records sent per batch: one batch every 1/BATCHES_PER_S seconds.
BATCHES_PER_S = 10


def key_of(seq: int, keys: int) -> str:
    """The key of record ``seq``."""
    return f"k{seq % keys:04d}"


#: With ``transactional``: every ABORT_EVERY-th transaction is aborted (its records are sent
#: again in a later transaction).
ABORT_EVERY = 4


def produce(settings: dict[str, Any], journal: Journal, stop: threading.Event) -> int:
    """Produce every record (or until ``stop``); return how many were acknowledged."""
    if settings.get("transactional"):
        return produce_transactions(settings, journal, stop)
    from kafka import KafkaProducer

    # Reconnect within a second after a broker restart, so that the producer does not hold
    # the run back (kafka-python backs off up to 30 s by default).
    producer = KafkaProducer(bootstrap_servers=settings["bootstrap"], acks="all",
                             enable_idempotence=True, linger_ms=5,
                             reconnect_backoff_max_ms=1000)
    records, rate, keys = settings["records"], settings["rate"], settings["keys"]
    topic = settings["topic"]
    say(ready=True)
    pending: deque[int] = deque(range(records))
    acked = 0
    started = time.monotonic()
    sent = 0
    batch = max(1, rate // BATCHES_PER_S)
    try:
        while pending and not stop.is_set():
            due = started + sent / rate  # pace: record n is due n / rate seconds after start
            wait = due - time.monotonic()
            if wait > 0 and stop.wait(wait):
                break
            chunk = [pending.popleft() for _ in range(min(batch, len(pending)))]
            futures = [(seq, producer.send(topic, key=key_of(seq, keys).encode(),
                                           value=str(seq).encode()))
                       for seq in chunk]
            for seq, future in futures:
                try:
                    meta = future.get(timeout=180)
                except Exception as exc:
                    journal.write("f", s=seq, err=f"{type(exc).__name__}: {exc}", t=now())
                    pending.append(seq)
                    continue
                journal.write("p", s=seq, p=meta.partition, o=meta.offset,
                              k=key_of(seq, keys), t=now())
                acked += 1
            sent += len(chunk)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    return acked


#: How long a transaction's commit or abort, and each of its sends, may take before the
#: producer is replaced.
END_TXN_TIMEOUT_S = 15.0
SEND_TIMEOUT_S = 10.0


def bounded(call: Any, timeout_s: float = END_TXN_TIMEOUT_S) -> None:
    """Run ``call`` with a time limit: kafka-python's commit_transaction and
    abort_transaction wait without one, and after a broker restart were seen to wait two
    minutes. TimeoutError when it did not end in time (it goes on in a daemon thread)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="end-transaction", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"ending the transaction took more than {timeout_s:.0f} s")
    if failure:
        raise failure[0]


def produce_transactions(settings: dict[str, Any], journal: Journal,
                         stop: threading.Event) -> int:
    """As :func:`produce`, one transaction per batch, every :data:`ABORT_EVERY`-th aborted
    after its records reached the broker (journalled ``a``; they are sent again). Committed
    records are journalled ``p``. A transaction that fails (the broker went away) is aborted
    if it still can be, else the producer is made anew; its records are sent again (the
    topic may then hold a committed copy the journal does not name: the checker takes the
    topic's records, read_committed, as the truth)."""
    from kafka import KafkaProducer

    # A transaction the broker lost track of (killed with it) blocks the partitions' last
    # stable offset, and a new producer's init_transactions, until the transaction timeout:
    # 10 s instead of Kafka's 60 s keeps a run from standing still that long.
    def new_producer() -> Any:
        producer = KafkaProducer(bootstrap_servers=settings["bootstrap"], acks="all",
                                 linger_ms=5, reconnect_backoff_max_ms=1000,
                                 transactional_id=f"chaos-{settings['topic']}",
                                 transaction_timeout_ms=10_000)
        producer.init_transactions()
        return producer

    def renewed() -> Any:
        while True:  # the broker may be down a while
            try:
                return new_producer()
            except Exception as exc:
                log.warning("a new transactional producer failed: %s", exc)
                if stop.wait(1.0):
                    raise

    records, rate, keys = settings["records"], settings["rate"], settings["keys"]
    topic = settings["topic"]
    producer = new_producer()
    say(ready=True)
    pending: deque[int] = deque(range(records))
    acked = transactions = sent = 0
    started = time.monotonic()
    batch = max(1, rate // BATCHES_PER_S)
    try:
        while pending and not stop.is_set():
            wait = started + sent / rate - time.monotonic()
            if wait > 0 and stop.wait(wait):
                break
            chunk = [pending.popleft() for _ in range(min(batch, len(pending)))]
            sent += len(chunk)
            transactions += 1
            abort = transactions % ABORT_EVERY == 0
            try:
                producer.begin_transaction()
                futures = [(seq, producer.send(topic, key=key_of(seq, keys).encode(),
                                               value=str(seq).encode())) for seq in chunk]
                metas = [(seq, future.get(timeout=SEND_TIMEOUT_S)) for seq, future in futures]
                bounded(producer.abort_transaction if abort else producer.commit_transaction)
            except Exception as exc:
                for seq in chunk:
                    journal.write("f", s=seq, err=f"{type(exc).__name__}: {exc}", t=now())
                pending.extend(chunk)
                # The old producer is left behind, not closed (close() would wait for a hung
                # call): the new one's init_transactions fences it and aborts what it left
                # open. (kafka-python's transactional producer was seen to stay stuck for
                # minutes after a broker restart, sends and transaction ends alike.)
                producer = renewed()
                continue
            for seq, meta in metas:
                journal.write("a" if abort else "p", s=seq, p=meta.partition, o=meta.offset,
                              k=key_of(seq, keys), t=now())
            if abort:
                pending.extend(chunk)
            else:
                acked += len(chunk)
    finally:
        producer.close(timeout=10)
    return acked


def producer_main() -> int:
    """Read the settings line from stdin and produce; return the exit status."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    settings = json.loads(line)

    def wait_for_stop() -> None:
        for command in sys.stdin:
            if command.strip() in ("stop", "exit"):
                break
        stop.set()

    threading.Thread(target=wait_for_stop, name="stop-reader", daemon=True).start()
    with Journal(Path(settings["journal"]), fsync=settings.get("fsync", False)) as journal:
        try:
            acked = produce(settings, journal, stop)
        except Exception as exc:
            log.exception("the producer failed")
            say(error=f"{type(exc).__name__}: {exc}")
            return ERROR_EXIT
    say(done=True, acked=acked)
    return 0


if __name__ == "__main__":
    if "--worker" not in sys.argv[1:]:
        sys.exit("chaos.producer: started by the chaos runner only (python -m chaos)")
    sys.exit(producer_main())
