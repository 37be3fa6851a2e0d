"""The rehearsal's plan: the job's own spec at the asked size, on the local backend (or Slurm's:
its batch script, one real agent per node; or mpi's: mpirun starts every rank, no agents), whose
ranks are light ranks (:mod:`tenter.rehearsal.rank`) instead of the job's script."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.contract.planner import new_job_id
from tenter.launch.backends.local.backend import LocalBackend
from tenter.launch.backends.mpi.backend import MpiBackend
from tenter.launch.backends.slurm.backend import SlurmBackend
from tenter.rehearsal.rank import STEP_ENV
from tenter.spec import load_file

MAX_RESTARTS = 3
"""A rank's kill and a host's loss use one each."""


def rehearsal_plan(
    spec_file: Path,
    hosts: int,
    procs_per_host: int,
    step_s: float,
    hang_timeout: int,
    elastic: bool = False,
    backend: str = "local",
) -> Plan:
    overrides = {
        # Checked under mpi's rules there; Slurm's plan is the local spec's, sized below.
        "backend": "mpi" if backend == "mpi" else "local",
        "instance_count": 2,
        "processes_per_host": 1,
        # Fixed membership by default (its first round is planned: no round of torch's
        # rendezvous, which at 64 handlers did not form in 2 minutes here); ``elastic``: one
        # host fewer may go on (a lost host's phase), through torch's rendezvous.
        "elastic": {
            "min_hosts": 1,
            "max_restarts": 0 if backend == "mpi" else MAX_RESTARTS,  # mpirun restarts none
            "hang_timeout": hang_timeout,
            "max_hosts": 2,
            "on_hang": "stop",
        },
        # mpirun's hosts simulated on this machine, every app context on localhost.
        **({"instance_type": "local"} if backend == "mpi" else {}),
    }
    spec, _ = load_file(spec_file, overrides)
    # Checked at a size this machine's capacity rule allows (it counts a torch worker's
    # 256 MiB per rank), then sized up: a light rank needs a few MiB (docs/scale.md).
    least = hosts - 1 if elastic else hosts
    sized = spec.elastic.model_copy(update={"min_hosts": least, "max_hosts": hosts})
    spec = spec.model_copy(
        update={"instance_count": hosts, "processes_per_host": procs_per_host, "elastic": sized}
    )
    job_id = new_job_id(f"rehearse-{spec.name}")
    light = [sys.executable, "-m", "tenter.rehearsal.rank"]
    if backend == "mpi":
        # mpirun's argv names the ranks' command after each host's shim: swapped there too.
        plan = MpiBackend().dryrun(spec, job_id)
        plan = dataclasses.replace(plan, launcher=_swapped(plan.launcher, plan.command, light))
    elif backend == "slurm":  # the batch script's one srun step runs the plan's command
        plan = SlurmBackend().dryrun(spec.model_copy(update={"backend": "slurm"}), job_id)
    else:
        plan = LocalBackend().dryrun(spec, job_id)
    return dataclasses.replace(plan, command=light, env={**plan.env, STEP_ENV: str(step_s)})


def _swapped(argv: list[str], old: list[str], new: list[str]) -> list[str]:
    """``argv`` with each run of ``old`` in it replaced by ``new``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i : i + len(old)] == old:
            out += new
            i += len(old)
        else:
            out.append(argv[i])
            i += 1
    return out
