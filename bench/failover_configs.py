"""The failover suite's configurations (ours at three heartbeat intervals, classic and KIP-848
groups at their defaults and at their fastest) and what one run measured (see
:mod:`bench.suite_failover`)."""

from __future__ import annotations

from dataclasses import dataclass

from kafka import KafkaConsumer

CLASSIC_DEFAULT_SESSION_MS = int(KafkaConsumer.DEFAULT_CONFIG["session_timeout_ms"])
CLASSIC_DEFAULT_HEARTBEAT_MS = int(KafkaConsumer.DEFAULT_CONFIG["heartbeat_interval_ms"])
#: The broker settings the configurations depend on, read from the broker (these are Kafka's
#: defaults, used when it will not say).
BROKER_SETTINGS = {
    "group.min.session.timeout.ms": 6000,  # the classic group's floor
    "group.consumer.session.timeout.ms": 45000,  # KIP-848 defaults
    "group.consumer.heartbeat.interval.ms": 5000,
}
KIP848_FAST = (6000, 1000)  # session, heartbeat set per group
ANCHOR = "classic-min"


@dataclass(frozen=True)
class Config:
    key: str
    label: str  # table row
    short: str  # plot tick
    kind: str  # "marshal" | "classic" | "kip848"
    hi_s: float = 0.0  # marshal
    session_ms: int | None = None  # classic: client config (None: kafka-python's default)
    heartbeat_ms: int | None = None
    group_config: bool = False  # kip848: set session_ms / heartbeat_ms for the group

    @property
    def detect_s(self) -> float:
        """How long the group may take to notice a dead member (bounds the waits)."""
        if self.kind == "marshal":
            return 3 * self.hi_s
        if self.kind == "classic":
            return (self.session_ms or CLASSIC_DEFAULT_SESSION_MS) / 1000
        return (self.session_ms or BROKER_SETTINGS["group.consumer.session.timeout.ms"]) / 1000

    @property
    def beat_s(self) -> float:
        if self.kind == "marshal":
            return self.hi_s
        if self.kind == "classic":
            return (self.heartbeat_ms or CLASSIC_DEFAULT_HEARTBEAT_MS) / 1000
        return (self.heartbeat_ms
                or BROKER_SETTINGS["group.consumer.heartbeat.interval.ms"]) / 1000


def configs(broker: dict[str, int]) -> list[Config]:
    min_session_ms = broker["group.min.session.timeout.ms"]
    classic_hb = min_session_ms // 3
    kip_session_ms = broker["group.consumer.session.timeout.ms"]
    kip_heartbeat_ms = broker["group.consumer.heartbeat.interval.ms"]
    return [
        Config("marshal-1", "marshal_py, HI 1 s", "marshal\nHI 1 s", "marshal", hi_s=1.0),
        Config("marshal-3", "marshal_py, HI 3 s", "marshal\nHI 3 s", "marshal", hi_s=3.0),
        Config("marshal-10", "marshal_py, HI 10 s", "marshal\nHI 10 s", "marshal", hi_s=10.0),
        Config("classic-default",
               f"classic group (kafka-python defaults: session "
               f"{CLASSIC_DEFAULT_SESSION_MS / 1000:g} s, heartbeat "
               f"{CLASSIC_DEFAULT_HEARTBEAT_MS / 1000:g} s)",
               f"classic\n{CLASSIC_DEFAULT_SESSION_MS / 1000:g} s", "classic"),
        Config(ANCHOR,
               f"classic group (kafka-python, broker minimum session "
               f"{min_session_ms / 1000:g} s, heartbeat {classic_hb / 1000:g} s)",
               f"classic\n{min_session_ms / 1000:g} s", "classic",
               session_ms=min_session_ms, heartbeat_ms=classic_hb),
        Config("kip848-default",
               f"KIP-848 group (confluent-kafka, broker defaults: session "
               f"{kip_session_ms / 1000:g} s, heartbeat {kip_heartbeat_ms / 1000:g} s)",
               f"KIP-848\n{kip_session_ms / 1000:g} s", "kip848",
               session_ms=kip_session_ms, heartbeat_ms=kip_heartbeat_ms),
        Config("kip848-fast",
               f"KIP-848 group (confluent-kafka, group configs: session "
               f"{KIP848_FAST[0] / 1000:g} s, heartbeat {KIP848_FAST[1] / 1000:g} s)",
               f"KIP-848\n{KIP848_FAST[0] / 1000:g} s", "kip848",
               session_ms=KIP848_FAST[0], heartbeat_ms=KIP848_FAST[1], group_config=True),
    ]


QUICK_KEYS = ("marshal-1", ANCHOR, "kip848-fast")


@dataclass
class Run:
    config: str
    split: str
    victim_held: int
    owned_s: float  # survivors own every partition again
    first_s: float  # first marker printed by a survivor
    last_s: float  # every marker printed
    stale_s: float | None = None  # marshal: the dead claims went stale
    expired_s: float | None = None  # marshal: the dead member stopped counting as live
