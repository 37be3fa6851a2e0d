"""The ray backend on a real Ray cluster: the local one tenter starts for a job, one Ray node
(its own raylet) per host. The 2 x 2 job with each rank's planned environment is
tests/launch/test_plan_is_what_runs.py's ``ray`` case; here, what else the backend must do."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from tests.conftest import assert_nothing_left, tenter
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow


def ray_processes_in(temp_dir: str) -> list[str]:
    """The command lines of the processes of the Ray cluster whose directory is ``temp_dir``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if temp_dir in cmdline:
            found.append(cmdline)
    return found


def test_a_killed_worker_restarts_on_ray_and_the_cluster_is_gone_after(tmp_path: Path) -> None:
    # The same spec file as tests/launch/test_elastic.py runs on the local backend.
    spec = write_spec(
        tmp_path, "flaky.py", instance_count=2, processes_per_host=2, elastic={"max_restarts": 1}
    )
    done = tenter("run", "--backend", "ray", str(spec))
    assert done.returncode == 0, done.stderr
    assert "tenter: algo-1: a worker failed; restarting the workers (0 restarts left)" in (
        done.stderr
    )
    assert done.stderr.count("tenter: rendezvous: 2 hosts (algo-1, algo-2), world size 4") == 2
    finished = {p.name.split("-")[1] for p in (done.job_dir / "seen").iterdir()}
    assert finished == {"0", "1", "2", "3"}
    # Two Ray nodes, each its own raylet, in the job's own Ray directory.
    logs = done.job_dir / "logs"
    assert sorted(p.name for p in logs.glob("ray-node-*.log")) == [
        "ray-node-0.log",
        "ray-node-1.log",
    ]
    found = re.search(r"/tmp/tenter-ray-\w+", (logs / "ray-node-1.log").read_text())
    assert found is not None
    assert not Path(found.group()).exists()
    assert ray_processes_in(found.group()) == []
    assert_nothing_left(done.job_dir)


def test_a_ray_block_on_another_backend_is_refused(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "contract.py", ray={"address": "127.0.0.1:6379"})
    done = tenter("run", str(spec))
    assert done.returncode == 2
    assert "ray.address" in done.stderr and "set backend: ray" in done.stderr
    assert "Traceback" not in done.stderr
