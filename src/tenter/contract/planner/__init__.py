"""Building the plan (:mod:`tenter.contract.plan`): :func:`make_plan`, a pure function of the
validated spec, the job id, tenter's home and the Python to use, and the job ids and
simulated hosts' addresses it names. Kept apart from the plan's types, which every backend and
agent reads, while only ``tenter plan``/``run`` (and a Slurm node's entry, resolving its
part) build one.

:func:`make_plan` composes named steps, each a pure function: the hosts' addresses
(:mod:`.addresses`), their placements and the shared and own parts of their environments and
files (:mod:`.hosts`), their ranks (:mod:`.ranks`), the store's policy (:mod:`.addresses`)
and the spec's own fields (:mod:`.make`)."""

from tenter.contract.planner.addresses import simulated_host_addr
from tenter.contract.planner.identity import (
    default_checkpoint_dir,
    job_identity,
    jobs_root,
    new_job_id,
)
from tenter.contract.planner.make import make_plan

__all__ = [
    "default_checkpoint_dir",
    "job_identity",
    "jobs_root",
    "make_plan",
    "new_job_id",
    "simulated_host_addr",
]
