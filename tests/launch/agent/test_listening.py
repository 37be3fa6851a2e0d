"""Every server of a running job listens on loopback or on a host's job address, never on
all interfaces: the launcher's rendezvous store, the workers' store that host algo-1's agent
serves (``MASTER_ADDR:MASTER_PORT``), the workers' own sockets."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import psutil
import pytest

from tests.conftest import Background, assert_nothing_left, job_processes
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow


def _listening(procs: list[psutil.Process]) -> dict[str, list[str]]:
    """Process (name and pid) -> the addresses its TCP sockets listen on."""
    found: dict[str, list[str]] = {}
    for proc in procs:
        try:
            sockets = proc.net_connections(kind="tcp")
            name = f"{' '.join(proc.cmdline()[:4])} (pid {proc.pid})"
        except psutil.NoSuchProcess:
            continue
        listening = [f"{s.laddr.ip}:{s.laddr.port}" for s in sockets if s.status == "LISTEN"]
        if listening:
            found[name] = listening
    return found


def test_no_server_of_a_2x2_job_listens_on_all_interfaces(tmp_path: Path) -> None:
    finish = tmp_path / "finish"
    spec = write_spec(
        tmp_path,
        "until_file.py",
        instance_count=2,
        processes_per_host=2,
        environment={"FINISH_FILE": str(finish)},
    )
    job = Background("run", str(spec))
    job.wait_for(*(f"ready world 4 rank {r}" for r in range(4)))
    try:
        launcher = psutil.Process(job.proc.pid)
        listening = _listening([launcher, *job_processes(job.job_dir.name)])
    finally:
        finish.touch()
    out = job.finish()
    assert job.proc.returncode == 0, out
    everywhere = {
        who: addrs
        for who, addrs in listening.items()
        if any(ipaddress.ip_address(a.rpartition(":")[0].strip("[]")).is_unspecified for a in addrs)
    }
    assert everywhere == {}, listening
    # The workers' store, served by algo-1's agent on algo-1's address.
    agents = {who: addrs for who, addrs in listening.items() if "tenter.launch.agent" in who}
    assert any(a.startswith("127.100.0.1:") for addrs in agents.values() for a in addrs), listening
    assert_nothing_left(job.job_dir)
