"""The librdkafka fetcher: confluent-kafka's ``Consumer`` on manual assignment.

See :mod:`marshal_py.client.fetchers` for the interface and the measurements. This module
turns kafka-python settings into librdkafka properties, librdkafka errors into marshal_py's,
and librdkafka messages into :class:`ConfluentRecord` s with the attributes of a
``ConsumerRecord``. confluent-kafka itself is imported on first use
(``pip install 'marshal_py[librdkafka]'``).
"""

from __future__ import annotations

import gc
import logging
import time
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import KafkaConsumer

from marshal_py.client.confluent_records import (
    ERROR,
    TRACKED_PER_RECORD,
    run_bounds,
    split_messages,
)
from marshal_py.client.fetch_types import TP, FetchedBatch
from marshal_py.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    MarshalError,
)
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.log.kafka_auth import connection_error, not_authorized, principal

log = logging.getLogger(__name__)

#: kafka-python setting -> librdkafka property.
_RENAMED = {key: key.replace("_", ".") for key in (
    "client_id", "client_rack", "security_protocol", "sasl_kerberos_service_name",
    "retry_backoff_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms", "check_crcs",
    "metadata_max_age_ms", "connections_max_idle_ms", "client_dns_lookup", "isolation_level",
    "receive_message_max_bytes", "max_in_flight_requests_per_connection", "fetch_min_bytes",
    "fetch_max_bytes", "max_partition_fetch_bytes", "allow_auto_create_topics")} | {
    "sasl_mechanism": "sasl.mechanisms", "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password", "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location", "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password", "ssl_crlfile": "ssl.crl.location",
    "ssl_ciphers": "ssl.cipher.suites", "request_timeout_ms": "socket.timeout.ms",
    "fetch_max_wait_ms": "fetch.wait.max.ms", "send_buffer_bytes": "socket.send.buffer.bytes",
    "receive_buffer_bytes": "socket.receive.buffer.bytes"}
#: kafka-python knobs that mean nothing here: its own tuning and internals, group settings.
_DROPPED = {"bootstrap_servers", "bootstrap_timeout_ms", "group_id", "group_instance_id",
            "enable_auto_commit", "auto_commit_interval_ms", "default_offset_commit_callback",
            "auto_offset_reset", "partition_assignment_strategy", "max_poll_records",
            "max_poll_interval_ms", "session_timeout_ms", "heartbeat_interval_ms",
            "consumer_timeout_ms", "enable_incremental_fetch_sessions", "socket_options",
            "api_version", "metric_reporters", "metrics_enabled", "metrics_num_samples",
            "metrics_sample_window_ms", "metric_group_prefix", "selector",
            "exclude_internal_topics", "kafka_client"}
#: librdkafka error codes treated apart (confluent_kafka.KafkaError).
_EOF, _AUTHN, _SSL, _TOPIC_AUTHZ, _GROUP_AUTHZ, _CLUSTER_AUTHZ = -191, -169, -181, 29, 30, 31
_STATE = -172  # _STATE: "Erroneous state", a seek on a partition not fetching yet
_MISSING = (-190, -188, 3)  # _UNKNOWN_PARTITION, _UNKNOWN_TOPIC, UNKNOWN_TOPIC_OR_PART
#: The group.id confluent-kafka insists on; never joined, never committed to.
UNUSED_GROUP_ID = "marshal_py-fetcher-no-group"


def librdkafka_config(config: KafkaLogConfig) -> dict[str, Any]:
    """``config``'s cluster as librdkafka properties: bootstrap servers, and the kafka-python
    consumer settings translated. One without librdkafka meaning is dropped (DEBUG log) when
    it only tunes kafka-python, else refused with ConfigurationError naming it (ssl_context,
    OAuth or Kerberos objects, proxies, deserializers: ignoring them would change security or
    the records)."""
    props: dict[str, Any] = {"bootstrap.servers": config.bootstrap_servers}
    for key, value in config.client_config(KafkaConsumer).items():
        if value is None:
            continue
        if key in _RENAMED:
            props[_RENAMED[key]] = value.upper() if key.endswith(("protocol", "mechanism")) \
                else value
        elif key == "ssl_check_hostname":
            props["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
        elif key in _DROPPED:
            log.debug("kafka-python setting %s has no librdkafka meaning: not used", key)
        else:
            raise ConfigurationError(
                f"kafka-python setting {key} has no librdkafka equivalent (fetcher='confluent')"
                ": remove it, or use fetcher='kafka-python'")
    return props


def confluent_module() -> Any:
    """The confluent_kafka module, imported on first use."""
    fix = "pip install 'marshal_py[librdkafka]'"
    try:
        import confluent_kafka
    except ImportError as exc:
        raise ConfigurationError(f"fetcher='confluent' needs confluent-kafka: {fix}") from exc
    if confluent_kafka.libversion()[1] < 0x02040000:
        raise ConfigurationError(f"confluent-kafka {confluent_kafka.version()[0]} is too old "
                                 f"for fetcher='confluent': {fix}")
    return confluent_kafka


class ConfluentFetcher:
    """A confluent-kafka ``Consumer`` on manual assignment; records are
    :class:`ConfluentRecord` s. Partitions are added by ``incremental_assign`` at BEGINNING
    (never at a committed offset, which would ask a group coordinator), moved by ``seek``;
    auto commit and offset store are off. confluent-kafka refuses a consumer without
    ``group.id`` (``""`` aborts the process): it gets :data:`UNUSED_GROUP_ID`, of which
    librdkafka only looks the coordinator up (one FindCoordinator, one more connection; a
    refusal for want of a DESCRIBE ACL on the group is ignored). Tuned by measurement:
    ``fetch.queue.backoff.ms`` 10 (at librdkafka's 1000 a consumer that empties its prefetch
    queue paused 1.1 s in a third of the runs), ``fetch.wait.max.ms`` 100 (an assigned or
    sought partition starts in ~10 ms, not ~300 ms), read_uncommitted and earliest (on an offset
    out of range) as kafka-python; prefetch
    (100k records a partition, 64 MB), fetch sizes and CRC checks stay librdkafka's (less
    prefetch was slower, bigger fetches no faster). A topic that may not be described is
    refused by :meth:`assign`, one that may not be read by :meth:`poll`
    (KafkaAuthorizationError); refused credentials or TLS raise KafkaAuthenticationError."""

    kind = "confluent"

    def __init__(self, config: KafkaLogConfig, *, messages: bool = False,
                 overrides: Mapping[str, Any] | None = None) -> None:
        """``messages``: the records :meth:`poll` returns are the ``confluent_kafka.Message``
        s themselves (offset ``m.offset()``...), not :class:`ConfluentRecord` s, and a poll
        takes as many as asked (no cap for the collector's sake): for readers that take the
        fields of many records at once (``map(Message.value, records)``). ``overrides``:
        librdkafka properties set over this class's own (e.g. ``queued.min.messages``)."""
        ck = self._ck = confluent_module()
        self._config, self._closed, self._one_topic = config, True, True
        self._messages = messages
        self._reported: list[Any] = []  # what librdkafka reported through error_cb
        self._positions: dict[TP, int | None] = {}
        #: Partitions whose librdkafka position follows ours (see :meth:`_passed`).
        self._trusted: set[TP] = set()
        self._known: set[str] = set()  # topics whose leaders librdkafka knows
        self._missing: set[str] = set()
        props = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 100,
                 "isolation.level": "read_uncommitted", **librdkafka_config(config),
                 "group.id": UNUSED_GROUP_ID, "auto.offset.reset": "earliest",
                 "enable.auto.commit": False,
                 "enable.auto.offset.store": False, "enable.partition.eof": False,
                 "log.connection.close": False, "error_cb": self._reported.append,
                 "logger": logging.getLogger(f"{__name__}.librdkafka"), **(overrides or {})}
        try:
            self._consumer = ck.Consumer(props)
        except (ck.KafkaException, ValueError) as exc:
            raise ConfigurationError(f"librdkafka refused the settings: {exc}") from exc
        self._closed, deadline = False, time.monotonic() + config.timeout_s
        while True:  # connect now, as KafkaConsumer does; refused credentials end it early
            try:
                self._consumer.list_topics(
                    config.topic, timeout=max(0.01, min(0.5, deadline - time.monotonic())))
                break
            except ck.KafkaException as exc:
                self._consumer.consume(1, 0.05)  # serves error_cb (nothing is assigned)
                refused = [e for e in self._reported if e.code() in (_AUTHN, _SSL)]
                if refused or time.monotonic() >= deadline:
                    self.close()
                    raise (self._error(refused[0]) if refused else
                           connection_error(config, exc)) from exc
        self._reported.clear()

    def assign(self, partitions: Iterable[TP], starts: Mapping[TP, int] | None = None
               ) -> None:
        """See :meth:`DataFetcher.assign`."""
        wanted, tp = set(partitions), self._ck.TopicPartition
        starts = starts or {}
        added = wanted - self._positions.keys()
        for topic in {t for t, _ in added} - self._known:
            self._look_up(topic, {p for t, p in added if t == topic})
        gone = self._positions.keys() - wanted
        if gone:
            self._consumer.incremental_unassign([tp(t, p) for t, p in gone])
        if added:  # -2: BEGINNING
            self._consumer.incremental_assign([tp(t, p, starts.get((t, p), -2))
                                               for t, p in added])
        self._positions = {key: starts.get(key, self._positions.get(key)) if key in added
                           else self._positions.get(key) for key in wanted}
        self._trusted -= added | gone
        self._one_topic = len({t for t, _ in wanted}) <= 1

    def _look_up(self, topic: str, partitions: set[int]) -> None:
        """Fetch a new topic's metadata (librdkafka would wait 500 ms before asking for its
        leaders); warn of partitions missing, refuse a topic not authorized."""
        try:
            meta = self._consumer.list_topics(topic, timeout=min(1.0, self._config.timeout_s))
            meta = meta.topics[topic]
        except (self._ck.KafkaException, KeyError) as exc:
            log.debug("metadata of %s: %s", topic, exc)
            return
        if meta.error is not None and meta.error.code() == _TOPIC_AUTHZ:
            raise not_authorized(self._config, "read", topic)
        if meta.error is None or meta.error.code() in _MISSING:
            for partition in sorted(partitions - set(meta.partitions)):
                self._warn_missing(f"{topic} [{partition}]")
        if meta.partitions:
            self._known.add(topic)

    def prepare(self, topics: Iterable[str]) -> None:
        """See :meth:`DataFetcher.prepare`."""
        for topic in set(topics) - self._known:
            self._look_up(topic, set())

    def assignment(self) -> set[TP]:
        """See :meth:`DataFetcher.assignment`."""
        return set(self._positions)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """See :meth:`DataFetcher.seek`."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, not {offset!r}")
        if (topic, partition) not in self._positions:
            raise ValueError(f"{topic}/{partition} is not assigned")
        tp = self._ck.TopicPartition(topic, partition, offset)
        try:
            self._consumer.seek(tp)
        except self._ck.KafkaException as exc:
            if exc.args[0].code() != _STATE:
                raise self._error(exc.args[0], topic, partition) from exc
            # Not fetching yet (just assigned): give it again, starting at ``offset``.
            self._consumer.incremental_unassign([tp])
            self._consumer.incremental_assign([tp])
        self._positions[(topic, partition)] = offset
        self._trusted.discard((topic, partition))

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """See :meth:`DataFetcher.high_watermark`."""
        try:
            _, high = self._consumer.get_watermark_offsets(
                self._ck.TopicPartition(topic, partition), cached=True)
        except self._ck.KafkaException:
            return None
        return int(high) if high is not None and high >= 0 else None

    def beginning_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """See :meth:`DataFetcher.beginning_offsets`."""
        found = {}
        for topic, partition in partitions:
            try:
                low, _ = self._consumer.get_watermark_offsets(
                    self._ck.TopicPartition(topic, partition), timeout=self._config.timeout_s)
            except self._ck.KafkaException as exc:
                raise self._error(exc.args[0], topic, partition) from exc
            found[(topic, partition)] = int(low)
        return found

    def position(self, topic: str, partition: int) -> int | None:
        """See :meth:`DataFetcher.position`."""
        return self._positions.get((topic, partition))

    def expect_records(self, count: int | None) -> None:
        """See :meth:`DataFetcher.expect_records`: ignored (librdkafka's fetch sizes are
        fixed when the consumer is made)."""

    def poll(self, timeout_s: float, max_records: int) -> list[FetchedBatch]:
        """See :meth:`DataFetcher.poll`. ``consume(n, timeout)`` waits for all n: this takes
        what is there, else waits for one record and takes what came with it. At most half
        the collector's generation-0 threshold less 100 (600 at Python's default 700) are
        taken, half that with the Python build of the records: a poll whose records (the
        Messages, and the Python build's tuples) outnumber the threshold runs the collector
        while they live, which promotes them and brings full collections."""
        consume = self._consumer.consume
        threshold = gc.get_threshold()[0] if gc.isenabled() and not self._messages else 0
        if threshold:
            max_records = min(max_records, max(100, (threshold - 100) // TRACKED_PER_RECORD))
        try:
            msgs = consume(max_records, 0)
            if not msgs and timeout_s > 0:
                msgs = consume(1, timeout_s)
                if msgs and max_records > 1:
                    msgs += consume(max_records - 1, 0)
        except self._ck.KafkaException as exc:
            raise self._error(exc.args[0]) from exc
        while self._reported:
            self._handle(self._reported.pop(0), None, None)
        if not msgs:
            return self._passed()
        n = len(msgs)
        if self._messages:
            return self._batches(self._runs_of_messages(msgs), n, max_records)
        runs = split_messages(msgs, self._one_topic)
        if runs is None:  # some message is an error: handled (or raised), then the rest
            msgs = [m for m in msgs if m.error() is None
                    or self._handle(m.error(), m.topic(), m.partition())]
            runs = split_messages(msgs, self._one_topic)
            assert runs is not None
        return self._batches(runs, n, max_records)

    def _runs_of_messages(self, msgs: list[Any]) -> list[tuple[str, int, list[Any]]]:
        """``messages=True``: the Messages themselves in runs of one partition (errors
        handled or raised)."""
        if any(map(ERROR, msgs)):
            msgs = [m for m in msgs if m.error() is None
                    or self._handle(m.error(), m.topic(), m.partition())]
        if not msgs:
            return []
        parts, bounds = run_bounds(msgs, self._one_topic)
        return [(msgs[i].topic(), parts[i], msgs if j - i == len(msgs) else msgs[i:j])
                for i, j in bounds]

    def _batches(self, runs: list[tuple[str, int, list[Any]]], n: int, max_records: int
                 ) -> list[FetchedBatch]:
        """One batch per partition of ``runs`` (of ``n`` messages polled), positions moved;
        the positions that passed offsets without records too when the poll was not full."""
        found: dict[TP, list[Any]] = {}
        for topic, partition, records in runs:
            key = (topic, partition)
            if key not in self._positions:
                continue  # unassigned meanwhile
            known = found.get(key)
            if known is None:
                found[key] = records
            else:
                found[key] = known + records
        batches = []
        for (topic, partition), records in found.items():
            if (topic, partition) not in self._trusted:
                records = self._from_position(topic, partition, records)
                if not records:
                    continue
            self._positions[(topic, partition)] = end = self._offset_of(records[-1]) + 1
            batches.append(FetchedBatch(topic, partition, records, end))
        self._trusted.update((b.topic, b.partition) for b in batches)
        if n < max_records:
            batches += self._passed()
        return batches

    def _offset_of(self, record: Any) -> int:
        """The offset of one of the records this fetcher returns (a Message's is a method)."""
        return int(record.offset()) if self._messages else int(record.offset)

    def _from_position(self, topic: str, partition: int, records: list[Any]) -> list[Any]:
        """``records`` of a partition assigned or sought since its last records, less those
        below the position asked for. librdkafka can lose a seek made while it still looks
        up where a just-assigned partition starts, and fetch from the beginning (seen under
        load: records from offset 0 after a seek to 20); the records from the position on
        then come as asked."""
        start = self._positions.get((topic, partition))
        if start is None:
            return records
        if self._offset_of(records[0]) >= start:
            return records
        log.debug("%s [%d]: dropped records below %d, fetched from before a seek",
                  topic, partition, start)
        return records[bisect_left(records, start, key=self._offset_of):]

    def _passed(self) -> list[FetchedBatch]:
        """Positions that moved past offsets holding no record (transaction markers, aborted
        records under read_committed): librdkafka's position passes them, the last record's
        offset does not. Asked only when a poll is not full (one call for every partition);
        a partition sought or just assigned is asked again only once records came from its
        new position (until then librdkafka may still report the old one)."""
        trusted = [key for key in self._trusted if key in self._positions]
        if not trusted:
            return []
        tp = self._ck.TopicPartition
        try:
            positions = self._consumer.position([tp(t, p) for t, p in trusted])
        except self._ck.KafkaException:
            return []
        out = []
        for found_tp in positions:
            key = (found_tp.topic, found_tp.partition)
            known = self._positions.get(key)
            if known is None or found_tp.offset <= known:
                continue
            self._positions[key] = found_tp.offset
            out.append(FetchedBatch(key[0], key[1], [], found_tp.offset))
        return out

    def _handle(self, err: Any, topic: str | None, partition: int | None) -> bool:
        """Log an error librdkafka reported and go on (False: drop its message), or raise."""
        code = err.code()
        if code in _MISSING:
            self._warn_missing(f"{topic} [{partition}]" if topic else err.str().split(":")[0])
        elif code == _GROUP_AUTHZ:  # the coordinator lookup of UNUSED_GROUP_ID
            log.debug("librdkafka: %s (not used)", err.str())
        elif code in (_AUTHN, _SSL, _TOPIC_AUTHZ, _CLUSTER_AUTHZ) or err.fatal() \
                or (topic is not None and code != _EOF and not err.retriable()):
            raise self._error(err, topic, partition)
        elif code != _EOF:
            log.info("librdkafka: %s", err.str())  # a broker lost: librdkafka reconnects
        return False

    def _warn_missing(self, name: str) -> None:
        if name not in self._missing:
            self._missing.add(name)
            log.warning("%s does not exist: no records from it until it does", name)

    def _error(self, err: Any, topic: str | None = None,
               partition: int | None = None) -> MarshalError:
        """The marshal_py error for a librdkafka error."""
        code, text, who = err.code(), err.str(), principal(self._config)
        if code == _TOPIC_AUTHZ and topic:
            return not_authorized(self._config, "read", topic)
        if code in (_TOPIC_AUTHZ, _CLUSTER_AUTHZ):
            return KafkaAuthorizationError(f"not authorized to read the consumed topics as "
                                           f"{who}: grant READ and DESCRIBE on them ({text})")
        if code in (_AUTHN, _SSL):
            return KafkaAuthenticationError(
                f"{'TLS handshake' if code == _SSL else 'authentication'} failed at "
                f"{self._config.bootstrap_servers} as {who}: {text}; check the "
                "security_protocol, sasl_* and ssl_* settings")
        where = f" of {topic}/{partition}" if topic else ""
        return BrokerUnavailableError(f"fetching records{where} failed: {text}")

    def close(self) -> None:
        """See :meth:`DataFetcher.close`."""
        if not self._closed:
            self._closed = True
            self._consumer.close()
