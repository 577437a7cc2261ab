"""A share member whose handler works a while on each record, for the test of members
sharing one partition: ``python -m tests.integration.share_worker '<settings as JSON>'``.

It joins (printing the same "member C (instance X) of G on T" line to stderr as ``marshal
consume``), then for each record sleeps ``work_ms``, prints one JSON line (``partition``,
``offset``, ``value``, ``delivery_count``, as ``marshal consume --print`` does) and accepts
it, until SIGTERM, when it closes the consumer and exits 0. A handler this slow (well under
5,000 records a second) has every member share the partition (PROTOCOL.md 8.3); ``marshal
consume --print`` is fast, and its members leave the partition to one of them.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from types import FrameType

from marshal_py import Marshaler


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    settings = json.loads(sys.argv[1])
    with Marshaler(settings["bootstrap"], settings["group"], settings["client"],
                   settings["hi"], coordination_topic=settings["coordination_topic"]) as m:
        consumer = m.consumer([settings["topic"]], "share", offset_reset="earliest",
                              lock_duration=settings["lock_s"],
                              delivery_limit=settings["delivery_limit"],
                              batch_size=settings["batch_size"], acknowledgement="explicit")

        def stop(signum: int, frame: FrameType | None) -> None:
            consumer.stop()

        signal.signal(signal.SIGTERM, stop)
        sys.stderr.write(f"marshal consume: member {settings['client']} (instance "
                         f"{m.instance_id}) of {settings['group']} on {settings['topic']}\n")
        sys.stderr.flush()
        work_s = settings["work_ms"] / 1000
        for record in consumer:
            time.sleep(work_s)
            sys.stdout.write(json.dumps({
                "partition": record.partition, "offset": record.offset,
                "value": record.value.decode() if record.value is not None else None,
                "delivery_count": record.delivery_count}) + "\n")
            sys.stdout.flush()
            consumer.ack(record, "accept")
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
