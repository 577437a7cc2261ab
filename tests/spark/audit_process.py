"""The Spark audit engine in a process of its own, on a session with Spark's Kafka connector
(so the engine reads the log in the JVM, with Spark's ``kafka`` source), serving audits one
after another: the session (and the connector's resolution) starts once for every test that
needs the JVM reader. Its driver starts as the tests' others do (:mod:`tests.spark.quick_jvm`):
for the million-record audit and the test before it, 44 CPU-s against 69 with the JVM's
defaults (2026-11-29), in about the same time.

    python -m tests.spark.audit_process HEARTBEAT_INTERVAL_MS

A :func:`tests.spark.session_server.serve` process: each request, ``{"bootstrap": ...,
"topic": ..., "output": ...}``, audits that coordination topic into ``output``; its answer's
result is ``AuditResult.as_json()`` and its extras.
"""

from __future__ import annotations

import sys
from typing import Any

from marshal_py.spark.audit import run_spark_audit
from marshal_py.spark.connector import kafka_connector_conf
from tests.spark.quick_jvm import quick_session
from tests.spark.session_server import serve


def main() -> None:
    heartbeat_interval_ms = int(sys.argv[1])

    def audit(spark: Any, request: dict[str, Any]) -> dict[str, Any]:
        result = run_spark_audit(request["bootstrap"], request["topic"],
                                 heartbeat_interval_ms=heartbeat_interval_ms,
                                 output=request["output"], spark=spark, timeout_s=30)
        return {**result.as_json(), **result.extra}

    serve(lambda: quick_session("audit-jvm-reader", **kafka_connector_conf()), audit)


if __name__ == "__main__":
    main()
