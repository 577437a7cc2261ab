"""Authenticated groups on the real broker: members sign, forgeries and replays are rejected
and counted, keys rotate, a member without the key refuses to run, and `marshal state` shows
rejections. The forgery, rotation and replay test runs on Kafka 3.9 too."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marshal_py import ConfigurationError, GroupKey, Marshaler
from marshal_py.client.consumer import Consumer
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import (
    ClaimingPartition,
    DecodeError,
    Heartbeat,
    ReleasingPartition,
    coordination_partition,
    decode_signed,
    encode,
    sign,
)
from marshal_py.replay.checkpoints import read_range
from tests.integration.consumer_support import ON_EVERY_BROKER_BOOTSTRAP, broker_bootstrap
from tests.integration.test_cli_admin import make_topic, wait_for

pytestmark = pytest.mark.integration

HI = 1.0
K1 = GroupKey("k1", b"first-secret-of-the-group-000001")
K2 = GroupKey("k2", b"second-secret-of-the-group-00002")
FORGER = GroupKey("k1", b"a-guess-that-is-not-the-secret!!")



def key_file(path: Path, group: str, keys: tuple[GroupKey, ...]) -> Path:
    path.write_text("".join(f"{group} {k.key_id} {base64.b64encode(k.secret).decode()}\n"
                            for k in keys))
    path.chmod(0o600)
    return path


def held(consumer: Consumer) -> set[int]:
    consumer.poll(timeout_s=0.05, max_records=0)
    return {tp.partition for tp in consumer.assignment()}


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    return broker_bootstrap(request)


@ON_EVERY_BROKER_BOOTSTRAP
def test_forged_records_change_nothing_and_keys_rotate(bootstrap: str, unique_name: str,
                                                      tmp_path: Path) -> None:
    topic, group, ctopic = unique_name, f"{unique_name}.g", f"__marshal-{unique_name}"
    make_topic(bootstrap, topic, 2, 5)
    common = dict(heartbeat_interval=HI, coordination_topic=ctopic)
    # Mid-rotation: w1 still signs with K1, w2 already with K2; both accept both.
    with Marshaler(bootstrap, group, "w1", auth_keys=(K1, K2), **common) as m1, \
            Marshaler(bootstrap, group, "w2", auth_keys=(K2, K1), **common) as m2:
        c1 = m1.consumer([topic], offset_reset="earliest")
        c2 = m2.consumer([topic], offset_reset="earliest")
        assert isinstance(c1, Consumer) and isinstance(c2, Consumer)
        wait_for(lambda: len(held(c1)) == 1 and len(held(c2)) == 1, "one partition each")
        victim = next(iter(held(c1)))
        with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=ctopic)) as log:
            cp = coordination_partition(topic, log.partition_count())
            now = int(time.time())
            # An unsigned release in w1's name, and a claim signed with a guessed secret.
            log.append(cp, encode(ReleasingPartition(now, m1.instance_id, "w1", group, topic,
                                                     victim, 0)))
            log.append(cp, sign(encode(ClaimingPartition(now, "ffff0001", "thief", group,
                                                         topic, victim)), FORGER, 1))
            end = log.end_position(cp)
        wait_for(lambda: m1.rationalizer.next_position(cp) >= end, "w1 to read the forgeries")
        wait_for(lambda: m2.rationalizer.next_position(cp) >= end, "w2 to read the forgeries")
        for m in (m1, m2):
            claim = m.rationalizer.claim(group, topic, victim)
            assert claim.owner is not None and claim.owner.client_id == "w1"
            assert m.rationalizer.rejected_count(group) == 2
        assert held(c1) == {victim}
        # Records signed with either key were accepted by both: every record of the group
        # except the two forgeries applied, and the two members split the partitions.
        assert {c.owner.client_id for c in m1.rationalizer.claims(group, topic)
                if c.owner is not None} == {"w1", "w2"}

        keys = key_file(tmp_path / "keys", group, (K1, K2))
        state = subprocess.run(
            [sys.executable, "-m", "marshal_py.cli", "state", "--bootstrap-servers",
             bootstrap, "--coordination-topic", ctopic, "--heartbeat-interval", str(HI),
             "--group", group, "--auth-keys", str(keys), "--json"],
            capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert state.returncode == 0, state.stderr
        rows = json.loads(state.stdout)
        assert {(r["partition"], r["client_id"]) for r in rows} == {
            (victim, "w1"), (1 - victim, "w2")}
        assert (f"rejected (unsigned, badly signed or replayed) records of authenticated "
                f"group {group}: 2") in state.stderr
        # marshal audit verifies as the members do with --auth-keys, and counts as they would
        # without a key (the forgeries then apply: the audit has no way to tell).
        for extra, rejected in ((["--auth-keys", str(keys)], 2), ([], 0)):
            audit = subprocess.run(
                [sys.executable, "-m", "marshal_py.cli", "audit", "--bootstrap-servers",
                 bootstrap, "--coordination-topic", ctopic, "--heartbeat-interval",
                 str(HI), "--json", *extra],
                capture_output=True, text=True, timeout=120, env=dict(os.environ))
            assert audit.returncode == 0, audit.stderr
            counts = json.loads(audit.stdout)["coordination"]
            assert sum(row["rejected"] for row in counts) == rejected

        # w1 processes its partition; then a copy of one of its first heartbeats (offset 0,
        # written seconds ago: within the skew bound) is appended again. It is refused as a
        # replay and the committed offset does not move back.
        got: list[object] = []

        def five_records() -> bool:
            got.extend(c1.poll(timeout_s=0.2))
            return len(got) >= 5

        wait_for(five_records, "w1's five records")
        c1.commit_batch(got)
        for m in (m1, m2):
            wait_for(lambda m=m: m.rationalizer.claim(group, topic, victim).committed_offset
                     == 5, "w1's commit of 5")
        with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=ctopic)) as log:
            first_beat = next(r.value for r in read_range(log, cp, 0, log.end_position(cp))
                              if _heartbeat_of(r.value, "w1", victim, 0))
            copy = log.append(cp, first_beat)
        for m in (m1, m2):
            wait_for(lambda m=m: m.rationalizer.next_position(cp) > copy.position,
                     "the members to read the copy")
            assert m.rationalizer.claim(group, topic, victim).committed_offset == 5
            assert m.rationalizer.claim(group, topic, victim).owner == m1.me
            assert m.rationalizer.rejected_count(group) == 3
        assert held(c1) == {victim}

        # A member without the group's keys refuses to take part.
        with Marshaler(bootstrap, group, "w3", **common) as m3, \
                pytest.raises(ConfigurationError, match=r"is authenticated .* no key"):
            m3.consumer([topic], offset_reset="earliest")


def _heartbeat_of(value: bytes | None, client: str, partition: int, offset: int) -> bool:
    """Is ``value`` a signed Heartbeat of ``client`` on ``partition`` at ``offset``?"""
    try:
        message, signature = decode_signed(value or b"")
    except DecodeError:
        return False
    return (signature is not None and isinstance(message, Heartbeat)
            and message.client_id == client and message.partition == partition
            and message.offset == offset)


def test_a_bad_key_file_is_one_line_on_the_cli(kafka_bootstrap: str, tmp_path: Path) -> None:
    bad = tmp_path / "keys"
    bad.write_text("g k1 c2hvcnQ=\n")
    bad.chmod(0o600)
    result = subprocess.run(
        [sys.executable, "-m", "marshal_py.cli", "state", "--bootstrap-servers",
         kafka_bootstrap, "--auth-keys", str(bad)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "keys:1: the secret of key 'k1' has 5 bytes" in lines[0]
