"""Every server of a running job listens on loopback or on the job's own addresses (its
hosts', its store's), never on all interfaces nor on another of the machine's addresses, on
every backend that runs on this machine: the launcher's rendezvous store, the workers' store
(``MASTER_ADDR:MASTER_PORT``, served by the group's rank 0 agent, or by mpi's launcher), the
workers' own sockets; also after a restart, when rank 0's agent serves the new round's store
(before, rank 0's worker served it itself, on ``*:PORT``)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tenter.jobdir.events import workers_store_ports
from tests.conftest import Background, assert_nothing_left, job_processes
from tests.launch.backends import BACKENDS, ready
from tests.launch.listening import everywhere, foreign, listening, own_addresses, with_tenters_above
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow


OPEN_MPI_DAEMON = "/usr/bin/mpirun "
"""Open MPI 4.1's mpirun listens for its daemons (ORTE's out-of-band TCP) on every interface,
whatever ``oob_tcp_if_include`` says: a known gap of the mpi backend (docs/launch.md), the
one exception here. Its PMIx server, the launcher's store and the ranks bind loopback."""

RAY_DRIVER = "_raylet"
"""Ray 2.60's core worker, loaded in the launcher on the ray backend (tenter run is the Ray
driver that places the host actors), listens on every interface (``::``) whatever
``--node-ip-address`` or ``ray.init(_node_ip_address=...)`` say; Ray's token guards it
(``RAY_AUTH_MODE=token``). A known gap of the ray backend (docs/ray.md, docs/security.md),
excepted here for the processes that load Ray's core only: tenter's own servers in them bind
the job's addresses (127.0.0.1 here), as the other cases hold."""


def runs_ray(pid: int) -> bool:
    try:
        return any(RAY_DRIVER in m.path for m in psutil.Process(pid).memory_maps())
    except psutil.Error:
        return False


CASES = {**BACKENDS, "local-after-a-restart": BACKENDS["local"]}


@pytest.mark.parametrize("name", CASES)
def test_every_server_of_a_running_job_listens_on_the_jobs_own_addresses(
    name: str, tmp_path: Path
) -> None:
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
            procs = with_tenters_above(
                [psutil.Process(job.proc.pid), *job_processes(job.job_dir.name)]
            )
            found = listening(procs)
            ray_pids = {p.pid for p in procs if name == "ray" and runs_ray(p.pid)}
            # The round's store, as its server recorded it (the last round's: after the restart).
            port = workers_store_ports(job.job_dir)[-1]
        finally:
            finish.touch()
        out = job.finish()
    assert job.proc.returncode == 0, out
    found = {who: addrs for who, addrs in found.items() if not who.startswith(OPEN_MPI_DAEMON)}
    for who, addrs in found.items():
        if int(who.rpartition("(pid ")[2].rstrip(")")) in ray_pids:
            found[who] = [a for a in addrs if not everywhere(a)]
    assert [a for addrs in found.values() for a in addrs if everywhere(a)] == [], found
    assert foreign(found, own_addresses(job.job_dir)) == {}, found
    # A process of the job serves the workers' store, on the port recorded for the workers.
    assert any(a.endswith(f":{port}") for addrs in found.values() for a in addrs), found
    assert_nothing_left(job.job_dir)
