"""The newcomer's demo: three consumers share a topic through __marshal, one is killed.

Run with ``bin/demo`` (which sets everything up first) or ``python -m marshal_py.cli.demo``.
It starts the development Kafka broker, creates a 12-partition topic, produces sample
orders, runs three ``marshal consume`` processes, shows ownership settle in ``marshal
state``, kills one with SIGKILL, shows its partitions taken over, and counts what was
consumed: nothing lost. ``--keep`` leaves the broker running at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaAdminClient, KafkaProducer

from marshal_py.admin.world_view import load_world
from marshal_py.devbroker import DevBroker
from marshal_py.errors import MarshalError
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.log.kafka_config import new_client

TOPIC = "orders"
GROUP = "demo.pipeline"
PARTITIONS = 12
HEARTBEAT_INTERVAL = 2.0
BATCH = 3_000


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run_cli(*args: str) -> None:
    print(f"$ marshal {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], check=True)


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = new_client(KafkaProducer, bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(start, start + count):
        value = json.dumps({"order": i, "amount": (i * 37) % 1000}).encode()
        producer.send(TOPIC, key=f"customer-{i % 97}".encode(), value=value,
                      partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def owners(bootstrap: str) -> dict[int, str | None]:
    """partition -> client id of its live owner, as every member computes it."""
    with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, create_topic=False)) as log:
        view = load_world(log, heartbeat_interval_ms=int(HEARTBEAT_INTERVAL * 1000), topic=TOPIC)
    found: dict[int, str | None] = {}
    for claim in view.rationalizer.claims(GROUP, TOPIC):
        held = claim.owner is not None and claim.is_held(view.now_ms)
        found[claim.key.partition] = claim.owner.client_id if held and claim.owner else None
    return found


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 60.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise MarshalError(f"the demo waited {timeout:.0f} s for {what}; see the logs above")
        time.sleep(0.1)
    return time.monotonic() - started


def consumed(outputs: list[Path]) -> Counter[tuple[int, int]]:
    seen: Counter[tuple[int, int]] = Counter()
    for path in outputs:
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                seen[(record["partition"], record["offset"])] += 1
    return seen


def demo(bootstrap: str, workdir: Path) -> None:
    say(f"Creating topic '{TOPIC}' with {PARTITIONS} partitions and producing {BATCH:,} orders")
    admin = new_client(KafkaAdminClient, bootstrap_servers=bootstrap)
    admin.create_topics({TOPIC: {"num_partitions": PARTITIONS, "replication_factor": 1}},
                        wait_for_metadata=True)
    admin.close()
    KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap)).close()  # creates __marshal
    produce(bootstrap, 0, BATCH)

    say("Starting three consumers of group 'demo.pipeline' (at-least-once, heartbeat 2 s)")
    workers: dict[str, subprocess.Popen[bytes]] = {}
    outputs = []
    for name in ("worker-1", "worker-2", "worker-3"):
        out = workdir / f"{name}.jsonl"
        outputs.append(out)
        workers[name] = subprocess.Popen(
            [sys.executable, "-m", "marshal_py.cli", "consume", "--group", GROUP,
             "--topic", TOPIC, "--client-id", name, "--heartbeat-interval",
             str(HEARTBEAT_INTERVAL), "--offset-reset", "earliest", "--print"],
            stdout=out.open("wb"), stderr=(workdir / f"{name}.log").open("wb"))
        print(f"{name}: pid {workers[name].pid}")
    try:
        took = wait_for("ownership to settle", lambda: sorted(
            Counter(o for o in owners(bootstrap).values() if o).values()) == [4, 4, 4])
        say(f"Ownership settled in {took:.1f} s: every member computes the same world")
        run_cli("state", "--group", GROUP, "--heartbeat-interval", str(HEARTBEAT_INTERVAL))

        say("kill -9 worker-2, then produce 3,000 more orders")
        workers["worker-2"].send_signal(signal.SIGKILL)
        workers["worker-2"].wait()
        killed_at = time.monotonic()
        produce(bootstrap, BATCH, BATCH)
        wait_for("the survivors to take over", lambda: set(owners(bootstrap).values()) == {
            "worker-1", "worker-3"} and None not in owners(bootstrap).values())
        say(f"worker-2's partitions taken over {time.monotonic() - killed_at:.1f} s after the "
            f"kill (claims go stale after 2 heartbeat intervals = {2 * HEARTBEAT_INTERVAL:.0f} s)")
        run_cli("state", "--group", GROUP, "--heartbeat-interval", str(HEARTBEAT_INTERVAL))

        wait_for("every order to be consumed",
                 lambda: len(consumed(outputs)) == 2 * BATCH, timeout=120)
        for name in ("worker-1", "worker-3"):
            workers[name].send_signal(signal.SIGTERM)
            workers[name].wait(timeout=30)
        seen = consumed(outputs)
        again = sum(n - 1 for n in seen.values())
        say("Result")
        print(f"produced {2 * BATCH:,} orders; consumed {len(seen):,} distinct; lost "
              f"{2 * BATCH - len(seen)}; delivered again after the crash {again} "
              "(at-least-once: at most about one heartbeat interval of worker-2's work)")
        say("After SIGTERM the survivors committed and released everything")
        run_cli("state", "--group", GROUP, "--heartbeat-interval", str(HEARTBEAT_INTERVAL))
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="marshal_py demo on a local Kafka broker")
    parser.add_argument("--keep", action="store_true", help="keep the broker running at the end")
    args = parser.parse_args()
    try:
        say("Starting a local Apache Kafka broker (KRaft, 127.0.0.1)")
        with DevBroker() as broker, tempfile.TemporaryDirectory(prefix="marshal-demo-") as tmp:
            bootstrap = broker.bootstrap_servers
            os.environ["MARSHAL_BOOTSTRAP_SERVERS"] = bootstrap
            print(f"bootstrap.servers={bootstrap}")
            demo(bootstrap, Path(tmp))
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
