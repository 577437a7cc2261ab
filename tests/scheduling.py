"""How ``bin/test`` spreads the suite over pytest-xdist workers.

Most of the suite waits: on heartbeat intervals, leases, brokers and Spark jobs. Several
workers (``bin/test`` runs three) use those waits, all on the one dev broker ``bin/test``
starts for the run (without it, the session fixtures start one per worker). A worker is
handed whole *parts*: a test file, or for the Spark tests one of four fixed sets of files,
so that each Spark session (a JVM and Python workers) starts once per part and the
standalone cluster once in the whole run; the files that also run on a Kafka 3.9 broker are
one part too, so that broker starts once. Parts go out longest first -- the Spark parts (with
the Kafka 3.9 part among them, so that the three workers do not all start Spark at once) and
the jobs with a program of their own -- then a part that computes in turn with one that
waits (the longest pure parts beside the fault campaigns and the longest broker files), then
the other broker parts, and the other pure tests, quick and many, fill the gaps at the end.

Each worker sorts its collection by :func:`rank_of` (the same order in every worker, as xdist
requires), and :class:`PartsScheduling` hands the parts out in that order.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

#: The Spark test files by part, the longest part first (2026-11-25, from --durations on a
#: loaded machine: the audit part about 5 minutes, the others 3-5).
SPARK_PARTS = {
    # The million-record audit (a generated log, both engines) and the other audit tests,
    # which share its broker, its local session and its Spark process with the Kafka
    # connector; its standalone-cluster test goes with the cluster part (one cluster a run).
    "spark-audit": ("test_audit_engines.py",),
    "spark-streams": ("test_range_stream.py", "test_example_pipeline.py",
                      "test_kafka_output.py", "test_fetch.py", "test_source_auth.py",
                      "test_range_stream_secured.py"),
    "spark-source": ("test_source_integration.py", "test_transactional_input.py",
                     "test_source_key_shared.py"),
    "spark-cluster": ("test_cluster.py", "test_source_cluster.py", "test_quick_jvm.py"),
}
#: The files whose tests also run on a Kafka 3.9 broker (``ON_EVERY_BROKER``), one part: the
#: 3.9 broker (a session fixture, started on first use) then starts once in the run, not on
#: every worker.
KAFKA39_PART = ("kafka-3.9", ("tests/integration/test_consumers.py",
                              "tests/integration/test_share.py",
                              "tests/integration/test_key_shared.py",
                              "tests/integration/test_devbroker.py",
                              "tests/integration/test_compat.py",
                              "tests/integration/test_layout.py",
                              "tests/integration/test_auth.py"))
_PART_OF_FILE = {f"tests/spark/{name}": part
                       for part, names in SPARK_PARTS.items() for name in names}
_PART_OF_FILE.update({path: KAFKA39_PART[0] for path in KAFKA39_PART[1]})
#: Tests that go with another part than their file's: those on the standalone cluster, which
#: starts once, in the cluster part.
_PART_OF_TEST = {
    "tests/spark/test_audit_engines.py::test_engines_agree_on_a_standalone_cluster":
        "spark-cluster",
    "tests/spark/test_range_stream.py::test_on_a_standalone_cluster_executor_jvms_read_every_"
    "record": "spark-cluster",
}

#: Parts (or directories) the workers take up first, in this order: the Spark parts and the
#: other long ones. Never three Spark parts at once at the start: the 3.9 part (which waits on
#: brokers) goes out second. With the three Spark parts first, the load reached 14 on 2 cores
#: in their first minutes.
FIRST = ("spark-streams", "kafka-3.9", "spark-audit", "tests/test_bench_quick.py",
         "spark-source", "spark-cluster")
#: Then these, which alternate: a part that keeps a core busy (the longest pure parts), then
#: one that mostly waits on brokers and heartbeats (the fault campaigns, the three-node
#: failover, the longest broker files), so that a worker computing runs beside two waiting.
#: When the long parts went out before every pure one, the three workers all waited at once
#: for minutes (the machine 75-85 % busy, 2026-11-29) and the pure tests ran at the end.
#: Longest first in each kind (2026-11-29, from a full run's timeline: the golden corpus
#: 110 s, the campaigns 139 s).
MIXED = ("tests/golden/test_golden_corpus.py", "tests/chaos/",
         "tests/property/test_share_properties.py", "tests/failure/",
         "tests/simulation/test_key_shared.py", "tests/integration/test_transactional_input.py",
         "tests/property/test_fuzz.py", "tests/integration/test_security.py",
         "tests/simulation/test_key_shared_batches.py", "tests/integration/test_exactly_once.py",
         "tests/simulation/test_consumers.py", "tests/integration/test_cli_admin.py",
         "tests/property/test_claim_index_properties.py",
         "tests/integration/test_consumer_api.py", "tests/simulation/test_handout.py")
PURE = ("tests/unit/", "tests/property/", "tests/simulation/", "tests/golden/",
        "tests/contract/")


def part_of(nodeid: str) -> str:
    """The part of the suite a test belongs to (one worker runs a part whole)."""
    for test, part in _PART_OF_TEST.items():
        if nodeid.startswith(test):
            return part
    path = nodeid.split("::", 1)[0]
    return _PART_OF_FILE.get(path, path)


def rank_of(nodeid: str) -> int:
    """Where the test's part comes in the order the workers take parts up: :data:`FIRST`,
    :data:`MIXED`, the other broker parts, then the other pure ones."""
    part = part_of(nodeid)
    for rank, first in enumerate(FIRST + MIXED):
        if part == first or (first.endswith("/") and part.startswith(first)):
            return rank
    return len(FIRST + MIXED) + (1 if part.startswith(PURE) else 0)


class PartsScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with :func:`part_of` as the scope, in collection order."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        # The workers' collection is already in the order parts should go out.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return part_of(nodeid)
