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
    spec_file: Path, hosts: int, procs_per_host: int, step_s: float, hang_timeout: int
) -> Plan:
    overrides = {
        "backend": "local",
        "instance_count": 2,
        "processes_per_host": 1,
        # Elastic: a job of fixed membership cannot go on without a lost host; min_hosts one
        # less than all, as at 1 the first round forms with the first host and every host
        # that arrives later restarts everyone (a round each).
        "elastic": {
            "min_hosts": 1,
            "max_restarts": MAX_RESTARTS,
            "hang_timeout": hang_timeout,
            "max_hosts": 2,
            "on_hang": "stop",
        },
    }
    spec, _ = load_file(spec_file, overrides)
    # Checked at a size this machine's capacity rule allows (it counts a torch worker's
    # 256 MiB per rank), then sized up: a light rank needs a few MiB (docs/scale.md).
    elastic = spec.elastic.model_copy(update={"min_hosts": hosts - 1, "max_hosts": hosts})
    spec = spec.model_copy(
        update={"instance_count": hosts, "processes_per_host": procs_per_host, "elastic": elastic}
    )
    plan = LocalBackend().dryrun(spec, new_job_id(f"rehearse-{spec.name}"))
    return dataclasses.replace(
        plan,
        command=[sys.executable, "-m", "tenter.rehearsal.rank"],
        env={**plan.env, STEP_ENV: str(step_s)},
    )
