"""The batch script of a job (a pure function; ``tenter plan --backend slurm`` prints it and the
job directory keeps it as ``job.sbatch``): resources in ``#SBATCH`` lines, then one ``srun``
step that starts one tenter agent per node (``python -m tenter.launch.backends.slurm.node PLAN``).
The spec's ``slurm`` block adds where the job runs (partition, account, QOS, reservation,
constraint, ``--exclusive``, extra directives) and a pyxis container for the step.

Slurm's SIGTERM (``scancel``, a preemption, ``--signal`` before the time limit) reaches every
process of the step: each agent turns it into a preemption request for its workers
(:mod:`tenter.launch.agent`), and the ranks into a stop at a step boundary after a final
checkpoint."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.spec import JobSpec, lookup
from tenter.spec.elastic import PREEMPTION_MARGIN_S

SCRIPT = "job.sbatch"
NODE_MODULE = "tenter.launch.backends.slurm.node"


def container_mounts(plan: Plan, spec: JobSpec) -> list[str]:
    """pyxis' mounts of the step's container: the job directory (the agents read the plan and
    write logs there), the working directory, the checkpoint folder and the channels, each at
    its own path, then the user's."""
    own = [plan.job_dir, plan.cwd, *([spec.checkpoint.dir] if spec.checkpoint.dir else [])]
    own += spec.channels.values()
    mounts = [f"{path}:{path}" for path in dict.fromkeys(own)]
    return [*mounts, *(m.pyxis() for m in spec.slurm.container_mounts)]


def _placement(spec: JobSpec) -> list[str]:
    """The ``slurm`` block's directives: where the job runs, and who pays for it."""
    opts = spec.slurm
    named = [
        ("partition", opts.partition),
        ("account", opts.account),
        ("qos", opts.qos),
        ("reservation", opts.reservation),
        ("constraint", opts.constraint),
    ]
    out = [f"--{name}={value}" for name, value in named if value is not None]
    return [*out, *(["--exclusive"] if opts.exclusive else [])]


def sbatch_script(plan: Plan, spec: JobSpec, python: str) -> str:
    """``python``: the nodes' (with ``slurm.container_image``, the container's)."""
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    procs, nodes = plan.procs_per_host, len(plan.hosts)
    cpus_per_task = max(1, itype.cpus // procs)
    logs = layout.logs_dir(plan.job_dir)
    directives = [
        f"--job-name={plan.job_id}",
        *_placement(spec),
        f"--nodes={nodes}",
        f"--ntasks-per-node={procs}",
        f"--cpus-per-task={cpus_per_task}",
    ]
    step = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus_per_task * procs}",
    ]
    if itype.gpus > 0:
        directives.append(f"--gpus-per-node={itype.gpus}")
        step.append(f"--gpus-per-node={itype.gpus}")
    if spec.max_run:
        minutes = math.ceil(spec.max_run / 60)
        directives.append(f"--time={minutes}")
        # SIGTERM to every task this long before the time limit: the agents and the ranks
        # take it as a preemption, and the job ends with a final checkpoint, not a SIGKILL.
        warning = spec.checkpoint.preemption_grace + PREEMPTION_MARGIN_S
        if spec.checkpoint.preemption_grace and warning < minutes * 60:
            directives.append(f"--signal=TERM@{warning}")
    directives += [f"--output={logs / 'slurm-%j.out'}", f"--chdir={plan.cwd}"]
    directives += spec.slurm.extra_directives
    # One failed agent ends the step; its peers would otherwise wait for a rendezvous.
    step.append("--kill-on-bad-exit=1")
    if spec.slurm.container_image:
        step += [
            f"--container-image={spec.slurm.container_image}",
            f"--container-mounts={','.join(container_mounts(plan, spec))}",
            f"--container-workdir={plan.cwd}",
        ]
    step += [python, "-m", NODE_MODULE]
    step.append(str(Path(plan.job_dir) / layout.PLAN_FILE))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# tenter job {plan.job_id}: the whole plan is plan.json next to this script.",
            *(f"#SBATCH {shlex.quote(d)}" for d in directives),
            "set -euo pipefail",
            f"# One tenter agent per node starts its {procs} workers (torch elastic); the agents",
            "# rendezvous (c10d) on the first node of $SLURM_JOB_NODELIST.",
            "exec " + shlex.join(step),
            "",
        ]
    )
