"""``tenter report JOB``: a finished job's throughput, utilisation and per-rank step times.

Writes into ``<job_dir>/report/``:

- ``report.md``: outcome, one row per rank (steps, samples, median and 90th-percentile step
  time, samples/s, mean CPU, peak memory), stragglers marked, and the plots below;
- ``throughput.png``: samples/s of the whole job over time (from ``tenter.report``);
- ``step_times.png``: each rank's distribution of step times: a straggler's box sits higher;
- ``goodput.png``: where the time went: each rank's time line coloured by the goodput
  ledger's parts (start-up, productive steps, checkpoints, faults, lost work...);
- ``utilization.png``: CPU (and GPU) busy per rank over time, and memory (from the live
  view's ``metrics.jsonl``; absent when the job ran without it).

A rank's steps are those of :mod:`tenter.jobdir.progress`: its ``tenter.report`` calls, else
the DDP steps tenter counted on it. In lock-step data-parallel training every rank waits for
the slowest in each all-reduce, so step times are nearly equal: the stragglers marked are
those the launcher named from when each rank's own work of a step was done (docs/goodput.md),
and any rank whose median step time is above STRAGGLER x the job's (ranks that do not wait for
each other). The busiest rank (highest CPU or GPU) is the straggler too: the table has both.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenter.contract.plan import read_plan
from tenter.goodput.keeper import named_stragglers
from tenter.jobdir import layout
from tenter.jobdir.events import read_events
from tenter.jobdir.progress import RankProgress, Step, read_progress
from tenter.launch.shared.console import read_index
from tenter.monitor.goodput_report import goodput_section
from tenter.monitor.metrics_files import Sample, read_metrics
from tenter.monitor.snapshot import format_bytes, format_duration
from tenter.spec.errors import counted

STRAGGLER = 1.2
"""A rank whose median step time is this much above the job's median is marked."""
MAX_BINS = 60


@dataclass(frozen=True)
class RankSummary:
    rank: int
    host: str
    steps: int
    samples: int
    step_times: list[float]
    samples_per_s: float | None
    cpu_percent: float | None
    peak_rss_bytes: int | None

    @property
    def median_step_s(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    @property
    def p90_step_s(self) -> float | None:
        if len(self.step_times) < 2:
            return self.median_step_s
        return statistics.quantiles(self.step_times, n=10)[-1]


def step_times(steps: Sequence[Step]) -> list[float]:
    """Seconds per step between consecutive records (a report every k steps: divided by k)."""
    return [(t1 - t0) / (b - a) for (t0, a), (t1, b) in itertools.pairwise(steps) if b > a]


def summarise_ranks(
    progress: Mapping[int, RankProgress], metrics: list[dict[str, Any]], hosts: dict[int, str]
) -> list[RankSummary]:
    by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in metrics:
        by_rank[int(row["rank"])].append(row)
    out = []
    for rank in sorted(progress.keys() | by_rank.keys()):
        done = progress.get(rank, RankProgress())
        rows = by_rank.get(rank, [])
        cpu = [float(r["cpu_percent"]) for r in rows if "cpu_percent" in r]
        rss = [int(r["rss_bytes"]) for r in rows if "rss_bytes" in r]
        out.append(
            RankSummary(
                rank=rank,
                host=hosts.get(rank, ""),
                steps=max((step for _, step in done.steps), default=0),
                samples=done.samples,
                step_times=step_times(done.steps),
                samples_per_s=done.samples_per_s(),
                cpu_percent=statistics.mean(cpu) if cpu else None,
                peak_rss_bytes=max(rss) if rss else None,
            )
        )
    return out


def stragglers(ranks: list[RankSummary]) -> set[int]:
    medians = {r.rank: r.median_step_s for r in ranks if r.median_step_s is not None}
    if len(medians) < 2:
        return set()
    typical = statistics.median(medians.values())
    return {rank for rank, m in medians.items() if m > STRAGGLER * typical}


def throughput_timeline(samples: dict[int, list[Sample]]) -> tuple[list[float], list[float]]:
    """(seconds since the first report, samples/s of the whole job) in up to 60 even bins."""
    every = [s for records in samples.values() for s in records if s.samples]
    if len(every) < 2:
        return [], []
    start = min(s.time for s in every)
    span = max(s.time for s in every) - start
    width = max(1.0, span / MAX_BINS)
    bins = [0.0] * (int(span / width) + 1)
    for s in every:
        bins[int((s.time - start) / width)] += s.samples or 0
    return [i * width for i in range(len(bins))], [n / width for n in bins]


def _plot_throughput(samples: dict[int, list[Sample]], path: Path) -> bool:
    times, rates = throughput_timeline(samples)
    if not times:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.step(times, rates, where="post")
    ax.set_xlabel("seconds since the first report")
    ax.set_ylabel("samples/s (all ranks)")
    ax.set_title("Throughput")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _plot_step_times(ranks: list[RankSummary], slow: set[int], path: Path) -> bool:
    timed = [r for r in ranks if r.step_times]
    if not timed:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.5 * len(timed) + 2), 3.5))
    box = ax.boxplot(
        [[t * 1000 for t in r.step_times] for r in timed],
        tick_labels=[str(r.rank) for r in timed],
        showfliers=True,
        patch_artist=True,
    )
    for patch, r in zip(box["boxes"], timed, strict=True):
        patch.set_facecolor("tab:red" if r.rank in slow else "tab:blue")
        patch.set_alpha(0.5)
    ax.set_xlabel("rank")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step time per rank (red: straggler)")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _plot_utilization(metrics: list[dict[str, Any]], path: Path) -> bool:
    if not any("cpu_percent" in r for r in metrics):
        return False
    start = min(float(r["time"]) for r in metrics)
    series: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in metrics:
        t = float(r["time"]) - start
        for key in ("cpu_percent", "gpu_util_percent", "rss_bytes", "gpu_memory_bytes"):
            if key in r:
                series[key][int(r["rank"])].append((t, float(r[key])))
    panels = [
        ("cpu_percent", "CPU % (100 = one core)", 1.0),
        ("gpu_util_percent", "GPU busy %", 1.0),
        ("rss_bytes", "resident memory (MiB)", 1 / 2**20),
        ("gpu_memory_bytes", "GPU memory (MiB)", 1 / 2**20),
    ]
    panels = [p for p in panels if p[0] in series]
    plt = _pyplot()
    fig, _ = plt.subplots(len(panels), 1, figsize=(8, 2.5 * len(panels)), sharex=True)
    for ax, (key, label, scale) in zip(fig.axes, panels, strict=True):
        for rank, points in sorted(series[key].items()):
            ax.plot([t for t, _ in points], [v * scale for _, v in points], label=f"rank {rank}")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.axes[0].set_title("Utilization per rank")
    fig.axes[0].legend(fontsize="small", ncol=4)
    fig.axes[-1].set_xlabel("seconds since the first sample")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _progress_note(progress: Mapping[int, RankProgress]) -> list[str]:
    """Where the table's steps come from, when it is not the script's own reports."""
    if not any(p.steps or p.reports for p in progress.values()):
        return [
            "No rank reported progress: call `tenter.report(step=..., samples=...)` in the "
            "training loop, or train with DistributedDataParallel (see docs/monitor.md).",
            "",
        ]
    if all(p.counted_only for p in progress.values()):
        return [
            "Steps are the DDP steps tenter counted (the script does not call `tenter.report`): "
            "no samples or loss (see docs/monitor.md).",
            "",
        ]
    return []


def write_report(job_dir: Path) -> Path:
    """Write ``<job_dir>/report/`` (see the module docstring); returns ``report.md``."""
    progress = read_progress(job_dir)
    samples = {rank: p.reports for rank, p in progress.items() if p.reports}
    metrics = read_metrics(job_dir)
    out = job_dir / layout.REPORT_DIR
    out.mkdir(exist_ok=True)
    plan = read_plan(job_dir)
    hosts = {int(str(e["rank"])): str(e["host"]) for e in read_index(plan.job_dir)}
    ranks = summarise_ranks(progress, metrics, hosts)
    named = named_stragglers(read_events(job_dir))
    by_step_time = stragglers(ranks)
    slow = by_step_time | {s.rank for s in named}
    lines = [f"# Job {job_dir.name}", ""]
    summary_file = job_dir / layout.SUMMARY_FILE
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
        outcome = "succeeded" if summary["exit_code"] == 0 else f"exit code {summary['exit_code']}"
        lines += [
            f"{outcome} after {format_duration(summary['duration_s'])}, "
            f"{counted(summary['hosts'], 'host')} x "
            f"{counted(summary['procs_per_host'], 'process')}",
            "",
        ]
    else:
        lines += ["still running (no summary.json yet): the figures cover it so far", ""]
    lines += _progress_note(progress)
    lines += [
        "| rank | host | steps | samples | median step | p90 step | samples/s | CPU % | peak RSS |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in ranks:
        mark = " **straggler**" if r.rank in slow else ""
        lines.append(
            f"| {r.rank}{mark} | {r.host or '-'} | {r.steps} | {r.samples} "
            f"| {format_duration(r.median_step_s)} | {format_duration(r.p90_step_s)} "
            f"| {_cell(r.samples_per_s, ',.0f')} | {_cell(r.cpu_percent, '.0f')} "
            f"| {format_bytes(r.peak_rss_bytes)} |"
        )
    lines.append("")
    if named:
        lines += ["Stragglers the launcher named (docs/goodput.md):", ""]
        lines += [f"- {straggler.text}" for straggler in named] + [""]
    if by_step_time:
        lines += [f"Median step > {STRAGGLER}x the job's: ranks {sorted(by_step_time)}", ""]
    plots = [
        ("throughput.png", "Throughput", _plot_throughput(samples, out / "throughput.png")),
        ("step_times.png", "Step times", _plot_step_times(ranks, slow, out / "step_times.png")),
        ("utilization.png", "Utilization", _plot_utilization(metrics, out / "utilization.png")),
    ]
    lines += goodput_section(job_dir, out, _pyplot())
    for name, title, written in plots:
        if written:
            lines += [f"## {title}", "", f"![{title}]({name})", ""]
    if not metrics:
        lines += ["No utilization samples: metrics.jsonl is written by the live view.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
