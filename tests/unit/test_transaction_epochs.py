"""A transactional commit checks what its producer wrote first
(marshal_py.client.transactions.PartitionProducer.commit): kafka-python may bump the producer's
epoch inside a transaction (KIP-360, after a broker restart), which aborts what was sent before
and lets later sends go on in a new transaction. A commit then would write the input offset
without the output: it is refused, and a bump during the commit makes its outcome unknown."""

from __future__ import annotations

from typing import Any

import pytest

from marshal_py.client.eos_batch import TransactionOutcomeUnknownError
from marshal_py.client.transactions import PartitionProducer
from marshal_py.errors import BrokerUnavailableError
from marshal_py.log.kafka_config import KafkaLogConfig


class _Future:
    def __init__(self, exception: BaseException | None = None) -> None:
        self.is_done = True
        self.exception = exception

    def failed(self) -> bool:
        return self.exception is not None


class _IdAndEpoch:
    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id, self.epoch = producer_id, epoch


class _Manager:
    def __init__(self) -> None:
        self.producer_id_and_epoch = _IdAndEpoch(7, 1)


class _Producer:
    """kafka-python's KafkaProducer as a transaction sees it; ``bump_on`` names the call
    during which the epoch is bumped, ``fail_sends`` fails the sends made before it."""

    def __init__(self, bump_on: str | None = None, fail_sends: bool = False) -> None:
        self._transaction_manager = _Manager()
        self.calls: list[str] = []
        self.futures: list[_Future] = []
        self.bump_on, self.fail_sends = bump_on, fail_sends

    def _maybe_bump(self, call: str) -> None:
        if call == self.bump_on:
            self._transaction_manager.producer_id_and_epoch = _IdAndEpoch(7, 2)
            if self.fail_sends:
                for future in self.futures:
                    future.exception = RuntimeError("OutOfOrderSequenceNumberError")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send(self, topic: str, **kwargs: Any) -> _Future:
        self.calls.append(f"send {topic}")
        future = _Future()
        self.futures.append(future)
        return future

    def flush(self, timeout: float | None = None) -> None:
        self.calls.append("flush")
        self._maybe_bump("flush")

    def commit_transaction(self) -> None:
        self.calls.append("commit")
        self._maybe_bump("commit")


def _partition_producer(fake: _Producer) -> PartitionProducer:
    producer = PartitionProducer.__new__(PartitionProducer)
    producer.config = KafkaLogConfig(bootstrap_servers="127.0.0.1:9092", topic="__marshal")
    producer.tid = "marshal-eos/g/t/0"
    producer.timeout_s = 5.0
    producer.in_use = producer.retired = producer._open = False
    producer._sent, producer._began_as = [], None
    producer._producer = fake
    return producer


def _one_sent(fake: _Producer) -> PartitionProducer:
    """A transaction begun on ``fake`` with one output record sent."""
    producer = _partition_producer(fake)
    producer.begin()
    producer.send("out", b"v", None, None, None)
    return producer


def test_a_commit_waits_for_every_record_then_commits() -> None:
    fake = _Producer()
    producer = _one_sent(fake)
    producer.commit("__marshal", 1, b"CommittingTransaction/...")
    assert fake.calls == ["begin", "send out", "send __marshal", "flush", "commit"]


@pytest.mark.parametrize(("fail_sends", "said"), [
    (True, r"not written.*records come again"),  # the sends in flight failed with the bump
    (False, r"epoch was bumped"),  # or they were acknowledged before it
])
def test_an_epoch_bumped_before_the_commit_refuses_it(fail_sends: bool, said: str) -> None:
    fake = _Producer(bump_on="flush", fail_sends=fail_sends)
    producer = _one_sent(fake)
    with pytest.raises(BrokerUnavailableError, match=said):
        producer.commit("__marshal", 1, b"CommittingTransaction/...")
    assert "commit" not in fake.calls


def test_a_failed_send_refuses_the_commit() -> None:
    fake = _Producer()
    producer = _one_sent(fake)
    fake.futures[0].exception = RuntimeError("NotLeaderForPartitionError")
    with pytest.raises(BrokerUnavailableError, match="NotLeaderForPartitionError"):
        producer.commit("__marshal", 1, b"CommittingTransaction/...")
    assert "commit" not in fake.calls


def test_an_epoch_bumped_during_the_commit_leaves_its_outcome_unknown() -> None:
    fake = _Producer(bump_on="commit")
    producer = _one_sent(fake)
    with pytest.raises(TransactionOutcomeUnknownError, match="read from the log"):
        producer.commit("__marshal", 1, b"CommittingTransaction/...")
