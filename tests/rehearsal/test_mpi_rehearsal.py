"""The rehearsal on the mpi backend (real Open MPI mpirun, the backend's own launcher and shim):
the light ranks' first step, a killed rank named as the failure report's root cause, and a
stopped rank named by the hang report, which needs the progress records the shim has mpirun's
ranks write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter.contract.plan import Plan
from tenter.rehearsal import mpi
from tenter.rehearsal.plan import rehearsal_plan
from tests.conftest import assert_nothing_left

SPEC = Path(__file__).parents[2] / "examples" / "digits" / "job.yaml"
HOSTS, PROCS = 4, 2


@pytest.mark.slow
def test_mpi_rehearsal_names_the_killed_and_the_stopped_rank() -> None:
    plans: list[Plan] = []

    def new_plan() -> Plan:
        plans.append(rehearsal_plan(SPEC, HOSTS, PROCS, 0.25, hang_timeout=2, backend="mpi"))
        return plans[-1]

    figures = mpi.rehearse(new_plan(), new_plan, bound_s=60, steady=False)
    assert set(figures.seconds) == {"first_step", "kill_stopped", "hang_named"}
    killed, hung = (Path(p.job_dir) for p in plans)
    assert json.loads((killed / "plan.json").read_text())["launcher"][0] == "mpirun"
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["state"] == "failed"
    assert "root cause: rank 4 on host algo-3 (local rank 0" in summary["summary"]
    assert "SIGKILL" in figures.root_cause
    summary = json.loads((hung / "summary.json").read_text())
    assert summary["state"] == "hang"
    suspects = [line for line in figures.hang_report.splitlines() if line.startswith("suspect: ")]
    assert len(suspects) == 1, figures.hang_report
    assert "suspect: rank 1 on algo-1" in suspects[0]
    assert "its process is stopped" in suspects[0]
    for job_dir in (killed, hung):
        assert_nothing_left(job_dir)
