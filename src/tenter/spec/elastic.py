"""``elastic`` and ``checkpoint``: how a job survives failures and changes size.

elastic:
  min_hosts: 1            # torchrun's --nnodes MIN:MAX
  max_hosts: 3
  max_restarts: 3         # worker-group restarts before the job fails
  rendezvous: {backend: c10d, join_timeout: 600, last_call_timeout: 30}
  hang_timeout: 300       # seconds without progress on any rank -> hang report
  on_hang: stop           # or restart
checkpoint: {dir: /fsx/ckpt, every: 100, keep: 3, preemption_grace: 30}
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from tenter.spec.base import Seconds, StrictModel
from tenter.spec.errors import Problem, show
from tenter.spec.limits import MAX_SECONDS, port_problem


class Rendezvous(StrictModel):
    backend: Literal["c10d", "etcd"] = "c10d"
    """c10d: a store served by the job's launcher. etcd: an existing etcd (v2 API) server."""
    endpoint: str | None = None
    """``host:port`` of the etcd server (etcd only)."""
    join_timeout: Seconds = 600
    """Seconds to wait for ``min_hosts`` hosts to join before failing."""
    last_call_timeout: Seconds = 30
    """Once ``min_hosts`` joined, seconds to wait for more (up to ``max_hosts``)."""


class Elastic(StrictModel):
    min_hosts: PositiveInt | None = None
    """Fewest hosts the job runs with (default: instance_count, i.e. not elastic)."""
    max_hosts: PositiveInt | None = None
    """Most hosts the job accepts (default: instance_count)."""
    max_restarts: NonNegativeInt = 0
    rendezvous: Rendezvous = Rendezvous()
    hang_timeout: Seconds | None = None
    """Seconds without progress on every rank after which the job is diagnosed as hung."""
    on_hang: Literal["stop", "restart"] = "stop"

    def problems(self, instance_count: int) -> list[Problem]:
        out = []
        lo, hi = self.min_hosts or instance_count, self.max_hosts or instance_count
        if not lo <= instance_count <= hi:
            out.append(
                Problem(
                    "elastic",
                    f"instance_count {instance_count} must lie between min_hosts ({lo}) and "
                    f"max_hosts ({hi})",
                    "change one of them",
                )
            )
        rdzv = self.rendezvous
        if rdzv.backend == "etcd" and not rdzv.endpoint:
            out.append(
                Problem(
                    "elastic.rendezvous.endpoint",
                    "is required with backend etcd",
                    "give the etcd server's host:port",
                )
            )
        elif rdzv.backend == "etcd" and rdzv.endpoint:
            out += _endpoint_problems(rdzv.endpoint)
        if rdzv.backend == "c10d" and rdzv.endpoint:
            out.append(
                Problem(
                    "elastic.rendezvous.endpoint",
                    "is only for etcd; the c10d store is served by the job itself",
                    "remove it",
                )
            )
        if self.on_hang == "restart" and not self.max_restarts:
            out.append(
                Problem(
                    "elastic.on_hang",
                    "restart needs max_restarts >= 1 to restart anything",
                    "set elastic.max_restarts, or on_hang: stop",
                )
            )
        return out


def _endpoint_problems(endpoint: str) -> list[Problem]:
    path = "elastic.rendezvous.endpoint"
    host, _, port = endpoint.rpartition(":")
    if not host or not re.fullmatch(r"[0-9]{1,5}", port):
        return [
            Problem(path, f"{show(endpoint)} is not host:port", "write e.g. etcd.example.com:2379")
        ]
    problem = port_problem(path, int(port))
    return [problem] if problem else []


class Checkpoint(StrictModel):
    dir: str | None = None
    """Where checkpoints go (default: ``<output dir>/checkpoints/<job identity>``, the job's
    rather than the run's, seen by all hosts: running the same job again resumes)."""
    every: PositiveInt | None = None
    """Save every N steps (read by :class:`tenter.checkpoint.Checkpointer` as its default)."""
    keep: PositiveInt = 3
    """How many complete checkpoints to keep."""
    preemption_grace: Annotated[int, Field(ge=0, le=MAX_SECONDS)] = 30
    """Seconds a preempted job (SIGTERM) gets to stop at a step boundary after a final
    checkpoint, before it is stopped as on a cancel; 0: SIGTERM stops the job at once."""


PREEMPTION_MARGIN_S = 20
"""What a scheduler should wait beyond ``preemption_grace`` before its SIGKILL (Slurm's
``--signal``, Kubernetes' ``terminationGracePeriodSeconds``): the hosts' own stop of ranks that
did not make it (SIGTERM, SIGKILL 10 s later) and their report."""
