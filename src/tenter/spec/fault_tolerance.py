"""``fault_tolerance``: per-step fault tolerance with torchft's replica groups.

fault_tolerance:
  replica_groups: 2     # the hosts split into this many equal groups, each its own elastic job
  min_replicas: 1       # the job goes on while this many groups can train

Each replica group trains a full copy of the model; torchft's ``Manager`` averages the
gradients across the groups that are up at each step. A group that fails restarts on its
own (``elastic.max_restarts``) and heals from a peer at the current step, while the others
go on without rolling back (docs/fault_tolerance.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from pydantic import PositiveInt

from tenter.spec.base import StrictModel
from tenter.spec.errors import Problem

TORCHFT_MINIMUM = (0, 2)
"""The first torchft release whose Manager, DDP and Optimizer wrappers tenter's example and
docs describe (and whose lighthouse takes ``--bind``)."""
INSTALL_FIX = "pip install 'tenter[ft]' (torchft >= 0.2) where tenter runs"


def torchft_problem() -> str | None:
    """Why torchft cannot serve a job from this Python, or None. Looked up without importing
    it (it imports torch; the spec stays light)."""
    if importlib.util.find_spec("torchft") is None:
        return "needs the torchft package, which is not installed"
    version = importlib.metadata.version("torchft")
    release = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if release < TORCHFT_MINIMUM:
        return f"needs torchft >= 0.2, and {version} is installed"
    return None


class FaultTolerance(StrictModel):
    replica_groups: PositiveInt = 2
    """Groups the hosts split into: ``instance_count / replica_groups`` hosts each."""
    min_replicas: PositiveInt = 1
    """Fewest groups that train a step (torchft's lighthouse ``--min_replicas``); the job fails
    when fewer can go on."""

    def problems(
        self, instance_count: int, backend: str, model_parallel: bool, elastic_hosts: bool
    ) -> list[Problem]:
        path = "fault_tolerance"
        out = []
        if self.replica_groups < self.min_replicas:
            out.append(
                Problem(
                    f"{path}.min_replicas",
                    f"{self.min_replicas} is more than the {self.replica_groups} replica_groups: "
                    "no step could ever train",
                    "lower min_replicas or raise replica_groups",
                )
            )
        if instance_count % self.replica_groups:
            out.append(
                Problem(
                    f"{path}.replica_groups",
                    f"{self.replica_groups} groups cannot split instance_count {instance_count} "
                    "hosts equally",
                    "use an instance_count that is a multiple of replica_groups",
                )
            )
        if model_parallel:
            out.append(
                Problem(
                    path,
                    "cannot be combined with distribution.smdistributed.modelparallel: a replica "
                    "group heals by copying a whole model from a peer",
                    "remove one of them",
                )
            )
        if elastic_hosts:
            out.append(
                Problem(
                    path,
                    "replaces elastic.min_hosts/max_hosts (a job goes on with fewer replica "
                    "groups, not fewer hosts)",
                    "remove them",
                )
            )
        if backend == "mpi":
            out.append(
                Problem(
                    path,
                    "needs a backend that restarts each replica group on its own (local, slurm, "
                    "kubernetes); mpirun runs one world",
                    "change backend",
                )
            )
        missing = torchft_problem()
        if missing:
            out.append(Problem(path, missing, INSTALL_FIX))
        return out
