"""Kafka transactions of an exactly-once member: one transactional producer per held partition.

Each held input partition has its own transactional id, bound to the claim and not to the
process (:func:`transactional_id`): whoever takes the partition up next fences the previous
owner by initializing the same id (PROTOCOL.md 7.2). :class:`KafkaFencing` makes and keeps
these producers (the engine's :class:`~marshal_py.client.fencing.Fencing`);
:class:`PartitionProducer` writes one partition's transactions.

kafka-python's ``commit_transaction`` and ``abort_transaction`` wait without a time limit, and
were seen to wait two minutes after a broker restart: every call here is bounded by the
member's ``timeout`` (:func:`bounded`). A commit whose outcome is unknown (it timed out) is
never guessed at: the caller takes the partition up again, which fences the producer (its
transaction then completes or aborts) and reads what the log says was committed.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import (
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    UnsupportedVersionError,
)

from marshal_py.client.eos_batch import TransactionFencedError, TransactionOutcomeUnknownError
from marshal_py.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    KafkaAuthorizationError,
    MarshalError,
)
from marshal_py.log.kafka_auth import is_authorization_failure, not_authorized, principal
from marshal_py.log.kafka_config import (
    SAFE_PRODUCER,
    KafkaLogConfig,
    close_producer,
    new_client,
    quick_metadata,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Transactional ids longer than this are shortened with a hash (Kafka's tools show them).
MAX_TRANSACTIONAL_ID = 249
#: Kafka's internal topic of transaction states: a cluster without it runs no transactions.
TRANSACTION_STATE_TOPIC = "__transaction_state"


def transactional_id(group: str, topic: str, partition: int) -> str:
    """The transactional id of a group's input partition: ``marshal/<group>/<topic>/<n>``.

    Topic names hold no ``/``, so the id is unambiguous read from the right whatever the
    group id holds; grant ``TransactionalId`` ACLs with the prefix ``marshal/<group>/``. An
    id over :data:`MAX_TRANSACTIONAL_ID` characters keeps the group prefix when it can and
    replaces the rest with a hash."""
    full = f"marshal/{group}/{topic}/{partition}"
    if len(full) <= MAX_TRANSACTIONAL_ID:
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:40]
    short = f"marshal/{group}/#{digest}"
    return short if len(short) <= MAX_TRANSACTIONAL_ID else f"marshal/#{digest}"


def commit_writer(instance_id: str, partition: int) -> str:
    """The instance id a partition's commit records are written under (signed groups count
    each writer's sequence numbers apart, PROTOCOL.md 12): ``<instance>.t<partition>``."""
    return f"{instance_id}.t{partition}"


def bounded(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """``call()`` with a time limit; :class:`TransactionOutcomeUnknownError` when it did not
    end in time (it goes on in a daemon thread, on a producer the caller then gives up)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"marshal-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TransactionOutcomeUnknownError(f"{what} did not end within {timeout_s:g} s")
    if failure:
        raise failure[0]
    return result[0]


def transaction_error(config: KafkaLogConfig, exc: BaseException, tid: str,
                      action: str) -> MarshalError:
    """A one-line error for a failed transactional call (``action`` says which)."""
    if isinstance(exc, MarshalError):
        return exc
    if isinstance(exc, ProducerFencedError | InvalidProducerEpochError
                  | TransactionCoordinatorFencedError):
        return TransactionFencedError(f"{action}: transactional id {tid!r} was initialized by "
                                      "another producer (the partition's next owner)")
    if isinstance(exc, TransactionalIdAuthorizationFailedError):
        group_prefix = tid.rsplit("/", 2)[0] + "/"
        return KafkaAuthorizationError(
            f"not authorized to use transactional id {tid!r} as {principal(config)}: grant "
            f"WRITE and DESCRIBE on TransactionalId {group_prefix!r} (resource pattern type "
            "prefixed) for exactly-once consumers")
    if isinstance(exc, UnsupportedVersionError):
        return ConfigurationError(
            f"the brokers at {config.bootstrap_servers} do not support transactions "
            f"({type(exc).__name__}): exactly-once needs Kafka 2.5 or later")
    if isinstance(exc, KafkaError) and is_authorization_failure(exc):
        named = exc.args[0] if exc.args else None
        topic = next(iter(named)) if isinstance(named, set | frozenset) and named else None
        return not_authorized(config, "write", str(topic) if topic else None) \
            if topic else KafkaAuthorizationError(
                f"{action}: not authorized as {principal(config)}: {exc}")
    if isinstance(exc, KafkaTimeoutError):
        return BrokerUnavailableError(f"{action} timed out: {exc}")
    return BrokerUnavailableError(f"{action} failed: {type(exc).__name__}: {exc}")


class PartitionProducer:
    """The transactional producer of one held input partition (one transaction at a time).

    Used by one thread at a time (the engine's when it is made and fenced, the
    application's for the batches). Every call is bounded by ``timeout_s``.
    """

    def __init__(self, config: KafkaLogConfig, tid: str, *, timeout_s: float,
                 transaction_timeout_ms: int) -> None:
        self.config = config
        self.tid = tid
        self.timeout_s = timeout_s
        #: True while a batch uses it; a producer given up meanwhile is closed at its end.
        self.in_use = False
        self.retired = False
        self._open = False
        #: The open transaction's sends (their futures), and the producer id and epoch it
        #: began with: see :meth:`commit`.
        self._sent: list[Any] = []
        self._began_as: tuple[int, int] | None = None
        try:
            self._producer = quick_metadata(new_client(KafkaProducer, **config.client_config(
                KafkaProducer, fixed={
                    **SAFE_PRODUCER,
                    "transactional_id": tid,
                    "transaction_timeout_ms": transaction_timeout_ms,
                    "linger_ms": 5,
                    "max_block_ms": int(timeout_s * 1000),
                })))
        except KafkaError as exc:
            raise transaction_error(config, exc, tid, "connecting a transactional producer") \
                from exc

    def init(self) -> None:
        """Fence every earlier producer of the id (``init_transactions``)."""
        try:
            bounded(self._producer.init_transactions, self.timeout_s + 1.0,
                    f"initializing transactional id {self.tid}")
        except TransactionOutcomeUnknownError as exc:
            raise BrokerUnavailableError(str(exc)) from exc
        except KafkaTimeoutError as exc:
            raise self._init_timed_out() from exc
        except Exception as exc:
            raise transaction_error(self.config, exc, self.tid,
                                    f"initializing transactional id {self.tid}") from exc

    def _init_timed_out(self) -> MarshalError:
        """No transaction coordinator answered: a cluster whose transaction state topic was
        never made cannot run transactions at all (a ConfigurationError); otherwise the
        brokers may be restarting (retried)."""
        admin = None
        try:
            admin = new_client(KafkaAdminClient, **self.config.client_config(KafkaAdminClient))
            found = [t for t in admin.describe_topics([TRANSACTION_STATE_TOPIC])
                     if t.get("name") == TRANSACTION_STATE_TOPIC]
            missing = not found or found[0].get("error_code", 0) == 3
        except Exception:  # cannot tell: the brokers may be away
            missing = False
        finally:
            if admin is not None:
                admin.close()
        if missing:
            return ConfigurationError(
                f"the brokers at {self.config.bootstrap_servers} run no transactions (they "
                f"have no {TRANSACTION_STATE_TOPIC} topic, so initializing transactional id "
                f"{self.tid!r} timed out): exactly-once needs transactions, so set "
                "transaction.state.log.replication.factor and transaction.state.log.min.isr "
                "no higher than the number of brokers")
        return BrokerUnavailableError(
            f"initializing transactional id {self.tid!r} timed out after "
            f"{self.timeout_s:g} s (is a broker restarting?); will try again")

    def begin(self) -> None:
        """Begin a transaction (nothing is sent until the first record)."""
        try:
            self._producer.begin_transaction()
        except Exception as exc:
            raise transaction_error(self.config, exc, self.tid, "beginning a transaction") \
                from exc
        self._open = True
        self._sent = []
        self._began_as = self._id_and_epoch()

    def _id_and_epoch(self) -> tuple[int, int] | None:
        """The producer id and epoch the producer writes with now (None: not known)."""
        manager = getattr(self._producer, "_transaction_manager", None)
        current = getattr(manager, "producer_id_and_epoch", None)
        return None if current is None else (current.producer_id, current.epoch)

    def send(self, topic: str, value: bytes | None, key: bytes | None,
             headers: Sequence[tuple[str, bytes]] | None, partition: int | None) -> Any:
        """Send an output record in the open transaction; its future."""
        try:
            future = self._producer.send(topic, value=value, key=key,
                                         headers=list(headers) if headers else None,
                                         partition=partition)
            self._sent.append(future)
            return future
        except KafkaTimeoutError as exc:
            raise BrokerUnavailableError(
                f"no metadata for output topic {topic!r} within {self.timeout_s:g} s: create "
                "the topic (or check the brokers)") from exc
        except KafkaError as exc:
            raise transaction_error(self.config, exc, self.tid,
                                    f"sending to {topic!r}") from exc

    def commit(self, coordination_topic: str, coordination_partition: int,
               record: bytes) -> None:
        """Add the commit record to the transaction and commit it. Raises
        :class:`TransactionFencedError`, :class:`TransactionOutcomeUnknownError` (commit
        timed out: outcome unknown), or another :class:`MarshalError` (not committed).

        Every record of the transaction is acknowledged first (the wait a commit makes
        anyway), and the transaction is committed only if each one was written under the
        producer id and epoch it began with. kafka-python recovers from some produce errors
        (an unknown producer id or an out-of-order sequence, as after a broker restart) by
        bumping the producer's epoch (KIP-360), which aborts the open transaction and fails
        the sends in flight -- and then lets the same transaction go on under the new epoch:
        a commit would then write the input offset without the output sent before the bump.
        That is refused here: the batch is aborted and its records come again."""
        self.send(coordination_topic, record, None, None, coordination_partition)
        try:
            self._producer.flush(self.timeout_s)
        except Exception as exc:
            raise transaction_error(self.config, exc, self.tid,
                                    "writing a transaction's records") from exc
        lost = next((f for f in self._sent if not f.is_done or f.failed()), None)
        if lost is not None or self._id_and_epoch() != self._began_as:
            why = (f"a record was not written ({lost.exception})" if lost is not None else
                   "the producer's epoch was bumped, which aborted the transaction")
            raise BrokerUnavailableError(f"transactional id {self.tid!r}: {why}; the batch is "
                                         "not committed and its records come again")
        try:
            bounded(self._producer.commit_transaction, self.timeout_s, "committing a transaction")
        except TransactionOutcomeUnknownError:
            raise
        except Exception as exc:
            raise transaction_error(self.config, exc, self.tid,
                                    "committing a transaction") from exc
        if self._id_and_epoch() != self._began_as:
            raise TransactionOutcomeUnknownError(
                f"transactional id {self.tid!r}: the producer's epoch was bumped while the "
                "transaction committed; what it committed is read from the log")
        self._open = False

    def abort(self) -> None:
        """Abort the open transaction (if any). Raises like :meth:`commit`."""
        if not self._open:
            return
        try:
            bounded(self._producer.abort_transaction, self.timeout_s, "aborting a transaction")
        except TransactionOutcomeUnknownError:
            raise
        except Exception as exc:
            raise transaction_error(self.config, exc, self.tid,
                                    "aborting a transaction") from exc
        self._open = False

    def close(self) -> None:
        """Close without waiting for what is pending (an open transaction is aborted by the
        next owner's fence, or by the broker after the transaction timeout)."""
        try:
            close_producer(self._producer, 0.0)
        except Exception:  # closing must not mask what led here
            log.debug("error while closing a transactional producer", exc_info=True)


class KafkaFencing:
    """The transactional producers of one exactly-once member, one per held partition; the
    engine's :class:`~marshal_py.client.fencing.Fencing`. Thread-safe."""

    def __init__(self, config: KafkaLogConfig, group: str, *, timeout_s: float,
                 transaction_timeout_ms: int) -> None:
        self.config = config
        self.group = group
        self.timeout_s = timeout_s
        self.transaction_timeout_ms = transaction_timeout_ms
        self._lock = threading.Lock()
        self._producers: dict[tuple[str, int], PartitionProducer] = {}
        #: Fences done (each one an init_transactions).
        self.fences = 0

    def fence(self, topic: str, partition: int) -> None:
        """A new producer for the partition's transactional id, initialized: every earlier
        one (another member's, or this member's previous one) is fenced."""
        self.forget(topic, partition)
        producer = PartitionProducer(self.config, transactional_id(self.group, topic, partition),
                                     timeout_s=self.timeout_s,
                                     transaction_timeout_ms=self.transaction_timeout_ms)
        try:
            producer.init()
        except BaseException:
            producer.close()
            raise
        with self._lock:
            self._producers[(topic, partition)] = producer
        self.fences += 1

    def forget(self, topic: str, partition: int) -> None:
        """The partition is no longer held: close its producer (at the end of the batch
        using it, if one does)."""
        with self._lock:
            producer = self._producers.pop((topic, partition), None)
            if producer is None:
                return
            producer.retired = True
            busy = producer.in_use
        if not busy:
            producer.close()

    def acquire(self, topic: str, partition: int,
                still_held: Callable[[], bool]) -> PartitionProducer | None:
        """The partition's producer for a batch, or None when the partition is gone.
        ``still_held`` is asked under the lock, after the producer was found: a partition
        given up (its lease revoked) is forgotten only afterwards, so a producer returned
        here belongs to the claim the caller holds."""
        with self._lock:
            producer = self._producers.get((topic, partition))
            if producer is None or producer.in_use or not still_held():
                return None
            producer.in_use = True
            return producer

    def release(self, producer: PartitionProducer) -> None:
        """The batch is over; a producer given up meanwhile is closed now."""
        with self._lock:
            producer.in_use = False
            retired = producer.retired
        if retired:
            producer.close()

    def close(self) -> None:
        """Close every producer."""
        with self._lock:
            producers = list(self._producers.values())
            self._producers.clear()
        for producer in producers:
            producer.retired = True
            if not producer.in_use:
                producer.close()
