"""TopicWatch: how a KafkaLog tells a deleted or replaced coordination topic from a broker
that is away or a metadata answer that lags (no broker: the describe answers are given)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from marshal_py.errors import CoordinationLogLostError
from marshal_py.log import kafka_identity
from marshal_py.log.kafka_identity import TopicWatch, patiently

ID = "b08328f3-74af-46b8-90ec-dcc6c35bac11"
OTHER = "3f0e7a52-0000-4000-8000-000000000001"


def described(topic_id: str = ID, partitions: int = 4) -> dict[str, Any]:
    return {"name": "__marshal", "topic_id": topic_id, "partitions": [{}] * partitions}


class Answers:
    """The brokers' answers to describe, in order (the last one repeats); an exception
    instance is raised (the brokers cannot be asked)."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.asked = 0

    def __call__(self) -> dict[str, Any] | None:
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_identity, "CONFIRM_PAUSE_S", 0.0)


def watch(answers: Callable[[], dict[str, Any] | None],
          counts: list[int] | None = None) -> TopicWatch:
    seen = counts if counts is not None else []
    return TopicWatch("__marshal", ID, answers, seen.append, every_s=0.0)


def test_a_topic_missing_in_three_answers_in_a_row_was_deleted() -> None:
    answers = Answers(None)
    with pytest.raises(CoordinationLogLostError, match="'__marshal' was deleted under this "
                                                       "member"):
        watch(answers).check()
    assert answers.asked == 1 + kafka_identity.CONFIRMATIONS


def test_one_lagging_answer_is_not_a_deletion() -> None:
    counts: list[int] = []
    answers = Answers(None, described())
    watch(answers, counts).check()
    assert answers.asked == 2 and counts == [4]


def test_another_id_is_a_recreated_topic() -> None:
    with pytest.raises(CoordinationLogLostError, match=f"topic id {ID} is now {OTHER}"):
        watch(Answers(described(OTHER))).check()


def test_brokers_that_cannot_be_asked_say_nothing() -> None:
    watch(Answers(KafkaTimeoutError("away"))).check()
    watch(Answers(None, KafkaTimeoutError("away"))).check()


def test_checks_are_spaced_unless_forced() -> None:
    answers = Answers(described())
    spaced = TopicWatch("__marshal", ID, answers, lambda count: None, every_s=3600.0)
    spaced.check()
    assert answers.asked == 0
    spaced.check(force=True)
    assert answers.asked == 1


def test_a_request_that_waits_asks_the_brokers_between_slices() -> None:
    """A deleted topic answers no request: the wait is cut into slices, and the brokers'
    answer between two ends it at once."""
    answers = Answers(None)
    sliced: list[float] = []

    def request(timeout_s: float) -> int:
        sliced.append(timeout_s)
        raise KafkaTimeoutError("no answer")

    deleted = TopicWatch("__marshal", ID, answers, lambda count: None, every_s=0.5)
    with pytest.raises(CoordinationLogLostError):
        patiently(deleted, request, timeout_s=30.0)
    assert sliced == [0.5]
    # A live topic: once the timeout has passed, the request's own error stands.
    alive = TopicWatch("__marshal", ID, Answers(described()), lambda count: None,
                       every_s=0.25)
    with pytest.raises(KafkaTimeoutError):
        patiently(alive, request, timeout_s=0.0)
    assert patiently(alive, lambda timeout_s: 7, timeout_s=1.0) == 7
