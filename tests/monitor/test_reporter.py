"""tenter.report: rank-local records in <job_dir>/metrics/rank-N.jsonl, a no-op elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenter
from tenter.monitor import reporter


@pytest.fixture(autouse=True)
def fresh_reporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test decides anew whether this process is a tenter rank."""
    monkeypatch.setattr(reporter, "_reporter", None)
    monkeypatch.setattr(reporter, "_checked", False)
    yield


def test_report_writes_nothing_if_not_in_a_tenter_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TENTER_JOB_DIR", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    tenter.report(step=1, samples=8, loss=0.5)
    reporter.flush()
    assert reporter._reporter is None
    assert list(cwd.iterdir()) == []


def test_report_appends_this_ranks_values_if_in_a_tenter_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TENTER_JOB_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    tenter.report(step=1, samples=8, loss=0.25, total_steps=10, lr=0.1)
    tenter.report(step=2, samples=8)
    reporter.flush()
    lines = [json.loads(x) for x in (tmp_path / "metrics/rank-3.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in line.items() if k != "time"} for line in lines] == [
        {"step": 1, "samples": 8, "loss": 0.25, "total_steps": 10, "metrics": {"lr": 0.1}},
        {"step": 2, "samples": 8},
    ]
    assert lines[0]["time"] <= lines[1]["time"]


def test_report_rejects_a_metric_that_is_not_a_number(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TENTER_JOB_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="could not convert string to float"):
        tenter.report(step=1, phase="warmup")  # type: ignore[arg-type]
