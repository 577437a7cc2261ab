"""Integration tests of marshal_py.devbroker: a real Kafka broker started by the project itself.

These need Java 17+ and Maven (or an already filled jar cache); they never skip. One broker is
shared through a module-scoped fixture; the lifecycle tests start their own.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from marshal_py.cli.dev_broker import dev_broker
from marshal_py.devbroker import (
    KAFKA_VERSION,
    KAFKA_VERSIONS,
    DevBroker,
    DevCluster,
    default_cache_dir,
    jvm,
    pinned_kafka_version,
    resolve_kafka_jars,
)
from marshal_py.devbroker import broker as broker_module
from marshal_py.devbroker import jars as jars_module
from marshal_py.devbroker.broker_config import performance_options
from marshal_py.devbroker.broker_log import describe_last_error
from marshal_py.devbroker.security import SecureDevBroker
from marshal_py.errors import DevBrokerError

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP_LINE = re.compile(r"^bootstrap\.servers=127\.0\.0\.1:(\d+)$")


# -- helpers -----------------------------------------------------------------------------------


def _process_gone(pid: int) -> bool:
    """True when no live process has this pid (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _await_process_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not _process_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for value in values:
            producer.send(topic, value=value, partition=0).get(timeout=30)
    finally:
        producer.close()


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        return values
    finally:
        consumer.close()


def _cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _start_cli(*args: str, stderr_path: Path) -> tuple[subprocess.Popen[str], IO[str]]:
    stderr_file = open(stderr_path, "w")  # noqa: SIM115 (closed by the caller)
    proc = subprocess.Popen(
        [sys.executable, "-m", "marshal_py.cli.dev_broker", *args],
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        stdin=subprocess.DEVNULL,
        text=True,
        env=_cli_env(),
        cwd=REPO_ROOT,
    )
    return proc, stderr_file


def _first_line(proc: subprocess.Popen[str], timeout: float = 120.0) -> str:
    """The first stdout line of proc, awaited without blocking past the timeout."""
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).rstrip("\n")
    except queue.Empty:
        pytest.fail(f"no stdout line within {timeout} s")


def _jvm_pid_from_stderr(stderr_path: Path) -> int:
    match = re.search(r"broker pid (\d+)", stderr_path.read_text())
    assert match is not None, stderr_path.read_text()
    return int(match.group(1))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cluster_id(data_dir: Path) -> str:
    text = (data_dir / "logs" / "meta.properties").read_text()
    match = re.search(r"^cluster\.id=(\S+)$", text, re.MULTILINE)
    assert match is not None
    return match.group(1)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevBroker]:
    """One broker with an explicit data directory, shared by this module's tests."""
    dev = DevBroker(data_dir=tmp_path_factory.mktemp("shared-broker"))
    dev.start()
    try:
        yield dev
    finally:
        dev.stop()


# -- a running broker --------------------------------------------------------------------------


def test_produce_and_consume(broker: DevBroker) -> None:
    assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
    assert broker.pid is not None and not _process_gone(broker.pid)
    topic = f"devbroker-{uuid.uuid4().hex[:8]}"
    _create_topic(broker.bootstrap_servers, topic)
    values = [b"alpha", b"beta", b"gamma"]
    _produce(broker.bootstrap_servers, topic, values)
    assert _consume(broker.bootstrap_servers, topic, len(values)) == values
    assert "Kafka Server started" in broker.log_path.read_text()


def test_restart_keeps_an_explicit_data_dir(broker: DevBroker) -> None:
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    _create_topic(broker.bootstrap_servers, topic)
    _produce(broker.bootstrap_servers, topic, [b"survives"])
    cluster_id = _cluster_id(broker.data_dir)
    pid = broker.pid
    assert pid is not None

    broker.stop()
    assert broker.pid is None
    assert _process_gone(pid)
    assert broker.data_dir.is_dir()
    broker.stop()  # idempotent

    broker.start()
    assert broker.pid not in (None, pid)
    assert _cluster_id(broker.data_dir) == cluster_id  # not formatted again
    assert _consume(broker.bootstrap_servers, topic, 1) == [b"survives"]


def test_kill_9_and_restart_on_the_same_data_keeps_acknowledged_records(
        broker: DevBroker) -> None:
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    _create_topic(broker.bootstrap_servers, topic)
    _produce(broker.bootstrap_servers, topic, [b"acked-before-the-crash"])
    pid, port, controller_port = broker.pid, broker.port, broker.controller_port
    assert pid is not None
    broker.kill()
    assert _process_gone(pid) and broker.pid is None and broker.data_dir.is_dir()
    broker.start()
    assert (broker.port, broker.controller_port) == (port, controller_port)
    assert broker.pid not in (None, pid)
    assert _consume(broker.bootstrap_servers, topic, 1) == [b"acked-before-the-crash"]


def test_the_data_dir_notes_the_release_that_formatted_it(broker: DevBroker) -> None:
    assert broker.kafka_version == KAFKA_VERSION
    assert (broker.data_dir / "kafka.version").read_text().strip() == KAFKA_VERSION


def test_the_jvm_takes_kafka_jvm_performance_opts(broker: DevBroker) -> None:
    # tests/conftest.py sets Kafka's variable for every broker of the suite.
    options = performance_options()  # read as the broker reads it
    assert options
    command = Path(f"/proc/{broker.pid}/cmdline").read_bytes().decode().split("\0")
    assert command[command.index("-cp") - len(options):command.index("-cp")] == options


def test_a_stopped_broker_leaves_an_archive_of_its_classes_that_the_next_one_maps(
        tmp_path: Path) -> None:
    # A cache of its own (the real jars, linked): the first broker finds no archive there.
    version_dir = tmp_path / "cache" / f"kafka-{KAFKA_VERSION}"
    version_dir.mkdir(parents=True)
    (version_dir / "lib").symlink_to(resolve_kafka_jars())
    first = DevBroker(cache_dir=tmp_path / "cache")
    first.start()
    try:
        assert not list(version_dir.glob("broker-classes-*.jsa"))  # dumped as it exits
    finally:
        first.stop()
    (archive,) = version_dir.glob("broker-classes-*.jsa")
    assert not list(version_dir.glob(".broker-classes-*"))  # the dump was renamed into place
    with DevBroker(cache_dir=tmp_path / "cache") as second:
        assert second.pid is not None
        assert str(archive) in Path(f"/proc/{second.pid}/maps").read_text()  # mapped


def test_the_first_format_is_kept_and_later_brokers_get_a_copy_with_ids_of_their_own(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka formats the first broker's storage; the next one's is a copy of that format
    (no JVM) with a cluster id and a directory id of its own, and it serves clients."""
    version_dir = tmp_path / "cache" / f"kafka-{KAFKA_VERSION}"
    version_dir.mkdir(parents=True)
    (version_dir / "lib").symlink_to(resolve_kafka_jars())
    caplog.set_level(logging.INFO, logger="marshal_py.devbroker")
    with DevBroker(cache_dir=tmp_path / "cache") as first:
        assert "formatting" in caplog.text and " from " not in caplog.text
        first_meta = (first.data_dir / "logs" / "meta.properties").read_text()
    (template,) = version_dir.glob("storage-*")
    assert sorted(p.name for p in template.iterdir()) == ["bootstrap.checkpoint",
                                                          "meta.properties"]
    caplog.clear()
    with DevBroker(cache_dir=tmp_path / "cache") as second:
        assert f"from {template}" in caplog.text and "formatting" not in caplog.text
        logs = second.data_dir / "logs"
        assert (logs / "bootstrap.checkpoint").read_bytes() == \
            (template / "bootstrap.checkpoint").read_bytes()
        ids = [dict(line.split("=", 1) for line in meta.splitlines() if "=" in line)
               for meta in (first_meta, (logs / "meta.properties").read_text())]
        assert ids[0]["cluster.id"] != ids[1]["cluster.id"]
        assert ids[0]["directory.id"] != ids[1]["directory.id"]
        assert ids[0]["node.id"] == ids[1]["node.id"] == "1"
        admin = KafkaAdminClient(bootstrap_servers=second.bootstrap_servers)
        try:
            assert admin.describe_cluster()["cluster_id"] == ids[1]["cluster.id"]
        finally:
            admin.close()


def test_temporary_data_dir_is_removed_by_stop() -> None:
    dev = DevBroker()
    assert dev.data_dir.is_dir()
    dev.stop()
    assert not dev.data_dir.exists()
    dev.stop()


# -- startup failures --------------------------------------------------------------------------


def test_busy_port_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        dev = DevBroker(port=port, data_dir=tmp_path)
        with pytest.raises(DevBrokerError, match=rf"127\.0\.0\.1:{port} is already in use") as info:
            dev.start()
        assert "\n" not in str(info.value)
        assert dev.pid is None
        assert not (tmp_path / "logs").exists()  # nothing was formatted or launched


def test_busy_controller_port_detected_in_the_broker_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The controller port is picked just before launch; make that pick collide, so that the JVM
    # itself runs into a busy port ("Address already in use" in its log) and exits.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setattr(broker_module, "free_port", lambda exclude=frozenset(): taken)
        dev = DevBroker(port=_free_port(), data_dir=tmp_path)
        with pytest.raises(DevBrokerError, match=rf"controller port 127\.0\.0\.1:{taken}") as info:
            dev.start()
        assert "\n" not in str(info.value)
        assert dev.pid is None
        assert "Address already in use" in dev.log_path.read_text()


def test_broker_exiting_at_startup_is_reported() -> None:
    dev = DevBroker(heap="1")  # -Xmx1: the JVM refuses to start
    try:
        with pytest.raises(DevBrokerError, match="exited during startup") as info:
            dev.start()
        message = str(info.value)
        assert str(dev.log_path) in message
        assert "Too small maximum heap" in message  # the log's last line, quoted
        assert "\n" not in message
        assert dev.pid is None
        dev.stop()
        assert dev.log_path.is_file()  # a failed broker's temporary data dir is kept for its log
    finally:
        shutil.rmtree(dev.data_dir, ignore_errors=True)


def test_not_answering_within_the_timeout(tmp_path: Path) -> None:
    dev = DevBroker(data_dir=tmp_path)
    with pytest.raises(DevBrokerError, match="did not answer within") as info:
        dev.start(timeout=0.01)
    assert str(dev.log_path) in str(info.value)
    assert dev.pid is None
    assert not (tmp_path / "broker.pid").exists()


def test_last_error_line_is_quoted() -> None:
    log_text = "\n".join(
        [
            "[2026-01-01 00:00:00,000] INFO starting (kafka.Kafka$)",
            "[2026-01-01 00:00:01,000] ERROR Exiting Kafka due to fatal exception (kafka.Kafka$)",
            "java.lang.RuntimeException: outer",
            "\tat kafka.Kafka.main(Kafka.scala:1)",
            "Caused by: java.io.IOException: disk on fire",
            "[2026-01-01 00:00:02,000] INFO shutting down (kafka.Kafka$)",
        ]
    )
    quote = describe_last_error(log_text)
    assert "Exiting Kafka due to fatal exception" in quote
    assert "java.io.IOException: disk on fire" in quote


# -- Java and Maven ----------------------------------------------------------------------------


def test_missing_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(DevBrokerError, match=r"Java is not installed.*17") as info:
        DevBroker(data_dir=tmp_path / "data").start()
    assert "\n" not in str(info.value)


def test_java_older_than_17(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    java = fake_bin / "java"
    java.write_text("#!/bin/sh\necho 'java version \"1.8.0_292\"' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_bin))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(DevBrokerError, match=r"is Java 8, .*needs Java 17 or newer"):
        DevBroker(data_dir=tmp_path / "data").start()


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.2-ea"', 11),
        ("garbage", None),
    ],
)
def test_java_version_parsing(output: str, major: int | None) -> None:
    assert jvm.parse_java_major_version(output) == major


def test_missing_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(DevBrokerError, match=r"Maven \(mvn\) is not on PATH"):
        resolve_kafka_jars(tmp_path / "cache")


def test_maven_resolution_failure(tmp_path: Path) -> None:
    pom = tmp_path / "kafka-pom.xml"
    pom.write_text(
        jars_module.POM_PATH.read_text().replace(
            f"<kafka.version>{KAFKA_VERSION}</kafka.version>",
            "<kafka.version>0.0.0-nonexistent</kafka.version>",
        )
    )
    cache = tmp_path / "cache"
    with pytest.raises(DevBrokerError, match="resolving the Kafka jars with Maven failed") as info:
        resolve_kafka_jars(cache, pom_path=pom)
    assert "\n" not in str(info.value)
    version_dir = cache / "kafka-0.0.0-nonexistent"
    assert not (version_dir / "lib").exists()
    assert not list(version_dir.glob("lib.tmp-*"))  # no half cache left behind


def test_kafka_version_matches_the_pom() -> None:
    text = jars_module.POM_PATH.read_text()
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", text)
    assert match is not None
    assert KAFKA_VERSION == match.group(1) == jars_module.pom_kafka_version()


# -- Kafka releases ----------------------------------------------------------------------------


def test_every_release_is_pinned_by_its_own_pom_and_named_by_version_or_series() -> None:
    assert next(iter(KAFKA_VERSIONS)) == KAFKA_VERSION  # the default first
    assert "3.9" in {".".join(v.split(".")[:2]) for v in KAFKA_VERSIONS}
    assert len(set(KAFKA_VERSIONS.values())) == len(KAFKA_VERSIONS)
    for version, pom in KAFKA_VERSIONS.items():
        assert jars_module.pom_kafka_version(pom) == version
        assert pinned_kafka_version(version) == version
        assert pinned_kafka_version(".".join(version.split(".")[:2])) == version
    assert pinned_kafka_version(None) == KAFKA_VERSION


@pytest.mark.parametrize("make", [DevBroker, DevCluster, SecureDevBroker])
def test_an_unsupported_kafka_version_is_one_line(make: type[object]) -> None:
    with pytest.raises(DevBrokerError, match=r"Kafka version '3\.8' is not one the development "
                       rf"broker runs; choose one of {re.escape(KAFKA_VERSION)} .*3\.9\.2 \(3\.9\)"
                       ) as info:
        make(kafka_version="3.8")
    assert "\n" not in str(info.value)


def test_the_kafka39_broker_runs_kafka_3_9(kafka39_bootstrap: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=kafka39_bootstrap)
    try:
        consumer.topics()  # bootstrapping probes the broker's version
        assert consumer.config["api_version"] == (3, 9)
    finally:
        consumer.close()


@pytest.mark.parametrize("noted", [True, False], ids=["noted", "formatted-before-notes"])
def test_a_data_dir_of_a_newer_kafka_is_refused_before_launch(tmp_path: Path,
                                                              noted: bool) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "meta.properties").write_text("cluster.id=x\nnode.id=1\nversion=1\n")
    if noted:  # else it predates the notes, when the dev broker ran only the default release
        (tmp_path / "kafka.version").write_text(f"{KAFKA_VERSION}\n")
    dev = DevBroker(data_dir=tmp_path, kafka_version="3.9")
    with pytest.raises(DevBrokerError, match=rf"holds the data of a Kafka {KAFKA_VERSION} broker, "
                       r"which Kafka 3\.9\.2 cannot read") as info:
        dev.start()
    assert "\n" not in str(info.value)
    assert dev.pid is None and not dev.log_path.exists()


# -- the jar cache -----------------------------------------------------------------------------


def test_default_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARSHAL_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("MARSHAL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "marshal_py"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "marshal_py"


def test_cached_jars_are_reused_without_maven(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = resolve_kafka_jars()  # the real cache (filled by the broker fixture or bin/setup)
    assert (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file()
    assert (lib / jars_module.MARKER_NAME).is_file()
    assert REPO_ROOT not in lib.parents  # cached outside the repository

    def no_maven(*args: object, **kwargs: object) -> None:
        raise AssertionError("Maven must not run when the cache is complete")

    monkeypatch.setattr(jars_module, "_run_maven", no_maven)
    monkeypatch.setattr(jars_module, "find_maven", no_maven)
    assert resolve_kafka_jars() == lib


def _fake_maven(tmp_path: Path, *, fail: bool = False) -> Path:
    """A stand-in mvn that records each call and writes the jar Maven would copy."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    calls = tmp_path / "mvn-calls"
    script = bin_dir / "mvn"
    body = (
        "echo '[ERROR] Failed to execute goal: network down -> [Help 1]'\necho '[ERROR] '\nexit 1\n"
        if fail
        else f'touch "$out/kafka_2.13-{KAFKA_VERSION}.jar" "$out/kafka-clients.jar"\n'
    )
    script.write_text(
        "#!/bin/sh\n"
        f'echo call >> "{calls}"\n'
        'for arg in "$@"; do case "$arg" in -DoutputDirectory=*) out="${arg#*=}";; esac; done\n'
        + body
    )
    script.chmod(0o755)
    return bin_dir


def test_cache_is_filled_once_and_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{_fake_maven(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "cache"
    results: list[Path] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def resolve() -> None:
        barrier.wait()
        try:
            results.append(resolve_kafka_jars(cache))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    lib = cache / f"kafka-{KAFKA_VERSION}" / "lib"
    assert results == [lib] * 4
    assert (tmp_path / "mvn-calls").read_text().count("call") == 1  # racing calls resolved once
    assert resolve_kafka_jars(cache) == lib
    assert (tmp_path / "mvn-calls").read_text().count("call") == 1  # then reused
    assert sorted(p.name for p in lib.iterdir()) == sorted(
        [jars_module.MARKER_NAME, "kafka-clients.jar", f"kafka_2.13-{KAFKA_VERSION}.jar"]
    )
    assert [p.name for p in lib.parent.iterdir() if p.name.startswith("lib")] == ["lib"]


def test_failed_resolution_leaves_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PATH", f"{_fake_maven(tmp_path, fail=True)}{os.pathsep}{os.environ['PATH']}"
    )
    cache = tmp_path / "cache"
    with pytest.raises(DevBrokerError, match=r"Maven failed: Failed to execute goal: network down"):
        resolve_kafka_jars(cache)
    version_dir = cache / f"kafka-{KAFKA_VERSION}"
    assert [p.name for p in version_dir.iterdir() if p.name.startswith("lib")] == []


# -- the command -------------------------------------------------------------------------------


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr"
    proc, stderr_file = _start_cli(stderr_path=stderr_path)
    try:
        line = _first_line(proc)
        match = BOOTSTRAP_LINE.match(line)
        assert match is not None, (line, stderr_path.read_text())
        bootstrap = line.split("=", 1)[1]
        jvm_pid = _jvm_pid_from_stderr(stderr_path)
        assert not _process_gone(jvm_pid)

        topic = f"cli-{uuid.uuid4().hex[:8]}"
        _create_topic(bootstrap, topic)
        _produce(bootstrap, topic, [b"via-cli"])
        assert _consume(bootstrap, topic, 1) == [b"via-cli"]

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert _process_gone(jvm_pid)
        assert "Traceback" not in stderr_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr_file.close()


def test_cli_serves_a_three_node_cluster_until_sigterm(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr"
    proc, stderr_file = _start_cli("--brokers", "3", stderr_path=stderr_path)
    try:
        line = _first_line(proc, timeout=180)
        assert line.startswith("bootstrap.servers="), (line, stderr_path.read_text())
        bootstrap = line.strip().split("=", 1)[1]
        assert len(bootstrap.split(",")) == 3
        match = re.search(r"broker pids ([\d,]+)", stderr_path.read_text())
        assert match is not None, stderr_path.read_text()
        pids = [int(p) for p in match.group(1).split(",")]
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            assert len(admin.describe_cluster()["brokers"]) == 3
        finally:
            admin.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
        assert all(_process_gone(pid) for pid in pids)
        assert "Traceback" not in stderr_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr_file.close()


def test_cli_refuses_a_cluster_with_a_fixed_port() -> None:
    result = CliRunner().invoke(dev_broker, ["--brokers", "3", "--port", "9092"])
    assert result.exit_code == 2
    assert "--brokers above 1 picks free ports itself" in result.output
    result = CliRunner().invoke(dev_broker, ["--brokers", "9"])
    assert result.exit_code == 2 and "9" in result.output


@pytest.mark.parametrize("value", ["0", "6", "three"])
def test_cli_bad_brokers_value_is_a_one_line_error(value: str) -> None:
    from marshal_py.cli import main

    result = CliRunner().invoke(main, ["dev-broker", "--brokers", value], prog_name="marshal")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("marshal dev-broker: error: ") and "--brokers" in lines[0]
    assert value in lines[0]


def test_cli_kill_9_of_a_cluster_leaves_no_orphan_jvm(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr"
    data_dir = tmp_path / "data"
    proc, stderr_file = _start_cli("--brokers", "3", "--data-dir", str(data_dir),
                                   stderr_path=stderr_path)
    try:
        line = _first_line(proc, timeout=180)
        assert line.startswith("bootstrap.servers="), (line, stderr_path.read_text())
        pids = [int((data_dir / f"node-{n}" / "broker.pid").read_text()) for n in (1, 2, 3)]
        proc.kill()
        proc.wait()
        assert all(_await_process_gone(pid) for pid in pids), \
            f"a JVM of {pids} outlived its killed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr_file.close()


def test_cluster_node_failing_at_start_is_named_with_its_log() -> None:
    cluster = DevCluster(3)
    cluster.nodes[2].heap = "1"  # -Xmx1: that node's JVM refuses to start
    try:
        with pytest.raises(DevBrokerError, match="node 2 of the Kafka cluster exited during "
                                                 "startup") as info:
            cluster.start()
        message = str(info.value)
        assert str(cluster.nodes[2].log_path) in message
        assert "Too small maximum heap" in message
        assert "\n" not in message
        assert not any(node.is_running() for node in cluster.nodes.values())
        assert cluster.nodes[2].log_path.is_file()  # the temporary data dir is kept for it
    finally:
        cluster.stop()
        shutil.rmtree(cluster.data_dir, ignore_errors=True)


def test_cluster_rejects_a_bad_node_count_and_node_id() -> None:
    with pytest.raises(DevBrokerError, match="1 to 5 nodes"):
        DevCluster(0)
    cluster = DevCluster(1)
    try:
        with pytest.raises(DevBrokerError, match="no node 4"):
            cluster.kill(4)
    finally:
        cluster.stop()
    assert not cluster.data_dir.exists()


def test_cli_kill_9_leaves_no_orphan_jvm(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr"
    data_dir = tmp_path / "data"
    proc, stderr_file = _start_cli("--data-dir", str(data_dir), stderr_path=stderr_path)
    try:
        assert BOOTSTRAP_LINE.match(_first_line(proc)), stderr_path.read_text()
        jvm_pid = int((data_dir / "broker.pid").read_text())
        assert jvm_pid == _jvm_pid_from_stderr(stderr_path)
        proc.kill()
        proc.wait()
        assert _await_process_gone(jvm_pid), f"JVM {jvm_pid} outlived its killed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr_file.close()


def test_cli_busy_port_exits_2_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "marshal_py.cli.dev_broker",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env=_cli_env(),
            cwd=REPO_ROOT,
            timeout=120,
            check=False,
        )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("marshal dev-broker: error: ")]
    assert len(errors) == 1, result.stderr
    assert str(port) in errors[0]
    assert "Traceback" not in result.stderr


def test_cli_resolve_only_prints_the_lib_dir() -> None:
    result = CliRunner().invoke(dev_broker, ["--resolve-only"])
    assert result.exit_code == 0, result.output
    assert Path(result.stdout.strip()) == resolve_kafka_jars()


def test_cli_resolve_only_takes_the_kafka_version() -> None:
    result = CliRunner().invoke(dev_broker, ["--resolve-only", "--kafka-version", "3.9"])
    assert result.exit_code == 0, result.output
    lib = Path(result.stdout.strip())
    assert lib == resolve_kafka_jars(version="3.9.2")
    assert lib.parent.name == "kafka-3.9.2" and (lib / "kafka_2.13-3.9.2.jar").is_file()


def test_cli_rejects_an_unsupported_kafka_version_with_one_line() -> None:
    result = CliRunner().invoke(dev_broker, ["--kafka-version", "2.8"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("marshal dev-broker: error: Kafka version '2.8' is not one the "
                               f"development broker runs; choose one of {KAFKA_VERSION} ")
    assert "3.9.2 (3.9)" in lines[0]


def test_cli_rejects_an_out_of_range_port() -> None:
    result = CliRunner().invoke(dev_broker, ["--port", "70000"])
    assert result.exit_code == 2
    assert "70000" in result.output
