"""Running checks: on one host (:func:`run_checks`) or on every host of a planned job."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.doctor.checks import CHECKS
from tenter.doctor.result import Check, CheckResult, Context, HostReport, JobContext, Outcome
from tenter.doctor.system import System
from tenter.spec import JobSpec, lookup


def run_checks(
    system: System,
    job: JobContext | None = None,
    checks: tuple[Check, ...] = CHECKS,
    host: str = "localhost",
) -> HostReport:
    outcomes = []
    for check in checks:
        try:
            result = check.run(Context(system, job))
        except Exception as e:
            # A bug in one check must not hide the others' findings, nor block a run
            # (a warning never does): show it loudly instead.
            where = traceback.extract_tb(e.__traceback__)[-1]
            result = CheckResult.warn(
                f"the check crashed: {type(e).__name__}: {e} ({where.filename}:{where.lineno})",
                "report this tenter bug; `tenter doctor --json` shows the other checks",
            )
        outcomes.append(Outcome(check.name, check.description, result))
    return HostReport(host, outcomes)


def job_context(spec: JobSpec, plan: Plan) -> JobContext:
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    dist = spec.distribution
    return JobContext(
        instance_type=itype,
        procs_per_host=plan.procs_per_host,
        # Slurm names the nodes when it allocates them: nothing to resolve before.
        hosts=() if plan.backend == "slurm" else tuple(h.addr for h in plan.hosts),
        # The local backend's hosts are all this machine.
        simulated=plan.backend == "local",
        # tenter.contract.planner simulates the hosts of these on this machine.
        output_dir=str(Path(plan.job_dir).parent),
        rehearsal=not itype.is_local and (plan.backend == "local" or plan.isolation != "none"),
        # SageMaker starts smdistributed jobs with mpirun too.
        uses_mpi=plan.backend == "mpi"
        or dist.mpi.enabled
        or dist.data_parallel
        or dist.model_parallel is not None,
    )


ISOLATED_HOSTS_OWN = ("socket-ifname",)
"""Checks of what an isolated host has of its own, not this machine (its interface)."""


def check_job(spec: JobSpec, plan: Plan, checks: tuple[Check, ...] = CHECKS) -> list[HostReport]:
    """Every host's report for a planned job.

    On the local backend every host is this machine, seen with that host's environment (the
    plan's variables over this process's). A cluster backend sends back the same
    :class:`HostReport` per host (``tenter doctor --json`` run there), and the host x check
    matrix is built from those reports alike.
    """
    job = job_context(spec, plan)
    if plan.isolation != "none":
        # Isolated hosts' interfaces do not exist before the launch (tenter makes them): this
        # machine's own say nothing of them.
        checks = tuple(c for c in checks if c.name not in ISOLATED_HOSTS_OWN)
    return [
        run_checks(System(env={**os.environ, **plan.host_env(host)}), job, checks, host=host.name)
        for host in plan.hosts
    ]
