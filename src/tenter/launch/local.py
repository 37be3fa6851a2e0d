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
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psutil

from tenter.launch import layout, report
from tenter.launch.api import JobResult, python_executable, tenter_home
from tenter.launch.plan import Plan, make_plan
from tenter.spec import JobSpec

POLL_S = 0.02
STOP_GRACE_S = 10.0
"""How long stopped workers get to exit after SIGTERM before SIGKILL."""


class LocalBackend:
    name = "local"

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        return make_plan(spec, job_id, tenter_home(), python_executable())

    def submit(self, plan: Plan) -> JobResult:
        return LocalJob(plan).run()


def create_backend() -> LocalBackend:
    return LocalBackend()


@contextlib.contextmanager
def _stop_requests() -> Iterator[threading.Event]:
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
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.agents: list[subprocess.Popen[bytes]] = []
        self._errors_seen: set[str] = set()

    def _start_agents(self, rdzv_port: int) -> None:
        plan_file = str(Path(self.plan.job_dir) / "plan.json")
        for host in self.plan.hosts:
            log = open(Path(self.plan.job_dir) / "logs" / f"agent-{host.name}.log", "wb")  # noqa: SIM115
            with log:
                self.agents.append(
                    subprocess.Popen(
                        [
                            python_executable(),
                            "-m",
                            "tenter.launch.agent",
                            plan_file,
                            str(host.index),
                            str(rdzv_port),
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
            codes = [a.poll() for a in self.agents]
            if all(c == 0 for c in codes):
                return None
            if any(c not in (None, 0) for c in codes) or self._a_rank_failed():
                return "failed"
            if stop_requested.is_set():
                return "interrupted"
            if deadline is not None and time.monotonic() > deadline:
                return "max_run"
            time.sleep(POLL_S)

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
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        port = listener.getsockname()[1]
        stopped_at: float | None = None
        reason: str | None = None
        tail = None
        try:
            with _stop_requests() as stop_requested:
                self._start_agents(port)
                # Imported once the agents are starting, so that their start-up and ours overlap.
                import torch.distributed as dist

                from tenter.launch.console import ConsoleTail

                tail = ConsoleTail(self.plan).start()
                # The store owns the listening socket from here on (and closes it).
                store = dist.TCPStore(
                    "127.0.0.1",
                    port,
                    is_master=True,
                    master_listen_fd=listener.detach(),
                    wait_for_workers=False,
                    timeout=timedelta(seconds=300),
                )
                reason = self._wait(stop_requested)
                if reason is not None:
                    stopped_at = time.time()
                    self._stop()
                del store
        finally:
            self._sweep()
            if tail is not None:
                tail.stop()
            listener.close()
        return self._result(reason, stopped_at, time.monotonic() - started, port)

    def _result(
        self, reason: str | None, stopped_at: float | None, duration: float, port: int
    ) -> JobResult:
        failures, agent_errors = report.collect_failures(self.plan, stopped_at)
        extra = list(agent_errors)
        if reason == "max_run":
            extra.insert(0, f"stopped: max_run of {self.plan.max_run} s exceeded")
        result = JobResult(
            job_id=self.plan.job_id,
            job_dir=self.plan.job_dir,
            exit_code=0,
            duration_s=duration,
            hosts=len(self.plan.hosts),
            procs_per_host=self.plan.procs_per_host,
            failures=failures,
            interrupted=reason == "interrupted",
            rdzv_endpoint=f"127.0.0.1:{port}",
        )
        if reason is not None:
            code = {"interrupted": 130, "max_run": 124}.get(reason) or report.job_exit_code(
                result.root_cause
            )
            result = dataclasses.replace(result, exit_code=code)
        summary = report.render_summary(result, self.plan, extra)
        why = None if result.ok else report.failure_reason(result)
        for host in self.plan.hosts:
            layout.write_outcome(host, why)
        result = dataclasses.replace(result, summary=summary)
        (Path(self.plan.job_dir) / "summary.json").write_text(
            json.dumps(dataclasses.asdict(result), indent=2)
        )
        return result
