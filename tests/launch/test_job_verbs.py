"""``tenter status|logs|cancel JOB`` on local jobs, followed by ``tenter run`` or detached
(Slurm's are in test_slurm.py, Kubernetes' in kubernetes/test_backend.py): a running job is
reached through the handle in its job directory, a finished one by its summary."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tenter.errors import TenterError
from tenter.jobdir.handle import JobHandle
from tenter.launch.api import get_backend
from tests.conftest import SCRIPTS, Background, assert_nothing_left, tenter

pytestmark = pytest.mark.slow
SCRIPT = str(SCRIPTS / "block.py")


def wait_for_ready(job_dir: Path, ranks: int) -> None:
    """Every rank printed "ready" (the job is fully up); by the files the ranks write."""
    outs = [job_dir / "logs" / f"rank-{r}.stdout" for r in range(ranks)]
    deadline = time.monotonic() + 120
    while not all(p.exists() and "ready" in p.read_text() for p in outs):
        assert time.monotonic() < deadline, "the ranks never got ready"
        time.sleep(0.1)


def _status_logs_cancel(job_dir: Path) -> None:
    status = tenter("status", job_dir.name)
    assert f"job {job_dir.name}: RUNNING (" in status.stdout
    logs = tenter("logs", job_dir.name, "--ranks", "1")
    assert logs.stdout.splitlines()[-1] == "[algo-1,1]<stdout>: ready 1"
    assert "[algo-1,0]" not in logs.stdout
    cancelled = tenter("cancel", job_dir.name)
    assert cancelled.returncode == 0 and "stopped its launcher" in cancelled.stdout


def test_status_logs_and_cancel_reach_a_running_local_job() -> None:
    job = Background("run", "--hosts", "1", "--procs-per-host", "2", SCRIPT)
    job.wait_for("ready", count=2)
    _status_logs_cancel(job.job_dir)
    out = job.finish(timeout=60)
    assert job.proc.returncode == 130, out
    assert "was interrupted" in out
    after = tenter("status", job.job_dir.name)
    assert f"job {job.job_dir.name}: FAILED (exit 130)" in after.stdout
    assert "is not running" in tenter("cancel", job.job_dir.name).stdout
    assert_nothing_left(job.job_dir)


def test_a_detached_local_job_is_reached_by_status_logs_and_cancel(tenter_home: Path) -> None:
    started = tenter("run", "--detach", "--hosts", "1", "--procs-per-host", "2", SCRIPT)
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    job_dir = tenter_home / "jobs" / job_id
    assert f"`tenter cancel {job_id}`" in started.stderr
    wait_for_ready(job_dir, 2)
    _status_logs_cancel(job_dir)
    after = tenter("status", job_id)
    assert f"job {job_id}: FAILED (exit 130)" in after.stdout
    assert "was interrupted" in after.stdout
    assert_nothing_left(job_dir)


def test_verbs_name_an_unknown_job() -> None:
    for verb in ("status", "logs", "cancel"):
        done = tenter(verb, "no-such-job")
        assert done.returncode == 4
        assert "JOB: no job 'no-such-job'" in done.stderr


@pytest.mark.parametrize(
    ("backend", "sends"), [("slurm", "scancel"), ("kubernetes", "deleting the pods")]
)
def test_preempt_names_the_scheduler_if_the_scheduler_preempts(backend: str, sends: str) -> None:
    # Every backend has the verb; these say who preempts their jobs, and touch nothing.
    handle = JobHandle(backend, "j-1", "/nonexistent/j-1", "default/PyTorchJob/j-1")
    with pytest.raises(TenterError) as raised:
        get_backend(backend).preempt(handle)
    assert raised.value.where == "--preempt"
    assert sends in str(raised.value)
    assert "`tenter cancel j-1` sends it" in str(raised.value)
