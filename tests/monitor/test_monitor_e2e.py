"""A real 2 x 2 job: what the ranks report reaches their files and metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter import session
from tenter.launch import api
from tenter.monitor.live import LiveView
from tenter.monitor.metrics_files import read_metrics, read_rank_samples
from tenter.spec import load
from tests.conftest import assert_nothing_left
from tests.monitor.helpers import SCRIPTS

pytestmark = pytest.mark.slow
STEPS = 20


def test_reports_of_a_2x2_job_reach_the_rank_files_and_the_metrics_file() -> None:
    spec, _ = load(
        {
            "entry_point": "reporting.py",
            "source_dir": str(SCRIPTS),
            "instance_count": 2,
            "processes_per_host": 2,
        },
        SCRIPTS,
    )
    plan = api.dryrun(spec)
    # As `tenter run` does once it has wired the view in (see docs/monitor.md).
    view = LiveView(plan, live=False, interval_s=0.2)
    result = session.follow(api.get_backend("local").submit(plan), session.Watch(), view)
    assert result.ok, result.summary
    reported = read_rank_samples(plan.job_dir)
    assert sorted(reported) == [0, 1, 2, 3]
    for rank, samples in reported.items():
        assert [s.step for s in samples] == list(range(1, STEPS + 1))
        assert [s.loss for s in samples] == [100 * rank + s for s in range(1, STEPS + 1)]
        assert {(s.samples, s.total_steps) for s in samples} == {(rank + 1, STEPS)}
        assert {s.metrics["lr"] for s in samples} == {0.5}
    last = {row["rank"]: row for row in read_metrics(plan.job_dir)}
    for rank, row in last.items():
        assert row["host"] == ("algo-1" if rank < 2 else "algo-2")
        assert (row["step"], row["samples"], row["loss"]) == (
            STEPS,
            STEPS * (rank + 1),
            100 * rank + STEPS,
        )
        assert row["total_steps"] == STEPS and row["metrics"] == {"lr": 0.5}
        assert row["state"] in ("done", "exited")
    assert sorted(last) == [0, 1, 2, 3]
    assert json.loads((Path(plan.job_dir) / "summary.json").read_text())["exit_code"] == 0
    assert_nothing_left(Path(plan.job_dir))
