"""The newcomer's demo: a local Kafka broker, a claim race in __marshal, and `marshal state`.

Run with ``bin/demo`` (which sets everything up first) or ``python -m marshal_py.demo``.
Starts the development broker, lets two simulated workers race for the partitions of a topic
through the coordination log, heartbeat and release, then shows what every client concludes
(``marshal state``) and the log itself (``marshal tail``). ``--keep`` leaves the broker running
until Ctrl-C so you can try the CLI against it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from marshal_py.devbroker import DevBroker
from marshal_py.errors import MarshalError
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import (
    ClaimingPartition,
    Heartbeat,
    ReleasingPartition,
    coordination_partition,
    encode,
)


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run_cli(*args: str) -> None:
    print(f"$ marshal {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], check=True)


def write_scenario(bootstrap: str) -> None:
    """Two workers race for 4 partitions of `events`; every client decides the same way."""
    with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap)) as log:
        cp = coordination_partition("events", log.partition_count())
        group, topic = "demo.pipeline", "events"
        now = int(time.time())
        workers = [("a1b2c3d4", "worker-1"), ("e5f6a7b8", "worker-2")]
        for partition in range(4):
            # Both propose; the log orders them, and the earliest valid claim wins.
            first, second = workers if partition % 2 == 0 else workers[::-1]
            for instance, client in (first, second):
                log.append(cp, encode(ClaimingPartition(now, instance, client, group, topic,
                                                        partition)))
        for partition in range(4):
            instance, client = workers[partition % 2]
            log.append(cp, encode(Heartbeat(now, instance, client, group, topic, partition,
                                             100 * (partition + 1))))
        instance, client = workers[1]
        log.append(cp, encode(ReleasingPartition(now, instance, client, group, topic, 3, 420)))


def main() -> None:
    parser = argparse.ArgumentParser(description="marshal_py demo on a local Kafka broker")
    parser.add_argument("--keep", action="store_true", help="keep the broker running")
    args = parser.parse_args()
    try:
        say("Starting a local Apache Kafka broker (KRaft, 127.0.0.1)")
        with DevBroker() as broker:
            bootstrap = broker.bootstrap_servers
            os.environ["MARSHAL_BOOTSTRAP_SERVERS"] = bootstrap
            print(f"bootstrap.servers={bootstrap}")
            say("Two workers race for the 4 partitions of 'events' through __marshal")
            write_scenario(bootstrap)
            say("What every client concludes from the log (the rationalized world state)")
            run_cli("state")
            say("The coordination log itself, with each record's verdict")
            run_cli("tail")
            if args.keep:
                say(f"Broker left running: export MARSHAL_BOOTSTRAP_SERVERS={bootstrap}; "
                    "Ctrl-C stops it")
                stop = threading.Event()
                signal.signal(signal.SIGTERM, lambda *_: stop.set())
                with contextlib.suppress(KeyboardInterrupt):
                    stop.wait()
            say("Stopping the broker")
    except MarshalError as exc:
        print(f"marshal demo: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except subprocess.CalledProcessError as exc:
        print(f"marshal demo: error: a CLI step failed ({exc})", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
