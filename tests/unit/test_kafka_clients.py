"""How marshal_py builds its kafka-python clients (marshal_py.log.kafka_config.new_client)."""

from __future__ import annotations

from typing import Any, ClassVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from marshal_py.log.kafka_config import new_client


class _Measured:
    """A client class that, like KafkaConsumer and KafkaProducer, has sensors to turn off."""

    DEFAULT_CONFIG: ClassVar[dict[str, Any]] = {"bootstrap_servers": "localhost",
                                                 "metrics_enabled": True}

    def __init__(self, **configs: Any) -> None:
        self.configs = configs


class _Unmeasured:
    """A client class that, like KafkaAdminClient, rejects a setting it does not know."""

    DEFAULT_CONFIG: ClassVar[dict[str, Any]] = {"bootstrap_servers": "localhost"}

    def __init__(self, **configs: Any) -> None:
        unknown = set(configs) - set(self.DEFAULT_CONFIG)
        assert not unknown, unknown
        self.configs = configs


def test_kafka_pythons_own_metrics_are_off_unless_asked_for() -> None:
    assert new_client(_Measured, bootstrap_servers="b").configs == {
        "bootstrap_servers": "b", "metrics_enabled": False}
    assert new_client(_Measured, metrics_enabled=True).configs == {"metrics_enabled": True}
    assert new_client(_Unmeasured, bootstrap_servers="b").configs == {"bootstrap_servers": "b"}
    # The kafka-python installed: its consumer and producer take the setting, its admin
    # client does not (and would reject it).
    assert "metrics_enabled" in KafkaConsumer.DEFAULT_CONFIG
    assert "metrics_enabled" in KafkaProducer.DEFAULT_CONFIG
    assert "metrics_enabled" not in KafkaAdminClient.DEFAULT_CONFIG
