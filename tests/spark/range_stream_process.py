"""A :func:`~marshal_py.spark.range_stream.read_stream` driver in its own process, for crash
tests: reads the test topic with Spark's Kafka reader and writes every batch's (partition,
offset) pairs to ``<out>/<tag>-<batch id>.json`` (to a temporary name, then renamed, so a
kill -9 never leaves half a file).

    python -m tests.spark.range_stream_process BOOTSTRAP CTOPIC GROUP TOPIC OUT TAG \\
        [--follow] [--mode alo] [--max-per-batch 300] [--no-connector] [--fail-at N]
        [--stop-after N] [--max-batches N] [--option NAME=VALUE ...]
        [--reader-option NAME=VALUE ...] [--cluster]

    python -m tests.spark.range_stream_process --serve

``--serve``: a :mod:`tests.spark.session_server` process running one stream after another on
one session (each request names the arguments of a run, as above, but for ``--no-connector``,
``--cluster`` and ``--master``): the restarts of the crash tests need no session of their own.

``--cluster``: on a standalone cluster of 2 one-core workers started here (executor JVMs of
their own, no marshal_py on their Python path), not local[2].

Without ``--follow`` the stream reads what is available at its start and exits 0. A
:class:`~marshal_py.errors.MarshalError` is printed as one line on stderr, exit status 2.
``--fail-at N``: batch N's function writes its rows to ``<out>/failed-<tag>.json`` (not a
batch file) and raises (exit status 1). ``--stop-after N``: batch N calls ``stream.stop()``.
``--option``: a further option of the stream; ``--reader-option``: an option of Spark's Kafka
reader (``reader_options``; ``kafka.fetch.max.wait.ms`` is 10 unless given).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from marshal_py.errors import MarshalError
from marshal_py.spark.cluster import StandaloneCluster
from marshal_py.spark.connector import kafka_connector_conf
from marshal_py.spark.range_stream import RangeStream, read_stream
from tests.spark.quick_jvm import quick_session
from tests.spark.session_server import serve


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "ctopic", "group", "topic", "out", "tag"):
        parser.add_argument(name)
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--mode", default="alo")
    parser.add_argument("--max-per-batch", default="300")
    parser.add_argument("--no-connector", action="store_true")
    parser.add_argument("--fail-at", type=int, default=None)
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--reader-option", action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--master", default=None,
                        help="a running standalone cluster's master URL (instead of --cluster)")
    return parser


def main() -> int:
    if sys.argv[1:] == ["--serve"]:
        serve(lambda: quick_session("range-stream-server", **kafka_connector_conf()),
              run_requested)
        return 0
    args = parser().parse_args()
    with contextlib.ExitStack() as stack:
        master = "local[2]"
        conf: dict[str, str | int] = {} if args.no_connector else dict(kafka_connector_conf())
        if args.cluster or args.master:
            if args.master:
                master = args.master
            else:
                cluster = stack.enter_context(StandaloneCluster(workers=2, cores=1,
                                                                memory="1g"))
                master = cluster.master_url
            conf.update({"spark.executor.cores": 1, "spark.cores.max": 2,
                         "spark.executor.memory": "512m",
                         "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                         "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s"})
        spark = quick_session(f"range-stream-{args.tag}", master, **conf)
        stack.callback(spark.stop)
        return run(spark, args)


def run_requested(spark: Any, request: dict[str, Any]) -> dict[str, Any]:
    """``--serve``: one run, ``{"argv": [the arguments of a run of its own]}``, on the served
    session; the answer is its exit status and what it wrote on stderr (a failed batch's
    traceback included)."""
    args = parser().parse_args(request["argv"])
    if args.no_connector or args.cluster or args.master:
        raise ValueError("--no-connector, --cluster and --master need a process of their own")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            returncode = run(spark, args)
    except Exception:  # as the process of its own would end: status 1 with the traceback
        return {"returncode": 1, "stderr": stderr.getvalue() + traceback.format_exc()}
    return {"returncode": returncode, "stderr": stderr.getvalue()}


def run(spark: Any, args: argparse.Namespace) -> int:
    out = Path(args.out)

    streams: list[RangeStream] = []

    def process(batch: Any, batch_id: int) -> None:
        rows = [[r.partition, r.offset] for r in batch.select("partition", "offset").collect()]
        if batch_id == args.fail_at:
            (out / f"failed-{args.tag}.json").write_text(json.dumps(rows))
            raise RuntimeError(f"batch {batch_id} failed on purpose")
        if batch_id == args.stop_after:
            streams[0].stop()
        tmp = out / f".{args.tag}-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"{args.tag}-{batch_id:05d}.json")

    options = {"bootstrap.servers": args.bootstrap, "coordination.topic": args.ctopic,
               "group": args.group, "topics": args.topic, "mode": args.mode,
               "client.id": "crash-stream", "heartbeat.interval": "1",
               "offset.reset": "earliest", "maxRecordsPerTrigger": args.max_per_batch}
    options.update(option.split("=", 1) for option in args.option)
    # Each task of a batch waits out one fetch on the broker (fetch.max.wait.ms, 500 ms by
    # default: 1 s a batch of 4 partitions on local[2]) before it returns: ask for a short
    # wait, as a latency-minded application would (the records read are the same).
    reader_options = {"kafka.fetch.max.wait.ms": "10"}
    reader_options.update(option.split("=", 1) for option in args.reader_option)
    try:
        with read_stream(spark, options, process, reader_options=reader_options) as stream:
            streams.append(stream)
            stream.run(available_now=not args.follow, trigger_interval=0.1,
                       max_batches=args.max_batches)
    except MarshalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
