"""A share member whose handler works a while on each record, for the test of members
sharing one partition: ``python -m tests.integration.share_worker '<settings as JSON>'``.

It joins as :mod:`tests.integration.share_victim` does, then for each record sleeps
``work_ms``, prints one JSON line (``partition``, ``offset``, ``value``, ``delivery_count``,
as ``marshal consume --print`` does) and accepts it, until SIGTERM, when it closes the
consumer and exits 0. A handler this slow (well under 5,000 records a second) has every
member share the partition (PROTOCOL.md 8.3); ``marshal consume --print`` is fast, and its
members leave the partition to one of them.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from types import FrameType

from tests.integration.share_victim import joined


def main() -> int:
    settings = json.loads(sys.argv[1])
    with joined(settings) as consumer:

        def stop(signum: int, frame: FrameType | None) -> None:
            consumer.stop()

        signal.signal(signal.SIGTERM, stop)
        work_s = settings["work_ms"] / 1000
        for record in consumer:
            time.sleep(work_s)
            sys.stdout.write(json.dumps({
                "partition": record.partition, "offset": record.offset,
                "value": record.value.decode() if record.value is not None else None,
                "delivery_count": record.delivery_count}) + "\n")
            sys.stdout.flush()
            consumer.ack(record, "accept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
