"""An exactly-once member in a process of its own, for the kill -9 and SIGSTOP tests:
``python -m tests.integration.eos_worker '<settings as JSON>'``.

It copies every record of ``topic`` to ``output`` (value and key, with a ``src`` header
naming the input's partition and offset), ``batch`` records per transaction, and prints one
JSON line per event: ``ready``, ``sent`` (a batch's output is sent, its transaction open),
``commit`` (``ok``: committed or not). From the ``hold_from``-th batch on it waits for a line
on stdin after ``sent`` and before committing, so the test can kill or freeze it with a
transaction open.
"""

from __future__ import annotations

import json
import logging
import sys

from marshal_py import Marshaler


def say(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    settings = json.loads(sys.argv[1])
    hold_from = settings.get("hold_from", 0)
    with Marshaler(settings["bootstrap"], settings["group"], settings["client"],
                   settings["hi"], coordination_topic=settings["coordination_topic"]) as m:
        consumer = m.consumer([settings["topic"]], "eos", offset_reset="earliest")
        say(event="ready", instance=m.instance_id)
        for batches, batch in enumerate(consumer.batches(max_records=settings["batch"]), 1):
            for record in batch:
                batch.send(settings["output"], record.value, key=record.key,
                           headers=[("src", f"{record.partition}/{record.offset}".encode())])
            say(event="sent", partition=batch.partition, first=batch.first_offset,
                next=batch.next_offset)
            if hold_from and batches >= hold_from:
                sys.stdin.readline()
            say(event="commit", ok=batch.commit(), partition=batch.partition,
                first=batch.first_offset, next=batch.next_offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
