"""The Prometheus endpoint of a real consumer: what /metrics says matches what was consumed."""

from __future__ import annotations

import time
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from marshal_py import Marshaler
from marshal_py.client.metrics import serve

pytestmark = pytest.mark.integration


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_show_records_delivered_and_claims_held(kafka_bootstrap: str,
                                                        unique_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics({unique_name: {"num_partitions": 2, "replication_factor": 1}},
                        wait_for_metadata=True)
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(30):
        producer.send(unique_name, value=str(i).encode(), partition=i % 2)
    producer.flush()
    producer.close()
    group = f"{unique_name}.g"
    with Marshaler(kafka_bootstrap, group_id=group, client_id="w1", heartbeat_interval=1.0,
                   coordination_topic=f"__marshal-{unique_name}") as m, \
            serve(m, 0) as server:
        consumer = m.consumer([unique_name], offset_reset="earliest")
        got = 0
        deadline = time.monotonic() + 60
        while got < 30 and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5):
                consumer.commit(record)
                got += 1
        assert got == 30
        held = {tp.partition for tp in consumer.assignment()}
        assert held == {0, 1}

        g = (("group", group),)

        def settled() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            metrics = scrape(server.url)
            committed = [v for (name, _), v in metrics.items()
                         if name == "marshal_committed_offset"]
            # The committed offsets are the consumer's as soon as it commits; the heartbeat
            # that carries them comes at its interval: await both.
            if sorted(committed) == [15, 15] \
                    and metrics.get(("marshal_heartbeats_written_total", g), 0) >= 1:
                return metrics
            return None

        metrics = None
        deadline = time.monotonic() + 30
        while metrics is None and time.monotonic() < deadline:
            metrics = settled()
            if metrics is None:
                time.sleep(0.1)
        assert metrics is not None, \
            "the committed offsets never reached 15 and 15 (or no heartbeat was written)"
        assert metrics[("marshal_records_delivered_total", g)] == 30
        claims = {dict(labels)["partition"] for (name, labels), v in metrics.items()
                  if name == "marshal_claims_held" and v == 1}
        assert claims == {"0", "1"}
        for p in ("0", "1"):
            where = (("group", group), ("partition", p), ("topic", unique_name))
            assert metrics[("marshal_lag", where)] == 0
        assert metrics[("marshal_heartbeats_written_total", g)] >= 1
        assert metrics[("marshal_coordination_records_written_total", g)] >= 3
        assert metrics[("marshal_rationalizer_records_skipped_total", g)] == 0
        assert metrics[("marshal_rationalizer_records_rejected_total", g)] == 0
        assert metrics[("marshal_group_members", (("group", group),
                                                  ("topic", unique_name)))] == 1
        info = [labels for (name, labels) in metrics if name == "marshal_member_info"]
        assert dict(info[0])["instance_id"] == m.instance_id
        consumer.close()
        # The consumer is gone; its counters are still exported (monotonic).
        after = scrape(server.url)
        assert after[("marshal_records_delivered_total", g)] == 30
        assert not any(name == "marshal_claims_held" for name, _ in after)
