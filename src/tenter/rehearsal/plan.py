"""The rehearsal's plan: the job's own spec at the asked size, on the local backend, whose ranks
are light ranks (:mod:`tenter.rehearsal.rank`) instead of the job's script."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.contract.planner import new_job_id
from tenter.launch.local.backend import LocalBackend
from tenter.rehearsal.rank import STEP_ENV
from tenter.spec.load import load_file

MAX_RESTARTS = 3
"""A rank's kill and a host's loss use one each."""


def rehearsal_plan(
    spec_file: Path, hosts: int, procs_per_host: int, step_s: float, hang_timeout: float
) -> Plan:
    overrides = {
        "backend": "local",
        "instance_count": hosts,
        "processes_per_host": procs_per_host,
        # Elastic (min_hosts 1): a job of fixed membership cannot go on without a lost host.
        "elastic": {
            "min_hosts": 1,
            "max_hosts": hosts,
            "max_restarts": MAX_RESTARTS,
            "hang_timeout": hang_timeout,
            "on_hang": "stop",
        },
    }
    spec, _ = load_file(spec_file, overrides)
    plan = LocalBackend().dryrun(spec, new_job_id(f"rehearse-{spec.name}"))
    return dataclasses.replace(
        plan,
        command=[sys.executable, "-m", "tenter.rehearsal.rank"],
        env={**plan.env, STEP_ENV: str(step_s)},
    )
