"""The rehearsal's launcher: tenter's local launcher
(:class:`~tenter.launch.backends.local.job.LocalJob`: its loop, lost hosts, hang report, ledger,
stragglers, summary), whose hosts' agents run in packs (:mod:`tenter.rehearsal.pack`) instead of a
process each.

The launcher still sees one process per host (:class:`HostProc`, ``Popen``'s ``pid``,
``poll``, ``wait``, ``send_signal``, ``kill``): the host's agent result gives its status, a
host whose machine was taken away reads as killed by SIGKILL (as a dead agent process would),
and its pack's own end as the host's.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil

from tenter.contract.plan import HostPlan, Plan
from tenter.jobdir import agent_result, layout
from tenter.launch.api import python_executable
from tenter.launch.backends.local.job import LocalJob
from tenter.launch.shared.processes import start_process
from tenter.rehearsal.pack import lost_marker

WAIT_POLL_S = 0.02


class HostProc:
    """One host of a pack, as the launcher's process handle of that host's agent."""

    def __init__(self, pack: subprocess.Popen[bytes], host: HostPlan) -> None:
        self.pack, self.host = pack, host
        self.pid = pack.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._status()
        return self.returncode

    def _status(self) -> int | None:
        if lost_marker(self.host).exists():
            return -signal.SIGKILL
        result = agent_result.read_result(self.host.dir)
        if result is not None:
            return 0 if result.state in ("SUCCEEDED", "PREEMPTED") else 1
        return self.pack.poll()

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["pack"], timeout or 0)
            time.sleep(WAIT_POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        if self.pack.poll() is None:
            self.pack.send_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        self.pack.wait()
        if self.returncode is None:
            self.returncode = -signal.SIGKILL


class RehearsalJob(LocalJob):
    """A local job whose agents run ``hosts_per_pack`` to a process."""

    def __init__(self, plan: Plan, hosts_per_pack: int) -> None:
        super().__init__(plan)
        self.hosts_per_pack = hosts_per_pack
        self.packs: list[subprocess.Popen[bytes]] = []

    def start_processes(self) -> None:
        plan_file = str(Path(self.plan.job_dir) / layout.PLAN_FILE)
        hosts = self.plan.hosts
        for first in range(0, len(hosts), self.hosts_per_pack):
            count = min(self.hosts_per_pack, len(hosts) - first)
            log_path = layout.logs_dir(self.plan.job_dir) / f"pack-{first}.log"
            argv = [python_executable(), "-m", "tenter.rehearsal.pack", plan_file]
            with open(log_path, "wb") as log:
                pack = start_process(
                    [*argv, str(self.rdzv_port), str(first), str(count)], {}, self.plan.cwd, log
                )
            self.packs.append(pack)
            for host in hosts[first : first + count]:
                self._agent_logs[host.index] = str(log_path)
                self.procs.append(HostProc(pack, host))  # type: ignore[arg-type]

    def end_packs(self, timeout_s: float) -> None:
        """Wait for the packs to exit (the job ends once every host's agent wrote its
        result, which its pack does a little before it exits); SIGKILL any still running
        after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        for pack in self.packs:
            try:
                pack.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pack.kill()
                pack.wait()

    def packs_cpu_s(self) -> float:
        """The packs' CPU seconds so far: every host's agent (the light ranks are not in it)."""
        total = 0.0
        for pack in self.packs:
            try:
                times = psutil.Process(pack.pid).cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def light_processes(self) -> list[psutil.Process]:
        """The packs' descendants: each host's warm template, its ranks and its spares."""
        found = []
        for pack in self.packs:
            try:
                found += psutil.Process(pack.pid).children(recursive=True)
            except psutil.Error:
                continue
        return found


def pss_bytes(processes: list[psutil.Process]) -> int:
    """The processes' proportional set size (shared pages counted once in all)."""
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except psutil.Error:
            continue  # ended meanwhile
    return total
