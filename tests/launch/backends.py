"""The backends a job runs on on this machine, for tests that check one property on each:
the local backend (simulated hosts, and isolated hosts in network namespaces), mpirun,
Slurm (the real one-node cluster of slurm_cluster.py, started for the test that needs it) and
Ray (the real local cluster of one Ray node per host that tenter starts for the job)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.launch.slurm_cluster import slurm_cluster


@dataclass(frozen=True)
class Backend:
    hosts: int
    procs: int
    flags: list[str] = field(default_factory=list)
    """``tenter run`` flags that select it."""
    slurm: bool = False

    @property
    def world(self) -> int:
        return self.hosts * self.procs


BACKENDS = {
    "local": Backend(2, 2),
    "local-isolated": Backend(2, 1, ["--isolation", "network"]),
    "mpi": Backend(2, 2, ["--backend", "mpi"]),
    # The test cluster has one node.
    "slurm": Backend(1, 2, ["--backend", "slurm"], slurm=True),
    # The local Ray cluster tenter starts for the job: one Ray node per host.
    "ray": Backend(2, 2, ["--backend", "ray"]),
}


@contextlib.contextmanager
def ready(backend: Backend) -> Iterator[None]:
    """What ``backend`` needs while a job runs on it: the Slurm cluster, or nothing."""
    if not backend.slurm:
        yield
        return
    with slurm_cluster() as env, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", env["SLURM_CONF"])  # for tenter and Slurm's commands
        yield
