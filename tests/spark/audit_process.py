"""The Spark audit engine in a process of its own, on a session with Spark's Kafka connector
(so the engine reads the log in the JVM, with Spark's ``kafka`` source), serving audits one
after another: the session (and the connector's resolution) starts once for every test that
needs the JVM reader.

    python -m tests.spark.audit_process HEARTBEAT_INTERVAL_MS

Reads one JSON object a line on stdin, ``{"bootstrap": ..., "topic": ..., "output": ...}``,
audits that coordination topic into ``output`` and answers with one JSON line on stdout:
``{"ok": true, "result": AuditResult.as_json() and its extras}`` or ``{"ok": false,
"error": "..."}``. Ends at the end of stdin. Everything else written to standard output
(Spark's chatter, the JVM's) goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from marshal_py.spark.audit import run_spark_audit
from marshal_py.spark.connector import kafka_connector_conf
from marshal_py.spark.session import local_session


def main() -> None:
    heartbeat_interval_ms = int(sys.argv[1])
    # The answers get standard output's pipe to themselves: whatever else writes to fd 1
    # (the JVM and the Python workers it starts inherit it) goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    spark = local_session("audit-jvm-reader", "local[2]", **kafka_connector_conf())
    try:
        print(json.dumps({"ready": True}), file=answers, flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            try:
                result = run_spark_audit(request["bootstrap"], request["topic"],
                                         heartbeat_interval_ms=heartbeat_interval_ms,
                                         output=request["output"], spark=spark, timeout_s=30)
                answer = {"ok": True, "result": {**result.as_json(), **result.extra}}
            except Exception:  # reported to the test, which fails with it
                answer = {"ok": False, "error": traceback.format_exc()}
            print(json.dumps(answer), file=answers, flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
