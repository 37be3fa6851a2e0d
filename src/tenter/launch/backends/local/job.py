"""A local job: one agent process per simulated host, started and watched by the launcher.

An agent killed by a signal is a lost host: an elastic job goes on while ``min_hosts``
remain (torch elastic re-forms the world without it). ``tenter join JOB`` adds one of the
plan's spare hosts, which enters at the next rendezvous round. ``tenter fault JOB
partition|heal|kill HOST`` (:mod:`tenter.launch.launcher.isolation.faults`) cuts a host off, plugs
it back in, or kills it.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import psutil

from tenter.contract.plan import HostPlan, Plan
from tenter.contract.torchrun import finished_marker
from tenter.jobdir import agent_result, layout
from tenter.jobdir.control import declare_found, declare_lost, join_requests
from tenter.jobdir.membership import record_join
from tenter.jobdir.results import JobState
from tenter.launch.diagnosis import root_cause
from tenter.launch.launcher.isolation.faults import NetworkFaults
from tenter.launch.launcher.supervisor import (
    Supervisor,
    agent_argv,
    goes_on_without_one,
    lose_host,
)
from tenter.launch.shared.console import read_index, say
from tenter.launch.shared.processes import env_of, job_processes, kill_all
from tenter.runtime.warm import WAIT_FLAG


class LocalJob(Supervisor):
    agents_tell = True

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.lost: set[int] = set()
        """Indexes of hosts whose agent was killed while the job went on without them."""
        self._agent_logs: dict[int, str] = {}
        self.faults = NetworkFaults(self)

    def start_processes(self) -> None:
        if self.plan.gpu_note:
            say(self.plan.gpu_note)
        for host in self.plan.hosts:
            self._start_agent(host)

    def _start_agent(self, host: HostPlan, log_name: str = "") -> None:
        log_path = layout.logs_dir(self.plan.job_dir) / (log_name or layout.agent_log(host.name))
        self._agent_logs[host.index] = str(log_path)
        # If the launcher dies, even by SIGKILL, each agent stops its workers as on a cancel
        # (SIGTERM, SIGKILL after the grace period).
        self.spawn(
            [*self.on_host(host), *agent_argv(self.plan, host, self.rdzv_port)],
            self.plan.host_env(host),
            log_path.name,
        )

    def check_processes(self) -> JobState:
        """running, succeeded, or failed."""
        if self.faults.stop_job:
            return JobState.FAILED
        active = [i for i in range(len(self.procs)) if i not in self.lost]
        for i in active:
            code = self.procs[i].poll()
            if code is None or code == 0:
                continue
            if code < 0 and goes_on_without_one(self.plan, len(active)):
                self.lost.add(i)
                why = f"its agent was killed by {signal.Signals(-code).name}"
                lose_host(self, self.plan.hosts[i].name, why, self.hosts_running)
                return JobState.RUNNING
            if code < 0:
                # Its workers died with it (their parent-death signal); their peers' broken
                # connections follow. The lost host is the root cause.
                self.host_failures.append(
                    root_cause.host_lost(
                        self.plan.hosts[i], self.procs[i].pid, code, self._agent_logs[i]
                    )
                )
            return JobState.FAILED
        codes = [self.procs[i].poll() for i in active]
        return JobState.SUCCEEDED if codes and all(c == 0 for c in codes) else JobState.RUNNING

    def collect_extra_failures(self) -> None:
        """An agent that failed without writing its report (a full disk): say so, with its
        log, rather than end with no cause at all. A host that joined too late: say that."""
        for i, proc in enumerate(self.procs):
            host = self.plan.hosts[i]
            result = agent_result.read_result(host.dir)
            if result is not None and result.message == agent_result.JOINED_TOO_LATE:
                self.notes.append(f"{host.name} joined as the job ended: it never entered it")
            report_file = agent_result.result_path(host.dir)
            if proc.returncode and proc.returncode > 0 and not report_file.exists():
                self.extra.append(
                    f"{host.name}: its agent exited with status {proc.returncode} without a "
                    f"report; see {self._agent_logs[i]}"
                )

    def host_dirs(self) -> list[str]:
        return [h.dir for i, h in enumerate(self.plan.hosts) if i not in self.lost]

    def on_tick(self) -> None:
        self._admit_joining_hosts()
        self.faults.on_tick()

    # ---- what faults do to a host (tenter.launch.launcher.isolation.faults decides when) ----

    @property
    def hosts_running(self) -> int:
        """Hosts whose agent still takes part (started, not lost or fenced)."""
        return len(self.procs) - len(self.lost)

    def agent_log(self, index: int) -> str:
        return self._agent_logs[index]

    def _workers_of(self, index: int) -> list[psutil.Process]:
        name = self.plan.hosts[index].name
        agent = self.procs[index].pid
        return [
            p
            for p in job_processes(self.plan.job_id)
            if env_of(p, "TENTER_HOST") == name and p.pid != agent
        ]

    def kill_host(self, index: int, also: tuple[psutil.Process, ...] = ()) -> None:
        """SIGKILL the host's agent and its workers (and ``also``, at the same time):
        :meth:`check_processes` then sees a lost host, as if the machine had died."""
        workers = self._workers_of(index)
        self.procs[index].kill()  # not reaped here: check_processes reads its status
        kill_all([*workers, *also])

    def fence_host(self, index: int, why: str) -> None:
        """Go on without a host that is cut off: kill its agent and workers (so that none
        comes back with stale state when the network does), and restart the other hosts'
        workers, blocked in a collective with it, into a rendezvous round without it."""
        self.lost.add(index)
        self.lost_hosts[self.plan.hosts[index].name] = why
        declare_lost(self.plan.job_dir, self.plan.hosts[index].name)
        blocked: list[psutil.Process] = []
        for other in range(len(self.procs)):
            if other not in self.lost and self.procs[other].poll() is None:
                # Their agents see the workers fail and restart them (one restart each).
                with contextlib.suppress(psutil.NoSuchProcess):
                    blocked += _workers_below(psutil.Process(self.procs[other].pid))
        self.kill_host(index, also=tuple(blocked))
        self.procs[index].wait()

    def restart_agent(self, index: int) -> None:
        """A fresh agent for a fenced host: it enters at the next rendezvous round."""
        host = self.plan.hosts[index]
        restarts = len(layout.agent_logs(self.plan.job_dir, host.name))
        declare_found(self.plan.job_dir, host.name)
        self._start_agent(host, layout.agent_log(host.name, restarts))
        self.procs[index] = self.procs.pop()  # spawn appends; the host keeps its place
        self.lost.discard(index)
        self.lost_hosts.pop(host.name, None)

    def _admit_joining_hosts(self) -> None:
        """``tenter join JOB`` leaves a request file; start one spare host per request, unless
        the job is ending (a host that entered now would restart ranks done with their work,
        or find the rendezvous closed)."""
        for request in join_requests(self.plan.job_dir):
            request.unlink()
            active = len(self.procs) - len(self.lost)
            spare = self.plan.spare_hosts
            if (ending := self._ending()) is not None:
                say(f"cannot add a host: the job is ending ({ending})")
                continue
            if active >= self.plan.max_hosts or not spare:
                say(f"cannot add a host: the job has {active} of max_hosts {self.plan.max_hosts}")
                continue
            host = spare[0]
            self.plan = self.plan.with_joined([host.name])
            layout.create_host(self.plan.host_tree(host))
            # Before the agent starts: it reads its host from the plan and this record.
            record_join(self.plan.job_dir, host.name)
            self._start_agent(host)
            say(f"host {host.name} joining; it enters at the next rendezvous")

    def _ending(self) -> str | None:
        """Why the job is ending, if it is: a host's agent ended, or a rank of the hosts'
        latest attempts returned from its script."""
        for i, proc in enumerate(self.procs):
            if i not in self.lost and proc.poll() is not None:
                return f"the agent of {self.plan.hosts[i].name} has ended"
        latest: dict[object, dict[str, object]] = {}
        for entry in read_index(self.plan.job_dir):
            latest[(entry["host"], entry["local_rank"])] = entry
        for entry in latest.values():
            if Path(finished_marker(layout.error_file(str(entry["stem"])))).exists():
                return f"rank {entry['rank']} on {entry['host']} finished its script"
        return None


def _workers_below(agent: psutil.Process) -> list[psutil.Process]:
    """An agent's workers: its descendants but its warm template and the spares waiting in
    it (titled ``... --warm ...`` until they become workers), which go on serving."""
    found = []
    for proc in agent.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if WAIT_FLAG not in " ".join(proc.cmdline()).split():
                found.append(proc)
    return found
