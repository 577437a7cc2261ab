"""The producer process of a fault campaign: ``python -m chaos.producer --worker``.

It reads one JSON line of settings on stdin, then produces ``records`` records at about
``rate`` records/s (value: the sequence number; key: ``k<seq mod keys>``, so the default
partitioner keeps each key on one partition) with ``acks=all`` and idempotence, and journals
each record the broker acknowledged (``p``: sequence, partition, offset, key). A send that
fails (the broker was down longer than the delivery timeout) is journalled as ``f`` and sent
again. It says ``{"ready": true}`` when connected and ``{"done": true, "acked": N}`` at the
end; ``stop`` on stdin (or SIGTERM) ends it early.
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


def produce(settings: dict[str, Any], journal: Journal, stop: threading.Event) -> int:
    """Produce every record (or until ``stop``); return how many were acknowledged."""
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
