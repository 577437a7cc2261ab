"""Hanging transactions: found on a set of partitions and completed the way their coordinator
decided (KIP-664's problem, with a safer remedy than an abort).

A *hanging* transaction is one a partition holds open while its transaction coordinator has
finished it: the coordinator's markers never reached the partition. Every ``read_committed``
reader (every marshal_py member, on the coordination topic) stops at its first record until a
marker is written. A broker restart can leave one: a single-node KRaft cluster killed while a
commit's markers were pending restarts with its partitions briefly without a leader, and its
transaction coordinator then drops those markers ("partitions are likely deleted").

:func:`find_hanging` asks each partition's leader for its open transactions
(DescribeProducers), finds each producer's transactional id (ListTransactions) and asks its
coordinator how it ended (DescribeTransactions). The coordinator's answer is the
*decision*: ``commit`` or ``abort`` when it reports the same producer id and epoch finished
(``CompleteCommit`` / ``CompleteAbort``); unknown (None) otherwise, e.g. after the id was
initialized again. A transaction the coordinator still runs is not hanging.

:func:`resolve` completes a decided one: it first fences the transactional id (so that the
old producer can add nothing more to what is completed), then writes the decided marker on
every partition still holding it open (WriteTxnMarkers, which needs ``ClusterAction`` on
the cluster). Aborting a transaction the coordinator committed (what ``kafka-transactions.sh
abort`` does) would undo a commit a producer was told succeeded; a decided marker cannot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import KafkaError, for_code
from kafka.structs import TopicPartition

from marshal_py.errors import BrokerUnavailableError, KafkaAuthorizationError, MarshalError
from marshal_py.log.kafka_auth import is_authorization_failure, principal
from marshal_py.log.kafka_config import KafkaLogConfig, close_producer, new_client

log = logging.getLogger(__name__)

Decision = Literal["commit", "abort"]

#: Open transactions younger than this are not looked at by default: a transaction's
#: markers are normally written within milliseconds of its end.
DEFAULT_MIN_AGE_S = 30.0

_DECISIONS: dict[str, Decision] = {"CompleteCommit": "commit", "CompleteAbort": "abort"}
#: Kafka's own topics: no producer writes transactions to them.
_KAFKA_INTERNAL = frozenset({"__consumer_offsets", "__transaction_state",
                             "__share_group_state", "__cluster_metadata"})
_RUNNING = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction a partition holds open: its first offset and its producer."""

    topic: str
    partition: int
    start_offset: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_write_ms: int


@dataclass(frozen=True)
class HangingTransaction:
    """A transaction held open by partitions after its coordinator finished it."""

    producer_id: int
    producer_epoch: int
    #: Its transactional id (None when no coordinator knows the producer any more).
    transactional_id: str | None
    #: What the coordinator reports for the id now (e.g. ``CompleteCommit``, ``Empty``).
    coordinator_state: str | None
    #: ``commit`` / ``abort`` when the coordinator finished this very producer epoch.
    decision: Decision | None
    #: The partitions holding it open (among those looked at).
    open_on: tuple[OpenTransaction, ...]

    def describe(self) -> str:
        """One line: where it is open and what its coordinator says."""
        where = ", ".join(f"{o.topic}-{o.partition} from offset {o.start_offset}"
                          for o in self.open_on)
        who = (f"transactional id {self.transactional_id!r}" if self.transactional_id
               else "an unknown transactional id")
        said = (f"its coordinator finished it ({self.coordinator_state}): {self.decision} it"
                if self.decision else
                f"its coordinator reports {self.coordinator_state}: the outcome is unknown"
                if self.coordinator_state else
                "no coordinator knows its producer (just after a restart it may not have "
                "loaded it yet: look again in a minute): the outcome is unknown")
        return (f"producer {self.producer_id} epoch {self.producer_epoch} ({who}) is open on "
                f"{where}; {said}")

    def abort_command(self, bootstrap_servers: str) -> str:
        """The Kafka tool's command that aborts it on its first partition (for an operator
        who decides an undecided one)."""
        first = self.open_on[0]
        return (f"kafka-transactions.sh --bootstrap-server {bootstrap_servers} abort --topic "
                f"{first.topic} --partition {first.partition} --start-offset "
                f"{first.start_offset}")


def _admin_error(config: KafkaLogConfig, exc: BaseException, action: str) -> MarshalError:
    if isinstance(exc, MarshalError):
        return exc
    if isinstance(exc, KafkaError) and is_authorization_failure(exc):
        return KafkaAuthorizationError(
            f"{action}: not authorized as {principal(config)} ({type(exc).__name__}): "
            "describing producers needs READ on the topics, completing a transaction needs "
            "ClusterAction on the cluster and WRITE on its transactional id")
    return BrokerUnavailableError(f"{action} failed at {config.bootstrap_servers}: "
                                  f"{type(exc).__name__}: {exc}")


class HangingTransactions:
    """Finds and completes hanging transactions on one cluster (an admin client's life)."""

    def __init__(self, config: KafkaLogConfig) -> None:
        self.config = config
        try:
            self._admin = new_client(KafkaAdminClient, **config.client_config(KafkaAdminClient))
        except KafkaError as exc:
            raise _admin_error(config, exc, "connecting an admin client") from exc

    def close(self) -> None:
        """Close the admin client."""
        self._admin.close()

    def __enter__(self) -> HangingTransactions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- finding ---------------------------------------------------------------------------

    def partitions_of(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of ``topics`` (those that exist)."""
        try:
            described = self._admin.describe_topics(sorted(set(topics)))
        except KafkaError as exc:
            raise _admin_error(self.config, exc, "describing topics") from exc
        return sorted(TopicPartition(t["name"], p["partition_index"]) for t in described
                      if not t.get("error_code") for p in t.get("partitions") or [])

    def _topics(self) -> list[str]:
        try:
            return sorted(t for t in self._admin.list_topics() if t not in _KAFKA_INTERNAL)
        except KafkaError as exc:
            raise _admin_error(self.config, exc, "listing topics") from exc

    def open_transactions(self, partitions: Sequence[TopicPartition], *,
                          min_age_s: float = 0.0,
                          now_ms: int | None = None) -> list[OpenTransaction]:
        """The transactions ``partitions`` hold open whose producer last wrote there at
        least ``min_age_s`` ago."""
        if not partitions:
            return []
        now = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            states = self._admin.describe_producers(list(partitions))
        except KafkaError as exc:
            raise _admin_error(self.config, exc, "describing producers") from exc
        found = []
        for tp, state in sorted(states.items()):
            for p in state.active_producers:
                start = p.current_transaction_start_offset
                if start < 0 or now - p.last_timestamp < min_age_s * 1000:
                    continue
                found.append(OpenTransaction(tp.topic, tp.partition, start, p.producer_id,
                                             p.producer_epoch, p.coordinator_epoch,
                                             p.last_timestamp))
        return found

    def find(self, watched: Sequence[TopicPartition], *,
             scan: Sequence[TopicPartition] | None = None,
             min_age_s: float = DEFAULT_MIN_AGE_S) -> list[HangingTransaction]:
        """The hanging transactions open on ``watched`` partitions; each lists where it is
        open among ``watched`` and ``scan``: the partitions a transaction may also have
        written to, every partition of the cluster's topics when None. (A partition left
        out keeps the transaction open after :meth:`resolve`, and its outcome is then
        unknown: scan all unless every partition a producer writes to is known.)"""
        opened = self.open_transactions(watched, min_age_s=min_age_s)
        producers = sorted({(o.producer_id, o.producer_epoch) for o in opened})
        if not producers:
            return []
        if scan is None:
            scan = self.partitions_of(self._topics())
        seen = set(watched)
        extra = [tp for tp in scan if tp not in seen]
        everywhere = opened + self.open_transactions(extra)
        hanging = []
        for pid, epoch in producers:
            tid, state, decision = self._coordinator_view(pid, epoch)
            if state in _RUNNING:
                continue  # the coordinator runs it: it may still end normally
            open_on = tuple(o for o in everywhere
                            if (o.producer_id, o.producer_epoch) == (pid, epoch))
            hanging.append(HangingTransaction(pid, epoch, tid, state, decision, open_on))
        return hanging

    def _coordinator_view(self, pid: int, epoch: int,
                          ) -> tuple[str | None, str | None, Decision | None]:
        try:
            listed = self._admin.list_transactions(producer_id_filters=[pid])
            ids = sorted({t.transactional_id for rows in listed.values() for t in rows
                          if t.producer_id == pid})
            if not ids:
                return None, None, None
            described = self._admin.describe_transactions(ids[:1])
        except KafkaError as exc:
            raise _admin_error(self.config, exc, "describing transactions") from exc
        tid = ids[0]
        desc = described.get(tid)
        if desc is None:
            return tid, None, None
        state = str(getattr(desc.state, "value", desc.state))
        same = desc.producer_id == pid and desc.producer_epoch == epoch
        if state in _RUNNING and not same:
            state = f"{state} (epoch {desc.producer_epoch})"
        decision = _DECISIONS.get(state) if same else None
        return tid, state, decision

    # -- completing ------------------------------------------------------------------------

    def resolve(self, hanging: HangingTransaction) -> list[OpenTransaction]:
        """Complete a decided hanging transaction; the partitions given its marker.

        Raises :class:`~marshal_py.errors.MarshalError` when it has no decision, when its id
        was initialized by someone else meanwhile (look again), or when the cluster refuses.
        """
        if hanging.decision is None or hanging.transactional_id is None:
            raise MarshalError(f"not completing it, its outcome is unknown: "
                               f"{hanging.describe()}")
        if not self._still_open(hanging):
            return []  # its markers arrived meanwhile: nothing to complete, nobody to fence
        self._fence(hanging)
        done = self._still_open(hanging)
        for open_txn in done:
            self._write_marker(open_txn, hanging.decision == "commit")
            log.warning("wrote the %s marker of producer %d epoch %d (%s) on %s-%d at offset "
                        ">= %d: the transaction its coordinator finished is complete there",
                        hanging.decision, hanging.producer_id, hanging.producer_epoch,
                        hanging.transactional_id, open_txn.topic, open_txn.partition,
                        open_txn.start_offset)
        return done

    def _still_open(self, hanging: HangingTransaction) -> list[OpenTransaction]:
        """Those of ``hanging.open_on`` that still hold the same transaction open."""
        now = {(o.topic, o.partition, o.start_offset) for o in self.open_transactions(
            [TopicPartition(o.topic, o.partition) for o in hanging.open_on])
            if (o.producer_id, o.producer_epoch) == (hanging.producer_id,
                                                     hanging.producer_epoch)}
        return [o for o in hanging.open_on if (o.topic, o.partition, o.start_offset) in now]

    def _fence(self, hanging: HangingTransaction) -> None:
        """Initialize the transactional id: the old producer can write nothing more. The new
        epoch must follow the hanging one directly, else someone else initialized the id in
        between and the decision read may be stale."""
        assert hanging.transactional_id is not None
        producer = None
        try:
            producer = new_client(KafkaProducer, **self.config.client_config(
                KafkaProducer, fixed={"transactional_id": hanging.transactional_id,
                                      "max_block_ms": int(self.config.timeout_s * 1000)}))
            producer.init_transactions()
            now = producer._transaction_manager.producer_id_and_epoch
            got = (int(now.producer_id), int(now.epoch))
        except KafkaError as exc:
            raise _admin_error(self.config, exc,
                               f"fencing transactional id {hanging.transactional_id!r}") from exc
        finally:
            if producer is not None:
                close_producer(producer, 0.0)
        if got != (hanging.producer_id, hanging.producer_epoch + 1):
            raise MarshalError(
                f"transactional id {hanging.transactional_id!r} was initialized by another "
                f"producer meanwhile (now producer {got[0]} epoch {got[1]}); look again")

    def _write_marker(self, open_txn: OpenTransaction, commit: bool) -> None:
        from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

        marker_type = WriteTxnMarkersRequest.WritableTxnMarker
        request = WriteTxnMarkersRequest(markers=[marker_type(
            producer_id=open_txn.producer_id, producer_epoch=open_txn.producer_epoch,
            transaction_result=commit,
            topics=[marker_type.WritableTxnMarkerTopic(
                name=open_txn.topic, partition_indexes=[open_txn.partition])],
            coordinator_epoch=open_txn.coordinator_epoch)])
        admin: Any = self._admin
        tp = TopicPartition(open_txn.topic, open_txn.partition)

        async def send() -> Any:
            leaders = await admin._async_get_leader_for_partitions([tp])
            return await admin._manager.send(request, node_id=next(iter(leaders)))

        try:
            response = admin._manager.run(send)
        except KafkaError as exc:
            raise _admin_error(self.config, exc, f"writing a marker on {tp.topic}-"
                               f"{tp.partition}") from exc
        for result in response.markers:
            for topic in result.topics:
                for partition in topic.partitions:
                    if partition.error_code:
                        error = for_code(partition.error_code)
                        raise _admin_error(self.config, error(),
                                           f"writing a marker on {tp.topic}-{tp.partition}")
