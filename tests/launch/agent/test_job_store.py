"""Who serves a local job's store: the first host's agent where the job ends with any host
(fixed membership; its launcher then imports no torch), the launcher where the job goes on
without a host (elastic), since the launcher outlives every host."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from tenter.jobdir import published
from tests.conftest import Background, assert_nothing_left, job_processes
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow


def _agent(job_id: str, host: str) -> psutil.Process:
    (agent,) = [
        p
        for p in job_processes(job_id)
        if "tenter.launch.agent" in " ".join(p.cmdline()) and p.environ()["TENTER_HOST"] == host
    ]
    return agent


def _listening(proc: psutil.Process) -> set[str]:
    return {
        f"{c.laddr.ip}:{c.laddr.port}"
        for c in proc.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _torch_loaded(proc: psutil.Process) -> bool:
    return "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text()


@pytest.mark.parametrize("elastic", [False, True])
def test_the_store_is_the_first_hosts_in_a_fixed_job_and_the_launchers_in_an_elastic_one(
    elastic: bool, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path,
        "block.py",
        instance_count=2,
        processes_per_host=1,
        **({"elastic": {"min_hosts": 1, "max_restarts": 1}} if elastic else {}),
    )
    job = Background("run", str(spec))
    job.wait_for("ready", count=2)
    try:
        launcher = psutil.Process(job.proc.pid)
        endpoint = published.published(job.job_dir, published.STORE)
        first = _listening(_agent(job.job_dir.name, "algo-1"))
        launcher_listens, launcher_torch = _listening(launcher), _torch_loaded(launcher)
    finally:
        job.proc.send_signal(signal.SIGINT)
        job.finish()
    if elastic:
        assert endpoint is None
        assert any(a.startswith("127.0.0.1:") for a in launcher_listens), launcher_listens
        assert launcher_torch
    else:
        assert endpoint is not None and endpoint.startswith("127.100.0.1:"), endpoint
        assert endpoint in first, first
        assert launcher_listens == set()
        assert not launcher_torch  # the launcher of a fixed job imports no torch
    assert_nothing_left(job.job_dir)
