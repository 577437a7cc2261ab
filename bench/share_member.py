"""The members of the share benchmark: a share-group member in its own process (``python -m
bench.share_member --worker``, driven by :class:`Worker` over JSON lines), with per-thread
profiles and a thread census on request, and :class:`CliMember`, a ``marshal consume``
process (see :mod:`bench.share`)."""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.cli_process import CliProcess
from bench.thread_census import ThreadCensus
from bench.worker_process import (
    WorkerProcess,
    prepare_orders,
    ready_then_go,
    say,
)
from bench.worker_process import worker_pool as started_workers
from marshal_py.protocol import format_ranges, ranges_of

#: Records a member acquires at a time.
BATCH_SIZE = 100

def worker_main() -> None:
    """Serve runs until "exit" or end of input. Protocol: JSON lines on stdin / stdout.

    ``{"cmd": "prepare", "bootstrap", "coordination_topic", "group", "topic", "client_id",
    "work_ms"}`` -> ``{"ready": true}``; then ``go`` (a plain line) starts consuming; ``stop``
    (a plain line) ends it -> ``{"done": true, ...summary}``.
    """
    from marshal_py import Marshaler

    for order in prepare_orders():
        # Started before the marshaler, so that its threads (the coordination producer's
        # sender, the log's reader) are profiled too.
        profiles = ThreadProfiles(f"member-{os.getpid()}")
        try:
            marshaler = Marshaler(order["bootstrap"], group_id=order["group"],
                                  client_id=order["client_id"],
                                  heartbeat_interval=order["heartbeat_interval"],
                                  fetcher=order.get("fetcher", "kafka-python"),
                                  coordination_topic=order["coordination_topic"])
        except Exception as exc:
            say(error=f"Marshaler: {exc}")
            continue
        try:
            if not ready_then_go():
                continue
            say(done=True, **_consume(marshaler, order["topic"], order["work_ms"], profiles))
        finally:
            marshaler.close()


class ThreadProfiles:
    """cProfile of every thread a member starts from now on (and of the calling one), when
    ``MARSHAL_BENCH_SHARE_PROFILE`` names a directory: one ``.prof`` file per thread there
    when :meth:`dump` is called (``python -m pstats`` reads them)."""

    def __init__(self, name: str) -> None:
        self.directory = os.environ.get("MARSHAL_BENCH_SHARE_PROFILE", "")
        self.name = name
        self.profiles: dict[str, cProfile.Profile] = {}
        if not self.directory:
            return
        threading.setprofile(self._start_in_thread)
        self._start(threading.current_thread().name)

    def _start(self, thread: str) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU time of that thread
        self.profiles[f"{thread}-{threading.get_native_id()}"] = profile
        profile.enable()

    def _start_in_thread(self, frame: Any, event: str, arg: Any) -> None:
        del frame, event, arg
        self._start(threading.current_thread().name)

    def dump(self) -> None:
        if not self.directory:
            return
        threading.setprofile(None)
        for thread, profile in self.profiles.items():
            profile.disable()
            profile.dump_stats(str(Path(self.directory) / f"{self.name}-{thread}.prof"))


def _consume(marshaler: Any, topic: str, work_ms: float,
             profiles: ThreadProfiles) -> dict[str, Any]:
    work_s = work_ms / 1000
    cpu_at_go = time.process_time()
    delivered: list[int] = []
    redelivered = 0
    error = ""
    consumer = marshaler.consumer([topic], "share", offset_reset="earliest",
                                  batch_size=BATCH_SIZE, acknowledgement="explicit")
    fetched = [0]  # records the data consumer fetched (its own and other members')
    poll = consumer._fetcher.poll

    def counting_poll(*args: Any, **kwargs: Any) -> Any:
        polled = poll(*args, **kwargs)
        fetched[0] += sum(len(batch.records) for batch in polled)
        return polled

    consumer._fetcher.poll = counting_poll  # counts what ShareConsumer._fetch reads

    def wait_for_stop() -> None:
        sys.stdin.readline()  # "stop" (or end of input)
        consumer.stop()

    stopper = threading.Thread(target=wait_for_stop, name="stop-reader", daemon=True)
    stopper.start()
    census = ThreadCensus(os.environ.get("MARSHAL_BENCH_SHARE_THREADS", ""),
                          f"member-{os.getpid()}")
    census.start()
    try:
        for record in consumer:
            if work_s:
                time.sleep(work_s)
            consumer.ack(record, "accept")
            delivered.append(record.offset)
            if record.delivery_count > 1:
                redelivered += 1
    except Exception as exc:  # reported to the parent, which fails the run
        error = f"{type(exc).__name__}: {exc}"
    finally:
        census.write()
        consumer.close()
    if not error:  # on an error the parent is told at once (it aborts the benchmark)
        stopper.join(timeout=30)
    cpu_s = time.process_time() - cpu_at_go
    profiles.dump()
    stats = consumer.stats
    distinct = sorted(set(delivered))
    repeated = sorted(o for o, n in Counter(delivered).items() if n > 1)
    channel = consumer._engine.channel  # where this member's replay began, for evidence
    return {
        "delivered": len(delivered),
        "fetched": fetched[0],
        "cpu_s": cpu_s,
        "distinct": len(distinct),
        "redelivered": redelivered,
        "offsets": format_ranges(ranges_of(distinct)) if distinct else "",
        "repeated": format_ranges(ranges_of(repeated)) if repeated else "",
        "replay_starts": {str(p): s for p, s in channel.replay_starts.items()},
        "acquisitions": stats.acquisitions,
        "records_acquired": stats.records_acquired,
        "records_void": stats.records_void,
        "renewals": stats.renewals,
        "acks": stats.acks,
        "coordination_records": stats.coordination_records,
        "error": error,
    }


class Worker(WorkerProcess):
    """A ``python -m bench.share_member --worker`` process, driven over its stdin and stdout."""

    def __init__(self, name: str) -> None:
        super().__init__(name, "bench.share_member")


def worker_pool(count: int) -> contextlib.AbstractContextManager[list[Worker]]:
    """``count`` share worker processes, stopped on exit."""
    return started_workers(lambda k: Worker(f"share-{k}"), count)


class CliMember(CliProcess):
    """A ``marshal consume --mode share --print`` process; collects the offsets it prints."""

    def __init__(self, bootstrap: str, coordination_topic: str, group: str, topic: str,
                 client_id: str, heartbeat_interval_s: float) -> None:
        self.offsets: list[int] = []
        self.redelivered = 0
        super().__init__(client_id, [
            "consume", "--bootstrap-servers", bootstrap,
            "--coordination-topic", coordination_topic, "--group", group, "--topic", topic,
            "--mode", "share", "--client-id", client_id,
            "--heartbeat-interval", f"{heartbeat_interval_s:g}", "--offset-reset", "earliest",
            "--batch-size", str(BATCH_SIZE), "--print",
        ])

    def on_stdout(self, raw: bytes, at: float) -> None:
        try:
            printed = json.loads(raw)
        except ValueError:
            return
        self.offsets.append(int(printed["offset"]))
        if printed.get("delivery_count", 1) > 1:
            self.redelivered += 1

    def summary(self) -> dict[str, Any]:
        distinct = sorted(set(self.offsets))
        return {"delivered": len(self.offsets), "fetched": None, "cpu_s": None,
                "distinct": len(distinct),
                "redelivered": self.redelivered,
                "offsets": format_ranges(ranges_of(distinct)) if distinct else "",
                "records_void": None, "error": ""}


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    worker_main()
