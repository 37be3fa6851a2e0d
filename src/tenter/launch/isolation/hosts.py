"""A job's isolated hosts, as the launcher runs them: the host network made before any
process, its record for other processes, and the rendezvous store on the switch.

The :class:`~tenter.launch.supervisor.Supervisor` calls these when the plan says
``isolation: network``; the agents then start through :meth:`HostNetwork.enter` and their
workers inherit the host's namespaces.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tenter.contract.isolation import SWITCH_ADDR
from tenter.contract.plan import Plan
from tenter.launch.api import python_executable
from tenter.launch.isolation import preflight, record
from tenter.launch.isolation.network import HostNetwork
from tenter.launch.processes import dies_with_parent

STORE_LOG = "store.log"


def open_network(plan: Plan) -> HostNetwork:
    """The network of ``plan``'s hosts, started and recorded in the job directory."""
    network = HostNetwork(
        [host.name for host in plan.hosts], user_namespace=preflight.user_namespace_needed()
    )
    network.start()
    try:
        record.write(network, plan.job_dir)
    except BaseException:
        network.close()
        raise
    return network


def add_host(network: HostNetwork, plan: Plan, index: int, name: str) -> None:
    """A host joining the running job: plugged in, and in the record."""
    network.add_host(index, name)
    record.write(network, plan.job_dir)


def serve_store(network: HostNetwork, plan: Plan) -> tuple[int, subprocess.Popen[bytes]]:
    """The rendezvous store on the switch (:data:`SWITCH_ADDR`): its port, and the process
    serving it. The port is bound here, before the process starts, so the agents can be
    started at once; their connections wait in the listening socket's backlog meanwhile."""
    with network.listen() as listener:
        port: int = listener.getsockname()[1]
        log = Path(plan.job_dir) / "logs" / STORE_LOG
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *network.enter_switch(plan.cwd),
                    python_executable(),
                    "-m",
                    "tenter.launch.store",
                    SWITCH_ADDR,
                    str(listener.fileno()),
                ],
                pass_fds=[listener.fileno()],
                # The job id: the launcher's final sweep finds it with the job's processes.
                env={**os.environ, "TENTER_JOB_ID": plan.job_id},
                cwd=plan.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=dies_with_parent(signal.SIGKILL),
            )
    return port, proc
