"""The campaign's operator: after a broker fault, it completes hanging transactions the way
an operator would (``marshal find-hanging --resolve``).

Kafka itself leaves them: a single-node KRaft broker killed while a commit's markers were
pending restarts with its partitions briefly without a leader, and its transaction
coordinator drops those markers as if the partitions had been deleted. The transaction is
finished (CompleteCommit) on the coordinator and open on its partitions for good, so every
``read_committed`` reader of them stops. That is the broker's failure, not marshal_py's; what
the campaign checks is that marshal_py's guarantees hold once it is repaired, so the run
repairs it, journals it (``hanging_resolved``) and notes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka.structs import TopicPartition

from marshal_py.errors import MarshalError
from marshal_py.log.hanging import HangingTransactions
from marshal_py.log.kafka_config import KafkaLogConfig

log = logging.getLogger(__name__)

#: How often the operator looks (seconds), and how long a transaction must have been
#: silent first (longer than the campaign's transaction timeout of 10 s: a transaction its
#: coordinator still runs is never touched anyway).
CHECK_EVERY_S = 5.0
MIN_AGE_S = 12.0
#: One whose outcome is unknown is noted only once it was seen this long: just after a
#: restart, the coordinator may not have loaded the transaction yet (it then completes it).
UNDECIDED_FOR_S = 30.0


class HangingOperator:
    """Looks for hanging transactions on a run's topics, at most every
    :data:`CHECK_EVERY_S`, once a broker fault happened."""

    def __init__(self, bootstrap: str, kafka_config: dict[str, Any], topics: list[str],
                 journal: Callable[..., None], notes: list[str], *,
                 min_age_s: float = MIN_AGE_S) -> None:
        self.config = KafkaLogConfig(bootstrap_servers=bootstrap, topic=topics[0],
                                     timeout_s=10.0, kafka_config=dict(kafka_config))
        self.topics = topics
        self.journal = journal
        self.notes = notes
        self.min_age_s = min_age_s
        self.armed = False
        self._next = 0.0
        #: When each undecided one was first seen (monotonic seconds).
        self._undecided_since: dict[tuple[int, int], float] = {}

    def arm(self) -> None:
        """A broker fault happened: start looking."""
        self.armed = True

    def tend(self) -> None:
        """Look now if it is time; complete what was decided, note what was not."""
        if not self.armed or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + CHECK_EVERY_S
        try:
            with HangingTransactions(self.config) as finder:
                watched: list[TopicPartition] = finder.partitions_of(self.topics)
                for hanging in finder.find(watched, min_age_s=self.min_age_s):
                    if hanging.decision is None:
                        since = self._undecided_since.setdefault(
                            (hanging.producer_id, hanging.producer_epoch), time.monotonic())
                        if time.monotonic() - since < UNDECIDED_FOR_S:
                            continue
                        note = f"a hanging transaction with no decision: {hanging.describe()}"
                        if note not in self.notes:
                            self.notes.append(note)
                            log.warning("  %s", note)
                        continue
                    done = finder.resolve(hanging)
                    self.journal("hanging_resolved", producer=hanging.producer_id,
                                 epoch=hanging.producer_epoch, tid=hanging.transactional_id,
                                 decision=hanging.decision,
                                 partitions=[f"{o.topic}-{o.partition}@{o.start_offset}"
                                             for o in done], t=time.time())
                    note = (f"the broker left a hanging transaction (Kafka drops the markers "
                            f"of a restarted single node): {hanging.describe()}; completed")
                    self.notes.append(note)
                    log.warning("  %s", note)
        except MarshalError as exc:  # the broker may still be loading: look again later
            log.debug("looking for hanging transactions failed: %s", exc)
