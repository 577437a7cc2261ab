"""A consumer process of a fault campaign: ``python -m chaos.worker --worker``.

The runner starts it (through :class:`bench.worker_process.WorkerProcess`) and writes one JSON
line with its settings to its stdin; the worker opens a ``Marshaler`` and a consumer of the
run's mode with the public API (``m.consumer([topic], mode=..., offset_reset="earliest")``),
says ``{"ready": true, "instance": ...}`` on stdout and consumes until it reads ``stop`` on
stdin (or gets SIGTERM, or its stdin closes), then closes the consumer gracefully (commit,
release, leave) and says ``{"done": true, ...}``. If the consumer raises, the worker journals
the error, says ``{"error": ...}`` and exits with status 3 (the runner starts a replacement).

``eos`` runs copy the records to the run's output topic in transactions instead
(:func:`copy_exactly_once`). For every record it is handed, the worker journals (see
:mod:`chaos.journal`):

1. ``d``: partition, offset, key, delivery count and the interval ``[t0, t1]`` of wall-clock
   time in which the consumer decided to hand the record out;
2. it "processes" the record (sleeps ``work_ms``);
3. ``x``: processed -- and only then commits it (``alo``: ``consumer.commit``), acknowledges
   it (``share``: ``consumer.ack(record, "accept")``, explicit acknowledgement) or lets the
   next ``next()`` commit it (``key-shared``, implicit commit; ``amo`` counts a record done
   when it is handed out).

``t0``/``t1`` come from wrapping the consumer's internal ``_next_buffered`` (the method that
makes the hand-out decision): ``t0`` is read before it runs, ``t1`` after it returned the
record. Stamping after ``next()`` returned would be wrong when a SIGSTOP lands between the
decision and the stamp: the record would look handed out after the process woke up. If the
internal method is missing (a future version), the worker stamps around ``next()`` instead,
where ``t0`` may be much earlier than the decision (the checker then never reports a
hand-out as too late, only as too early).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chaos.journal import Journal, now

log = logging.getLogger("chaos.worker")

#: Exit status of a worker whose consumer raised.
ERROR_EXIT = 3


def say(**message: Any) -> None:
    """One JSON message to the runner on stdout."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class HandOutStamps:
    """Remembers when the consumer decided to hand out the record it returned last."""

    def __init__(self, consumer: Any) -> None:
        self.t0 = 0.0
        self.t1 = 0.0
        self.internal = hasattr(consumer, "_next_buffered")
        if self.internal:
            original = consumer._next_buffered

            def stamped() -> Any:
                t0 = now()
                record = original()
                if record is not None:
                    self.t0, self.t1 = t0, now()
                return record

            consumer._next_buffered = stamped  # instance attribute: DeliveryLoop calls it

    def before_next(self) -> None:
        """Called before each ``next()`` (used only without the internal hook)."""
        if not self.internal:
            self.t0 = now()

    def after_next(self) -> tuple[float, float]:
        """The hand-out interval of the record ``next()`` just returned."""
        if not self.internal:
            self.t1 = now()
        return self.t0, self.t1


def open_consumer(marshaler: Any, settings: dict[str, Any]) -> Any:
    """The consumer of the run's mode, through the public API."""
    mode = settings["mode"]
    topics = [settings["topic"]]
    if mode == "eos":
        return marshaler.consumer(topics, "eos", offset_reset="earliest")
    if mode == "share":
        return marshaler.consumer(topics, "share", offset_reset="earliest",
                                  acknowledgement="explicit",
                                  lock_duration=settings["lock_duration"],
                                  delivery_limit=settings["delivery_limit"])
    if mode == "key-shared":
        return marshaler.consumer(topics, "key-shared", offset_reset="earliest")
    return marshaler.consumer(topics, mode, offset_reset="earliest")


def consume(settings: dict[str, Any], journal: Journal) -> int:
    """Run one consumer until stopped; return the process exit status."""
    from chaos.logview import group_keys
    from marshal_py import Marshaler

    mode = settings["mode"]
    work_s = settings.get("work_ms", 0) / 1000
    try:
        marshaler = Marshaler(settings["bootstrap"], group_id=settings["group"],
                              client_id=settings["client"],
                              heartbeat_interval=settings["heartbeat_interval"],
                              coordination_topic=settings["coordination_topic"], timeout=30.0,
                              kafka_config=settings.get("kafka_config") or None,
                              fetcher=settings.get("fetcher", "kafka-python"),
                              auth_keys=group_keys(settings["group"],
                                                   settings.get("auth_key")).get(
                                                       settings["group"], ()))
    except Exception as exc:
        journal.write("error", msg=f"{type(exc).__name__}: {exc}", t=now())
        say(error=f"Marshaler: {type(exc).__name__}: {exc}")
        return ERROR_EXIT
    delivered = 0
    status = 0
    try:
        journal.write("start", client=settings["client"], instance=marshaler.instance_id,
                      pid=os.getpid(), inc=settings["inc"], mode=mode, t=now())
        consumer = open_consumer(marshaler, settings)
        stamps = HandOutStamps(consumer)
        signal.signal(signal.SIGTERM, lambda signum, frame: consumer.stop())

        def wait_for_stop() -> None:
            for line in sys.stdin:  # "stop", or the end of input when the runner goes away
                if line.strip() in ("stop", "exit"):
                    break
            consumer.stop()

        threading.Thread(target=wait_for_stop, name="stop-reader", daemon=True).start()
        say(ready=True, instance=marshaler.instance_id, pid=os.getpid())
        iterator: Iterator[Any] = iter(consumer) if mode != "eos" else iter(())
        if mode == "eos":
            delivered = copy_exactly_once(consumer, settings, journal, work_s)
        while True:
            stamps.before_next()
            try:
                record = next(iterator)
            except StopIteration:
                break
            t0, t1 = stamps.after_next()
            key = record.key.decode("utf-8", "replace") if record.key is not None else None
            count = getattr(record, "delivery_count", 1)
            journal.write("d", p=record.partition, o=record.offset, k=key, c=count,
                          t0=t0, t1=t1)
            delivered += 1
            if work_s:
                time.sleep(work_s)  # the simulated processing of the record
            journal.write("x", p=record.partition, o=record.offset, t=now())
            if mode == "alo":
                consumer.commit(record)
            elif mode == "share" and not consumer.ack(record, "accept"):
                journal.write("ack_refused", p=record.partition, o=record.offset, c=count)
        journal.write("closing", t=now())
        consumer.close()
        journal.write("closed", t=now())
    except Exception as exc:
        log.exception("the consumer failed")
        journal.write("error", msg=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc(),
                      t=now())
        say(error=f"{type(exc).__name__}: {exc}")
        status = ERROR_EXIT
    finally:
        try:
            marshaler.close()
        except Exception:
            log.warning("closing the Marshaler failed", exc_info=True)
    if status == 0:
        say(done=True, delivered=delivered)
    return status


def copy_exactly_once(consumer: Any, settings: dict[str, Any], journal: Journal,
                      work_s: float) -> int:
    """``eos`` runs: copy every batch to the run's output topic (value and key, with a
    ``src`` header ``<partition>/<offset>`` naming the input record) in its transaction.

    Journalled: ``d`` per record of a batch (``[t0, t1]`` around the internal call that
    decides the hand-out), ``x`` per record once its batch committed, ``a`` once it was not
    (the records come again)."""
    stamps = [0.0, 0.0]
    take = consumer._take_batch

    def stamped(max_records: int) -> Any:
        t0 = now()
        batch = take(max_records)
        if batch is not None:
            stamps[0], stamps[1] = t0, now()
        return batch

    consumer._take_batch = stamped  # instance attribute: poll_batch calls it
    output = settings["output"]
    delivered = 0
    for batch in consumer.batches(max_records=settings.get("batch", 100)):
        for record in batch:
            key = record.key.decode("utf-8", "replace") if record.key is not None else None
            journal.write("d", p=record.partition, o=record.offset, k=key, c=1,
                          t0=stamps[0], t1=stamps[1])
            delivered += 1
            if work_s:
                time.sleep(work_s)
            batch.send(output, record.value, key=record.key,
                       headers=[("src", f"{record.partition}/{record.offset}".encode())])
        ok = batch.commit()
        for record in batch:
            journal.write("x" if ok else "a", p=record.partition, o=record.offset, t=now())
    return delivered


def worker_main() -> int:
    """Read the settings line from stdin, consume, return the exit status."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    settings = json.loads(line)
    # marshal_py's warnings (lost claims, failed steps, skipped replays) go next to the journal.
    handler = logging.FileHandler(Path(settings["journal"]).with_suffix(".log"))
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    # SIGUSR1 dumps every thread's stack next to the journal (the runner asks for it when a
    # consumer takes long to stop).
    stacks = open(Path(settings["journal"]).with_suffix(".stacks"), "a")  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    with Journal(Path(settings["journal"]), fsync=settings.get("fsync", False)) as journal:
        return consume(settings, journal)


if __name__ == "__main__":
    if "--worker" not in sys.argv[1:]:
        sys.exit("chaos.worker: started by the chaos runner only (python -m chaos)")
    sys.exit(worker_main())
