"""The rehearsal's phases, timed: tenter's launcher (:class:`~tenter.rehearsal.job.RehearsalJob`)
runs the job in a thread of this process while this drives it as faults would, and reads
what happened through tenter's own readers (the hang module's progress records, the ledger,
the live view, ``tenter status``).

1. launch → every rank at its first step;
2. one rank killed (``tenter fault kill --rank``'s path) → every rank stepping again (a new
   process each: the in-round restart);
3. one host lost (its agent and ranks gone at once) → the rest stepping again;
4. steady state: the launcher thread's CPU (share of a core) and the process's RSS, bytes and
   files written to the job directory per second, one live-view refresh, one ledger and
   straggler pass, ``tenter status``;
5. one rank SIGSTOPped (the others wait in an all-reduce) → the hang report naming it.

Store requests are counted per host per phase (:mod:`tenter.rehearsal.store_count`).

:class:`Driver` has the phases any backend's launcher goes through; :class:`Rehearsal` is the
local backend's (the mpi backend's: :mod:`tenter.rehearsal.mpi`; Slurm's, whose launcher is
``sbatch`` and ``squeue``: :mod:`tenter.rehearsal.slurm`).
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tenter.contract.plan import Plan
from tenter.goodput.keeper import LedgerKeeper
from tenter.goodput.stragglers import StragglerRule
from tenter.jobdir import layout
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.results import JobResult
from tenter.launch.diagnosis import hang
from tenter.launch.diagnosis.rank_signals import LocalSignals, RankSignals
from tenter.launch.launcher.isolation.faults import kill_rank
from tenter.launch.launcher.output import create_job_dir
from tenter.launch.launcher.supervisor import Supervisor
from tenter.launch.shared.processes import process_identity, stat_fields
from tenter.rehearsal import commands, store_count
from tenter.rehearsal.job import RehearsalJob, pss_bytes

POLL_S = 0.1
CULPRIT = 1
"""The rank the hang phase stops."""
STEADY_S = 5.0
STEADY_PHASE = "steady"


class RehearsalFailed(Exception):
    """A phase did not reach its end within its bound."""


@dataclass
class Figures:
    hosts: int
    ranks: int
    seconds: dict[str, float] = field(default_factory=dict)
    """Phase name to seconds: first_step, kill, host_lost, hang_named."""
    store_requests: dict[str, float] = field(default_factory=dict)
    """Phase name to store requests per host (mean; max in ``store_requests_max``)."""
    store_requests_max: dict[str, int] = field(default_factory=dict)
    store_polls: dict[str, float] = field(default_factory=dict)
    """Phase name to the agents' polls among its store requests per host (mean)."""
    steady: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """Phase or figure name to why this backend has none of it."""
    root_cause: str = ""
    """The failure report's root cause (rank, host, signal), where a rank's kill ends the job
    (mpi)."""
    processes_per_host: float = 0.0
    """The machine's processes per simulated host at the first step (template, ranks,
    spares; not the packs): what bounds the size one machine rehearses."""
    result: JobResult | None = None
    hang_report: str = ""

    def event_requests(self, phase: str) -> float:
        """Store requests per host (mean) that ``phase``'s event made: its count less the
        agents' polls, which grow with the phase's length (on this machine's two cores, with
        the hosts: the raw count of a restart seemed to grow with them, docs/scale.md)."""
        return self.store_requests.get(phase, 0.0) - self.store_polls.get(phase, 0.0)

    def worst_phase_requests(self) -> float:
        """Store requests per host that the event of the phase that made the most made:
        launch, kill or host lost (the steady state's grow with its length, not the job's
        size)."""
        phases = [self.event_requests(p) for p in self.store_requests if p != STEADY_PHASE]
        return max(phases, default=0.0)


def _wait(what: str, done: Callable[[], bool], bound_s: float) -> float:
    """Seconds until ``done()``; RehearsalFailed past ``bound_s``."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > bound_s:
            raise RehearsalFailed(f"{what}: not within {bound_s:g} s")
        time.sleep(POLL_S)
    return time.monotonic() - started


def _stepping(plan: Plan, ranks: int, old_pids: set[int]) -> Callable[[], bool]:
    """Every one of ``ranks`` ranks has stepped in a process not among ``old_pids``."""

    def check() -> bool:
        progress = hang.read_progress(plan)
        fresh = [p for p in progress if p.pid not in old_pids and p.step > 0]
        return len(fresh) >= ranks

    return check


def _pids(plan: Plan) -> set[int]:
    return {p.pid for p in hang.read_progress(plan)}


def _thread_cpu_s(native_id: int) -> float:
    fields = stat_fields(f"/proc/self/task/{native_id}/stat")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _job_dir_usage(job_dir: str) -> tuple[int, int]:
    size = files = 0
    for root, _, names in os.walk(job_dir):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
    return size, files


def _ledger_and_stragglers(keeper: LedgerKeeper) -> None:
    """One pass of the launcher's ledger watcher (launch/launcher/watchers/ledger.py)."""
    keeper.write()
    keeper.stragglers(StragglerRule())


def _timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def _wall_and_cpu(action: Callable[[], object]) -> tuple[float, float]:
    """``action``'s wall time and this thread's CPU seconds in it: on cores that the ranks and
    the launcher's thread share, the wall time is mostly the wait for one."""
    cpu = time.thread_time()
    wall = _timed(action)
    return wall, time.thread_time() - cpu


class Driver:
    """The phases any backend's job goes through: its launcher (``job``, tenter's own) in a
    thread of this process, driven from this one."""

    def __init__(
        self, plan: Plan, job: Supervisor, bound_s: float, steady: bool, steady_s: float
    ) -> None:
        self.plan, self.job, self.bound_s = plan, job, bound_s
        self.steady, self.steady_s = steady, steady_s
        """Whether to measure the steady state (phase 4), and for how long."""
        self.figures = Figures(len(plan.hosts), len(plan.hosts) * plan.procs_per_host)
        self._stop = threading.Event()
        self._launcher: threading.Thread | None = None

    def _count_requests(self, phase: str) -> None:
        """The store's requests per host in ``phase``: counted where agents make them."""

    def _end_launcher(self) -> None:
        self._stop.set()
        if self._launcher is not None:
            self._launcher.join()

    def _launch(self) -> None:
        started = time.monotonic()
        create_job_dir(self.plan)  # as a backend's submit does
        self.job.start()
        handle = JobHandle(
            self.plan.backend, self.plan.job_id, self.plan.job_dir, process_identity(os.getpid())
        )
        handle.write()

        def launcher() -> None:
            self.figures.result = self.job.wait(self._stop)

        self._launcher = threading.Thread(target=launcher, name="tenter-launcher", daemon=True)
        self._launcher.start()
        _wait(
            "every rank at its first step",
            _stepping(self.plan, self.figures.ranks, set()),
            self.bound_s,
        )
        self.figures.seconds["first_step"] = time.monotonic() - started

    def _steady_state(self) -> None:
        assert self._launcher is not None and self._launcher.native_id is not None
        launcher_cpu = functools.partial(_thread_cpu_s, self._launcher.native_id)
        status = functools.partial(tenter_status, self.plan, self.bound_s)
        self.figures.steady.update(steady_state(self.plan, launcher_cpu, status, self.steady_s))

    def _hang(self) -> None:
        seconds, report = name_a_hang(self.plan, LocalSignals(), self.bound_s)
        self.figures.seconds["hang_named"], self.figures.hang_report = seconds, report
        assert self._launcher is not None
        self._launcher.join(timeout=self.bound_s)


class Rehearsal(Driver):
    """The local backend's rehearsal: every phase, the agents in packs."""

    def __init__(
        self,
        plan: Plan,
        hosts_per_pack: int,
        bound_s: float,
        steady: bool = True,
        steady_s: float = STEADY_S,
    ) -> None:
        self.local = RehearsalJob(plan, hosts_per_pack)
        super().__init__(plan, self.local, bound_s, steady, steady_s)
        self._requests: dict[int, int] = {}
        self._polls: dict[int, int] = {}

    def run(self) -> Figures:
        try:
            self._launch()
            self._kill_a_rank()
            if self.plan.min_hosts < len(self.plan.hosts):  # a fixed membership stops
                self._lose_a_host()
            if self.steady:
                self._steady_state()
            self._hang()
        finally:
            self._end_launcher()
            self.local.end_packs(self.bound_s)
        return self.figures

    def _count_requests(self, phase: str) -> None:
        ended, packs = time.time(), len(self.local.packs)
        saved = functools.partial(store_count.saved_since, self.plan.job_dir, packs, ended)
        _wait("the packs' store counts", saved, self.bound_s)
        now, polls = store_count.requests_by_host(self.plan.job_dir)
        deltas = [count - self._requests.get(host, 0) for host, count in now.items()]
        poll_deltas = [count - self._polls.get(host, 0) for host, count in polls.items()]
        self._requests, self._polls = now, polls
        self.figures.store_requests[phase] = sum(deltas) / max(1, len(deltas))
        self.figures.store_polls[phase] = sum(poll_deltas) / max(1, len(deltas))
        self.figures.store_requests_max[phase] = max(deltas, default=0)

    def _launch(self) -> None:
        super()._launch()
        self.figures.processes_per_host = len(self.local.light_processes()) / self.figures.hosts
        self._count_requests("launch")

    def _kill_a_rank(self) -> None:
        self.figures.seconds["kill"] = kill_a_rank(self.plan, self.figures.ranks, self.bound_s)
        self._count_requests("kill")

    def _lose_a_host(self) -> None:
        old = _pids(self.plan)
        started = time.monotonic()
        commands.lose_host(self.plan.job_dir, self.plan.hosts[-1].name)
        left = self.figures.ranks - self.plan.procs_per_host
        _wait(
            "the other hosts' ranks stepping after a host's loss",
            _stepping(self.plan, left, old),
            self.bound_s,
        )
        self.figures.seconds["host_lost"] = time.monotonic() - started
        self._count_requests("host_lost")

    def _steady_state(self) -> None:
        agents0, wall0 = self.local.packs_cpu_s(), time.monotonic()
        super()._steady_state()
        agents1, wall1 = self.local.packs_cpu_s(), time.monotonic()
        # The agents' CPU over the window and the timed reads after it: they run all along.
        steady = self.figures.steady
        steady["agent_core"] = (agents1 - agents0) / (wall1 - wall0) / self.figures.hosts
        light = self.local.light_processes()
        steady["light_pss_mb"] = pss_bytes(light) / max(1, len(light)) / 2**20
        self._count_requests(STEADY_PHASE)


def name_a_hang(plan: Plan, signals: RankSignals, bound_s: float) -> tuple[float, str]:
    """Seconds from the culprit's SIGSTOP (``signals``: on this machine, or through its
    agent) until the hang report is written, the others waiting in the all-reduce after its
    last step; and the report."""
    culprit = next(p for p in hang.read_progress(plan) if p.rank == CULPRIT)
    report = Path(plan.job_dir) / layout.HANG_REPORT_FILE
    started = time.monotonic()
    signals.send([culprit], signal.SIGSTOP)

    def stopped() -> bool:
        return signals.states([culprit])[CULPRIT] in hang.STOPPED

    _wait("the culprit's process stopped", stopped, bound_s)
    last = next(p for p in hang.read_progress(plan) if p.pid == culprit.pid)
    commands.hang(plan.job_dir, CULPRIT, last.step)
    _wait("the hang report", report.exists, (plan.hang_timeout or 0) + bound_s)
    return time.monotonic() - started, report.read_text()


def kill_a_rank(plan: Plan, ranks: int, bound_s: float) -> float:
    """Seconds from ``tenter fault kill --rank``'s request (the middle rank's: its agent
    SIGKILLs it) until every one of ``ranks`` ranks steps again in a new process."""
    old = _pids(plan)
    started = time.monotonic()
    kill_rank(plan.job_dir, ranks // 2)
    _wait("every rank stepping after a rank's kill", _stepping(plan, ranks, old), bound_s)
    return time.monotonic() - started


def steady_state(
    plan: Plan,
    launcher_cpu_s: Callable[[], float],
    status: Callable[[], None],
    window_s: float = STEADY_S,
) -> dict[str, float]:
    """The steady state's figures (``window_s`` of it): the launcher's CPU
    (``launcher_cpu_s``: its CPU seconds so far) and this process's RSS, what the job
    directory grows by, and one live-view refresh, ledger and straggler pass and ``status``."""
    from tenter.monitor.live import LiveView

    me = psutil.Process()
    # As the launcher holds them all along: caught up before the window, then one refresh
    # timed (a fresh reader's first read of the whole history is not the steady state).
    view, keeper = LiveView(plan, live=False), LedgerKeeper(plan.job_dir)
    view.poll()
    _ledger_and_stragglers(keeper)
    size0, files0 = _job_dir_usage(plan.job_dir)
    cpu0, wall0 = launcher_cpu_s(), time.monotonic()
    time.sleep(window_s)
    cpu1, wall1 = launcher_cpu_s(), time.monotonic()
    size1, files1 = _job_dir_usage(plan.job_dir)
    steady = {
        "launcher_core": (cpu1 - cpu0) / (wall1 - wall0),
        "launcher_rss_mb": me.memory_info().rss / 2**20,
        "job_dir_bytes_per_s": (size1 - size0) / (wall1 - wall0),
        "job_dir_files_per_s": (files1 - files0) / (wall1 - wall0),
    }
    steady["live_view_s"], steady["live_view_cpu_s"] = _wall_and_cpu(view.poll)
    steady["ledger_stragglers_s"], steady["ledger_stragglers_cpu_s"] = _wall_and_cpu(
        lambda: _ledger_and_stragglers(keeper)
    )
    # Its CPU too: on a machine whose cores the ranks share, most of its wall time is the
    # wait for one. The only child reaped meanwhile (the packs end with the rehearsal).
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    steady["status_s"] = _timed(status)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    steady["status_cpu_s"] = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    return steady


def tenter_status(plan: Plan, bound_s: float) -> None:
    tenter = [sys.executable, "-m", "tenter", "status", plan.job_dir]
    subprocess.run(tenter, check=True, capture_output=True, timeout=bound_s)
