"""The job's store where the first host's agent serves it (:attr:`tenter.contract.plan.Plan.
store_on_first_host`): a Slurm job's first node, whose launcher (``sbatch``) is gone
once the job runs; a local job of fixed membership, which ends when any of its hosts does,
so that its store may end with the first host (the launcher then serves nothing and imports
no torch, seconds of CPU beside the agents' own imports on a small machine).

The first host's agent serves it on its own address and a port the kernel picks (the store
takes the listening socket: no window for another process to take the port), and publishes
``ADDR:PORT`` in the job directory (:mod:`tenter.jobdir.published`); the other hosts' agents
wait for it there. Once its own part succeeded, the first host's agent serves on until every
host's agent wrote its result (each closes torch's rendezvous through the store as it ends),
at most :data:`LINGER_S`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tenter.contract.plan import HostPlan, Plan
from tenter.jobdir import agent_result, published
from tenter.launch.shared.store import listener_on, serve_store

logger = logging.getLogger(__name__)

LINGER_S = 60.0
"""How long the first host serves the store for hosts that have not ended yet."""
POLL_S = 0.05


def start(plan: Plan, host: HostPlan) -> tuple[Any, int]:
    """This host's part: ``(store, port)`` on the first host (the store serves until the
    object goes), ``(None, port)`` on the others, once the first host published it."""
    if host.index == 0:
        listener = listener_on(host.addr)
        port = int(listener.getsockname()[1])
        store = serve_store(host.addr, listener)
        published.publish(plan.job_dir, published.STORE, host.addr, port)
        logger.info("serving the job's store at %s:%d", host.addr, port)
        return store, port
    _, port = published.wait_for(plan.job_dir, published.STORE, plan.join_timeout)
    return None, port


def linger(plan: Plan) -> None:
    """Serve on (the caller keeps the store) until every host's agent wrote its result."""
    results = [agent_result.result_path(h.dir) for h in plan.hosts]
    deadline = time.monotonic() + LINGER_S
    while not all(r.exists() for r in results):
        if time.monotonic() > deadline:
            logger.warning("not every host ended within %.0f s; the store stops", LINGER_S)
            return
        time.sleep(POLL_S)  # other hosts' agents write them; nothing to be notified by
