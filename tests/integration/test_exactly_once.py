"""Exactly-once consume -> transform -> produce on the real broker (PROTOCOL.md 7.2): output and
input offsets commit in one transaction; a member killed (kill -9) with a transaction open, or
frozen (SIGSTOP) and resumed after a takeover, leaves no output that read_committed readers
see; aborted commit records never enter the world state; `marshal consume --mode eos` copies a
topic exactly once; and what cannot work is one clear line."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from marshal_py import ExactlyOnceConsumer, GroupKey, Marshaler
from marshal_py.devbroker import DevBroker
from marshal_py.protocol import CommittingTransaction, coordination_partition, encode
from tests.integration.consumer_support import create_topic, run_marshal, wait_for

pytestmark = pytest.mark.integration

HI = 1.0


@pytest.fixture
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    return {"input": f"eos-in-{tag}", "output": f"eos-out-{tag}", "group": f"eos.{tag}",
            "coordination": f"__marshal_eos_{tag}"}


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(count):
            producer.send(topic, key=f"k{i % 5}".encode(), value=f"v{i}".encode(),
                          partition=i % partitions, headers=[("h", f"{i}".encode())])
        producer.flush()
    finally:
        producer.close()


def read_topic(bootstrap: str, topic: str, partitions: int,
               isolation: str = "read_committed") -> list[Any]:
    """Every record of ``topic`` (up to its end now) at ``isolation``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, isolation_level=isolation)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "could not read the output to its end"
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def sources(records: list[Any]) -> Counter[str]:
    """How often each input record (its ``src`` header) appears in ``records``."""
    return Counter(dict(r.headers)["src"].decode() for r in records)


def expected_sources(count: int, partitions: int) -> Counter[str]:
    return Counter(f"{i % partitions}/{i // partitions}" for i in range(count))


def copy(consumer: ExactlyOnceConsumer, output: str, until: int, timeout: float = 60) -> int:
    """Copy batches (with a ``src`` header) until ``until`` records were committed."""
    committed = 0
    deadline = time.monotonic() + timeout
    while committed < until:
        assert time.monotonic() < deadline, f"committed {committed} of {until}"
        batch = consumer.poll_batch(0.5)
        if batch is None:
            continue
        for record in batch:
            batch.send(output, record.value, key=record.key,
                       headers=[("src", f"{record.partition}/{record.offset}".encode())])
        if batch.commit():
            committed += len(batch)
    return committed


def claims_when(m: Marshaler, topic: str, expected: Callable[[list[Any]], bool],
                timeout: float = 30) -> list[Any]:
    """The group's claims on ``topic`` once ``expected`` holds of them. ``commit`` returns when
    the transaction coordinator has decided; the markers that make the commit record visible to
    read_committed readers reach the coordination partition a moment later (Kafka writes them
    after answering), so what a member sees right after a commit is awaited, not read once."""
    seen: list[Any] = []

    def check() -> bool:
        seen[:] = m.claims(topic)
        return expected(seen)
    wait_for(check, timeout, f"the claims on {topic} to settle",
             describe=lambda: repr([(c.key.partition, c.committed_offset, c.transactional)
                                    for c in seen]))
    return list(seen)


def test_output_and_offsets_commit_together_and_each_record_is_copied_once(
        kafka_bootstrap: str, names: dict[str, str]) -> None:
    create_topic(kafka_bootstrap, names["input"], 2)
    create_topic(kafka_bootstrap, names["output"], 2)
    produce(kafka_bootstrap, names["input"], 300, 2)
    with Marshaler(kafka_bootstrap, names["group"], "c1", HI,
                   coordination_topic=names["coordination"]) as m:
        consumer = m.consumer([names["input"]], "eos", offset_reset="earliest")
        first = wait_for(lambda: consumer.poll_batch(0.5, max_records=10), 30, "a batch")
        assert len(first) <= 10 and {r.partition for r in first} == {first.partition}
        first.abort()  # its records come again, nothing of it is visible
        assert copy(consumer, names["output"], 300) == 300
        claims = claims_when(m, names["input"], lambda cs: sorted(
            (c.committed_offset, c.transactional) for c in cs) == [(150, True), (150, True)])
        assert len(claims) == 2
        assert consumer.transactions[1] == 1  # the one aborted
        with pytest.raises(Exception, match="batches"):
            consumer.poll()
    copied = read_topic(kafka_bootstrap, names["output"], 2)
    assert sources(copied) == expected_sources(300, 2)


def test_an_authenticated_group_signs_its_commit_records_and_accepts_them(
        kafka_bootstrap: str, names: dict[str, str]) -> None:
    """The commit records go through another producer than the member's other records, under
    a writer of their own (``<instance>.t<partition>``) with its own sequence numbers: none
    is rejected, by the member or by a reader that joins later."""
    keys = (GroupKey("eos-key", os.urandom(32)),)
    create_topic(kafka_bootstrap, names["input"], 2)
    create_topic(kafka_bootstrap, names["output"], 2)
    produce(kafka_bootstrap, names["input"], 100, 2)
    with Marshaler(kafka_bootstrap, names["group"], "c1", HI, auth_keys=keys,
                   coordination_topic=names["coordination"]) as m:
        consumer = m.consumer([names["input"]], "eos", offset_reset="earliest")
        assert copy(consumer, names["output"], 100) == 100
        assert consumer.transactions[0] >= 2
        claims_when(m, names["input"],
                    lambda cs: sorted(c.committed_offset for c in cs) == [50, 50])
        assert m.rationalizer.rejected_count(names["group"]) == 0
    with Marshaler(kafka_bootstrap, names["group"], "c2", HI, auth_keys=keys,
                   coordination_topic=names["coordination"]) as later:
        claims_when(later, names["input"],
                    lambda cs: sorted(c.committed_offset for c in cs) == [50, 50])
        assert later.rationalizer.rejected_count(names["group"]) == 0


def test_an_aborted_commit_record_never_enters_the_world_state(
        kafka_bootstrap: str, names: dict[str, str]) -> None:
    create_topic(kafka_bootstrap, names["input"], 1)
    create_topic(kafka_bootstrap, names["output"], 1)
    produce(kafka_bootstrap, names["input"], 20, 1)
    with Marshaler(kafka_bootstrap, names["group"], "c1", HI,
                   coordination_topic=names["coordination"]) as m:
        consumer = m.consumer([names["input"]], "eos", offset_reset="earliest")
        assert copy(consumer, names["output"], 20) == 20
        count = m._log.partition_count()
    # A commit record for offset 999 in a transaction that aborts: in the log, not in force.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap,
                             transactional_id=f"x-{uuid.uuid4()}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        forged = CommittingTransaction(int(time.time()), "deadbeef.t0", "c9", names["group"],
                                       names["input"], 0, 999)
        producer.send(names["coordination"], encode(forged),
                      partition=coordination_partition(names["input"], count)).get(timeout=10)
        producer.abort_transaction()
    finally:
        producer.close()
    state = run_marshal("state", "--json", "--heartbeat-interval", str(HI),
                        "--bootstrap-servers", kafka_bootstrap, "--coordination-topic",
                        names["coordination"], "--group", names["group"])
    assert state.returncode == 0, state.stderr
    assert [row["committed_offset"] for row in json.loads(state.stdout)] == [20]
    with Marshaler(kafka_bootstrap, names["group"], "c2", HI,
                   coordination_topic=names["coordination"]) as m:
        assert [c.committed_offset for c in m.claims(names["input"])] == [20]


class Worker:
    """An :mod:`tests.integration.eos_worker` process."""

    def __init__(self, bootstrap: str, names: dict[str, str], client: str,
                 hold_from: int) -> None:
        settings = {"bootstrap": bootstrap, "group": names["group"], "client": client,
                    "hi": HI, "coordination_topic": names["coordination"],
                    "topic": names["input"], "output": names["output"], "batch": 10,
                    "hold_from": hold_from}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.eos_worker", json.dumps(settings)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def next(self, kind: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {kind!r} event from the worker: "
                                     f"{self.stderr()}") from None
            if event["event"] == kind:
                return event

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def raw_end(bootstrap: str, topic: str) -> int:
    """The end of ``topic``'s partition 0 for read_uncommitted readers (open transactions
    included)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def test_a_member_killed_with_a_transaction_open_leaves_no_visible_output(
        kafka_bootstrap: str, names: dict[str, str], workers: list[Worker]) -> None:
    create_topic(kafka_bootstrap, names["input"], 1)
    create_topic(kafka_bootstrap, names["output"], 1)
    produce(kafka_bootstrap, names["input"], 40, 1)
    a = Worker(kafka_bootstrap, names, "a", hold_from=2)
    workers.append(a)
    a.next("ready")
    assert a.next("commit")["ok"]  # the first 10 records, committed
    sent = a.next("sent")
    assert (sent["first"], sent["next"]) == (10, 20)
    # The second transaction's output is in the log (read_uncommitted sees it) when a dies.
    wait_for(lambda: raw_end(kafka_bootstrap, names["output"]) >= 20, 30, "the open output")
    a.proc.kill()
    a.proc.wait()
    with Marshaler(kafka_bootstrap, names["group"], "b", HI,
                   coordination_topic=names["coordination"]) as m:
        consumer = m.consumer([names["input"]], "eos")
        # b takes over once a's claim is stale, fences a's transactional id (aborting what a
        # left open) and starts at a's last commit.
        assert copy(consumer, names["output"], 30) == 30
        lease = consumer._engine.leases[(names["input"], 0)]
        assert lease.start == 10
    assert sources(read_topic(kafka_bootstrap, names["output"], 1)) == expected_sources(40, 1)
    assert len(read_topic(kafka_bootstrap, names["output"], 1, "read_uncommitted")) >= 50


def test_a_frozen_member_resumed_after_the_takeover_commits_nothing(
        kafka_bootstrap: str, names: dict[str, str], workers: list[Worker]) -> None:
    create_topic(kafka_bootstrap, names["input"], 1)
    create_topic(kafka_bootstrap, names["output"], 1)
    produce(kafka_bootstrap, names["input"], 40, 1)
    a = Worker(kafka_bootstrap, names, "a", hold_from=2)
    workers.append(a)
    a.next("ready")
    assert a.next("commit")["ok"]
    assert a.next("sent")["first"] == 10
    wait_for(lambda: raw_end(kafka_bootstrap, names["output"]) >= 20, 30, "the open output")
    os.kill(a.proc.pid, signal.SIGSTOP)  # a zombie with its transaction open
    with Marshaler(kafka_bootstrap, names["group"], "b", HI,
                   coordination_topic=names["coordination"]) as m:
        consumer = m.consumer([names["input"]], "eos")
        assert copy(consumer, names["output"], 30) == 30
        os.kill(a.proc.pid, signal.SIGCONT)
        a.go()  # a commits the batch it had open before it froze
        resumed = a.next("commit")
        assert not resumed["ok"] and resumed["first"] == 10
        # The zombie's refused commit left b's committed offset where b's last commit put it
        # (b may since have given the partition to a, now live again: balancing, not harm).
        claims_when(m, names["input"],
                    lambda cs: {c.key.partition: c.committed_offset for c in cs} == {0: 40})
    assert sources(read_topic(kafka_bootstrap, names["output"], 1)) == expected_sources(40, 1)


def test_marshal_consume_copies_a_topic_exactly_once(kafka_bootstrap: str,
                                                     names: dict[str, str]) -> None:
    create_topic(kafka_bootstrap, names["input"], 3)
    create_topic(kafka_bootstrap, names["output"], 3)
    produce(kafka_bootstrap, names["input"], 90, 3)
    result = run_marshal("consume", "--bootstrap-servers", kafka_bootstrap,
                         "--coordination-topic", names["coordination"], "--group",
                         names["group"], "--topic", names["input"], "--mode", "eos",
                         "--output-topic", names["output"], "--offset-reset", "earliest",
                         "--heartbeat-interval", str(HI), "--max-records", "90", timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"copied 90 records to {names['output']} exactly once" in result.stderr
    copied = read_topic(kafka_bootstrap, names["output"], 3)
    assert sorted(r.value for r in copied) == sorted(f"v{i}".encode() for i in range(90))
    by_value = {r.value: r for r in copied}
    for i in range(90):
        record = by_value[f"v{i}".encode()]
        assert record.key == f"k{i % 5}".encode()
        assert record.headers == [("h", f"{i}".encode())]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_an_unknown_output_topic_and_a_missing_output_option_are_one_line(
        kafka_bootstrap: str, names: dict[str, str]) -> None:
    create_topic(kafka_bootstrap, names["input"], 1)
    base = ("consume", "--bootstrap-servers", kafka_bootstrap, "--coordination-topic",
            names["coordination"], "--group", names["group"], "--topic", names["input"])
    unknown = run_marshal(*base, "--mode", "eos", "--output-topic", "no-such-topic")
    assert unknown.returncode == 2
    assert one_line(unknown.stderr) == (
        f"marshal: error: topic 'no-such-topic' does not exist on {kafka_bootstrap}; create "
        "it or check the name")
    missing = run_marshal(*base, "--mode", "eos")
    assert missing.returncode == 2
    assert "--mode eos copies records to --output-topic" in one_line(missing.stderr)
    stray = run_marshal(*base, "--output-topic", names["input"])
    assert stray.returncode == 2
    assert "--output-topic needs --mode eos" in one_line(stray.stderr)


class BrokerWithoutTransactions(DevBroker):
    """A single broker whose transaction state topic asks for three replicas: it can never be
    made, so no transaction coordinator ever answers (a common development mistake)."""

    def _server_properties(self) -> str:
        return super()._server_properties().replace(
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.replication.factor=3")


def test_a_broker_without_transactions_is_one_line(names: dict[str, str]) -> None:
    broker = BrokerWithoutTransactions(heap="512m")
    broker.start()
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, names["input"], 1)
        create_topic(bootstrap, names["output"], 1)
        produce(bootstrap, names["input"], 5, 1)
        result = run_marshal("consume", "--bootstrap-servers", bootstrap, "--group",
                             names["group"], "--topic", names["input"], "--mode", "eos",
                             "--output-topic", names["output"], "--offset-reset", "earliest",
                             "--heartbeat-interval", str(HI), "--timeout", "5", timeout=120)
    finally:
        broker.stop()
    assert result.returncode == 2, result.stderr
    # The member joined (its one line of progress), then could not take anything up.
    line = one_line("\n".join(x for x in result.stderr.splitlines()
                              if not x.startswith("marshal consume: member ")))
    assert line.startswith(f"marshal: error: the brokers at {bootstrap} run no transactions"), line
    assert "transaction.state.log.replication.factor" in line
