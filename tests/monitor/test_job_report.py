"""tenter report JOB: plots and a Markdown page; a slow rank is marked."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tenter.jobdir.results import JobResult, write_result
from tenter.monitor.job_report import step_times, throughput_timeline
from tenter.monitor.metrics_files import Sample
from tests.conftest import tenter
from tests.monitor.helpers import T0, fake_job, launched_at

PNG = b"\x89PNG\r\n\x1a\n"


def test_report_writes_plots_and_marks_the_straggler() -> None:
    plan = fake_job(step_s={3: 2.0})
    job_dir = Path(plan.job_dir)
    rows = [
        {"time": T0 + t, "rank": r, "host": "algo-1", "state": "running", "cpu_percent": 50.0}
        | {"rss_bytes": 2**20 * (r + 1)}
        for t in range(5)
        for r in range(4)
    ]
    (job_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = tenter("report", plan.job_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(job_dir / "report" / "report.md")
    page = (job_dir / "report" / "report.md").read_text()
    assert "| 3 **straggler** | algo-2 | 11 | 352 | 2.0 s | 2.0 s | 16 | 50 | 4 MiB |" in page
    assert "| 0 | algo-1 | 11 | 352 | 1.0 s | 1.0 s | 32 | 50 | 1 MiB |" in page
    for name in ("throughput.png", "step_times.png", "utilization.png", "goodput.png"):
        assert f"]({name})" in page
        assert (job_dir / "report" / name).read_bytes().startswith(PNG)


def test_report_shows_goodput_ledger_parts() -> None:
    plan = fake_job()
    job_dir = Path(plan.job_dir)
    launched_at(job_dir, T0 - 10)  # 10 s before the first step
    write_result(job_dir, JobResult(plan.job_id, plan.job_dir, 0, 25.0, 2, 2))
    os.utime(job_dir / "summary.json", (T0 + 15, T0 + 15))  # ended 5 s after step 11
    done = tenter("report", plan.job_id)
    assert done.returncode == 0, done.stderr
    page = (job_dir / "report" / "report.md").read_text()
    assert "goodput 40.0 %: productive 10.0 s of 25.0 s; startup 10.0 s, teardown 5.0 s" in page
    assert "| startup | 10.0 | 40.0 % |" in page
    assert (job_dir / "report" / "goodput.png").read_bytes().startswith(PNG)


def test_report_exits_4_naming_job_if_there_is_no_such_job() -> None:
    done = tenter("report", "no-such-job")
    assert done.returncode == 4  # no such job
    assert "JOB: no job 'no-such-job'" in done.stderr


def test_step_times_divide_by_the_steps_between_reports() -> None:
    assert step_times([(0.0, 10), (3.0, 20), (4.0, 21)]) == [0.3, 1.0]


def test_throughput_timeline_sums_ranks_per_second() -> None:
    reports = {
        0: [Sample(time=T0 + t, samples=10) for t in range(3)],
        1: [Sample(time=T0 + t + 0.5, samples=5) for t in range(3)],
    }
    assert throughput_timeline(reports) == ([0.0, 1.0, 2.0], [15.0, 15.0, 15.0])
