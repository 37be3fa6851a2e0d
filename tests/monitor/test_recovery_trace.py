"""``tenter report JOB --trace``: the timeline of a real job's recovery, as a Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tenter.monitor.recovery_trace import Phase, chain, job_recoveries
from tests.conftest import REPO, job_dirs, tenter
from tests.monitor.trace_format import trace_problems

FAULTY = REPO / "benchmarks" / "workloads" / "faulty.py"
TRAIN = REPO / "examples" / "elastic" / "train.py"


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """examples/elastic/train.py on 2 hosts x 2 processes, 16 steps, checkpoints every 4;
    rank 1 raises after step 6 (benchmarks/workloads/faulty.py): one group restart from
    step 4. Its job directory, and the workload's own record of the fault and the steps."""
    root = tmp_path_factory.mktemp("restarted")
    times = root / "times"
    times.mkdir()
    spec = root / "job.yaml"
    environment = {"TIMES_DIR": str(times), "FAULT": "raise_error", "FAULT_RANK": "1"}
    fields = {
        "entry_point": str(FAULTY),
        "args": [str(TRAIN), "--epochs", "1"],
        "instance_count": 2,
        "processes_per_host": 2,
        "checkpoint": {"every": 4},
        "environment": {**environment, "FAULT_STEP": "6"},
        "elastic": {"max_restarts": 1},
    }
    spec.write_text(yaml.safe_dump(fields))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TENTER_HOME", str(root / "home"))
        done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    (job_dir,) = job_dirs(root / "home" / "jobs")
    return job_dir, times


def recovered_at(times: Path, rank: int) -> float:
    """When ``rank`` finished its first step after the restart (step 5, from the checkpoint
    of step 4), by the workload's own record."""
    lines = (times / f"steps-{rank}").read_text().split("\n")
    return [float(t) for t, step in (line.split() for line in lines if line) if step == "5"][1]


def test_trace_of_restarted_job_is_valid_with_a_track_per_rank(
    restarted: tuple[Path, Path],
) -> None:
    job_dir, _ = restarted
    done = tenter("report", str(job_dir), "--trace")
    assert done.returncode == 0, done.stderr
    path = job_dir / "report" / "recovery.trace.json"
    assert done.stdout.splitlines()[-1] == str(path)
    assert done.stdout.startswith("recovery 1: ")
    trace = json.loads(path.read_text())
    assert trace_problems(trace) == []
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"rank 0", "rank 1", "rank 2", "rank 3", "agent"} <= names
    for rank in range(4):
        track = {e["name"] for e in events if e["ph"] == "X" and e["tid"] == rank + 1}
        # Warm workers are forked before the round: their restart phase is empty, left out.
        assert {"recovery 1", "detection", "checkpoint load", "first step"} <= track


def test_phases_add_up_to_the_measured_recovery_time(restarted: tuple[Path, Path]) -> None:
    job_dir, times = restarted
    fault = float((times / "fault").read_text())
    (recovery,) = job_recoveries(job_dir)
    assert sorted(r.rank for r in recovery.ranks) == [0, 1, 2, 3]
    for ranked in recovery.ranks:
        measured = recovered_at(times, ranked.rank) - fault
        summed = sum(p.seconds for p in ranked.phases)
        assert abs(summed - measured) <= 0.05 * measured, (ranked.rank, summed, measured)


def test_a_moment_not_recorded_merges_its_phase_into_the_one_before() -> None:
    phases = chain([("a", 1.0), ("b", None), ("c", 0.5), ("d", 3.0)], end=4.0)
    assert phases == [Phase("a", 1.0, 1.0), Phase("c", 1.0, 3.0), Phase("d", 3.0, 4.0)]


def test_trace_check_finds_slices_that_do_not_nest() -> None:
    event = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10}
    crossing = {**event, "name": "b", "ts": 5}
    assert trace_problems({"traceEvents": [event, {**event, "ts": 10}]}) == []
    assert trace_problems({"traceEvents": [event, crossing]}) == [
        "track (1, 1): b overlaps a without nesting"
    ]
    assert trace_problems({"traceEvents": [{**event, "dur": -1}]}) != []
