"""``python -m tenter.launch.agent PLAN_JSON HOST_INDEX RDZV_PORT``: run one host of a job.

The agent reads its host's part of the plan and starts the host's warm template first
(:mod:`tenter.launch.warm`): it imports torch while the agent imports it for the rendezvous,
seconds each (4-5 s for a CUDA build on the H100 machine), so the first workers are forked
with torch imported instead of importing it after the agent's.
Nothing of torch is imported before that (a test holds this module to it); then
:func:`tenter.launch.agent.run.run_host` does the rest.
"""

from __future__ import annotations

import logging
import os

from tenter.contract.plan import Plan
from tenter.jobdir.layout import spares_tmp_dir
from tenter.launch.warm import WarmPool


def main(argv: list[str]) -> int:
    plan_path, host_index, rdzv_port = argv
    with open(plan_path) as f:
        plan = Plan.from_json(f.read())
    host = plan.hosts[int(host_index)]
    # The agent's log is a file in the job directory; torch elastic's INFO lines (rendezvous
    # rounds) are what explain a stuck job.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("torch.distributed.elastic").setLevel(logging.INFO)
    workers_env = dict(os.environ)
    pool = WarmPool.for_workers(
        plan.command,
        plan.procs_per_host,
        workers_env,
        plan.cwd,
        tmp_dir=spares_tmp_dir(plan.job_dir, host.name),
        checkpoint_dir=plan.checkpoint_dir,
    )
    if pool is not None:
        pool.fill()
    # Imported here, not above: the template imports torch meanwhile.
    from tenter.launch.agent.run import run_host

    return run_host(plan, host, rdzv_port, workers_env, pool)
