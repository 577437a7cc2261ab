"""A share member that acquires one batch and then never acknowledges it, for the kill -9
test: ``python -m tests.integration.share_victim '<settings as JSON>'``.

It joins (printing the same "member C (instance X) of G on T" line to stderr as
``marshal consume``), polls with explicit acknowledgement until it holds records, prints one
JSON line per record it holds (``partition``, ``offset``, ``delivery_count``, as
``marshal consume --print`` does), then "holding N records" on stderr, and blocks until
killed.
So what it holds when the test kills it is exactly what it printed: no race with an
acknowledgement.

:func:`joined` (the member's start) also serves :mod:`tests.integration.share_worker`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from marshal_py import Marshaler
from marshal_py.client.share_consumer import ShareConsumer, ShareRecord


@contextmanager
def joined(settings: dict[str, Any]) -> Iterator[ShareConsumer]:
    """A share consumer of the member ``settings`` describe (explicit acknowledgement, from
    the earliest record), announced on stderr as ``marshal consume`` announces one; closed
    with its Marshaler on the way out."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    with Marshaler(settings["bootstrap"], settings["group"], settings["client"],
                   settings["hi"], coordination_topic=settings["coordination_topic"]) as m:
        consumer = m.consumer([settings["topic"]], "share", offset_reset="earliest",
                              lock_duration=settings["lock_s"],
                              delivery_limit=settings["delivery_limit"],
                              batch_size=settings["batch_size"], acknowledgement="explicit")
        assert isinstance(consumer, ShareConsumer)
        sys.stderr.write(f"marshal consume: member {settings['client']} (instance "
                         f"{m.instance_id}) of {settings['group']} on {settings['topic']}\n")
        sys.stderr.flush()
        yield consumer


def main() -> int:
    settings = json.loads(sys.argv[1])
    with joined(settings) as consumer:
        records: list[ShareRecord] = []
        while not records:
            records = consumer.poll(timeout_s=0.2, max_records=settings["batch_size"])
        for record in records:
            sys.stdout.write(json.dumps({"partition": record.partition, "offset": record.offset,
                                         "delivery_count": record.delivery_count}) + "\n")
        sys.stdout.flush()
        sys.stderr.write(f"holding {len(records)} records\n")
        sys.stderr.flush()
        threading.Event().wait()  # until kill -9
    return 0


if __name__ == "__main__":
    sys.exit(main())
