"""The job directory on disk::

<job_dir>/plan.json                  the plan that ran
<job_dir>/summary.json               outcome, duration, failures
<job_dir>/logs/rank-<N>.stdout|.stderr|.error.json
<job_dir>/hosts/<algo-N>/            one SageMaker /opt/ml tree per host:
    input/config/{resourceconfig,hyperparameters,inputdataconfig}.json
    input/data/<channel> -> your data (a link, not a copy)
    model/  output/data/  output/success|failure  checkpoints/
"""

from __future__ import annotations

import os
from pathlib import Path

from tenter.launch.plan import HostPlan, Plan

HOST_SUBDIRS = (
    "input/config",
    "input/data",
    "model",
    "output/data",
    "output/intermediate",
    "checkpoints",
)


def create(plan: Plan) -> None:
    """Create the job directory. Fails if it exists: a job id is never reused."""
    job_dir = Path(plan.job_dir)
    job_dir.mkdir(parents=True, exist_ok=False)
    (job_dir / "logs").mkdir()
    for host in plan.hosts:
        root = Path(host.dir)
        for sub in HOST_SUBDIRS:
            (root / sub).mkdir(parents=True, exist_ok=True)
        for rel, content in host.files.items():
            (root / rel).write_text(content)
        for rel, target in host.links.items():
            os.symlink(target, root / rel)
    (job_dir / "plan.json").write_text(plan.to_json())


def write_outcome(host: HostPlan, failure: str | None) -> None:
    """SageMaker's ``output/success`` or ``output/failure`` (holding the reason)."""
    out = Path(host.dir) / "output"
    if failure is None:
        (out / "success").write_text("")
    else:
        (out / "failure").write_text(failure + "\n")
