"""Audit time of the coordination log, local engine vs Spark engine, on a real broker.

Usage: python -m bench.audit [--records N[,N...]] [--engines local,spark] [--master M]
                             [--bootstrap-servers B] [--quick]

Starts its own dev broker (Kafka 4.3.1, KRaft, 127.0.0.1) unless ``--bootstrap-servers`` is
given. For each N (default 1,000,000 and 10,000,000): generates N records of realistic
coordination traffic (``marshal_py.admin.audit_generate``, seed 1: 12 groups on 6 topics,
member heartbeats, claims and races, heartbeats, AMO confirmations, releases, takeovers,
restarts, share groups, 0.2 % garbage), produces them to a fresh 4-partition CreateTime topic
with their own timestamps, then times ``marshal audit`` of the whole log with each engine
(writing every table as Parquet to a temporary directory): the local engine (one
rationalizer, one process) and the Spark engine on ``--master`` (default ``local[*]``: one
executor thread per core). Spark's time includes starting the session.

``--quick`` is a smoke run (N=5,000, Spark on local[1]) that finishes in about a minute.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from marshal_py.admin.audit_generate import create_topic, generate, produce
from marshal_py.admin.audit_local import AuditResult, run_local_audit
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
    parser.add_argument("--quick", action="store_true",
                        help="A smoke run: 5,000 records, Spark on local[1].")
    args = parser.parse_args()
    sizes = [int(n) for n in args.records.split(",")]
    engines = args.engines.split(",")
    if args.quick:
        sizes, args.master = [5_000], "local[1]"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, Kafka {KAFKA_VERSION}")
    with broker(args.bootstrap_servers) as bootstrap, \
            tempfile.TemporaryDirectory(prefix="marshal-audit-bench-") as scratch:
        for size in sizes:
            topic = f"__audit-bench-{size}-{int(time.time() * 1000)}"
            create_topic(bootstrap, topic, PARTITIONS)
            started = time.monotonic()
            produce(bootstrap, topic, generate(size, seed=1),
                    progress=lambda n, rate: stderr_progress(
                        f"produced {n:,} records ({rate:,.0f}/s)"))
            print(f"{size:,} records: generated and produced in "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            results = {}
            for engine in engines:
                result = audit(engine, bootstrap, topic, Path(scratch) / engine, args.master)
                results[engine] = result
                master = f" on {args.master}" if engine == "spark" else ""
                print(f"  {engine}{master}: {result.seconds:.1f} s = "
                      f"{result.records / result.seconds:,.0f} records/s "
                      f"({result.violations} violations)", flush=True)
            if len(results) == 2 and results["spark"].summary != results["local"].summary:
                print("  the engines' summaries DIFFER", flush=True)
                sys.exit(1)


if __name__ == "__main__":
    main()
