"""A run's directory: the files a campaign run leaves behind, and loading them for the checker.

Layout of ``<campaign dir>/run-NNN-<mode>/``:

* ``meta.json`` -- the run's settings (mode, group, topic, partitions, heartbeat interval, ...);
* ``faults.jsonl`` -- the runner's journal of spawns, faults and recoveries;
* ``producer.jsonl`` -- the producer's journal;
* ``worker-<client>-<n>.jsonl`` -- one journal per consumer process incarnation, with its
  ``.log`` (marshal_py's warnings) and ``.stacks`` (thread stacks, dumped on SIGUSR1 when the
  process is slow to stop);
* ``topic.jsonl`` -- the data topic after the run: ``p``, ``o``, ``k`` per record;
* ``output.jsonl`` -- ``eos`` runs: the output topic after the run (read_committed): ``p``,
  ``o`` of the input record each output record names;
* ``coordination.jsonl`` -- the run's coordination topic: ``cp``, ``pos``, ``ts``, ``v``
  (base64, null for a tombstone) per record;
* ``result.json`` -- the checker's verdict.

``python -m chaos check DIR`` checks such a directory again.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from chaos.journal import read_journal
from chaos.run_data import Incarnation, RunData, RunMeta, TopicRecord
from marshal_py.world import CoordinationRecord

META = "meta.json"
FAULTS = "faults.jsonl"
PRODUCER = "producer.jsonl"
TOPIC = "topic.jsonl"
COORDINATION = "coordination.jsonl"
OUTPUT = "output.jsonl"
RESULT = "result.json"
WORKER_PREFIX = "worker-"


def coordination_row(record: CoordinationRecord) -> dict[str, Any]:
    """A coordination record as a ``coordination.jsonl`` row."""
    value = None if record.value is None else base64.b64encode(record.value).decode("ascii")
    return {"cp": record.partition, "pos": record.position, "ts": record.timestamp_ms,
            "v": value}


def load_run(directory: Path) -> RunData:
    """Everything the checker needs from a run directory.

    Raises:
        FileNotFoundError / ValueError: the directory is not a complete run.
    """
    meta = RunMeta.from_dict(json.loads((directory / META).read_text(encoding="utf-8")))
    topic = [TopicRecord(int(r["p"]), int(r["o"]), r.get("k"))
             for r in read_journal(directory / TOPIC)]
    acks = [e for e in read_journal(directory / PRODUCER) if e.get("e") == "p"] \
        if (directory / PRODUCER).exists() else []
    produced = [(int(e["p"]), int(e["o"])) for e in acks]
    produced_at = [float(e["t"]) for e in acks if "t" in e]
    incarnations = [Incarnation.from_events(path.stem.removeprefix(WORKER_PREFIX),
                                            read_journal(path))
                    for path in sorted(directory.glob(f"{WORKER_PREFIX}*.jsonl"))]
    faults = read_journal(directory / FAULTS) if (directory / FAULTS).exists() else []
    coordination = [
        CoordinationRecord(int(r["cp"]), int(r["pos"]), int(r["ts"]),
                           None if r.get("v") is None else base64.b64decode(r["v"]))
        for r in read_journal(directory / COORDINATION)]
    outputs = [(int(r["p"]), int(r["o"])) for r in read_journal(directory / OUTPUT)] \
        if (directory / OUTPUT).exists() else []
    return RunData(meta, topic, produced, incarnations, faults, coordination, produced_at,
                   outputs)
