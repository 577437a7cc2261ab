"""python -m bench: every benchmark against its anchor, on one broker, with plots.

Usage::

    python -m bench [SUITE ...] [--quick] [--repeat N] [--bootstrap-servers HOST:PORT]
    python -m bench --list

Runs the named suites (all of them by default) in order against one Kafka broker — a dev
broker it starts itself (Kafka 4.3.1, KRaft, 127.0.0.1) unless ``--bootstrap-servers`` names
one — and writes, per suite, ``bench/results/<suite>.json`` and ``.md`` and
``docs/bench/<suite>-N.png``. ``--quick`` is the smoke run ``bin/test`` makes: small sizes,
one repetition, written under ``bench/results/quick`` (never over the quoted figures).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from bench.harness import BROKER_PROPERTIES, BenchContext, BenchError
from bench.report import write
from marshal_py.errors import MarshalError

#: Suite name -> (module, what it measures), in the order a full run takes them.
SUITES: dict[str, tuple[str, str]] = {
    "overhead": ("bench.suite_overhead",
                 "exclusive consumers (ALO, AMO, Spark source) vs plain kafka-python"),
    "failover": ("bench.suite_failover",
                 "kill -9 failover vs classic and KIP-848 consumer groups"),
    "share": ("bench.suite_share", "share consumers vs Kafka's native share groups"),
    "key-shared": ("bench.suite_key_shared",
                   "key-shared processes on the Parallel Consumer's published setup"),
    "coordination": ("bench.suite_coordination",
                     "claim latency, apply rate, catch-up, records per 1,000, RSS"),
    "growth": ("bench.suite_growth", "settling and rationalizer cost against size (MemoryLog)"),
    "eos": ("bench.suite_eos",
            "exactly-once copy vs ALO and Kafka's transactions; cost to neighbour groups"),
}


@contextmanager
def _broker(bootstrap: str | None, ctx_say: BenchContext) -> Iterator[str]:
    if bootstrap is not None:
        yield bootstrap
        return
    ctx_say.say("starting a dev broker")
    with _bench_broker()() as broker:
        yield broker.bootstrap_servers


def _bench_broker() -> type:
    """The dev broker with :data:`bench.harness.BROKER_PROPERTIES` added."""
    from marshal_py.devbroker import DevBroker

    class BenchBroker(DevBroker):
        def _server_properties(self) -> str:
            extra = "".join(f"{k}={v}\n" for k, v in BROKER_PROPERTIES.items())
            return super()._server_properties() + extra

    return BenchBroker


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds every suite's cleanup and the broker's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", metavar="SUITE",
                        help=f"suites to run (default all): {', '.join(SUITES)}")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: small sizes, one repetition, nothing quoted")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repetitions of every figure (default 3; --quick 1)")
    parser.add_argument("--bootstrap-servers", default=None,
                        help="use this broker instead of starting a dev broker")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, (_module, what) in SUITES.items():
            print(f"{name:<13} {what}")
        return 0
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite {unknown[0]!r}; choose from {', '.join(SUITES)}")
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    names = args.suites or list(SUITES)
    signal.signal(signal.SIGTERM, _terminate)
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    probe = BenchContext(bootstrap="", quick=args.quick, repeat=repeat, command=command.strip())
    try:
        with _broker(args.bootstrap_servers, probe) as bootstrap:
            ctx = BenchContext(bootstrap=bootstrap, quick=args.quick, repeat=repeat,
                               command=command.strip())
            print(f"# {ctx.machine}")
            for name in names:
                started = time.monotonic()
                ctx.say(f"suite {name}: {SUITES[name][1]}")
                module = importlib.import_module(SUITES[name][0])
                report = module.run(ctx)
                paths = write(report, ctx.machine, ctx.quick)
                print(report.markdown(ctx.machine))
                ctx.say(f"suite {name} done in {time.monotonic() - started:.0f} s; wrote "
                        + ", ".join(str(p) for p in paths))
    except (BenchError, MarshalError) as exc:
        print(f"python -m bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("python -m bench: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
