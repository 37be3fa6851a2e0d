"""``tenter scale``: run one job at several sizes and compare its throughput with linear
scaling.

Each size is an ordinary job (``tenter.launch.api.run``, on the spec's backend). Its figures
come from what the ranks reported with ``tenter.report``: each rank's throughput is the
samples it reported between the end of its warm-up (the first tenth of its reports, at least
one: process-group set-up, first-touch allocations) and its last report, over that time; the
job's throughput is the sum over ranks. Start-up and teardown are not counted: they do not
grow with the dataset. Time per epoch is the samples of one epoch (all samples reported over
the epochs run) divided by that throughput; without an epoch count, time per 100 steps.

Scaling efficiency at N ranks = (throughput at N / throughput of the smallest run) / (N /
the smallest run's ranks): 100 % is linear scaling. The ideal time line of the plot is the
smallest run's time scaled down the same way.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from tenter.monitor.metrics_files import Sample, read_rank_samples
from tenter.monitor.snapshot import format_duration

WARMUP_FRACTION = 0.1


@dataclass(frozen=True)
class Measurement:
    samples_per_s: float
    step_time_s: float | None
    samples: int
    """Every sample the ranks reported (warm-up included)."""
    steps: int


def measure(samples: dict[int, list[Sample]]) -> Measurement | None:
    """The steady-state throughput of a finished job, or None if it reported too little."""
    rates, step_times = [], []
    for records in samples.values():
        skip = max(1, int(len(records) * WARMUP_FRACTION))
        if len(records) <= skip:
            continue
        first, last = records[skip - 1], records[-1]
        span = last.time - first.time
        if span <= 0:
            continue
        rates.append(sum(s.samples or 0 for s in records[skip:]) / span)
        if first.step is not None and last.step is not None and last.step > first.step:
            step_times.append(span / (last.step - first.step))
    if not rates or not any(rates):
        return None
    return Measurement(
        samples_per_s=sum(rates),
        step_time_s=statistics.median(step_times) if step_times else None,
        samples=sum(s.samples or 0 for records in samples.values() for s in records),
        steps=max((s.step or 0 for records in samples.values() for s in records), default=0),
    )


@dataclass(frozen=True)
class ScaleRun:
    hosts: int
    procs_per_host: int
    job_id: str
    job_dir: str
    samples_per_s: float
    step_time_s: float | None
    samples: int
    steps: int
    time_s: float
    """Time per epoch, or per 100 steps without an epoch count."""
    ideal_time_s: float
    speedup: float
    efficiency: float

    @property
    def world(self) -> int:
        return self.hosts * self.procs_per_host


def compare(
    sizes: list[tuple[int, int, str, str]], measured: list[Measurement], epochs: int | None
) -> list[ScaleRun]:
    """``sizes``: (hosts, processes per host, job id, job dir) of each run, smallest first."""
    base_world = sizes[0][0] * sizes[0][1]
    base = measured[0]
    base_time = _time(base, epochs)
    runs = []
    for (hosts, procs, job_id, job_dir), m in zip(sizes, measured, strict=True):
        ratio = hosts * procs / base_world
        speedup = m.samples_per_s / base.samples_per_s
        runs.append(
            ScaleRun(
                hosts=hosts,
                procs_per_host=procs,
                job_id=job_id,
                job_dir=job_dir,
                samples_per_s=m.samples_per_s,
                step_time_s=m.step_time_s,
                samples=m.samples,
                steps=m.steps,
                time_s=_time(m, epochs),
                ideal_time_s=base_time / ratio,
                speedup=speedup,
                efficiency=speedup / ratio,
            )
        )
    return runs


def _time(m: Measurement, epochs: int | None) -> float:
    if epochs:
        return m.samples / epochs / m.samples_per_s
    return 100 * (m.step_time_s or 0.0)


def table(runs: list[ScaleRun], epochs: int | None) -> str:
    unit = "time/epoch" if epochs else "time/100 steps"
    lines = [
        f"| hosts | procs/host | ranks | samples/s | step time | {unit} | ideal | speedup "
        "| efficiency | job |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.hosts} | {r.procs_per_host} | {r.world} | {r.samples_per_s:,.0f} "
            f"| {format_duration(r.step_time_s)} | {format_duration(r.time_s)} "
            f"| {format_duration(r.ideal_time_s)} | {r.speedup:.2f}x | {r.efficiency:.0%} "
            f"| {r.job_id} |"
        )
    return "\n".join(lines)


def plot(runs: list[ScaleRun], epochs: int | None, title: str, path: Path) -> None:
    """Measured time against the ideal linear line (left), efficiency per size (right)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    by_hosts = len({r.hosts for r in runs}) > 1
    xs = [r.hosts if by_hosts else r.world for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(xs, [r.time_s for r in runs], "o-", label="measured")
    left.plot(xs, [r.ideal_time_s for r in runs], "--", color="gray", label="ideal (linear)")
    left.set_xlabel("hosts" if by_hosts else "processes")
    left.set_ylabel("seconds per epoch" if epochs else "seconds per 100 steps")
    left.set_xticks(xs)
    left.set_ylim(bottom=0)
    left.legend()
    left.grid(alpha=0.3)
    bars = right.bar([str(x) for x in xs], [100 * r.efficiency for r in runs], color="tab:blue")
    right.bar_label(bars, fmt="%.0f%%")
    right.axhline(100, color="gray", linestyle="--")
    right.set_xlabel("hosts" if by_hosts else "processes")
    right.set_ylabel("scaling efficiency (%)")
    right.set_ylim(0, max(110, *(100 * r.efficiency + 10 for r in runs)))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(runs: list[ScaleRun], epochs: int | None, title: str, out: Path) -> list[Path]:
    """``scale.md`` (the table and the plot), ``scale.json`` and ``scale.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    plot(runs, epochs, title, out / "scale.png")
    (out / "scale.json").write_text(
        json.dumps({"epochs": epochs, "runs": [asdict(r) for r in runs]}, indent=2)
    )
    text = f"# {title}\n\n{table(runs, epochs)}\n\n![scaling](scale.png)\n"
    (out / "scale.md").write_text(text)
    return [out / "scale.md", out / "scale.json", out / "scale.png"]


def measure_job(job_dir: str) -> Measurement | None:
    return measure(read_rank_samples(job_dir))
