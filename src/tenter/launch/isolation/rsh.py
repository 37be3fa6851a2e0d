"""``python -m tenter.launch.isolation.rsh HOST COMMAND...``: mpirun's remote shell on
isolated hosts (Open MPI's ``plm_rsh_agent``), in place of ssh.

Open MPI starts its daemon on every other host by running its agent as it runs ssh: the host
as mpirun's ``--host`` names it, then a shell command line in words whose values are quoted
for the remote shell (``orted --daemonize -mca ess "env" ...``). This helper runs that line
with ``sh -c`` in the host's namespaces (network, hostname, ``/dev/shm``), in the current
directory (the job's, on the file system every host shares, as a cluster's home is): the
mpirun command line stays the one that runs on a cluster, with only the agent replaced.

The hosts are those of the job's network record (``network.json`` in the directory the
:data:`NETWORK_ENV` variable names: the launcher sets it for mpirun, whose children inherit
it). A host is named by its name or its address. As ssh, it exits 255 when it cannot reach
the host, and with the command's status otherwise.
"""

from __future__ import annotations

import os
import signal
import sys

from tenter.errors import TenterError
from tenter.launch.isolation import attach
from tenter.launch.isolation.network import HostNetwork, host_addr
from tenter.launch.processes import dies_with_parent

NETWORK_ENV = "TENTER_NETWORK"
"""The directory of the network record of the hosts this agent reaches (the job's)."""
UNREACHABLE = 255
"""ssh's exit status when it cannot reach the host (Open MPI reports the daemon as failed)."""


def agent_command(python: str) -> str:
    """The ``plm_rsh_agent`` value that runs this helper (Open MPI splits it on spaces)."""
    return f"{python} -m {__name__}"


def host_named(network: HostNetwork, host: str) -> str:
    """The name of the host that ``host`` (a name or an address) designates."""
    if host in network.hosts:
        return host
    for index, name in enumerate(network.hostnames):
        if host_addr(index) == host:
            return name
    raise KeyError(host)


def remote_argv(network: HostNetwork, host: str, command: list[str], cwd: str) -> list[str]:
    """The argv that runs ``command`` (ssh's words of a shell line) on ``host``."""
    return [*network.enter(host_named(network, host), cwd), "sh", "-c", " ".join(command)]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m tenter.launch.isolation.rsh HOST COMMAND...", file=sys.stderr)
        return UNREACHABLE
    host, command = argv[0], argv[1:]
    where = os.environ.get(NETWORK_ENV)
    try:
        if not where:
            raise TenterError(
                NETWORK_ENV, "not set", "set it to the directory of the job's network.json"
            )
        network = attach(where)
        target = remote_argv(network, host, command, os.getcwd())
    except KeyError:
        print(f"rsh: {host}: no such host in {where}/network.json", file=sys.stderr)
        return UNREACHABLE
    except TenterError as e:
        print(f"rsh: {host}: {e}", file=sys.stderr)
        return UNREACHABLE
    # Replaced by nsenter, then the shell, then (undaemonized: orte_leave_session_attached)
    # orted: mpirun's signals and the command's status are the command's own, as through ssh.
    # An ssh session ends when mpirun's machine dies; here the daemon gets SIGTERM then (and
    # stops its ranks), where it would otherwise wait on a network that went with its job.
    dies_with_parent(signal.SIGTERM, starter=os.getppid())()
    os.execvp(target[0], target)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
