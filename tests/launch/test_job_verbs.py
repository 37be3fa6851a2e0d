"""``tenter status|logs|cancel JOB`` on a local job (Slurm's are in test_slurm.py): a running
job is found by its processes, a finished one by its summary."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SCRIPTS, assert_nothing_left, tenter

pytestmark = pytest.mark.slow
DEADLINE_S = 120.0
SCRIPT = str(SCRIPTS / "block.py")


def _job_dir(tenter_home: Path) -> Path:
    deadline = time.monotonic() + DEADLINE_S
    while not (tenter_home / "jobs").is_dir() or not any((tenter_home / "jobs").iterdir()):
        assert time.monotonic() < deadline, "the job directory never appeared"
        time.sleep(0.1)
    (job_dir,) = (tenter_home / "jobs").iterdir()
    return job_dir


def test_status_logs_and_cancel_reach_a_running_local_job(tenter_home: Path) -> None:
    # The mpi backend shares this path (tenter.launch.processes): its launcher stops mpirun.
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tenter", "run", "--hosts", "1", "--procs-per-host", "2", SCRIPT],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    job_dir = _job_dir(tenter_home)
    outs = [job_dir / "logs" / f"rank-{r}.stdout" for r in (0, 1)]
    deadline = time.monotonic() + DEADLINE_S
    while not all(p.exists() and "ready" in p.read_text() for p in outs):
        assert time.monotonic() < deadline and launcher.poll() is None, "the ranks never got ready"
        time.sleep(0.1)
    status = tenter("status", job_dir.name)
    assert f"job {job_dir.name}: RUNNING (" in status.stdout
    logs = tenter("logs", job_dir.name, "--ranks", "1")
    assert logs.stdout.splitlines()[-1] == "[algo-1,1]<stdout>: ready 1"
    assert "[algo-1,0]" not in logs.stdout
    cancelled = tenter("cancel", job_dir.name)
    assert cancelled.returncode == 0 and "stopped its launcher" in cancelled.stdout
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 130, err
    assert "was interrupted" in err
    after = tenter("status", job_dir.name)
    assert f"job {job_dir.name}: FAILED (exit 130)" in after.stdout
    assert "is not running" in tenter("cancel", job_dir.name).stdout
    assert_nothing_left(job_dir)


def test_verbs_name_an_unknown_job() -> None:
    for verb in ("status", "logs", "cancel"):
        done = tenter(verb, "no-such-job")
        assert done.returncode == 2
        assert "JOB: no job 'no-such-job'" in done.stderr
