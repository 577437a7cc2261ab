"""One member of a plain Kafka consumer group, as its own process: the failover suite's anchors.

Usage::

    python -m bench.group_member --client kafka-python|confluent --bootstrap-servers HOST:PORT \\
        --group GROUP --topic TOPIC --client-id ID [--session-ms N] [--heartbeat-ms N]

``kafka-python``: a kafka-python ``KafkaConsumer(group_id=..., subscribe)``, the classic group
protocol, at kafka-python's defaults unless ``--session-ms`` / ``--heartbeat-ms`` are given.
``confluent``: a confluent-kafka ``Consumer`` with ``group.protocol=consumer`` (KIP-848); its
session timeout and heartbeat interval are the group's (broker defaults or per-group configs
set by the caller), so the two options are refused. Both start at the earliest offset of a
partition with no committed offset and commit as their defaults do (auto-commit every 5 s).

It writes one line per event on stdout, flushed at once (the parent timestamps them as it
reads them, as it does ``marshal consume --print``)::

    <time.time()> ready
    <time.time()> assigned <partition,partition,...>      (every change; "-" when none)
    <time.time()> record <partition> <offset> <value>

SIGTERM (or SIGINT) closes the consumer (it leaves the group) and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

POLL_S = 0.1

_running = True


def _stop(signum: int, frame: FrameType | None) -> None:
    global _running
    _running = False


def emit(*parts: object) -> None:
    sys.stdout.write(f"{time.time():.6f} " + " ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


class Assignment:
    """Prints the assignment whenever it differs from the last one printed."""

    def __init__(self) -> None:
        self.last: list[int] | None = None

    def report(self, partitions: list[int]) -> None:
        partitions = sorted(partitions)
        if partitions != self.last:
            self.last = partitions
            emit("assigned", ",".join(map(str, partitions)) or "-")


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import KafkaConsumer

    options: dict[str, object] = {}
    if args.session_ms is not None:
        options["session_timeout_ms"] = args.session_ms
    if args.heartbeat_ms is not None:
        options["heartbeat_interval_ms"] = args.heartbeat_ms
    consumer = KafkaConsumer(args.topic, bootstrap_servers=args.bootstrap_servers,
                             group_id=args.group, client_id=args.client_id,
                             auto_offset_reset="earliest", **options)
    assignment = Assignment()
    try:
        emit("ready")
        while _running:
            for batch in consumer.poll(timeout_ms=int(POLL_S * 1000)).values():
                for record in batch:
                    value = (record.value or b"").decode("utf-8", "replace")
                    emit("record", record.partition, record.offset, value)
            assignment.report([tp.partition for tp in consumer.assignment()])
    finally:
        consumer.close()


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    if args.session_ms is not None or args.heartbeat_ms is not None:
        raise SystemExit("group_member: a KIP-848 member's session timeout and heartbeat "
                         "interval are group configs (set them on the broker)")
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap_servers, "group.id": args.group,
        "client.id": args.client_id, "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([args.topic])
    assignment = Assignment()
    try:
        emit("ready")
        while _running:
            message = consumer.poll(POLL_S)
            if message is not None:
                if message.error():
                    print(f"group_member: {message.error()}", file=sys.stderr, flush=True)
                else:
                    value = (message.value() or b"").decode("utf-8", "replace")
                    emit("record", message.partition(), message.offset(), value)
            assignment.report([tp.partition for tp in consumer.assignment()])
    finally:
        consumer.close()


CLIENTS: dict[str, Callable[[argparse.Namespace], None]] = {
    "kafka-python": run_kafka_python,
    "confluent": run_confluent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--session-ms", type=int, default=None)
    parser.add_argument("--heartbeat-ms", type=int, default=None)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    CLIENTS[args.client](args)


if __name__ == "__main__":
    main()
