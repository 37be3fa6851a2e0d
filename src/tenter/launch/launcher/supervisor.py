"""The launcher's loop for a job whose processes run from this machine: tenter's per-host
agents (local backend) or mpirun (mpi backend).

:class:`Supervisor` serves the rendezvous store on a port the kernel picked, starts the job's
processes (a subclass's :meth:`~Supervisor.start_processes`) in the job directory its backend
created, then watches them: a process's exit, and each of its watchers
(:mod:`tenter.launch.launcher.watchers`: a rank's recorded failure, a stop request or preemption,
``max_run``, the goodput ledger, a hang). It stops every host as soon as one fails (SIGTERM,
then SIGKILL after a grace period) and, whatever happens (success, failure, Ctrl-C, a
SIGKILLed worker), finally sweeps away any process that carries this job's id, so nothing
outlives the job.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tenter.contract.isolation import SWITCH_ADDR
from tenter.contract.plan import HostPlan, Plan
from tenter.errors import ExitCode
from tenter.jobdir import layout, published
from tenter.jobdir.control import declare_lost
from tenter.jobdir.results import Failure, JobResult, JobState
from tenter.launch.api import python_executable
from tenter.launch.diagnosis import root_cause
from tenter.launch.launcher.isolation import hosts as isolated_hosts
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.launch.launcher.preemption import PreemptionWatch
from tenter.launch.launcher.watchers import EveryTick, Watcher
from tenter.launch.launcher.watchers.deadline import MaxRunWatcher
from tenter.launch.launcher.watchers.hang import HangWatcher
from tenter.launch.launcher.watchers.ledger import LedgerWatcher
from tenter.launch.launcher.watchers.rank_failure import RankFailureWatcher
from tenter.launch.launcher.watchers.stop import StopWatcher
from tenter.launch.shared.console import EventFeed, say
from tenter.launch.shared.processes import (
    env_of,
    job_processes,
    kill_all,
    start_process,
    stop_launched,
)
from tenter.launch.shared.store import serve_store
from tenter.runtime.warm import TITLE_ROOM
from tenter.spec.errors import counted

POLL_S = 0.05
"""How often the launcher checks its processes, error files and hang records: often enough
that a failure stops the job well within a second, rarely enough to leave the cores to the
ranks."""
EXIT_BY_STOP = {
    JobState.INTERRUPTED: ExitCode.INTERRUPTED,
    JobState.MAX_RUN: ExitCode.MAX_RUN,
    JobState.HANG: ExitCode.HANG,
    JobState.PREEMPTED: ExitCode.PREEMPTED,
}
"""The job's exit code when the launcher stopped it for that reason."""


class Supervisor:
    listen_addr = "127.0.0.1"
    """Where the job's store listens (loopback: the simulated hosts are all here)."""
    a_rank_fails_the_job = True
    """Whether a rank's own failure stops a job without restarts at once
    (:mod:`tenter.launch.launcher.watchers.rank_failure`)."""
    agents_tell = False
    """Whether tenter's agents run the ranks and tell what they show: a rank's own failure (an
    event) and their progress (each host's summary, :meth:`host_dirs`), so that the launcher
    reads no rank's file while the job runs."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.procs: list[subprocess.Popen[bytes]] = []
        """The processes this launcher started: one agent per host, or mpirun."""
        self.rdzv_port = 0
        self.events = EventFeed(plan.job_dir)
        self.extra: list[str] = []
        """Lines for the summary beyond the failures (a hang report...)."""
        self.notes: list[str] = []
        """Notes for the summary, whatever the outcome (a host that joined too late...)."""
        self.host_failures: list[Failure] = []
        """Hosts lost in a job that could not go on without them (their agent was killed)."""
        self.lost_hosts: dict[str, str] = {}
        """Hosts an elastic job went on without, and why."""
        self.preemption = PreemptionWatch(plan)
        self.ledger = LedgerWatcher(plan)
        self._oom_kills_before = root_cause.oom_kill_count()
        self._listener: socket.socket | None = None
        self._store: Any = None
        self.network: HostNetwork | None = None
        """The job's isolated hosts (``isolation: network``) while it runs."""
        self._store_proc: subprocess.Popen[bytes] | None = None
        """The store's process on the isolated hosts' switch."""
        self.started = time.monotonic()
        self.scratch_dirs: list[str] = []
        """Temporary directories the job's processes write in, removed by the final sweep
        (after its processes are gone: a process killed there cannot remove its own)."""

    # ---- what a subclass provides ----

    def start_processes(self) -> None:
        """Start the job's processes (into ``self.procs``)."""
        raise NotImplementedError

    def check_processes(self) -> JobState:
        """running, succeeded or failed."""
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            return JobState.FAILED
        return JobState.SUCCEEDED if codes and all(c == 0 for c in codes) else JobState.RUNNING

    def on_tick(self) -> None:
        """Called on every poll while the job runs (membership changes, joins...)."""

    def stop_processes(self) -> None:
        """Stop the job's processes early (a failure, Ctrl-C, max_run): SIGTERM, then wait."""
        stop_launched(self.procs)

    def release(self) -> None:
        """Give back what :meth:`start_processes` took beyond this machine's processes (a Ray
        cluster's placement group and actors); called once the job's processes are gone."""

    def collect_extra_failures(self) -> None:
        """Before the result is read: record failures only the launcher saw."""

    def host_dirs(self) -> list[str]:
        """The directories of the hosts the job goes on with (where agents tell)."""
        return [host.dir for host in self.plan.hosts]

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        log_name: str,
        death_signal: signal.Signals = signal.SIGTERM,
    ) -> None:
        """Start one of the job's processes, its output in ``logs/<log_name>``.

        In a session of its own (Ctrl-C in a terminal reaches the launcher only, which stops
        the job in order), and told by the kernel when the launcher dies, even by SIGKILL: it
        then stops its part of the job as on a cancel."""
        with open(layout.logs_dir(self.plan.job_dir) / log_name, "wb") as log:
            self.procs.append(start_process(argv, env, self.plan.cwd, log, death_signal))

    def on_host(self, host: HostPlan) -> list[str]:
        """The argv prefix that runs a command on ``host``: nothing on this machine's own
        network; on isolated hosts, entering its namespaces (plugging in a joining host)."""
        if self.network is None:
            return []
        if host.name not in self.network.hosts:
            isolated_hosts.add_host(self.network, self.plan, host.index, host.name)
        return self.network.enter(host.name, self.plan.cwd)

    # ---- the loop ----

    def start(self) -> None:
        """Start the processes and the store (the job directory is there: the backend created
        it, :func:`tenter.launch.launcher.output.create_job_dir`); returns at once."""
        if self.plan.isolation == "network":
            self._start_network()
        elif not self.plan.store_on_first_host:  # else tenter.launch.agent.job_store
            # The kernel picks the port and we keep the socket: no window in which another job
            # could take it (the classic fixed 29500 clash).
            self._listener = socket.create_server((self.listen_addr, 0), backlog=1024)
            self.rdzv_port = self._listener.getsockname()[1]
        try:
            self.start_processes()
            if self._listener is not None and self.plan.serves_store:
                # Started after the processes, so that their start-up and torch's import here
                # overlap. The store owns the listening socket from here on (and closes it).
                self._store = serve_store(self.listen_addr, self._listener)
        except BaseException:
            self._sweep()
            if self._listener is not None:
                self._listener.close()
            raise

    def _start_network(self) -> None:
        """Isolated hosts: their network, and the store on its switch (docs/isolation.md)."""
        self.network = isolated_hosts.open_network(self.plan)
        self.listen_addr = SWITCH_ADDR
        try:
            if self.plan.serves_store:
                self.rdzv_port, self._store_proc = isolated_hosts.serve_store(
                    self.network, self.plan
                )
        except BaseException:
            self._sweep()
            raise

    def wait(self, stop: threading.Event) -> JobResult:
        stopped_at: float | None = None
        reason: JobState | None = None
        try:
            reason = self._watch(stop)
            if reason is not None:
                stopped_at = time.time()
                self.stop_processes()
            if self.preemption.requested_at is not None:
                # The ranks that SIGTERM ended were stopped by the job's preemption.
                stopped_at = min(stopped_at or time.time(), self.preemption.requested_at)
            self.ledger.last_pass()
            self.events.print_new()
        finally:
            self._store = None
            self._sweep()
            if self._listener is not None:
                self._listener.close()
        return self._result(reason, stopped_at)

    def _watch(self, stop: threading.Event) -> JobState | None:
        """Block until the job ends; returns why it was stopped early, or None."""
        watchers = _watchers(self, stop)
        while True:
            verdict = self.check_processes()
            if verdict != JobState.RUNNING:
                return None if verdict == JobState.SUCCEEDED else verdict
            for watcher in watchers:
                reason = watcher.tick(time.monotonic())
                if reason is not None:
                    return reason
            time.sleep(POLL_S)

    def _sweep(self) -> None:
        for proc in [*self.procs, *([self._store_proc] if self._store_proc else [])]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        kill_all(job_processes(self.plan.job_id))
        for scratch in self.scratch_dirs:
            shutil.rmtree(scratch, ignore_errors=True)
        if self.network is not None:
            # Its namespaces, links and bridge go with their holders (and their last process).
            self.network.close()
        self.release()

    def _result(self, reason: JobState | None, stopped_at: float | None) -> JobResult:
        self.collect_extra_failures()
        failures, agent_errors, crashed_at_exit = root_cause.collect_failures(self.plan, stopped_at)
        if reason == JobState.FAILED and crashed_at_exit and not (failures or agent_errors):
            # Every rank that "failed" had finished its script: the job did its work.
            reason = None if not self.host_failures else reason
        exit_code, why, failures = _ending(self.plan, reason, self.preemption, failures)
        extra = [*why, *agent_errors, *self.extra]
        outcome = root_cause.Outcome(
            exit_code=exit_code,
            duration_s=time.monotonic() - self.started,
            interrupted=exit_code == ExitCode.INTERRUPTED,
            rdzv_endpoint=published.published(self.plan.job_dir, published.STORE) or ""
            if self.plan.store_on_first_host
            else f"{self.listen_addr}:{self.rdzv_port}",
            extra=extra,
            notes=[*crashed_at_exit, *self.notes],
            stragglers=[s.to_dict() for _, s in sorted(self.ledger.stragglers.items())],
            lost_hosts=self.lost_hosts,
            oom_kills=root_cause.oom_kills_since(self._oom_kills_before),
        )
        return root_cause.record_result(self.plan, [*self.host_failures, *failures], outcome)


def goes_on_without_one(plan: Plan, running: int) -> bool:
    """Whether an elastic job of ``running`` hosts goes on when one is lost (min_hosts)."""
    return running - 1 >= plan.min_hosts and plan.max_restarts > 0


def lose_host(job: Supervisor, name: str, cause: str, left: int) -> None:
    """Go on without host ``name`` (its agent killed, its node lost): the other agents restart
    without waiting for it, its workers go, and the summary names it."""
    declare_lost(job.plan.job_dir, name)
    # Its workers run in sessions of their own and may outlive their agent.
    kill_all([p for p in job_processes(job.plan.job_id) if env_of(p, "TENTER_HOST") == name])
    job.lost_hosts[name] = cause
    say(f"host {name} lost ({cause}); going on with {counted(left, 'host')}")


def _watchers(job: Supervisor, stop: threading.Event) -> list[Watcher]:
    """What the launcher's loop looks at on each poll, in turn (:mod:`.watchers`)."""
    plan, told = job.plan, job.agents_tell
    fails_at_once = job.a_rank_fails_the_job and not plan.max_restarts
    rank_failed = (lambda: job.events.rank_failed) if told else None
    return [
        *([RankFailureWatcher(plan, rank_failed)] if fails_at_once else []),
        StopWatcher(plan, stop, job.preemption),
        MaxRunWatcher(job.started, plan.max_run),
        EveryTick(job.events.print_new),
        EveryTick(job.on_tick),
        job.ledger,
        HangWatcher(
            plan, job.extra, lambda: job.events.restarted_at, job.host_dirs if told else None
        ),
    ]


def _ending(
    plan: Plan, reason: JobState | None, preemption: PreemptionWatch, failures: list[Failure]
) -> tuple[int, list[str], list[Failure]]:
    """The job's exit code for why it stopped (``reason``; None: it ended by itself), the
    summary's first lines that say so, and the failures that count."""
    exit_code = EXIT_BY_STOP.get(reason, ExitCode.JOB_FAILED) if reason else ExitCode.OK
    why = []
    if reason == JobState.MAX_RUN:
        why.append(f"stopped: max_run of {plan.max_run} s exceeded")
    if preemption.requested and reason in (None, JobState.PREEMPTED):
        # Whether the ranks ended by the request or finished meanwhile, the job was
        # preempted: its outcome says whether a final checkpoint was made, and what
        # tenter's own SIGTERM to the ranks caused is no failure of theirs.
        exit_code, line = preemption.outcome()
        why.insert(0, line)
        failures = [f for f in failures if not f.secondary]
    return exit_code, why, failures


def agent_argv(plan: Plan, host: HostPlan, rdzv_port: int) -> list[str]:
    """The command that runs ``host``'s tenter agent (on this machine or in a Ray actor)."""
    return [
        python_executable(),
        "-m",
        "tenter.launch.agent",
        str(Path(plan.job_dir) / layout.PLAN_FILE),
        str(host.index),
        str(rdzv_port),
        TITLE_ROOM,  # for the workers forked from the agent (tenter.launch.agent.main)
    ]
