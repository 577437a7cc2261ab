"""An optional Prometheus endpoint for a running member (``pip install marshal_py[metrics]``).

::

    from marshal_py import Marshaler
    from marshal_py.client.metrics import serve

    with Marshaler("127.0.0.1:9092", group_id="team.job", client_id="worker-1") as m:
        server = serve(m, port=9464)           # GET http://127.0.0.1:9464/metrics
        consumer = m.consumer(["events"])
        ...

Everything is read at scrape time from the :class:`~marshal_py.client.marshaler.Marshaler`,
its current consumer (whatever kind) and its rationalizer: the consumers do no extra work per
record beyond one integer increment. Attributes are read defensively, so a kind of consumer
that lacks one simply does not export that metric. Counters stay monotonic when the
Marshaler's consumer is closed and another one opened.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from marshal_py.errors import ConfigurationError

if TYPE_CHECKING:
    from marshal_py.client.marshaler import Marshaler

INSTALL_HINT = "pip install marshal_py[metrics]"

#: Every metric this module exports: name -> (type, help). Counters get ``_total``.
METRICS: dict[str, tuple[str, str]] = {
    "marshal_member_info": ("gauge", "This member: group, client_id, instance_id, consumer"),
    "marshal_records_delivered": ("counter", "Records handed out to the application"),
    "marshal_claims_held": ("gauge", "1 for each partition this member holds (exclusive)"),
    "marshal_key_slots_held": ("gauge", "Key-hash slots this member owns, per partition"),
    "marshal_share_records_held": (
        "gauge", "Share records this member acquired and has not acknowledged, per partition"),
    "marshal_committed_offset": ("gauge", "Committed offset (next to consume) per partition"),
    "marshal_lag": ("gauge", "Records between the committed offset and the partition's "
                             "high watermark last seen by the fetcher"),
    "marshal_heartbeats_written": ("counter", "Heartbeats (each carries the committed offset)"),
    "marshal_releases_written": ("counter", "Partitions released with their committed offset"),
    "marshal_amo_batches_confirmed": ("counter", "At-most-once batches confirmed in the log"),
    "marshal_share_records_acquired": ("counter", "Share records acquired"),
    "marshal_share_acknowledgements": ("counter", "Share records acknowledged, by kind"),
    "marshal_coordination_records_written": ("counter", "Records written to the coordination "
                                                        "topic"),
    "marshal_checkpoints_written": ("counter", "Group checkpoints written"),
    "marshal_rationalizer_records_skipped": (
        "counter", "Coordination records that could not be read (garbage, unknown types)"),
    "marshal_rationalizer_records_ignored": (
        "counter", "Valid coordination records the rules ignored (lost claims, non-owners)"),
    "marshal_rationalizer_records_rejected": (
        "counter", "Records about this authenticated group that were unsigned, badly signed "
                   "or replayed (forgeries)"),
    "marshal_group_members": ("gauge", "Live members of the group, per topic"),
}


def _prometheus() -> Any:
    try:
        return importlib.import_module("prometheus_client")
    except ImportError as exc:
        raise ConfigurationError(
            f"metrics need prometheus_client, which is not installed: {INSTALL_HINT}") from exc


def _copy(read: Any, default: Any) -> Any:
    """``read()`` retried when another thread changed a dict while it was being read."""
    for _ in range(5):
        try:
            return read()
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
        except Exception:
            return default
    return default


class MarshalCollector:
    """A prometheus_client collector reading one Marshaler at scrape time."""

    def __init__(self, marshaler: Marshaler) -> None:
        self.marshaler = marshaler
        self._lock = threading.Lock()
        self._consumer_id: int | None = None
        self._retired: dict[tuple[str, tuple[str, ...]], float] = {}
        self._last: dict[tuple[str, tuple[str, ...]], float] = {}

    def describe(self) -> list[Any]:
        return []  # no collection at registration time

    def collect(self) -> Iterator[Any]:
        _prometheus()
        core = importlib.import_module("prometheus_client.core")
        with self._lock:
            yield from self._collect(core)

    # -- reading --------------------------------------------------------------------------

    def _monotonic(self, consumer: Any) -> None:
        """A new consumer restarts its counters: keep the old ones' totals as a base."""
        ident = None if consumer is None else id(consumer)
        if ident != self._consumer_id:
            for key, value in self._last.items():
                self._retired[key] = self._retired.get(key, 0.0) + value
            self._last = {}
            self._consumer_id = ident

    def _counter_value(self, name: str, labels: tuple[str, ...], value: float | None) -> float:
        key = (name, labels)
        if value is not None:
            self._last[key] = float(value)
        return self._retired.get(key, 0.0) + self._last.get(key, 0.0)

    def _collect(self, core: Any) -> Iterator[Any]:
        m = self.marshaler
        group = str(getattr(m, "group_id", ""))
        client = str(getattr(m, "client_id", ""))
        consumer = getattr(m, "_consumer", None)
        engine = getattr(consumer, "_engine", None) or getattr(consumer, "engine", None)
        self._monotonic(consumer)
        families: dict[str, Any] = {}

        def family(name: str, labels: list[str]) -> Any:
            if name not in families:
                kind, text = METRICS[name]
                cls = core.CounterMetricFamily if kind == "counter" else core.GaugeMetricFamily
                families[name] = cls(name, text, labels=["group", *labels])
            return families[name]

        info = family("marshal_member_info", ["client_id", "instance_id", "consumer"])
        info.add_metric([group, client, str(getattr(m, "instance_id", "")),
                         type(consumer).__name__ if consumer is not None else "none"], 1)

        counters: list[tuple[str, list[str], tuple[str, ...], Any]] = [
            ("marshal_records_delivered", [], (), getattr(consumer, "records_delivered", None))]
        stats = getattr(engine, "stats", None)
        for name, attr in (("marshal_heartbeats_written", "heartbeats"),
                           ("marshal_releases_written", "released"),
                           ("marshal_amo_batches_confirmed", "amo_batches_confirmed"),
                           ("marshal_share_records_acquired", "records_acquired")):
            value = getattr(stats, attr, None)
            if isinstance(value, int | float):
                counters.append((name, [], (), value))
        acks = getattr(stats, "acks", None)
        if isinstance(acks, dict):
            for kind, value in sorted(dict(acks).items()):
                counters.append(("marshal_share_acknowledgements", ["kind"], (str(kind),),
                                 value))
        channel = getattr(engine, "channel", None)
        for name, attr in (("marshal_coordination_records_written", "records_written"),
                           ("marshal_checkpoints_written", "checkpoints_written")):
            value = getattr(channel, attr, None)
            if isinstance(value, int | float):
                counters.append((name, [], (), value))
        for name, _, labels, value in counters:
            self._counter_value(name, labels, value)
        # Every counter seen, also those of a closed consumer (monotonic across consumers).
        for name, labels in sorted(set(self._retired) | set(self._last)):
            names = ["kind"] if name == "marshal_share_acknowledgements" else []
            family(name, names).add_metric([group, *labels],
                                           self._counter_value(name, labels, None))

        rationalizer = getattr(m, "rationalizer", None)
        if rationalizer is not None:
            skipped = _copy(rationalizer.skipped_count, None)
            ignored = _copy(rationalizer.ignored_count, None)
            if skipped is not None:
                family("marshal_rationalizer_records_skipped", []).add_metric([group], skipped)
            if ignored is not None:
                family("marshal_rationalizer_records_ignored", []).add_metric([group], ignored)
            rejected = _copy(lambda: rationalizer.rejected_count(group), None)
            if rejected is not None:
                family("marshal_rationalizer_records_rejected", []).add_metric([group],
                                                                             rejected)

        yield from families.values()
        yield from self._partitions(core, consumer, engine, group)

    def _partitions(self, core: Any, consumer: Any, engine: Any, group: str) -> Iterator[Any]:
        """Per-partition gauges: what this member holds, its committed offsets and lag."""
        m = self.marshaler
        rationalizer = getattr(m, "rationalizer", None)
        me = _copy(lambda: m.me, None)
        clock = getattr(m, "clock", None)
        now = _copy(clock.now_ms, None) if clock is not None else None
        topics = tuple(getattr(consumer, "topics", ()) or ())
        labels = ["group", "topic", "partition"]
        claims = core.GaugeMetricFamily("marshal_claims_held", METRICS["marshal_claims_held"][1],
                                        labels=labels)
        slots = core.GaugeMetricFamily("marshal_key_slots_held",
                                       METRICS["marshal_key_slots_held"][1], labels=labels)
        records = core.GaugeMetricFamily("marshal_share_records_held",
                                         METRICS["marshal_share_records_held"][1],
                                         labels=labels)
        committed = core.GaugeMetricFamily("marshal_committed_offset",
                                           METRICS["marshal_committed_offset"][1], labels=labels)
        lag = core.GaugeMetricFamily("marshal_lag", METRICS["marshal_lag"][1], labels=labels)
        members = core.GaugeMetricFamily("marshal_group_members",
                                         METRICS["marshal_group_members"][1],
                                         labels=["group", "topic"])
        offsets: dict[tuple[str, int], int] = {}

        slotted: set[tuple[str, int]] = set()
        holdings = getattr(engine, "holdings", None)
        if isinstance(holdings, dict):
            for (topic, partition), holding in _copy(lambda: list(holdings.items()), []):
                where = [group, topic, str(partition)]
                if hasattr(holding, "cursor"):  # an exclusive claim
                    claims.add_metric(where, 1)
                    value = _copy(lambda h=holding: h.cursor.committed, None)
                elif hasattr(holding, "owned"):  # key-shared slots
                    slots.add_metric(where, len(_copy(lambda h=holding: set(h.owned), ())))
                    slotted.add((topic, partition))
                    value = _copy(lambda h=holding: h.commit_floor(), None)
                else:
                    continue
                if isinstance(value, int):
                    offsets[(topic, partition)] = value
        held = getattr(engine, "held", None)
        if isinstance(held, dict):
            for (topic, partition), acquired in _copy(lambda: list(held.items()), []):
                records.add_metric([group, topic, str(partition)], len(acquired))
        if rationalizer is not None and me is not None:
            for topic in topics:
                for key, share in _copy(lambda t=topic: rationalizer.share_partitions(group, t),
                                        []):
                    offsets[(key.topic, key.partition)] = share.spso
                for key, keys in _copy(
                        lambda t=topic: rationalizer.key_shared_partitions(group, t), []):
                    if (key.topic, key.partition) in slotted:
                        continue  # the engine said it already
                    owned = _copy(lambda k=keys: k.slots_of(me), ())
                    count = sum(last - first + 1 for first, last in owned)
                    slots.add_metric([group, key.topic, str(key.partition)], count)
                    mine = [c for first, last in owned for c in
                            _copy(lambda k=keys: k.committed_offsets(), [])[first:last + 1]]
                    if mine and all(c is not None for c in mine):
                        offsets[(key.topic, key.partition)] = min(mine)
                if now is not None:
                    live = _copy(lambda t=topic: rationalizer.members(group, t, now), None)
                    if live is not None:
                        members.add_metric([group, topic], len(live))
        for (topic, partition), value in sorted(offsets.items()):
            committed.add_metric([group, topic, str(partition)], value)
            high = _highwater(consumer, topic, partition)
            if high is not None:
                lag.add_metric([group, topic, str(partition)], max(0, high - value))
        yield from (claims, slots, records, committed, lag, members)


def _highwater(consumer: Any, topic: str, partition: int) -> int | None:
    """The fetcher's last known high watermark (no request: it came with the last fetch)."""
    known = getattr(consumer, "high_watermark", None)
    if known is None:
        return None
    try:
        value = known(topic, partition)
    except Exception:  # not assigned to the fetcher (any more)
        return None
    return int(value) if value is not None else None


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it."""

    def __init__(self, server: Any, thread: threading.Thread, addr: str) -> None:
        self._server = server
        self._thread = thread
        self.addr = addr
        self.port = int(server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving. Idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collector(marshaler: Marshaler) -> MarshalCollector:
    """A collector to register in your own registry (``REGISTRY.register(collector(m))``)."""
    _prometheus()
    return MarshalCollector(marshaler)


def serve(marshaler: Marshaler, port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``marshaler``'s metrics on ``http://addr:port/metrics`` from a daemon thread
    (port 0: any free port, see :attr:`MetricsServer.port`). Its own registry: several
    Marshalers in one process each get their own endpoint."""
    prom = _prometheus()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(MarshalCollector(marshaler))
    try:
        server, thread = prom.start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}"
                                 " (choose another --metrics-port)") from exc
    return MetricsServer(server, thread, addr)
