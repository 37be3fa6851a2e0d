"""tenter scale: the digits example at 1 and 2 hosts; the figures' arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter.monitor.metrics_files import Sample
from tenter.monitor.scaling import compare, measure
from tests.conftest import REPO, tenter

PNG = b"\x89PNG\r\n\x1a\n"


def reports(rate: float, steps: int = 21, batch: int = 10) -> list[Sample]:
    return [Sample(time=s * batch / rate, step=s, samples=batch) for s in range(1, steps + 1)]


def test_measure_sums_steady_state_rates_after_the_warm_up() -> None:
    # 21 reports: the first 2 (a tenth) are warm-up; 19 steps of 10 samples in 1.9 s each.
    m = measure({0: reports(100.0), 1: reports(50.0)})
    assert m is not None
    assert m.samples_per_s == pytest.approx(150.0)
    assert m.step_time_s == pytest.approx(0.15)  # the median of 0.1 and 0.2
    assert (m.samples, m.steps) == (420, 21)


def test_compare_gives_ideal_time_speedup_and_efficiency_from_the_smallest_run() -> None:
    one, two = measure({0: reports(100.0)}), measure({0: reports(90.0), 1: reports(90.0)})
    assert one is not None and two is not None
    runs = compare([(1, 1, "a", "/a"), (2, 1, "b", "/b")], [one, two], epochs=1)
    assert runs[0].time_s == pytest.approx(210 / 100)
    assert runs[1].ideal_time_s == pytest.approx(runs[0].time_s / 2)
    assert (runs[1].speedup, runs[1].efficiency) == (pytest.approx(1.8), pytest.approx(0.9))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--hosts", "1,x"], "--hosts: '1,x' is not a comma-separated list of positive counts"),
        (["--hosts", "1,2", "--procs-per-host", "1,2"], "--procs-per-host: both --hosts (1,2)"),
        ([], "--hosts: gives no sizes to compare. Fix: give them, e.g. --hosts 1,2,3"),
        (["--hosts", "1,2", "--epochs", "0"], "--epochs: 0 is not a positive number of epochs"),
    ],
)
def test_scale_exits_2_naming_the_flag_if_sizes_are_wrong(flags: list[str], message: str) -> None:
    done = tenter("scale", str(REPO / "examples/digits/job.yaml"), *flags)
    assert done.returncode == 2
    assert message in " ".join(done.stderr.split())


@pytest.mark.slow
def test_scale_runs_digits_at_1_and_2_hosts_and_writes_table_and_plot(tmp_path: Path) -> None:
    done = tenter(
        "scale",
        str(REPO / "examples/digits/job.yaml"),
        "--hosts",
        "1,2",
        "--procs-per-host",
        "1",
        "--epochs",
        "1",
        "--out",
        str(tmp_path / "study"),
    )
    assert done.returncode == 0, done.stderr
    study = tmp_path / "study"
    assert (study / "scale.png").read_bytes().startswith(PNG)
    runs = json.loads((study / "scale.json").read_text())["runs"]
    assert [(r["hosts"], r["procs_per_host"]) for r in runs] == [(1, 1), (2, 1)]
    base, two = runs
    assert (base["speedup"], base["efficiency"]) == (1.0, 1.0)
    assert two["speedup"] == pytest.approx(two["samples_per_s"] / base["samples_per_s"])
    assert two["efficiency"] == pytest.approx(two["speedup"] / 2)
    assert two["ideal_time_s"] == pytest.approx(base["time_s"] / 2)
    for r in runs:
        # 1437 training digits, split over the ranks (DistributedSampler pads to equal shards).
        assert r["samples"] == 1437 if r["hosts"] == 1 else r["samples"] == 1438
        assert r["time_s"] == pytest.approx(r["samples"] / r["samples_per_s"])
        assert r["steps"] == 23  # a global batch of 64
        assert Path(r["job_dir"], "summary.json").exists()
    table = (study / "scale.md").read_text()
    assert "| 2 | 1 | 2 |" in table and "![scaling](scale.png)" in table
    assert "| hosts | procs/host | ranks |" in done.stdout
