"""``python -m tenter.launch.agent PLAN_JSON HOST_INDEX RDZV_PORT [TITLE_ROOM]``: run one host
of a job.

The agent reads its host's part of the plan, imports torch (for the rendezvous), then forks
its host's warm template (:mod:`tenter.launch.agent.spares`) from itself: the template starts with
torch imported, and the host pays one import of torch, not two side by side (seconds each;
4-5 s for a CUDA build on the H100 machine, on the same cores as the other hosts' on a
machine of simulated hosts). The fork comes before the agent configures its logging or starts
a thread (torch's rendezvous keeps a heartbeat thread; the agent serves stores), so the
template starts as a fresh process would; the launcher's last argument, spaces, is room for
the titles of the workers forked from it (:data:`tenter.runtime.warm.TITLE_ROOM`). Where the
agent runs inside another process (a Slurm node's entry, whose initial environment, which
the kernel shows a fork's workers with, is Slurm's, and which may run torchft's lighthouse
thread), the template is a fresh process instead, started before the agent imports torch.
Where the plan has the first host's agent serve the job's store
(:mod:`tenter.launch.agent.job_store`; ``RDZV_PORT`` is then unused), it does so after the
fork. Nothing of torch is imported before that (a test holds this module to it); then
:func:`tenter.launch.agent.run.run_host` does the rest.
"""

from __future__ import annotations

import logging
import os
import sys

from tenter.contract.placeholders import LIGHTHOUSE_PORT
from tenter.contract.plan import Plan
from tenter.contract.torchrun import shared_worker_env
from tenter.jobdir import private, published
from tenter.jobdir.layout import spares_tmp_dir
from tenter.launch.agent.spares import ENABLED_ENV, WarmPool, enabled

logger = logging.getLogger(__name__)


def run_time_resolved(plan: Plan) -> Plan:
    """The plan with what is known at run time only in place of its placeholder: torchft's
    lighthouse port, which the launcher, or a Slurm job's first node, publishes as it starts
    the lighthouse (before any agent). The rendezvous port is
    :func:`tenter.launch.agent.rendezvous.endpoint`'s; the workers' store's, the round's."""
    if not plan.replica_groups:
        return plan
    _, port = published.wait_for(plan.job_dir, published.LIGHTHOUSE, plan.join_timeout)
    return plan.resolved({LIGHTHOUSE_PORT: port})


def main(argv: list[str], fork_template: bool = True) -> int:
    """Run the host; ``fork_template``: this process has no thread of its own yet."""
    plan_path, host_index, rdzv_port = argv[:3]
    with open(plan_path) as f:
        plan = run_time_resolved(Plan.from_json(f.read()).as_running())  # joined hosts too
    host = plan.hosts[int(host_index)]
    private.enter(plan.output_group)  # what the workers write is the job's alone
    workers_env = shared_worker_env(os.environ, plan.pass_environment, plan.host_env(host))
    pool = WarmPool.for_workers(
        plan.command,
        plan.procs_per_host,
        workers_env,
        plan.cwd,
        tmp_dir=spares_tmp_dir(plan.job_dir, host.name),
        checkpoint_dir=plan.checkpoint_dir,
    )
    if pool is not None and not fork_template:
        pool.fill()  # a fresh template, importing torch beside this process
    # Imported here, not above: torch.
    from tenter.launch.agent.run import run_host
    from tenter.runtime import bootstrap

    if pool is not None and fork_template and (template := pool.fork_template()) is not None:
        # This process is now the host's template: serve, and in each spare run its rank.
        sys.exit(bootstrap.exit_fast(bootstrap.main(template)))
    # The agent's log is a file in the job directory; torch elastic's INFO lines (rendezvous
    # rounds) are what explain a stuck job.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("torch.distributed.elastic").setLevel(logging.INFO)
    if not enabled():
        logger.info("warm workers off (%s=0): workers start fresh", ENABLED_ENV)
    if pool is not None:
        if (forked := pool.forked_template()) is not None:
            logger.info("warm template forked (pid %d)", forked)
        pool.fill()
    if not plan.store_on_first_host:
        return run_host(plan, host, rdzv_port, workers_env, pool)
    # After the fork: the store's threads must not be the template's.
    from tenter.launch.agent import job_store

    store, port = job_store.start(plan, host)
    code = run_host(plan, host, str(port), workers_env, pool)
    if store is not None and code == 0:
        job_store.linger(plan)
    return code
