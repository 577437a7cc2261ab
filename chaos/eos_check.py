"""The ``eos`` check of a campaign run: every input record's output exactly once.

The output topic is read ``read_committed`` after the run: an aborted transaction's records
(a member killed or fenced mid-batch) are not there. Each output record names its input in a
``src`` header (``<partition>/<offset>``), which the runner turns into ``(partition, offset)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chaos.run_data import RunResult

TP = tuple[int, int]


def check_outputs(outputs: Iterable[TP], inputs: Mapping[TP, str | None],
                  result: RunResult) -> None:
    """Add the ``eos`` verdicts to ``result``: ``lost`` (an input without output),
    ``output_twice`` (an input with several) and ``unknown_record`` (an output of no input);
    ``result.lost`` and ``result.duplicated`` count inputs (hand-outs repeated after aborted
    transactions stay counted as re-deliveries)."""
    from chaos.run_data import Violation

    result.duplicated = 0
    counts = Counter(outputs)
    for (p, o), n in sorted(counts.items()):
        if (p, o) not in inputs:
            result.violations.append(Violation(
                "unknown_record", f"{n} output record(s) name p{p}@{o}, which the input topic "
                "does not hold"))
        elif n > 1:
            result.duplicated += 1
            result.violations.append(Violation(
                "output_twice", f"p{p}@{o} (key {inputs[(p, o)]}) has {n} output records"))
    for (p, o), key in sorted(inputs.items()):
        if (p, o) not in counts:
            result.lost += 1
            result.violations.append(Violation(
                "lost", f"p{p}@{o} (key {key}) has no output record"))
