"""The mpi backend: ``tenter run --backend mpi job.yaml`` starts every rank with Open MPI's
``mpirun`` (the argv is :func:`tenter.launch.backends.mpirun.mpirun_argv`; ``tenter plan --backend
mpi`` prints it whole).

Hosts: with ``instance_type: local`` the job's hosts are simulated on this machine (every app
context on ``localhost``); with a catalog type they are SageMaker's ``algo-1`` ... ``algo-N``,
and tenter runs on ``algo-1`` as SageMaker's toolkit does; with ``mpirun.hostfile`` they
are the file's first N hosts (mpirun gets the file as ``--hostfile``: slots come from it).
With ``isolation: network`` each host has namespaces of its own
(:mod:`tenter.launch.launcher.isolation`): mpirun runs on ``algo-1`` and reaches the others through
:mod:`tenter.launch.launcher.isolation.rsh`, its ``plm_rsh_agent``.

Everything around mpirun is the shared :class:`~tenter.launch.launcher.supervisor.Supervisor`'s, as
on the local backend: the job directory, the store the ranks rendezvous on (served by tenter on a
port the kernel picked, ``MASTER_PORT``: ranks are its clients, as torch elastic's workers are
of their agent's store), stopping on the first recorded failure, ``max_run``, Ctrl-C, the
final sweep of every process carrying ``TENTER_JOB_ID``, and the root-cause summary.
mpirun's own output (its error reports) goes to ``logs/mpirun.log``; a rank it reports killed
by a signal (which leaves no error file) is added to the report from there.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from tenter.contract.fabric import CLUSTER_NIC, LOOPBACK_NIC
from tenter.contract.isolation import HOST_NIC, SWITCH_ADDR
from tenter.contract.placeholders import MASTER_PORT, resolve
from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.contract.sagemaker import host_names
from tenter.errors import MissingToolError
from tenter.jobdir import layout
from tenter.jobdir.agent_result import AgentResult, HostState, WorkerFailure, write_result
from tenter.jobdir.events import EventKind, record_event
from tenter.jobdir.layout import PLAN_FILE
from tenter.jobdir.lookup import tenter_home
from tenter.launch.api import python_executable
from tenter.launch.backends.mpirun import MPIRUN, mpirun_argv
from tenter.launch.launcher.isolation import preflight
from tenter.launch.launcher.isolation.rsh import NETWORK_ENV, SESSIONS_ENV, agent_command
from tenter.launch.launcher.supervised import SupervisedBackend
from tenter.launch.launcher.supervisor import Supervisor
from tenter.spec import JobSpec, lookup, processes_per_host
from tenter.spec.mpi_options import MpiOptions
from tenter.spec.mpirun import hostfile_hosts

# Open MPI 4's report of a rank that died by a signal.
_SIGNALLED = re.compile(
    r"process rank (\d+) with PID (\d+) on node \S+ exited on signal (\d+)", re.IGNORECASE
)


class MpiBackend(SupervisedBackend):
    name = "mpi"

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        itype = lookup(spec.instance_type)
        assert itype is not None, "the spec check rejects unknown instance types"
        procs = processes_per_host(spec, itype)
        count = spec.instance_count
        python = python_executable()
        user = spec.mpi_options()
        master_addr = None
        if spec.isolation == "network":
            # Hosts of their own on this machine (the plan's addresses, eth0): mpirun runs on
            # algo-1 and starts its daemons on the others through the rsh helper, where a
            # cluster's mpirun uses ssh; the ranks find the launcher's store on the switch.
            plan = make_plan(spec, job_id, tenter_home(), python)
            mpi_hosts, nic, slots = [h.name for h in plan.hosts], HOST_NIC, procs
            isolated = {
                "plm_rsh_agent": agent_command(python),
                # orted stays the agent's process instead of daemonizing: it then stops with
                # mpirun, even when the launcher dies with the hosts' network (rsh.py).
                "orte_leave_session_attached": "1",
            }
            user = user.merged_over(MpiOptions(mca=isolated))
            master_addr = SWITCH_ADDR
        else:
            if itype.is_local:
                addrs, mpi_hosts, nic = ["127.0.0.1"] * count, ["localhost"] * count, LOOPBACK_NIC
            elif spec.mpirun.hostfile:
                addrs = mpi_hosts = hostfile_hosts(Path(spec.mpirun.hostfile))[:count]
                nic = spec.mpirun.network_interface or CLUSTER_NIC
            else:
                addrs = mpi_hosts = host_names(count)
                nic = spec.mpirun.network_interface or CLUSTER_NIC
            plan = make_plan(
                spec, job_id, tenter_home(), python, addrs=addrs, network_interface=nic
            )
            slots = procs * count if itype.is_local else procs
        argv = mpirun_argv(
            plan,
            mpi_hosts,
            procs,
            python,
            user_options=user,
            network_interface=nic,
            master_addr=master_addr,
            host_slots=slots,
            hostfile=spec.mpirun.hostfile,
            allow_run_as_root=os.geteuid() == 0,
            agent_store=True,
            rank_logs=True,
            plan_source=str(Path(plan.job_dir) / PLAN_FILE),
        )
        return dataclasses.replace(plan, launcher=argv)

    def check_ready(self, plan: Plan) -> None:
        if shutil.which(MPIRUN) is None:
            raise MissingToolError(
                "backend",
                "mpi: mpirun is not on PATH",
                "install Open MPI (Debian: apt-get install openmpi-bin), or choose another "
                "backend (--backend local)",
            )
        if plan.isolation == "network":
            preflight.check_machine()

    def supervisor(self, plan: Plan) -> MpiJob:
        return MpiJob(plan)


class MpiJob(Supervisor):
    """A job whose ranks mpirun starts: one launcher process instead of the agents."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        itype = lookup(plan.instance_type)
        # Ranks on other hosts reach the store through the hosts' network, at the address of
        # the first host (where mpirun and this launcher run): never on all interfaces.
        local = itype is not None and itype.is_local
        self.listen_addr = "127.0.0.1" if local else plan.hosts[0].addr

    def start_processes(self) -> None:
        argv = [resolve(arg, {MASTER_PORT: self.rdzv_port}) for arg in self.plan.launcher]
        # The ranks' store is the launcher's: recorded as an agent records the one it serves.
        host = self.plan.hosts[0].name
        record_event(
            self.plan.job_dir, EventKind.WORKERS_STORE, host=host, attempt=0, port=self.rdzv_port
        )
        argv[0] = shutil.which(argv[0]) or argv[0]
        # mpirun itself carries the job id, so the final sweep finds it too; a launcher killed
        # even by SIGKILL still stops mpirun, which stops the ranks.
        env = {"TENTER_JOB_ID": self.plan.job_id}
        if self.network is not None:
            env[NETWORK_ENV] = self.plan.job_dir  # where the rsh helper finds the hosts
            # The temporary directories of mpirun (its session directory, ompi.HOST.UID, and
            # its ranks') and of the rsh helper's sessions on the other hosts, in one: removed
            # by the final sweep, or by the sessions if a killed launcher took mpirun along.
            scratch = tempfile.mkdtemp(prefix="tenter-mpi-")
            self.scratch_dirs.append(scratch)
            env[SESSIONS_ENV] = scratch
            env["TMPDIR"] = os.path.join(scratch, "mpirun")
            os.mkdir(env["TMPDIR"], mode=0o700)
        # On isolated hosts mpirun runs on the first, as on a cluster's first node. There, a
        # launcher that dies takes the hosts' network with it: mpirun could no longer reach
        # its daemons to stop them in order, and would wait for them forever. It is killed
        # instead; its remote-shell sessions then stop the daemons (rsh.py).
        death_signal = signal.SIGKILL if self.network is not None else signal.SIGTERM
        self.spawn([*self.on_host(self.plan.hosts[0]), *argv], env, layout.MPIRUN_LOG, death_signal)

    def collect_extra_failures(self) -> None:
        """Ranks mpirun saw die by a signal, reported as their host's agent would report them
        (mpirun's ranks have no agent), so the launcher reads every backend's the same way."""
        log = layout.logs_dir(self.plan.job_dir) / layout.MPIRUN_LOG
        text = log.read_text(errors="replace") if log.exists() else ""
        when = log.stat().st_mtime if log.exists() else time.time()
        by_host: dict[int, list[WorkerFailure]] = {}
        for match in _SIGNALLED.finditer(text):
            rank, pid, signum = (int(g) for g in match.groups())
            host = rank // self.plan.procs_per_host
            stem = self.plan.log_stem(self.plan.hosts[host].name, rank, 0)
            by_host.setdefault(host, []).append(
                WorkerFailure(
                    rank=rank,
                    local_rank=rank % self.plan.procs_per_host,
                    pid=pid,
                    exit_code=-signum,
                    timestamp=when,
                    error_file=layout.error_file(stem),
                )
            )
        for index, failures in by_host.items():
            result = AgentResult(HostState.FAILED, failures, "reported by mpirun")
            write_result(self.plan.hosts[index].dir, result)
