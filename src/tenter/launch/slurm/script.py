"""The batch script of a job (a pure function; ``tenter plan --backend slurm`` prints it and the
job directory keeps it as ``job.sbatch``): resources in ``#SBATCH`` lines, then one ``srun``
step that starts one tenter agent per node (``python -m tenter.launch.slurm.node PLAN``).

Slurm's SIGTERM (``scancel``, a preemption, ``--signal`` before the time limit) reaches every
process of the step: each agent turns it into a preemption request for its workers
(:mod:`tenter.launch.agent`), and the ranks into a stop at a step boundary after a final
checkpoint."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.spec import JobSpec, lookup
from tenter.spec.elastic import PREEMPTION_MARGIN_S

SCRIPT = "job.sbatch"
NODE_MODULE = "tenter.launch.slurm.node"
NIC_PLACEHOLDER = "${slurm_nic}"
"""The network interface of a job of simulated-host instance type (``local``): the one that
carries the node's address, which only the node can tell (loopback on a one-node test
cluster, the NIC on a real one)."""


def node_placeholder(index: int) -> str:
    """The name of node ``index`` of the allocation, until Slurm allocates it."""
    return f"${{slurm_node_{index}}}"


def sbatch_script(plan: Plan, spec: JobSpec, python: str) -> str:
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    procs, nodes = plan.procs_per_host, len(plan.hosts)
    cpus_per_task = max(1, itype.cpus // procs)
    logs = Path(plan.job_dir) / "logs"
    directives = [
        f"--job-name={plan.job_id}",
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
    # One failed agent ends the step; its peers would otherwise wait for a rendezvous.
    step += ["--kill-on-bad-exit=1", python, "-m", NODE_MODULE]
    step.append(str(Path(plan.job_dir) / "plan.json"))
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
