"""The embedded default backend: ``instance_count`` simulated hosts on this machine.

Each simulated host is one torch elastic agent process (:mod:`tenter.launch.agent`) with
its own name, loopback address and SageMaker directory. The launcher serves the c10d
rendezvous store on a port the kernel picked, follows the ranks' logs, and stops every
host as soon as one fails (SIGTERM, then SIGKILL after a grace period). Whatever happens
(success, failure, Ctrl-C, a SIGKILLed worker) it finally sweeps away any process that
carries this job's id, so nothing outlives the job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil

from tenter.launch import hang, layout, report
from tenter.launch.api import JobResult, JobStatus, python_executable
from tenter.launch.console import ConsoleTail, EventFeed, say
from tenter.launch.jobs import tenter_home
from tenter.launch.plan import HostPlan, Plan, make_plan
from tenter.spec import JobSpec

POLL_S = 0.05
"""How often the launcher checks agents, error files and hang records: often enough that a
failure stops the job well within a second, rarely enough to leave the cores to the ranks."""
STOP_GRACE_S = 10.0
"""How long stopped workers get to exit after SIGTERM before SIGKILL."""
EXIT_BY_STOP = {"interrupted": 130, "max_run": 124, "hang": 124}
"""The job's exit status when the launcher stopped it for that reason (a shell's 130 for
Ctrl-C, timeout(1)'s 124); a failed rank's stop takes the root cause's status."""


class LocalBackend:
    name = "local"

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        return make_plan(spec, job_id, tenter_home(), python_executable())

    def submit(self, plan: Plan) -> JobResult:
        return LocalJob(plan).run()

    def status(self, plan: Plan) -> JobStatus:
        from tenter.launch import processes  # built on this module's job_processes

        return processes.process_status(plan)

    def cancel(self, plan: Plan) -> str:
        from tenter.launch import processes

        return processes.stop_processes(plan)


def create_backend() -> LocalBackend:
    return LocalBackend()


def serve_store(host: str, listener: socket.socket) -> Any:
    """The rendezvous store, serving on ``listener``'s socket: the kernel picked the port
    and the store takes the socket over, so no other process can take the port between
    choosing and binding it. torch's default (libuv) store takes a listening socket only
    from torch 2.8 (pytorch#150215); older torch gets the legacy store, which always could."""
    import torch
    import torch.distributed as dist

    return dist.TCPStore(
        host,
        listener.getsockname()[1],
        is_master=True,
        master_listen_fd=listener.detach(),
        wait_for_workers=False,
        timeout=timedelta(seconds=300),
        use_libuv=torch.__version__ >= "2.8",
    )


@contextlib.contextmanager
def stop_requests() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM while the job runs (signals reach the main thread only;
    elsewhere, e.g. ``Estimator.fit`` in a thread, the caller's handlers stay)."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: requested.set())
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def control_dir(plan: Plan) -> Path:
    """Requests to a running job (``tenter join`` writes ``join-*`` files here)."""
    path = Path(plan.job_dir) / "control"
    path.mkdir(exist_ok=True)
    return path


def _env(proc: psutil.Process, name: str) -> str | None:
    try:
        return proc.environ().get(name)
    except psutil.Error:
        return None


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every process of this job: they all carry TENTER_JOB_ID in their environment,
    including workers whose agent died (they run in sessions of their own)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("TENTER_JOB_ID") == job_id:
                found.append(proc)
    return found


class LocalJob:
    listen_addr = "127.0.0.1"
    """Where the job's store listens (the mpi backend serves remote hosts: all interfaces)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.agents: list[subprocess.Popen[bytes]] = []
        self.lost: set[int] = set()
        """Indexes of hosts whose agent was killed while the job went on without them."""
        self.rdzv_port = 0
        self.events = EventFeed(plan)
        self.extra: list[str] = []
        """Lines for the summary beyond the failures (a hang report...)."""
        self._errors_seen: set[str] = set()
        self._next_hang_check = 0.0

    def _start(self) -> None:
        """Start the job's processes: one agent per host (the mpi backend: mpirun)."""
        for host in self.plan.hosts:
            self._start_agent(host)

    def _start_agent(self, host: HostPlan) -> None:
        plan_file = str(Path(self.plan.job_dir) / "plan.json")
        log_path = Path(self.plan.job_dir) / "logs" / f"agent-{host.name}.log"
        with open(log_path, "wb") as log:
            self.agents.append(
                subprocess.Popen(
                    [
                        python_executable(),
                        "-m",
                        "tenter.launch.agent",
                        plan_file,
                        str(host.index),
                        str(self.rdzv_port),
                    ],
                    env={**os.environ, **host.env},
                    cwd=self.plan.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Ctrl-C in a terminal reaches the launcher only, which stops the
                    # hosts in order rather than all processes at once.
                    start_new_session=True,
                )
            )

    def _a_rank_failed(self) -> bool:
        """A rank recorded a failure of its own in its error file. Without restarts the job
        cannot succeed any more: stop now rather than after that process's slow teardown.

        A peer's broken-connection error does not count: it follows another rank's death,
        which that rank's agent is about to report, and stopping now would lose that report.
        """
        if self.plan.max_restarts:
            return False
        for entry in os.scandir(Path(self.plan.job_dir) / "logs"):
            if entry.name.endswith(".error.json") and entry.name not in self._errors_seen:
                self._errors_seen.add(entry.name)
                if not report.is_peer_error(entry.path):
                    return True
        return False

    def _wait(self, stop_requested: threading.Event) -> str | None:
        """Block until the job ends; returns why it was stopped early, or None."""
        deadline = time.monotonic() + self.plan.max_run if self.plan.max_run else None
        while True:
            verdict = self._check_agents()
            if verdict != "running":
                return None if verdict == "succeeded" else verdict
            if self._a_rank_failed():
                return "failed"
            if stop_requested.is_set():
                return "interrupted"
            if deadline is not None and time.monotonic() > deadline:
                return "max_run"
            self.events.print_new()
            self._admit_joining_hosts()
            if self._hung():
                if self.plan.on_hang == "stop":
                    return "hang"
                self._restart_hung_workers()
            time.sleep(POLL_S)

    def _check_agents(self) -> str:
        """running, succeeded, or failed. An agent killed by a signal is a lost host: the job
        goes on while ``min_hosts`` remain (torch elastic re-forms the world without it)."""
        active = [i for i in range(len(self.agents)) if i not in self.lost]
        for i in active:
            code = self.agents[i].poll()
            if code is None or code == 0:
                continue
            if code < 0 and len(active) - 1 >= self.plan.min_hosts and self.plan.max_restarts:
                self._lose_host(i, signal.Signals(-code).name)
                return "running"
            return "failed"
        codes = [self.agents[i].poll() for i in active]
        return "succeeded" if codes and all(c == 0 for c in codes) else "running"

    def _lose_host(self, index: int, why: str) -> None:
        self.lost.add(index)
        name = self.plan.hosts[index].name
        # Its workers run in sessions of their own and outlive their killed agent.
        orphans = [p for p in job_processes(self.plan.job_id) if _env(p, "TENTER_HOST") == name]
        for proc in orphans:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(orphans, timeout=STOP_GRACE_S)
        left = len(self.agents) - len(self.lost)
        say(f"host {name} lost (its agent was killed by {why}); going on with {left} hosts")

    def _admit_joining_hosts(self) -> None:
        """``tenter join JOB`` leaves a request file; start one more host per request."""
        for request in sorted(control_dir(self.plan).glob("join-*")):
            request.unlink()
            active = len(self.agents) - len(self.lost)
            if active >= self.plan.max_hosts:
                say(f"cannot add a host: the job has {active} of max_hosts {self.plan.max_hosts}")
                continue
            spec = JobSpec.model_validate(self.plan.spec)
            grown = spec.model_copy(update={"instance_count": len(self.plan.hosts) + 1})
            host = make_plan(grown, self.plan.job_id, tenter_home(), python_executable()).hosts[-1]
            self.plan = dataclasses.replace(self.plan, hosts=[*self.plan.hosts, host])
            layout.create_host(host)
            layout.write_plan(self.plan)
            self._start_agent(host)
            say(f"host {host.name} joining; it enters at the next rendezvous")

    def _hung(self) -> bool:
        if not self.plan.hang_timeout or time.monotonic() < self._next_hang_check:
            return False
        self._next_hang_check = time.monotonic() + 0.5
        progress = hang.read_progress(self.plan)
        if not progress:
            return False
        now = time.time()
        if now - max(p.time for p in progress) < self.plan.hang_timeout:
            return False
        text = hang.report(progress, hang.collect_stacks(progress), time.time())
        text = f"hang: no rank made progress for {self.plan.hang_timeout} s\n{text}"
        (Path(self.plan.job_dir) / "hang-report.txt").write_text(text + "\n")
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
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for agent in self.agents:
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=max(0.0, deadline - time.monotonic()))

    def _sweep(self) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        procs = job_processes(self.plan.job_id)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=STOP_GRACE_S)

    def run(self) -> JobResult:
        started = time.monotonic()
        layout.create(self.plan)
        # The kernel picks the port and we keep the socket: no window in which another job
        # could take it (the classic fixed 29500 clash).
        listener = socket.create_server((self.listen_addr, 0), backlog=1024)
        port = self.rdzv_port = listener.getsockname()[1]
        stopped_at: float | None = None
        reason: str | None = None
        tail = view = None
        try:
            with stop_requests() as stop_requested:
                self._start()
                # Imported once the agents are starting, so that their start-up and ours
                # overlap (serve_store imports torch.distributed the same way).
                from tenter.monitor.live import LiveView

                # Before the tail: a live table redirects stdout, where the tail must print.
                view = LiveView(
                    self.plan,
                    live=self.plan.live,
                    metrics_port=self.plan.metrics_port,
                    metrics_addr=self.plan.metrics_addr,
                ).start()
                tail = ConsoleTail(self.plan).start()
                store = None
                if self.plan.rdzv_backend == "c10d":
                    # The store owns the listening socket from here on (and closes it).
                    store = serve_store("127.0.0.1", listener)
                reason = self._wait(stop_requested)
                if reason is not None:
                    stopped_at = time.time()
                    self._stop()
                self.events.print_new()
                del store
        finally:
            self._sweep()
            if tail is not None:
                tail.stop()
            if view is not None:  # after the tail: the last log lines print above the table
                view.stop()
            listener.close()
        return self._result(reason, stopped_at, time.monotonic() - started, port)

    def _result(
        self, reason: str | None, stopped_at: float | None, duration: float, port: int
    ) -> JobResult:
        failures, agent_errors = report.collect_failures(self.plan, stopped_at)
        extra = [*agent_errors, *self.extra]
        if reason == "max_run":
            extra.insert(0, f"stopped: max_run of {self.plan.max_run} s exceeded")
        return report.record_result(
            self.plan,
            failures,
            extra,
            exit_code=0 if reason is None else EXIT_BY_STOP.get(reason),
            duration_s=duration,
            interrupted=reason == "interrupted",
            rdzv_endpoint=f"{self.listen_addr}:{port}",
        )
