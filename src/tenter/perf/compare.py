"""``tenter perf compare``: runs side by side, per message size.

Each log (tenter's output or nccl-tests') gives one column of in-place busbw, the half
every nccl-tests mode prints and the one torch's collectives run natively; each further
run also gets its ratio to the first. The footer gives each run's max and mean of that same
column, so that its ratios are those of the rows above it (nccl-tests' own "Avg bus
bandwidth", over both halves, stays in the JSON as ``reported_avg_busbw``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenter.perf.parse import Log, LogRow

Key = tuple[int, str, str | None]
"""A table row: (size, type, redop); logs of several types or ops have several per size."""


@dataclass(frozen=True)
class Run:
    label: str
    path: str
    log: Log

    def busbw(self) -> dict[Key, float]:
        return {_key(r): r.in_place.busbw for r in self.log.rows if r.in_place is not None}

    def max_busbw(self) -> float | None:
        """The table's column at its highest."""
        return max(self.busbw().values(), default=None)

    def avg_busbw(self) -> float | None:
        """The table's column, averaged over its rows."""
        values = list(self.busbw().values())
        return sum(values) / len(values) if values else None


def _key(row: LogRow) -> Key:
    return (row.size, row.type, row.redop)


def table_keys(runs: list[Run]) -> list[Key]:
    """Every (size, type, redop) of any run, in order of first appearance."""
    keys: dict[Key, None] = {}
    for run in runs:
        keys.update(dict.fromkeys(_key(r) for r in run.log.rows))
    return list(keys)


def ratio(value: float | None, first: float | None) -> float | None:
    return value / first if value is not None and first else None


def format_table(runs: list[Run]) -> str:
    width = max(10, *(len(r.label) for r in runs))
    values = [r.busbw() for r in runs]
    head = f"# {'size':>10s}  {'type':>8s}  {'redop':>6s}  {runs[0].label:>{width}s}"
    for run in runs[1:]:
        head += f"  {run.label:>{width}s}  {'ratio':>6s}"
    lines = [
        f'# tenter perf compare: in-place busbw (GB/s) per size; ratio = run / "{runs[0].label}"',
        head,
    ]
    for key in table_keys(runs):
        size, type_name, redop = key
        first = values[0].get(key)
        line = f"{size:12d}  {type_name:>8s}  {redop or '':>6s}  {_num(first, width)}"
        for run_values in values[1:]:
            value = run_values.get(key)
            line += f"  {_num(value, width)}  {_num(ratio(value, first), 6)}"
        lines.append(line)
    for name, stat in (("max busbw", Run.max_busbw), ("avg busbw", Run.avg_busbw)):
        firsts = stat(runs[0])
        line = f"# {name:>30s}  {_num(firsts, width)}"
        for run in runs[1:]:
            value = stat(run)
            line += f"  {_num(value, width)}  {_num(ratio(value, firsts), 6)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _num(value: float | None, width: int) -> str:
    return f"{'-':>{width}s}" if value is None else f"{value:{width}.2f}"


def to_json(runs: list[Run]) -> dict[str, Any]:
    values = [r.busbw() for r in runs]
    return {
        "metric": "in-place busbw (GB/s)",
        "runs": [
            {
                "label": r.label,
                "path": r.path,
                "rows": len(r.log.rows),
                "max_busbw": r.max_busbw(),
                "avg_busbw": r.avg_busbw(),
                "reported_avg_busbw": r.log.reported_avg_busbw,
            }
            for r in runs
        ],
        "table": [
            {
                "size": key[0],
                "type": key[1],
                "redop": key[2],
                "busbw": [v.get(key) for v in values],
                "ratio": [ratio(v.get(key), values[0].get(key)) for v in values],
            }
            for key in table_keys(runs)
        ],
    }


def plot(runs: list[Run], path: Path) -> None:
    """busbw against message size (log2 x axis), one line per run, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        points = sorted((size, bw) for (size, _, _), bw in run.busbw().items() if size > 0)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=run.label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("in-place busbw (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
