"""What the local and mpi backends share: their jobs run under a :class:`Supervisor` on this
machine, in ``tenter run``'s own process or, with ``--detach``, in a launcher process of their
own (``python -m tenter.launch.launcher.daemon``); ``status``, ``logs`` and ``cancel`` reach either
from any process through the job directory and the job's processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from tenter.contract.plan import Plan, read_plan
from tenter.errors import ExitCode
from tenter.jobdir import layout
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.results import JobResult, read_result
from tenter.launch.api import JobStatus, python_executable
from tenter.launch.launcher.output import create_job_dir
from tenter.launch.shared.console import ConsoleTail
from tenter.launch.shared.processes import (
    CANCEL_TIMEOUT_S,
    alive,
    job_processes,
    kill_all,
    process_identity,
    stop_job,
)
from tenter.launch.shared.signals import hold_stop_signals, is_preemption
from tenter.spec.errors import counted

if TYPE_CHECKING:
    from tenter.launch.launcher.supervisor import Supervisor

FOLLOW_POLL_S = 0.2
"""How often a process that did not launch a job looks for its summary."""


class SupervisedBackend:
    name = ""
    reports_progress = True
    daemon_module = "tenter.launch.launcher.daemon"
    """What a detached job's own process runs (``python -m MODULE BACKEND JOB_DIR``)."""
    daemon_stop_s = 0.0
    """What that process may take to end once its job's launcher has, before a cancel kills it."""

    def __init__(self) -> None:
        self._jobs: dict[str, Supervisor] = {}
        """Jobs this process launched and has not waited for yet."""

    def supervisor(self, plan: Plan) -> Supervisor:
        raise NotImplementedError

    def check_ready(self, plan: Plan) -> None:
        """Raise if this machine cannot run ``plan`` (a missing tool)."""

    def submit(self, plan: Plan, *, detach: bool = False) -> JobHandle:
        self.check_ready(plan)
        handle = JobHandle(self.name, plan.job_id, plan.job_dir, process_identity(os.getpid()))
        if detach:
            return self._start_daemon(plan, handle)
        create_job_dir(plan)
        job = self.supervisor(plan)
        job.start()
        handle.write()
        self._jobs[plan.job_id] = job
        return handle

    def _start_daemon(self, plan: Plan, handle: JobHandle) -> JobHandle:
        create_job_dir(plan)
        log = layout.logs_dir(plan.job_dir) / layout.LAUNCHER_LOG
        with open(log, "wb") as out:
            daemon = subprocess.Popen(
                [
                    python_executable(),
                    "-m",
                    self.daemon_module,
                    self.name,
                    plan.job_dir,
                ],
                cwd=plan.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own session: the caller's terminal and its end do not reach the job.
                start_new_session=True,
                preexec_fn=hold_stop_signals,
            )
        handle = dataclasses.replace(handle, scheduler_id=process_identity(daemon.pid))
        handle.write()
        return handle

    def wait(self, handle: JobHandle, stop: threading.Event) -> JobResult:
        job = self._jobs.pop(handle.job_id, None)
        if job is not None:
            return job.wait(stop)
        return self._follow(handle, stop)

    def _follow(self, handle: JobHandle, stop: threading.Event) -> JobResult:
        """Wait for a job another process launched: its summary, or its launcher's death."""
        job_dir = Path(handle.job_dir)
        cancelled = False
        while (result := read_result(job_dir)) is None:
            if stop.is_set() and not cancelled:
                if is_preemption(stop):
                    self.preempt(handle)
                else:
                    self.cancel(handle)
                cancelled = True
            if alive(handle.scheduler_id) is None:
                if (result := read_result(job_dir)) is not None:
                    return result
                kill_all(job_processes(handle.job_id))
                return JobResult(
                    job_id=handle.job_id,
                    job_dir=handle.job_dir,
                    exit_code=ExitCode.JOB_FAILED,
                    duration_s=0.0,
                    hosts=0,
                    procs_per_host=0,
                    summary=f"job {handle.job_id}: its launcher (pid {handle.scheduler_id}) "
                    "died without a summary; its processes were stopped",
                )
            time.sleep(FOLLOW_POLL_S)
        # The launcher exits right after writing the summary: wait for that (and reap it
        # where it is this process's child), so that the job has truly ended on return.
        launcher = alive(handle.scheduler_id)
        if launcher is not None:
            with contextlib.suppress(psutil.Error):
                launcher.wait(timeout=CANCEL_TIMEOUT_S)
        return result

    def status(self, handle: JobHandle) -> JobStatus:
        """Running while its launcher runs (``tenter run``, or a detached job's own launcher:
        it carries no ``TENTER_JOB_ID``, and may have no process of the job yet, or none any
        more while it writes the summary), or while processes it left behind do."""
        launcher = alive(handle.scheduler_id)
        if launcher is not None:
            # Its descendants (one read of each process's stat), not the processes carrying
            # the job's id (a read of every process's environment: 2 s at 64 x 8 here).
            with contextlib.suppress(psutil.Error):  # it ended meanwhile: as if gone
                count = sum(p.pid != os.getpid() for p in launcher.children(recursive=True))
                text = f"RUNNING (launcher pid {launcher.pid}, {count} processes on this machine)"
                return JobStatus(True, text)
        procs = job_processes(handle.job_id)
        if procs:
            return JobStatus(
                True,
                "RUNNING without its launcher (it was killed): "
                f"{counted(len(procs), 'process')} left on this machine",
                launcher=False,
            )
        return JobStatus(
            False,
            "ENDED without a summary: no process of the job is left (its launcher was killed)",
        )

    def logs(
        self, handle: JobHandle, ranks: list[int] | None, tag: bool, follow: bool
    ) -> ConsoleTail:
        return ConsoleTail(handle.job_dir, ranks, tag)

    def cancel(self, handle: JobHandle) -> str:
        launcher = alive(handle.scheduler_id)
        if launcher is not None and launcher.pid == os.getpid():
            launcher = None  # this process launched it: stop its processes directly
        return stop_job(handle.job_id, launcher, grace_s=self.daemon_stop_s)

    def preempt(self, handle: JobHandle) -> str:
        """Preempt the running job (as SIGTERM to ``tenter run`` would): every rank stops at a
        step boundary after a final checkpoint; waits for its end (the grace period at most)."""
        launcher = alive(handle.scheduler_id)
        if launcher is None or launcher.pid == os.getpid():
            return self.cancel(handle)  # no launcher to preempt it: stopped directly
        grace = read_plan(handle.job_dir).preemption_grace
        return stop_job(handle.job_id, launcher, signal.SIGTERM, grace + self.daemon_stop_s)
