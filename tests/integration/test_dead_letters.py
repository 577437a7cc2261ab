"""Dead letters decided by the log, on the real broker: a holder killed at a record's last
delivery attempt does not lose the record's dead letter, and a successor of a duty finds the
letter its predecessor already wrote (PROTOCOL.md section 8.2, rule 9)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from marshal_py import Marshaler
from marshal_py.client.dead_letters import DeadLetterWriter
from marshal_py.log import KafkaLogConfig
from tests.integration.consumer_support import create_topic, wait_for
from tests.integration.test_share import read_topic

pytestmark = pytest.mark.integration

#: A member that releases offset 17 at its first delivery and is killed (SIGKILL, by itself:
#: exactly at that moment) when it is handed 17 at its last one, holding it under a lock.
VICTIM = textwrap.dedent("""
    import os, signal, sys
    from marshal_py import Marshaler
    bootstrap, group, topic, dead_letters = sys.argv[1:5]
    marshaler = Marshaler(bootstrap, group, "victim", heartbeat_interval=1.0)
    consumer = marshaler.consumer([topic], "share", offset_reset="earliest", delivery_limit=2,
                                  lock_duration=1.0, acknowledgement="explicit",
                                  dead_letter_topic=dead_letters)
    for record in consumer:
        if record.offset == 17 and record.delivery_count < 2:
            consumer.ack(record, "release")
        elif record.offset == 17:
            print("killed holding 17", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            consumer.ack(record, "accept")
""")


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(count):
        producer.send(topic, str(i).encode(), key=f"k{i}".encode(), partition=0)
    producer.flush()
    producer.close()


def test_a_holder_killed_at_the_last_attempt_leaves_the_dead_letter_to_a_survivor(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    topic, dlq, group = unique_name, f"{unique_name}-dlq", f"group-{unique_name}"
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, dlq, 1)
    produce(kafka_bootstrap, topic, 40)
    script = tmp_path / "victim.py"
    script.write_text(VICTIM)
    victim = subprocess.run([sys.executable, str(script), kafka_bootstrap, group, topic, dlq],
                            capture_output=True, text=True, timeout=60)
    assert victim.returncode == -9 and "killed holding 17" in victim.stdout, victim.stderr
    assert read_topic(kafka_bootstrap, dlq) == []  # the victim wrote no letter

    marshaler = Marshaler(kafka_bootstrap, group, "survivor", heartbeat_interval=1.0)
    consumer = marshaler.consumer([topic], "share", offset_reset="earliest",
                                  delivery_limit=2, lock_duration=1.0)
    delivered: list[int] = []
    try:
        def done() -> bool:
            delivered.extend(r.offset for r in consumer.poll(timeout_s=0.2))
            return consumer.dead_lettered == 1 and \
                consumer.stats.acks["dead-lettered"] == 1
        wait_for(done, 30, "the survivor to write the owed dead letter")
        share = marshaler.rationalizer.share_partition(group, topic, 0)
        assert share is not None
        assert 17 not in delivered  # owed a letter: never handed to an application again
    finally:
        consumer.close()
        marshaler.close()

    letters = read_topic(kafka_bootstrap, dlq)
    assert [letter.value for letter in letters] == [b"17"]
    headers = dict(letters[0].headers)
    assert headers["marshal.group"] == group.encode()
    assert headers["marshal.original.offset"] == b"17"
    assert headers["marshal.delivery.count"] == b"2"
    assert letters[0].key == b"k17"


def test_a_letter_written_before_is_found_for_that_record_and_group_only(
        kafka_bootstrap: str, unique_name: str) -> None:
    dlq = f"{unique_name}-dlq"
    create_topic(kafka_bootstrap, dlq, 3)
    config = KafkaLogConfig(kafka_bootstrap, timeout_s=10)
    writer = DeadLetterWriter(config, "g1")
    since = int(time.time() * 1000)

    class Record:
        topic, partition, offset, key, value, headers = "orders", 2, 41, b"k", b"v", []

    try:
        assert not writer.already_written(dlq, "orders", 2, 41, since)
        writer.write(dlq, Record, 3, "delivery-limit")
        assert writer.already_written(dlq, "orders", 2, 41, since)
        assert not writer.already_written(dlq, "orders", 2, 40, since)
        assert not writer.already_written(dlq, "orders", 1, 41, since)
        assert not DeadLetterWriter(config, "g2").already_written(dlq, "orders", 2, 41, since)
        # Asked from long before it was written, it is found too.
        assert writer.already_written(dlq, "orders", 2, 41, since - 3_600_000)
    finally:
        writer.close()


def test_client_settings_in_kafka_config_tune_every_client_of_a_member(
        kafka_bootstrap: str, unique_name: str) -> None:
    """Settings that a member's clients also choose themselves (the fetch wait, the linger,
    acks) are taken from ``kafka_config`` by the data fetcher, the coordination reader and
    writer and the dead-letter producer alike: each used to stop the member with kafka-python's
    TypeError ("got multiple values for keyword argument")."""
    topic, dlq, group = unique_name, f"{unique_name}-dlq", f"group-{unique_name}"
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, dlq, 1)
    produce(kafka_bootstrap, topic, 20)
    tuned = {"fetch_max_wait_ms": 300, "linger_ms": 2, "acks": "all"}
    with Marshaler(kafka_bootstrap, group, "tuned", heartbeat_interval=1.0,
                   kafka_config=tuned) as marshaler:
        consumer = marshaler.consumer([topic], "share", offset_reset="earliest",
                                      delivery_limit=2, acknowledgement="explicit",
                                      dead_letter_topic=dlq)
        accepted: set[int] = set()

        def handled() -> bool:
            for record in consumer.poll(timeout_s=0.2):
                if record.offset == 7:
                    consumer.ack(record, "release")  # twice: then it is dead-lettered
                else:
                    consumer.ack(record, "accept")
                    accepted.add(record.offset)
            return len(accepted) == 19 and consumer.dead_lettered == 1

        wait_for(handled, 30, "19 records accepted and offset 7 dead-lettered")
        consumer.close()
    letters = read_topic(kafka_bootstrap, dlq)
    assert [(r.key, r.value) for r in letters] == [(b"k7", b"7")]
