"""A job's isolated hosts, as the launcher runs them: the host network made before any
process, its record for other processes, and the rendezvous store on the switch.

The :class:`~tenter.launch.launcher.supervisor.Supervisor` calls these when the plan says
``isolation: network``; the agents then start through :meth:`HostNetwork.enter` and their
workers inherit the host's namespaces.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tenter.contract.isolation import SWITCH_ADDR, etc_hosts
from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.launch.api import python_executable
from tenter.launch.launcher.isolation import preflight, record
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.runtime.parent_death import dies_with_parent


def open_network(plan: Plan) -> HostNetwork:
    """The network of ``plan``'s hosts, started and recorded in the job directory."""
    network = HostNetwork(
        [host.name for host in plan.hosts],
        user_namespace=preflight.user_namespace_needed(),
        etc=_etc_files(plan),
        # Each host's SageMaker tree at SageMaker's path, so that /opt/ml/model works.
        opt_ml={h.name: h.dir for h in [*plan.hosts, *plan.spare_hosts]},
    )
    network.start()
    try:
        record.write(network, plan.job_dir)
    except BaseException:
        network.close()
        raise
    return network


def _etc_files(plan: Plan) -> dict[str, str]:
    """The hosts' own ``/etc/hosts`` (every host's name, spare hosts too: a bind-mounted file
    is not replaced, and a host may join) and ``/etc/nsswitch.conf`` (names from that file
    only: no DNS server is reachable from the hosts, and glibc's reverse lookups of
    unlisted addresses, which torch makes of its peers' IPv4-mapped ones, would fail with
    "temporary failure" instead of falling back to the number)."""
    etc_dir = Path(plan.job_dir) / layout.ETC_DIR
    etc_dir.mkdir(exist_ok=True)
    files = {"/etc/hosts": etc_hosts([h.name for h in [*plan.hosts, *plan.spare_hosts]])}
    nsswitch = Path("/etc/nsswitch.conf")
    if nsswitch.exists():
        files[str(nsswitch)] = files_only(nsswitch.read_text())
    for target, text in files.items():
        (etc_dir / Path(target).name).write_text(text)
    return {target: str(etc_dir / Path(target).name) for target in files}


def files_only(nsswitch: str) -> str:
    """``nsswitch.conf`` with host names looked up in ``/etc/hosts`` only."""
    lines = [line for line in nsswitch.splitlines() if not line.strip().startswith("hosts:")]
    return "\n".join([*lines, "hosts: files"]) + "\n"


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
        log = layout.logs_dir(plan.job_dir) / layout.STORE_LOG
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *network.enter_switch(plan.cwd),
                    python_executable(),
                    "-m",
                    "tenter.launch.shared.store",
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
