"""Overhead of tenter.report and the live view on the step time of a training job.

    python benchmarks/report_overhead.py [--reps 3]

1. End to end: the compute-bound MLP (benchmarks/workloads/mlp.py) on 1 host x 2 processes,
   one thread each, with ``--no-report`` and no live view (A) against reporting every step
   with the live view sampling every second, as ``tenter run`` does (B); runs interleaved
   A, B, A, B... so that load from elsewhere affects both. Step time: rank 0's mean over its
   steady steps. Target: B / A - 1 < 2 %.
2. The parts, which a loaded machine does not blur: the cost of one ``tenter.report`` call
   (in this process) and of one ``LiveView.poll`` of that 2-rank job, relative to a step and
   to the poll interval.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = Path(__file__).parent / "workloads" / "mlp.py"


def run_job(report: bool) -> tuple[float, float | None]:
    """(rank 0's mean step time in ms, mean LiveView.poll time in ms or None)."""
    from tenter import session
    from tenter.contract.plan import Plan
    from tenter.launch import api
    from tenter.monitor.live import LiveView
    from tenter.monitor.snapshot import Snapshot
    from tenter.spec import load

    args = ["--samples", "4096", "--epochs", "2"] + ([] if report else ["--no-report"])
    spec, _ = load(
        {
            "entry_point": WORKLOAD.name,
            "source_dir": str(WORKLOAD.parent),
            "instance_count": 1,
            "processes_per_host": 2,
            "args": args,
            "environment": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
            "logs": {"ranks": []},
        },
        WORKLOAD.parent,
    )
    plan = api.dryrun(spec)
    assert isinstance(plan, Plan)
    view = LiveView(plan, live=False, status_every_s=3600) if report else None
    polls: list[float] = []
    if view is not None:
        timed = view.poll

        def poll() -> Snapshot:
            started = time.perf_counter()
            try:
                return timed()
            finally:
                polls.append(time.perf_counter() - started)

        view.poll = poll  # type: ignore[method-assign]
    result = session.follow(api.get_backend("local").submit(plan), session.Watch(), view)
    assert result.ok, result.summary
    text = (Path(plan.job_dir) / "logs/rank-0.stdout").read_text()
    match = re.search(r"step time ([\d.]+) ms", text)
    assert match, text
    return float(match.group(1)), 1000 * statistics.mean(polls) if polls else None


def report_call_us(calls: int = 200_000) -> float:
    from tenter.monitor import reporter

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TENTER_JOB_DIR"] = tmp
        started = time.perf_counter()
        for step in range(calls):
            reporter.report(step=step, samples=64, loss=0.5, total_steps=calls)
        reporter.flush()
        return 1e6 * (time.perf_counter() - started) / calls


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["TENTER_HOME"] = home
        base, with_view, polls = [], [], []
        for _ in range(args.reps):
            base.append(run_job(report=False)[0])
            step, poll = run_job(report=True)
            with_view.append(step)
            polls.append(poll or 0.0)
    a, b = statistics.median(base), statistics.median(with_view)
    call = report_call_us()
    poll = statistics.mean(polls)
    print(f"step time without reporting: {a:.2f} ms (runs: {', '.join(f'{x:.1f}' for x in base)})")
    print(
        f"step time with report + live view: {b:.2f} ms (runs: "
        f"{', '.join(f'{x:.1f}' for x in with_view)})"
    )
    print(f"end-to-end overhead: {100 * (b / a - 1):+.2f} % (target < 2 %)")
    print(f"one tenter.report call: {call:.2f} us = {100 * call / 1000 / a:.3f} % of a step")
    print(f"one LiveView.poll: {poll:.2f} ms per 1 s interval = {poll / 10:.2f} % of one core")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0 if b / a - 1 < 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
