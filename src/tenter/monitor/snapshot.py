"""What the live view shows of a job at one moment (:class:`Snapshot`, a :class:`RankStatus`
per rank), and the two ways it is shown: a line of text (:func:`status_line`) and the
terminal's table (:func:`render`). Pure functions of a snapshot; :mod:`tenter.monitor.live`
takes the snapshots."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rich import box
from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table

from tenter.goodput.ledger import Ledger
from tenter.monitor.goodput_report import time_lines

MAX_ROWS = 32
"""More ranks than this: the table shows the slowest ones (metrics.jsonl has them all)."""


@dataclass(frozen=True)
class RankStatus:
    rank: int
    host: str
    state: str
    """pending (not started), starting (no report nor step yet), running, done (reached its last
    step), failed (its error file exists) or exited."""
    step: int | None = None
    samples: int = 0
    """Samples this rank reported in all."""
    samples_per_s: float | None = None
    step_time_s: float | None = None
    loss: float | None = None
    total_steps: int | None = None
    cpu_percent: float | None = None
    """Of one core: 200 is two cores busy."""
    rss_bytes: int | None = None
    gpu_util_percent: float | None = None
    gpu_memory_bytes: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    time: float
    elapsed_s: float
    ranks: list[RankStatus]
    samples_per_s: float | None
    """The job's: the sum over live ranks."""
    step: int | None
    """The slowest reporting rank's step."""
    total_steps: int | None
    eta_s: float | None
    gpus: bool
    goodput: Ledger | None = None
    """The goodput ledger as the launcher last kept it (``goodput.json``)."""
    stragglers: list[str] = field(default_factory=list)
    """The stragglers named so far, a line each."""

    @property
    def reporting(self) -> bool:
        return any(r.step is not None or r.samples for r in self.ranks)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if 0 < seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:.0f} {unit}"
        count //= 1024
    return f"{count:.0f} TiB"


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _progress(snapshot: Snapshot) -> str:
    text = f"elapsed {format_duration(snapshot.elapsed_s)}"
    if snapshot.step is not None:
        text += f"  step {snapshot.step}"
        if snapshot.total_steps:
            percent = 100 * snapshot.step / snapshot.total_steps
            text += f"/{snapshot.total_steps} ({percent:.0f} %)"
    if snapshot.samples_per_s is not None:
        text += f"  {snapshot.samples_per_s:,.0f} samples/s"
    if snapshot.eta_s is not None:
        text += f"  ETA {format_duration(snapshot.eta_s)}"
    return text


def status_line(snapshot: Snapshot) -> str:
    """The plain-text view: one line for the whole job."""
    states: dict[str, int] = {}
    for r in snapshot.ranks:
        states[r.state] = states.get(r.state, 0) + 1
    counts = ", ".join(f"{n} {state}" for state, n in states.items())
    text = f"status: {counts}; {_progress(snapshot)}"
    timed = [r for r in snapshot.ranks if r.step_time_s is not None]
    if timed:
        slowest = max(timed, key=lambda r: r.step_time_s or 0.0)
        median = statistics.median(r.step_time_s or 0.0 for r in timed)
        text += (
            f"; step time {format_duration(median)}"
            f" (slowest: rank {slowest.rank}, {format_duration(slowest.step_time_s)})"
        )
    losses = [r.loss for r in snapshot.ranks if r.loss is not None]
    if losses:
        text += f"; loss {statistics.mean(losses):.4g}"
    return text + "".join(f"\n{line}" for line in _time_lines(snapshot))


def _time_lines(snapshot: Snapshot) -> list[str]:
    return time_lines(snapshot.goodput, snapshot.stragglers)


def render(snapshot: Snapshot) -> RenderableType:
    """The terminal view: a row per rank, then the job's progress bar and figures."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("host", "rank", "state", "step", "samples/s", "step time", "loss", "CPU %"):
        table.add_column(name, justify="left" if name in ("host", "state") else "right")
    table.add_column("RSS", justify="right")
    if snapshot.gpus:
        table.add_column("GPU %", justify="right")
        table.add_column("GPU mem", justify="right")
    ranks = snapshot.ranks
    hidden = 0
    if len(ranks) > MAX_ROWS:
        hidden = len(ranks) - MAX_ROWS
        ranks = sorted(ranks, key=lambda r: -(r.step_time_s or 0.0))[:MAX_ROWS]
    styles = {
        "failed": "bold red",
        "exited": "dim",
        "pending": "dim",
        "starting": "yellow",
        "done": "blue",
    }
    for r in ranks:
        row = [
            r.host,
            str(r.rank),
            f"[{styles.get(r.state, 'green')}]{r.state}[/]",
            _number(r.step, "d"),
            _number(r.samples_per_s, ",.0f"),
            format_duration(r.step_time_s),
            _number(r.loss, ".4g"),
            _number(r.cpu_percent, ".0f"),
            format_bytes(r.rss_bytes),
        ]
        if snapshot.gpus:
            row += [_number(r.gpu_util_percent, ".0f"), format_bytes(r.gpu_memory_bytes)]
        table.add_row(*row)
    footer: list[RenderableType] = []
    if hidden:
        footer.append(f"... and {hidden} more ranks (the slowest are shown; all are recorded)")
    progress = Table.grid(padding=(0, 2))
    if snapshot.step is not None and snapshot.total_steps:
        bar = ProgressBar(total=snapshot.total_steps, completed=snapshot.step, width=40)
        progress.add_row(bar, _progress(snapshot))
    else:
        progress.add_row(_progress(snapshot))
    lines = [
        f"[bold yellow]{line}[/]" if line.startswith("straggler") else line
        for line in _time_lines(snapshot)
    ]
    return Group(table, *footer, progress, *lines)
