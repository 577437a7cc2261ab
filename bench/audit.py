"""Audit time of the coordination log, local engine vs Spark engine, on a real broker.

Usage: python -m bench.audit [--records N[,N...]] [--engines local,spark] [--master M]
                             [--bootstrap-servers B] [--keep DIR] [--json FILE] [--quick]

Starts its own dev broker (Kafka 4.3.1, KRaft, 127.0.0.1) unless ``--bootstrap-servers`` is
given. For each N (default 1,000,000 and 10,000,000): generates N records of realistic
coordination traffic (``marshal_py.audit.generate``, seed 1: 12 groups on 6 topics,
member heartbeats, claims and races, heartbeats, AMO confirmations, releases, takeovers,
restarts, share groups, 0.2 % garbage), produces them to a fresh 4-partition CreateTime topic
with their own timestamps, then times ``marshal audit`` of the whole log with each engine
(writing every table as Parquet to a temporary directory): the local engine (one
rationalizer, one process) and the Spark engine on ``--master`` (default ``local[*]``: one
executor thread per core). Spark's time includes starting the session.

``--keep DIR`` keeps the tables (``DIR/<N>/<engine>/<table>``) instead of a temporary
directory; ``--json FILE`` writes every result (``AuditResult.as_json`` per engine, and the
produce time) for a program to read. The suite's large engines-agree test runs this command in
the background with both.

``--quick`` is a smoke run (N=5,000, Spark on local[1]) that finishes in about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from marshal_py.audit.generate import create_topic, generate_in_background, produce
from marshal_py.audit.local import AuditResult, run_local_audit
from marshal_py.devbroker import KAFKA_VERSION, DevBroker

HI_MS = 10_000
PARTITIONS = 4


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    dev = DevBroker()
    dev.start()
    try:
        yield dev.bootstrap_servers
    finally:
        dev.stop()


def stderr_progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def audit(engine: str, bootstrap: str, topic: str, output: Path, master: str) -> AuditResult:
    if engine == "local":
        return run_local_audit(bootstrap, topic, heartbeat_interval_ms=HI_MS, output=output,
                               timeout_s=30, progress=stderr_progress)
    from marshal_py.spark.audit import run_spark_audit

    return run_spark_audit(bootstrap, topic, heartbeat_interval_ms=HI_MS, output=output,
                           master=master, timeout_s=30, progress=stderr_progress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="1000000,10000000",
                        help="comma-separated log sizes (default 1,000,000 and 10,000,000)")
    parser.add_argument("--engines", default="local,spark")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--bootstrap-servers", default=None,
                        help="use this broker instead of starting a dev broker")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="write the tables under DIR/<records>/<engine> and keep them")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write every result as JSON to FILE")
    parser.add_argument("--quick", action="store_true",
                        help="A smoke run: 5,000 records, Spark on local[1].")
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.records.split(",")]
    except ValueError:
        parser.error(f"--records takes comma-separated integers, not {args.records!r}")
    engines = args.engines.split(",")
    unknown = sorted(set(engines) - {"local", "spark"})
    if unknown:
        parser.error(f"unknown engine {unknown[0]!r}; choose from local, spark")
    if args.quick:
        sizes, args.master = [5_000], "local[1]"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, Kafka {KAFKA_VERSION}")
    runs: list[dict[str, Any]] = []
    with ExitStack() as stack:
        bootstrap = stack.enter_context(broker(args.bootstrap_servers))
        root = args.keep or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="marshal-audit-bench-")))
        for size in sizes:
            topic = f"__audit-bench-{size}-{int(time.time() * 1000)}"
            create_topic(bootstrap, topic, PARTITIONS)
            started = time.monotonic()
            produce(bootstrap, topic, generate_in_background(size, seed=1),
                    progress=lambda n, rate: stderr_progress(
                        f"produced {n:,} records ({rate:,.0f}/s)"))
            produce_s = time.monotonic() - started
            print(f"{size:,} records: generated and produced in {produce_s:.1f} s", flush=True)
            results = {}
            for engine in engines:
                result = audit(engine, bootstrap, topic, root / str(size) / engine, args.master)
                results[engine] = result
                master = f" on {args.master}" if engine == "spark" else ""
                print(f"  {engine}{master}: {result.seconds:.1f} s = "
                      f"{result.records / result.seconds:,.0f} records/s "
                      f"({result.violations} violations)", flush=True)
            runs.append({"records": size, "produce_seconds": round(produce_s, 3),
                         "engines": {name: r.as_json() for name, r in results.items()}})
            if args.json is not None:
                args.json.write_text(json.dumps(runs, indent=1))
            if len(results) == 2 and \
                    sorted(results["spark"].summary) != sorted(results["local"].summary):
                print("  the engines' summaries DIFFER", flush=True)
                sys.exit(1)


if __name__ == "__main__":
    main()
