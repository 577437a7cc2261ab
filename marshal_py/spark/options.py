"""Options of the ``marshal`` Spark source: parsed and validated in one place (no Spark here).

Every option is a string in Spark; :func:`parse_options` turns the map into a typed
:class:`SourceOptions` or raises :class:`~marshal_py.errors.ConfigurationError` naming the
option and the values that would work. Unknown options are refused (a typo must not be
silently ignored); ``kafka.<setting>`` passes a kafka-python setting (security, SASL, SSL) to
every client, e.g. ``kafka.security_protocol``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from marshal_py.client.settings import (
    DEFAULT_ISOLATION_LEVEL,
    ISOLATION_LEVELS,
    IsolationLevel,
    data_config,
    isolation_level_of,
)
from marshal_py.config.group_keys import load_group_keys
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka_config import DEFAULT_COORDINATION_TOPIC, KafkaLogConfig
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.messages import (
    DEFAULT_DELIVERY_LIMIT,
    DEFAULT_INFLIGHT_LIMIT,
    DEFAULT_LOCK_MS,
)
from marshal_py.replay.reading import DEFAULT_REPLAY_WINDOW_MS

if TYPE_CHECKING:
    from marshal_py.client.marshaler import Marshaler

SourceMode = Literal["alo", "amo", "share", "key-shared"]
MODES = ("alo", "amo", "share", "key-shared")
SourceFetcher = Literal["auto", "confluent", "kafka-python"]
FETCHERS = ("auto", "confluent", "kafka-python")

#: option name -> what it means (the table in docs/spark.md says the same)
OPTIONS: dict[str, str] = {
    "bootstrap.servers": "Kafka bootstrap servers (required)",
    "group": "consumer group id (required)",
    "topics": "comma-separated topics to consume (required)",
    "mode": "alo (default), amo, share or key-shared",
    "client.id": "this query's client id in the group (default spark-<hostname>); keep it "
                 "stable so a restarted query takes its partitions back at once",
    "heartbeat.interval": "seconds (default 10); the same for every member of the group",
    "offset.reset": "latest (default) or earliest: where a partition with no committed "
                    "offset starts",
    "start.datetime": "share mode: a new share group starts at the first record at or after "
                      "this ISO-8601 time",
    "balance": "fair (default) or greedy",
    "max.claims": "most partitions per topic this query holds",
    "lock.duration": "share mode: acquisition lock in seconds (1..3600, default 30)",
    "delivery.limit": "share mode: delivery attempts before a record is archived (2..10)",
    "inflight.limit": "share mode: records in flight per partition (1..10000)",
    "max.poll.interval": "share mode: seconds a micro-batch may run; one still running then "
                         "gives its records back to the group, with their delivery counts "
                         "(default: no bound)",
    "maxRecordsPerTrigger": "most records per micro-batch (default: all available)",
    "maxRecordsPerPartition": "split ranges larger than this over several tasks "
                              "(default 100000)",
    "minPartitions": "split ranges so a batch has at least this many tasks",
    "failOnDataLoss": "true (default): fail when planned records were deleted by retention "
                      "before they were read; false: skip them with a warning",
    "fetch.timeout": "seconds a task waits for records it was planned to read (default 60)",
    "fetcher": "how executors fetch records: auto (default: librdkafka when confluent-kafka is "
               "installed on the executor, else kafka-python), confluent or kafka-python",
    "isolation.level": "read_committed (default; kafka.isolation_level when set) or "
                       "read_uncommitted: whether records of aborted transactions are read; "
                       "under read_committed batches end at the last stable offset",
    "coordination.topic": "the coordination topic (default __marshal)",
    "coordination.index.topic": "the compacted topic that keeps the coordination topic's "
                                "layout (default: the coordination topic's name + -index)",
    "replay.window": "seconds of coordination log replayed on start (default 7 days)",
    "settle.timeout": "seconds the query waits for its first claims (default 3 heartbeat "
                      "intervals)",
    "auth.keys": "authenticated groups: the driver's key file (lines 'GROUP KEY_ID SECRET', "
                 "as marshal --auth-keys); the query verifies the group's records and signs "
                 "its own; the secret stays on the driver",
}


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one ``marshal`` stream."""

    bootstrap_servers: str
    group: str
    topics: tuple[str, ...]
    mode: SourceMode = "alo"
    client_id: str = ""
    heartbeat_interval_s: float = 10.0
    offset_reset: Literal["latest", "earliest"] = "latest"
    start_time: datetime | None = None
    balance: Literal["fair", "greedy"] = "fair"
    max_claims: int | None = None
    lock_duration_s: float = DEFAULT_LOCK_MS / 1000
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    inflight_limit: int = DEFAULT_INFLIGHT_LIMIT
    max_poll_interval_s: float | None = None
    max_records_per_trigger: int | None = None
    max_records_per_partition: int = 100_000
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    fetch_timeout_s: float = 60.0
    fetcher: SourceFetcher = "auto"
    coordination_topic: str = DEFAULT_COORDINATION_TOPIC
    coordination_index_topic: str | None = None
    replay_window_s: float = DEFAULT_REPLAY_WINDOW_MS / 1000
    settle_timeout_s: float | None = None
    isolation_level: IsolationLevel = DEFAULT_ISOLATION_LEVEL
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    #: Option ``auth.keys``: the key file, read on the driver only (the secrets are never
    #: part of the options Spark ships to executors).
    auth_keys_file: str | None = None

    @property
    def signed(self) -> bool:
        """The group is authenticated (option ``auth.keys``)."""
        return self.auth_keys_file is not None

    def group_keys(self) -> tuple[GroupKey, ...]:
        """The group's keys, read from the ``auth.keys`` file now; () without the option.
        Raises ConfigurationError (one line naming the option and the file) when the file
        cannot be read or lists no key for the group."""
        if self.auth_keys_file is None:
            return ()
        try:
            keys = load_group_keys(self.auth_keys_file).get(self.group, ())
        except ConfigurationError as exc:
            raise ConfigurationError(f"option 'auth.keys': {exc}") from None
        if not keys:
            raise ConfigurationError(
                f"option 'auth.keys': the key file {self.auth_keys_file} lists no key for "
                f"group {self.group!r}; add a line '{self.group} KEY_ID SECRET'")
        return keys

    def marshaler(self) -> Marshaler:
        """A Marshaler of the group these options name (the driver's member joins with it)."""
        from marshal_py.client.marshaler import Marshaler

        return Marshaler(
            bootstrap_servers=self.bootstrap_servers, group_id=self.group,
            client_id=self.client_id, heartbeat_interval=self.heartbeat_interval_s,
            coordination_topic=self.coordination_topic, replay_window=self.replay_window_s,
            kafka_config=self.kafka_config, index_topic=self.coordination_index_topic,
            auth_keys=self.group_keys())

    @property
    def log_config(self) -> KafkaLogConfig:
        """How every client of this stream reaches Kafka."""
        return KafkaLogConfig(bootstrap_servers=self.bootstrap_servers,
                              topic=self.coordination_topic,
                              index_topic=self.coordination_index_topic,
                              kafka_config=dict(self.kafka_config))

    @property
    def data_config(self) -> KafkaLogConfig:
        """How the executors (and the planning driver) read the data topics: the
        stream's isolation level set."""
        return data_config(self.log_config, self.isolation_level)

    @property
    def settle_timeout(self) -> float:
        """Seconds to wait for the first claims."""
        if self.settle_timeout_s is not None:
            return self.settle_timeout_s
        return 3 * self.heartbeat_interval_s + 5


#: Other spellings of options, in Spark's camelCase (lowercased) -> the option's name.
ALIASES = {"authkeys": "auth.keys"}


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map (keys are case-insensitive there: we compare lowercased;
    :data:`ALIASES` name the same option another way)."""
    given = {ALIASES.get(k.lower(), k.lower()): (k, str(v)) for k, v in raw.items()}
    if len(given) < len(raw):
        raise ConfigurationError(
            "an option of the marshal source is given twice (options are case-insensitive, "
            "and authKeys is auth.keys): give each once")
    known = {k.lower(): k for k in OPTIONS}
    kafka_config: dict[str, Any] = {}
    for lower, (name, value) in given.items():
        if lower.startswith("kafka."):
            kafka_config[name[len("kafka."):]] = _kafka_value(value)
        elif lower not in known and lower != "path":
            raise ConfigurationError(
                f"unknown option {name!r} of the marshal source; known options: "
                f"{', '.join(sorted(OPTIONS))}, and kafka.<kafka-python setting>"
            )

    def get(name: str) -> str | None:
        found = given.get(name.lower())
        return None if found is None else found[1].strip()

    def required(name: str) -> str:
        value = get(name)
        if not value:
            raise ConfigurationError(f"option {name!r} of the marshal source is required "
                                     f"({OPTIONS[name]})")
        return value

    topics = tuple(dict.fromkeys(t.strip() for t in required("topics").split(",") if t.strip()))
    if not topics:
        raise ConfigurationError("option 'topics' names no topic; give e.g. 'events' or 'a,b'")
    mode = (get("mode") or "alo").lower()
    if mode not in MODES:
        raise ConfigurationError(
            f"option 'mode' must be alo, amo, share or key-shared, not {mode!r}")
    offset_reset = (get("offset.reset") or "latest").lower()
    if offset_reset not in ("latest", "earliest"):
        raise ConfigurationError(
            f"option 'offset.reset' must be latest or earliest, not {offset_reset!r}")
    balance = (get("balance") or "fair").lower()
    if balance not in ("fair", "greedy"):
        raise ConfigurationError(f"option 'balance' must be fair or greedy, not {balance!r}")
    max_poll_interval = _bounded(get, "max.poll.interval", None, float, "a number", 1.0, None)
    if max_poll_interval is not None and mode != "share":
        raise ConfigurationError(
            "option 'max.poll.interval' applies to mode share only: in alo and amo a "
            "micro-batch holds partitions, not records (see docs/spark.md)")
    fetcher = (get("fetcher") or "auto").lower()
    if fetcher not in FETCHERS:
        raise ConfigurationError(
            f"option 'fetcher' must be auto, confluent or kafka-python, not {fetcher!r}")
    start_time = None
    if (text := get("start.datetime")) is not None:
        try:
            start_time = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError(
                f"option 'start.datetime' {text!r} is not an ISO-8601 time, e.g. "
                "2026-11-22T08:00:00+00:00") from None
        if start_time.tzinfo is None:
            raise ConfigurationError("option 'start.datetime' needs a time zone, e.g. "
                                     "2026-11-22T08:00:00+00:00")
    options = SourceOptions(
        bootstrap_servers=required("bootstrap.servers"),
        group=required("group"),
        topics=topics,
        mode=mode,  # type: ignore[arg-type]
        client_id=get("client.id") or f"spark-{socket.gethostname()}",
        heartbeat_interval_s=_number(get, "heartbeat.interval", 10.0, minimum=0.01),
        offset_reset=offset_reset,  # type: ignore[arg-type]
        start_time=start_time,
        balance=balance,  # type: ignore[arg-type]
        max_claims=_integer(get, "max.claims", None, minimum=1),
        lock_duration_s=_number(get, "lock.duration", DEFAULT_LOCK_MS / 1000, minimum=1,
                                maximum=3600),
        delivery_limit=_integer(get, "delivery.limit", DEFAULT_DELIVERY_LIMIT, minimum=2,
                                maximum=10) or DEFAULT_DELIVERY_LIMIT,
        inflight_limit=_integer(get, "inflight.limit", DEFAULT_INFLIGHT_LIMIT, minimum=1,
                                maximum=10_000) or DEFAULT_INFLIGHT_LIMIT,
        max_poll_interval_s=max_poll_interval,
        max_records_per_trigger=_integer(get, "maxRecordsPerTrigger", None, minimum=1),
        max_records_per_partition=_integer(get, "maxRecordsPerPartition", 100_000,
                                           minimum=1) or 100_000,
        min_partitions=_integer(get, "minPartitions", None, minimum=1),
        fail_on_data_loss=_boolean(get, "failOnDataLoss", True),
        fetch_timeout_s=_number(get, "fetch.timeout", 60.0, minimum=0.1),
        fetcher=fetcher,  # type: ignore[arg-type]
        coordination_topic=get("coordination.topic") or DEFAULT_COORDINATION_TOPIC,
        coordination_index_topic=get("coordination.index.topic") or None,
        replay_window_s=_number(get, "replay.window", DEFAULT_REPLAY_WINDOW_MS / 1000,
                                minimum=0),
        settle_timeout_s=(None if get("settle.timeout") is None
                          else _number(get, "settle.timeout", 0.0, minimum=0)),
        isolation_level=_isolation_level(get, kafka_config),
        kafka_config=kafka_config,
        auth_keys_file=get("auth.keys") or None,
    )
    options.group_keys()  # a bad or missing key file fails the query at load
    # Reject kafka.* settings kafka-python does not know, now rather than in every task.
    options.log_config.client_config()
    if fetcher == "confluent":  # and those librdkafka cannot take, or a missing librdkafka
        from marshal_py.spark.fetch import confluent_problem

        why = confluent_problem(options.data_config)
        if why is not None:
            raise ConfigurationError(f"option fetcher=confluent: {why}; use fetcher=auto or "
                                     "kafka-python instead")
    return options


def _isolation_level(get: Any, kafka_config: Mapping[str, Any]) -> IsolationLevel:
    """Option ``isolation.level`` (it wins), else ``kafka.isolation_level``, else
    read_committed. Both are checked when given: the coordination log's clients get the
    ``kafka.*`` settings as they are."""
    text = get("isolation.level")
    if text is not None:
        text = text.lower()
        if text not in ISOLATION_LEVELS:
            raise ConfigurationError(f"option 'isolation.level' must be read_committed or "
                                     f"read_uncommitted, not {text!r}")
    passed = kafka_config.get("isolation_level")
    if passed is not None and passed not in ISOLATION_LEVELS:
        raise ConfigurationError(
            f"option 'kafka.isolation_level' must be read_committed or read_uncommitted, "
            f"not {passed!r}")
    return isolation_level_of(text, kafka_config)


def _number(get: Any, name: str, default: float, *, minimum: float,
            maximum: float | None = None) -> float:
    return _bounded(get, name, default, float, "a number", minimum, maximum)


def _integer(get: Any, name: str, default: int | None, *, minimum: int,
             maximum: int | None = None) -> int | None:
    return _bounded(get, name, default, int, "an integer", minimum, maximum)


N = TypeVar("N", int, float)
D = TypeVar("D")


def _bounded(get: Any, name: str, default: D, parse: Callable[[str], N], kind: str,
             minimum: N, maximum: N | None) -> N | D:
    text = get(name)
    if text is None:
        return default
    try:
        value = parse(text)
    except ValueError:
        raise ConfigurationError(f"option {name!r} must be {kind}, not {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = (f">= {_show(minimum)}" if maximum is None
                  else f"between {_show(minimum)} and {_show(maximum)}")
        raise ConfigurationError(f"option {name!r} must be {bounds}, not {text}")
    return value


def _show(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _boolean(get: Any, name: str, default: bool) -> bool:
    text = get(name)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"option {name!r} must be true or false, not {text!r}")


def _kafka_value(text: str) -> Any:
    """kafka-python wants ints and booleans as such; Spark options are all strings."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text
