"""The launcher's loop for a job whose processes run from this machine: tenter's per-host
agents (local backend) or mpirun (mpi backend).

:class:`Supervisor` creates the job directory, serves the rendezvous store on a port the
kernel picked, starts the job's processes (a subclass's :meth:`~Supervisor.start_processes`),
then watches them: a rank's recorded failure, a process's exit, ``max_run``, a hang, a stop
request. It stops every host as soon as one fails (SIGTERM, then SIGKILL after a grace
period) and, whatever happens (success, failure, Ctrl-C, a SIGKILLed worker), finally sweeps
away any process that carries this job's id, so nothing outlives the job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from tenter.contract.isolation import SWITCH_ADDR
from tenter.contract.plan import HostPlan, Plan
from tenter.errors import ExitCode
from tenter.goodput.records import LedgerKeeper, record_hang, record_straggler
from tenter.goodput.stragglers import Straggler, StragglerRule, find_stragglers
from tenter.jobdir import layout, published
from tenter.jobdir.results import Failure, JobResult
from tenter.launch import flight_recorder, hang, report
from tenter.launch.console import EventFeed, say
from tenter.launch.isolation import hosts as isolated_hosts
from tenter.launch.isolation.network import HostNetwork
from tenter.launch.output import create_job_dir
from tenter.launch.preemption import PreemptionWatch
from tenter.launch.processes import STOP_GRACE_S, job_processes, kill_all
from tenter.launch.signals import is_preemption
from tenter.launch.store import serve_store
from tenter.runtime.parent_death import dies_with_parent

POLL_S = 0.05
"""How often the launcher checks its processes, error files and hang records: often enough
that a failure stops the job well within a second, rarely enough to leave the cores to the
ranks."""
FLIGHT_RECORDER_WAIT_S = 2.0
"""How long the hang report waits for the ranks' flight recorders, after their stacks."""
LEDGER_S = 2.0
"""How often the goodput ledger in the job directory is brought up to date (at most)."""
LEDGER_SHARE = 50
"""The ledger's interval is at least this many times the time one pass takes."""
AGENT_REPORT_S = 1.0
"""How long an agent takes, past the grace period, to kill its workers and write its result."""
EXIT_BY_STOP = {
    "interrupted": ExitCode.INTERRUPTED,
    "max_run": ExitCode.MAX_RUN,
    "hang": ExitCode.HANG,
    "preempted": ExitCode.PREEMPTED,
}
"""The job's exit code when the launcher stopped it for that reason."""


def start_process(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    log: BinaryIO,
    death_signal: signal.Signals = signal.SIGTERM,
) -> subprocess.Popen[bytes]:
    """A process of the launcher's: in a session of its own, its output in ``log``, sent
    ``death_signal`` by the kernel when the launcher dies (see :meth:`Supervisor.spawn`)."""
    return subprocess.Popen(
        argv,
        env={**os.environ, **env},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=dies_with_parent(death_signal),
    )


class Supervisor:
    listen_addr = "127.0.0.1"
    """Where the job's store listens (loopback: the simulated hosts are all here)."""

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
        self._oom_kills_before = report.oom_kill_count()
        self._errors_seen: set[str] = set()
        self._next_hang_check = 0.0
        self._listener: socket.socket | None = None
        self._store: Any = None
        self.network: HostNetwork | None = None
        """The job's isolated hosts (``isolation: network``) while it runs."""
        self._store_proc: subprocess.Popen[bytes] | None = None
        """The store's process on the isolated hosts' switch."""
        self._started = time.monotonic()
        self._ledger: LedgerKeeper | None = None
        self._next_ledger = 0.0
        self._straggler_rule = StragglerRule(**plan.stragglers) if plan.stragglers else None  # type: ignore[arg-type]
        self.stragglers: dict[int, Straggler] = {}
        """The ranks named stragglers so far (each once)."""
        self.scratch_dirs: list[str] = []
        """Temporary directories the job's processes write in, removed by the final sweep
        (after its processes are gone: a process killed there cannot remove its own)."""

    # ---- what a subclass provides ----

    def start_processes(self) -> None:
        """Start the job's processes (into ``self.procs``)."""
        raise NotImplementedError

    def check_processes(self) -> str:
        """running, succeeded or failed."""
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            return "failed"
        return "succeeded" if codes and all(c == 0 for c in codes) else "running"

    def on_tick(self) -> None:
        """Called on every poll while the job runs (membership changes, joins...)."""

    def collect_extra_failures(self) -> None:
        """Before the result is read: record failures only the launcher saw."""

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
        """Create the job directory (unless a detaching caller did), start the processes and
        the store; returns at once."""
        if not (Path(self.plan.job_dir) / layout.PLAN_FILE).exists():
            create_job_dir(self.plan)
        if self.plan.isolation == "network":
            self._start_network()
        elif not self.plan.store_on_first_host:  # else tenter.launch.agent.job_store
            # The kernel picks the port and we keep the socket: no window in which another job
            # could take it (the classic fixed 29500 clash).
            self._listener = socket.create_server((self.listen_addr, 0), backlog=1024)
            self.rdzv_port = self._listener.getsockname()[1]
        try:
            self.start_processes()
            if self._listener is not None and self.plan.rdzv_backend == "c10d":
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
            if self.plan.rdzv_backend == "c10d":
                self.rdzv_port, self._store_proc = isolated_hosts.serve_store(
                    self.network, self.plan
                )
        except BaseException:
            self._sweep()
            raise

    def wait(self, stop: threading.Event) -> JobResult:
        stopped_at: float | None = None
        reason: str | None = None
        try:
            reason = self._watch(stop)
            if reason is not None:
                stopped_at = time.time()
                self._stop()
            if self.preemption.requested_at is not None:
                # The ranks that SIGTERM ended were stopped by the job's preemption.
                stopped_at = min(stopped_at or time.time(), self.preemption.requested_at)
            self._last_ledger_pass()
            self.events.print_new()
        finally:
            self._store = None
            self._sweep()
            if self._listener is not None:
                self._listener.close()
        return self._result(reason, stopped_at)

    def _watch(self, stop: threading.Event) -> str | None:
        """Block until the job ends; returns why it was stopped early, or None."""
        deadline = self._started + self.plan.max_run if self.plan.max_run else None
        while True:
            verdict = self.check_processes()
            if verdict != "running":
                return None if verdict == "succeeded" else verdict
            if self._a_rank_failed():
                return "failed"
            if stop.is_set():
                if not (is_preemption(stop) and self.plan.preemption_grace):
                    return "interrupted"
                if not self.preemption.requested:
                    self.preemption.start()  # the ranks stop by themselves, then succeed
                elif self.preemption.expired():
                    return "preempted"
            if deadline is not None and time.monotonic() > deadline:
                return "max_run"
            self.events.print_new()
            self.on_tick()
            self._keep_ledger()
            if self._hung():
                if self.plan.on_hang == "stop":
                    return "hang"
                self._restart_hung_workers()
            time.sleep(POLL_S)

    def _a_rank_failed(self) -> bool:
        """A rank recorded a failure of its own in its error file. Without restarts the job
        cannot succeed any more: stop now rather than after that process's slow teardown.

        A peer's broken-connection error does not count: it follows another rank's death,
        which that rank's agent is about to report, and stopping now would lose that report.
        """
        if self.plan.max_restarts:
            return False
        for entry in os.scandir(layout.logs_dir(self.plan.job_dir)):
            if (
                entry.name.endswith(layout.ERROR_FILE_SUFFIX)
                and entry.name not in self._errors_seen
            ):
                self._errors_seen.add(entry.name)
                if not report.is_peer_error(entry.path):
                    return True
        return False

    def _keep_ledger(self) -> None:
        """Rewrite ``goodput.json`` every LEDGER_S while the job runs (the summary has the
        final one), and name the stragglers that appeared."""
        started = time.monotonic()
        if started < self._next_ledger:
            return
        try:
            self._ledger_pass()
        except (OSError, ValueError, KeyError, TypeError) as e:
            # A full disk, a damaged record: the job goes on without its ledger (said once).
            self._next_ledger = float("inf")
            say(f"the goodput ledger is no longer kept: {e!r}")
            return
        # A pass reads the records once but reckons over all of them: a long job's passes
        # are spaced out so that they take at most 1/LEDGER_SHARE of a core.
        self._next_ledger = started + max(LEDGER_S, LEDGER_SHARE * (time.monotonic() - started))

    def _last_ledger_pass(self) -> None:
        """Once the ranks are gone: what their last steps show. A job that ended between two
        passes (or within its first) has its stragglers named all the same, as any later
        reading of its records names them."""
        if self._next_ledger != float("inf"):  # unless the ledger was given up
            self._next_ledger = 0.0
            self._keep_ledger()

    def _ledger_pass(self) -> None:
        if self._ledger is None:
            self._ledger = LedgerKeeper(self.plan.job_dir)
        self._ledger.write()
        if self._straggler_rule is None:
            return
        steps, hosts = self._ledger.reader.arrivals, self._ledger.reader.hosts
        for straggler in find_stragglers(steps, hosts, self._straggler_rule):
            if straggler.rank not in self.stragglers:
                self.stragglers[straggler.rank] = straggler
                record_straggler(self.plan.job_dir, straggler)
                say(f"straggler: {straggler.text}")

    def _hung(self) -> bool:
        if not self.plan.hang_timeout or time.monotonic() < self._next_hang_check:
            return False
        self._next_hang_check = time.monotonic() + 0.5
        progress = hang.read_progress(self.plan)
        verdict = hang.hang_verdict(
            progress, time.time(), self.plan.hang_timeout, self.events.restarted_at
        )
        if verdict is None:
            return False
        record_hang(self.plan.job_dir)
        asked = flight_recorder.request_dumps(self.plan.job_dir)
        stacks = hang.collect_stacks(progress)
        states = {p.rank: hang.process_state(p.pid) for p in progress}
        text = hang.report(progress, stacks, time.time(), states)
        answering = {p.rank: p.stem for p in progress if p.state != hang.EXITING}
        dumps = flight_recorder.collect_dumps(answering, asked, FLIGHT_RECORDER_WAIT_S)
        found = flight_recorder.culprits(dumps, {p.rank: p.host for p in progress})
        if found:
            text += "\n" + "\n".join(found)
        text = f"hang: {verdict}\n{text}"
        (Path(self.plan.job_dir) / layout.HANG_REPORT_FILE).write_text(text + "\n")
        self.extra.append(text)
        say(text)
        return True

    def _restart_hung_workers(self) -> None:
        """on_hang: restart. Kill the workers; their agents restart the group (one restart)."""
        for p in hang.read_progress(self.plan):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        self._next_hang_check = time.monotonic() + (self.plan.hang_timeout or 0)

    def _stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        # The agents give their workers the same grace, then SIGKILL them and report: wait for
        # that report rather than kill the agents at the very moment they escalate.
        deadline = time.monotonic() + STOP_GRACE_S + AGENT_REPORT_S
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))

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

    def _result(self, reason: str | None, stopped_at: float | None) -> JobResult:
        self.collect_extra_failures()
        failures, agent_errors, crashed_at_exit = report.collect_failures(self.plan, stopped_at)
        if reason == "failed" and crashed_at_exit and not (failures or agent_errors):
            # Every rank that "failed" had finished its script: the job did its work.
            reason = None if not self.host_failures else reason
        extra = [*agent_errors, *self.extra]
        exit_code = EXIT_BY_STOP.get(reason or "", ExitCode.JOB_FAILED if reason else 0)
        if self.preemption.requested and reason in (None, "preempted"):
            # Whether the ranks ended by the request or finished meanwhile, the job was
            # preempted: its outcome says whether a final checkpoint was made, and what
            # tenter's own SIGTERM to the ranks caused is no failure of theirs.
            exit_code, line = self.preemption.outcome()
            extra.insert(0, line)
            failures = [f for f in failures if not f.secondary]
        if reason == "max_run":
            extra.insert(0, f"stopped: max_run of {self.plan.max_run} s exceeded")
        oom_kills_after = report.oom_kill_count()
        outcome = report.Outcome(
            exit_code=exit_code,
            duration_s=time.monotonic() - self._started,
            interrupted=exit_code == ExitCode.INTERRUPTED,
            rdzv_endpoint=published.published(self.plan.job_dir, published.STORE) or ""
            if self.plan.store_on_first_host
            else f"{self.listen_addr}:{self.rdzv_port}",
            extra=extra,
            notes=[*crashed_at_exit, *self.notes],
            stragglers=[s.to_dict() for _, s in sorted(self.stragglers.items())],
            lost_hosts=self.lost_hosts,
            oom_kills=None
            if oom_kills_after is None or self._oom_kills_before is None
            else oom_kills_after - self._oom_kills_before,
        )
        return report.record_result(self.plan, [*self.host_failures, *failures], outcome)
