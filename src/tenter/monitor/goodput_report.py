"""Where the time went, shown: the live view's lines (:class:`GoodputFeed`, :func:`time_lines`)
and ``tenter report``'s goodput section: the ledger's parts as a table, and ``goodput.png``, a
time line per rank with each piece coloured by its part (docs/goodput.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tenter.goodput.keeper import LedgerKeeper, named_stragglers
from tenter.goodput.ledger import PARTS, Ledger, job_timelines, run_end, summary_line
from tenter.goodput.stragglers import Straggler
from tenter.jobdir.events import EventFollower
from tenter.jobdir.layout import GOODPUT_FILE

COLOURS = {
    "startup": "tab:gray",
    "productive": "tab:green",
    "checkpoint": "tab:blue",
    "fault": "tab:red",
    "lost": "tab:orange",
    "hang": "tab:purple",
    "preemption": "tab:brown",
    "teardown": "lightgray",
}
"""Each part's colour: green is time that trained."""


class GoodputFeed:
    """What the launcher keeps of a running job's ledger and stragglers, for the live view."""

    def __init__(self, job_dir: Path) -> None:
        self._job_dir = job_dir
        self._events = EventFollower(job_dir)
        self.named: list[Straggler] = []
        """The stragglers named so far (as of the last :meth:`stragglers`)."""

    def ledger(self) -> Ledger | None:
        try:
            return Ledger.from_dict(json.loads((self._job_dir / GOODPUT_FILE).read_text()))
        except (OSError, ValueError, KeyError):
            return None  # not written yet

    def stragglers(self) -> list[str]:
        """The stragglers named so far, a line each."""
        self.named += named_stragglers(self._events.read_new())
        return [straggler.text for straggler in self.named]


def time_lines(ledger: Ledger | None, stragglers: list[str]) -> list[str]:
    """Where the time went so far: goodput, and the stragglers named."""
    lines = [summary_line(ledger)] if ledger is not None else []
    return lines + [f"straggler: {text}" for text in stragglers]


def goodput_section(job_dir: Path, out: Path, pyplot: Any) -> list[str]:
    """The Markdown of the section; writes ``out/goodput.png`` beside it."""
    keeper = LedgerKeeper(job_dir)
    now = time.time()
    runs = keeper.runs(now)
    ledger = keeper.ledger(now)
    lines = [
        "## Goodput",
        "",
        summary_line(ledger),
        "",
        "| part | seconds | share |",
        "|---|---:|---:|",
    ]
    for part in PARTS:
        share = ledger.parts[part] / ledger.wall_s if ledger.wall_s else 0.0
        lines.append(f"| {part} | {ledger.parts[part]:.1f} | {100 * share:.1f} % |")
    lines.append("")
    _plot(runs, job_timelines(runs, now), now, ledger, out / "goodput.png", pyplot)
    return [*lines, "![Goodput](goodput.png)", ""]


def _plot(runs: Any, timelines: Any, now: float, ledger: Ledger, path: Path, plt: Any) -> None:
    origin = runs[0].launch
    rows = sorted({rank for lines in timelines for rank in lines})
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.35 * max(len(rows), 4)))
    for run, lines in zip(runs, timelines, strict=True):
        for rank, line in lines.items():
            y = rows.index(rank)
            for part in PARTS:
                bars = [
                    (s.start - origin, s.end - s.start) for s in line.segments if s.part == part
                ]
                if bars:
                    ax.broken_barh(bars, (y - 0.4, 0.8), color=COLOURS[part])
        ax.axvline(run_end(run, now) - origin, color="black", linewidth=0.5)
    ax.set_yticks(range(len(rows)), [f"rank {r}" if r >= 0 else "(no reports)" for r in rows])
    ax.set_xlabel("seconds since the launch")
    ax.set_title(f"Where the time went: goodput {100 * ledger.goodput:.1f} %")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[p]) for p in PARTS if ledger.parts[p] > 0]
    shown = [p for p in PARTS if ledger.parts[p] > 0]
    ax.legend(handles, shown, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
