"""``python -m tenter.launch.launcher.isolation.rsh HOST COMMAND...``: mpirun's remote shell on
isolated hosts (Open MPI's ``plm_rsh_agent``), in place of ssh.

Open MPI starts its daemon on every other host by running its agent as it runs ssh: the host
as mpirun's ``--host`` names it, then a shell command line in words whose values are quoted
for the remote shell (``orted --daemonize -mca ess "env" ...``). This helper runs that line
with ``sh -c`` in the host's namespaces (network, hostname, ``/dev/shm``), in the current
directory (the job's, on the file system every host shares, as a cluster's home is), and
stays its parent as sshd does (:func:`run_session`): the mpirun command line stays the one
that runs on a cluster, with only the agent replaced.

The hosts are those of the job's network record (``network.json`` in the directory the
:data:`NETWORK_ENV` variable names: the launcher sets it for mpirun, whose children inherit
it). A host is named by its name or its address. As ssh, it exits 255 when it cannot reach
the host, and with the command's status otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from tenter.errors import TenterError
from tenter.launch.launcher.isolation import attach
from tenter.launch.launcher.isolation.network import HostNetwork, host_addr
from tenter.launch.shared.processes import STOP_GRACE_S
from tenter.runtime.parent_death import dies_with_parent

NETWORK_ENV = "TENTER_NETWORK"
"""The directory of the network record of the hosts this agent reaches (the job's)."""
SESSIONS_ENV = "TENTER_RSH_SESSIONS"
"""The directory the sessions' temporary directories go in (the launcher's, with mpirun's,
removed when the job ends); unset, the system's."""
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
        print(
            "usage: python -m tenter.launch.launcher.isolation.rsh HOST COMMAND...", file=sys.stderr
        )
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
    return run_session(target)


def run_session(argv: list[str]) -> int:
    """Run ``argv`` as sshd runs a session: its processes (the shell, then orted, which stays
    attached: orte_leave_session_attached) in a process group of their own, stopped as a
    whole when the session ends.

    The session ends when mpirun signals this helper or dies (a parent-death signal). That
    matters here more than through ssh: the hosts' network goes with the launcher, so a
    daemon left to notice on its own would wait forever on a peer it can no longer reach.

    The session has a temporary directory of its own (``TMPDIR``), removed when it ends:
    orted keeps its session directory there (``ompi.HOST.UID``) and removes it only when it
    exits by itself, not when it is stopped with the job, as it is after a rank failed. It is
    made in the launcher's :data:`SESSIONS_ENV`, which the launcher removes at the end: the
    job's final sweep may stop this helper too before it is done."""
    mpirun = os.getppid()
    dies_with_parent(signal.SIGTERM, starter=mpirun)()
    sessions = os.environ.get(SESSIONS_ENV)
    tmpdir = tempfile.mkdtemp(prefix="session-", dir=sessions)
    session = subprocess.Popen(argv, start_new_session=True, env={**os.environ, "TMPDIR": tmpdir})

    def remove_tmpdir() -> None:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if sessions and os.getppid() != mpirun:
            # mpirun died, with the launcher that would have removed the job's directory of
            # temporary directories (mpirun's own in it): nobody else will.
            shutil.rmtree(sessions, ignore_errors=True)

    def end_session(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session.pid, signum)
        try:
            session.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session.pid, signal.SIGKILL)
        remove_tmpdir()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, end_session)
    code = session.wait()
    remove_tmpdir()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
