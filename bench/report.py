"""What a benchmark suite reports: tables of medians and ratios, and plots beside them.

A suite returns a :class:`SuiteReport`; :func:`write` turns it into
``bench/results/<suite>.json`` (every figure, every repetition), ``bench/results/<suite>.md``
(the Markdown tables BENCHMARKS.md quotes) and ``docs/bench/<suite>-<n>.png`` (matplotlib,
headless). Figures compare ours and an anchor measured in the same run, as a ratio.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
PLOTS_DIR = ROOT / "docs" / "bench"


@dataclass
class Measured:
    """Repeated measurements of one figure (median reported, range kept)."""

    values: list[float]
    unit: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def low(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def high(self) -> float:
        return max(self.values) if self.values else float("nan")

    def cell(self, digits: int = 0) -> str:
        """``median (low to high)``, or just the value when measured once."""
        if not self.values:
            return "—"
        if len(self.values) == 1:
            return _fmt(self.median, digits)
        low, high = _fmt(self.low, digits), _fmt(self.high, digits)
        return f"{_fmt(self.median, digits)} ({low} to {high})"


def _fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def ratio(ours: float, anchor: float) -> str:
    """``ours / anchor`` as ``0.58x`` (— when the anchor is zero or missing)."""
    if not anchor or anchor != anchor or ours != ours:
        return "—"
    return f"{ours / anchor:.2f}x"


@dataclass
class Table:
    """One Markdown table: ``columns`` headers, ``rows`` of cells (already formatted)."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "| " + " | ".join("---" for _ in self.columns) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        lines += [""] + [f"{note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"


@dataclass
class Plot:
    """A plot: ``kind`` "bar" (grouped bars, one group per x label) or "line" (x numeric,
    one line per series). ``series``: name -> one y value per x (None: not measured)."""

    title: str
    kind: str
    x_label: str
    y_label: str
    x: list[Any]
    series: dict[str, list[float | None]]
    log_x: bool = False
    log_y: bool = False


@dataclass
class SuiteReport:
    """Everything one suite measured."""

    suite: str
    command: str
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def markdown(self, machine: str) -> str:
        described = machine.removeprefix("machine: ")  # machine_line() names itself
        parts = [f"### {self.suite}", "", f"Command: `{self.command}`  ",
                 f"Machine: {described}", ""]
        parts += [t.markdown() for t in self.tables]
        parts += [f"![{p.title}](docs/bench/{self.suite}-{i + 1}.png)\n"
                  for i, p in enumerate(self.plots)]
        return "\n".join(parts)


def draw(plot: Plot, path: Path) -> None:
    """Render ``plot`` to a PNG (matplotlib, Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    names = list(plot.series)
    if plot.kind == "bar":
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            xs = [j + i * width - 0.4 + width / 2 for j in range(len(plot.x))]
            ys = [v if v is not None else 0.0 for v in plot.series[name]]
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks(range(len(plot.x)), [str(x) for x in plot.x])
    else:
        for name in names:
            pts = [(x, y) for x, y in zip(plot.x, plot.series[name], strict=True)
                   if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        if plot.log_x:
            ax.set_xscale("log")
    if plot.log_y:
        ax.set_yscale("log")
    ax.set_title(plot.title)
    ax.set_xlabel(plot.x_label)
    ax.set_ylabel(plot.y_label)
    ax.grid(True, alpha=0.3)
    if len(names) > 1:
        ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def write(report: SuiteReport, machine: str, quick: bool,
          results_dir: Path = RESULTS_DIR, plots_dir: Path = PLOTS_DIR) -> list[Path]:
    """Write the JSON, the Markdown and the plots of ``report``; return the paths written.
    A ``quick`` run writes under ``results_dir/quick`` and ``plots_dir/quick`` (never over the
    figures BENCHMARKS.md quotes)."""
    if quick:
        results_dir, plots_dir = results_dir / "quick", plots_dir / "quick"
    results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    data = {"suite": report.suite, "command": report.command, "machine": machine,
            "quick": quick, "tables": [asdict(t) for t in report.tables],
            "plots": [asdict(p) for p in report.plots], "raw": report.raw}
    json_path = results_dir / f"{report.suite}.json"
    json_path.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    written.append(json_path)
    md_path = results_dir / f"{report.suite}.md"
    md_path.write_text(report.markdown(machine))
    written.append(md_path)
    for i, plot in enumerate(report.plots):
        png = plots_dir / f"{report.suite}-{i + 1}.png"
        draw(plot, png)
        written.append(png)
    return written


def _jsonable(value: Any) -> Any:
    if isinstance(value, Measured):
        return {"values": value.values, "median": value.median, "unit": value.unit}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Sequence):
        return list(value)
    return repr(value)
