"""Every server of a running job listens on loopback or on a host's job address, never on
all interfaces, on every backend that runs on this machine: the launcher's rendezvous store,
the workers' store (``MASTER_ADDR:MASTER_PORT``, served by the group's rank 0 agent, or by
mpi's launcher), the workers' own sockets; also after a restart, when rank 0's agent serves
the new round's store (before, rank 0's worker served it itself, on ``*:PORT``)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import subprocess
from pathlib import Path

import psutil
import pytest

from tenter.jobdir.events import workers_store_ports
from tests.conftest import Background, assert_nothing_left, job_processes
from tests.launch.backends import BACKENDS, ready
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow


OPEN_MPI_DAEMON = "/usr/bin/mpirun "
"""Open MPI 4.1's mpirun listens for its daemons (ORTE's out-of-band TCP) on every interface,
whatever ``oob_tcp_if_include`` says: a known gap of the mpi backend (docs/launch.md), the
one exception here. Its PMIx server, the launcher's store and the ranks bind loopback."""

CASES = {**BACKENDS, "local-after-a-restart": BACKENDS["local"]}


def _listening(procs: list[psutil.Process]) -> dict[str, list[str]]:
    """Process (name and pid) -> the addresses its TCP sockets listen on.

    Read with ``ss`` in each network namespace the processes are in: psutil reads the
    sockets of the caller's namespace only, and isolated hosts have their own."""
    names = {}
    namespaces: dict[int, int] = {}  # the namespace's inode -> a process in it
    for proc in procs:
        try:
            names[proc.pid] = " ".join(proc.cmdline()[:4])
            namespaces[os.stat(f"/proc/{proc.pid}/ns/net").st_ino] = proc.pid
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
    found: dict[str, list[str]] = {}
    for pid in namespaces.values():
        ss = ["nsenter", "--target", str(pid), "--net", "ss", "--no-header", "-ltnp"]
        table = subprocess.run(ss, capture_output=True, text=True, timeout=30, check=True)
        for line in table.stdout.splitlines():
            address = line.split()[3]
            for owner in {int(p) for p in re.findall(r"pid=(\d+)", line)} & names.keys():
                found.setdefault(f"{names[owner]} (pid {owner})", []).append(address)
    return found


def _with_tenters_above(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` and tenter's processes above them: Slurm starts a node's agent (and the
    first node's rendezvous store) with Slurm's environment, which names no job."""
    found = {p.pid: p for p in procs}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            for parent in proc.parents():
                if any(arg.startswith("tenter.") for arg in parent.cmdline()):
                    found[parent.pid] = parent
    return list(found.values())


def _everywhere(address: str) -> bool:
    """``ss``'s ``*:PORT``, ``0.0.0.0:PORT``, ``[::]:PORT``: all interfaces."""
    host = address.rpartition(":")[0].strip("[]")
    return host == "*" or ipaddress.ip_address(host.partition("%")[0]).is_unspecified


@pytest.mark.parametrize("name", CASES)
def test_no_server_of_a_running_job_listens_on_all_interfaces(name: str, tmp_path: Path) -> None:
    backend, restart = CASES[name], name.endswith("restart")
    finish = tmp_path / "finish"
    environment = {"FINISH_FILE": str(finish)}
    if restart:
        environment["FAIL_ONCE_RANK"] = "1"
    spec = write_spec(
        tmp_path,
        "until_file.py",
        instance_count=backend.hosts,
        processes_per_host=backend.procs,
        environment=environment,
        **({"elastic": {"max_restarts": 1}} if restart else {}),
    )
    with ready(backend):
        job = Background("run", *backend.flags, str(spec))
        # Every rank ready (after a restart: ready again, in the restarted round).
        ranks = (f"ready world {backend.world} rank {r} " for r in range(backend.world))
        job.wait_for(*ranks, count=2 if restart else 1)
        try:
            procs = _with_tenters_above(
                [psutil.Process(job.proc.pid), *job_processes(job.job_dir.name)]
            )
            listening = _listening(procs)
            # The round's store, as its server recorded it (the last round's: after the restart).
            port = workers_store_ports(job.job_dir)[-1]
        finally:
            finish.touch()
        out = job.finish()
    assert job.proc.returncode == 0, out
    everywhere = {
        who: addrs
        for who, addrs in listening.items()
        if any(_everywhere(a) for a in addrs) and not who.startswith(OPEN_MPI_DAEMON)
    }
    assert everywhere == {}, listening
    # A process of the job serves the workers' store, on the port recorded for the workers.
    assert any(a.endswith(f":{port}") for addrs in listening.values() for a in addrs), listening
    assert_nothing_left(job.job_dir)
