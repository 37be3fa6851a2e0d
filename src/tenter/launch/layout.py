"""The job directory on disk::

<job_dir>/plan.json                  the plan that ran (plus hosts that joined)
<job_dir>/summary.json               outcome, duration, failures
<job_dir>/events.jsonl               rendezvous rounds and restarts, as the agents saw them
<job_dir>/checkpoints/               the job's checkpoints (unless the spec names a dir)
<job_dir>/logs/rank-<N>.stdout|.stderr|.error.json   (restarts: rank-<N>.<host>.attempt-<K>.*)
<job_dir>/logs/index.jsonl           which log files exist, for which rank, host and attempt
<job_dir>/hosts/<algo-N>/            one SageMaker /opt/ml tree per host:
    input/config/{resourceconfig,hyperparameters,inputdataconfig}.json
    input/data/<channel> -> your data (a link, not a copy)
    model/  output/data/  output/success|failure
    checkpoints -> the job's checkpoint directory (shared by all hosts)
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
)


def create(plan: Plan) -> None:
    """Create the job directory. Fails if it exists: a job id is never reused."""
    job_dir = Path(plan.job_dir)
    job_dir.mkdir(parents=True, exist_ok=False)
    (job_dir / "logs").mkdir()
    Path(plan.hosts[0].links["checkpoints"]).mkdir(parents=True, exist_ok=True)
    for host in plan.hosts:
        create_host(host)
    write_plan(plan)


def create_host(host: HostPlan) -> None:
    root = Path(host.dir)
    for sub in HOST_SUBDIRS:
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rel, content in host.files.items():
        (root / rel).write_text(content)
    for rel, target in host.links.items():
        os.symlink(target, root / rel)


def write_plan(plan: Plan) -> None:
    """``plan.json``, replaced atomically (a joining host's agent reads it)."""
    tmp = Path(plan.job_dir) / ".plan.json.tmp"
    tmp.write_text(plan.to_json())
    tmp.replace(Path(plan.job_dir) / "plan.json")


def write_outcome(host: HostPlan, failure: str | None) -> None:
    """SageMaker's ``output/success`` or ``output/failure`` (holding the reason)."""
    out = Path(host.dir) / "output"
    if failure is None:
        (out / "success").write_text("")
    else:
        (out / "failure").write_text(failure + "\n")
