"""Status and cancel for jobs whose processes run on this machine (local and mpi backends).

Every process of such a job carries ``TENTER_JOB_ID`` in its environment (see
:func:`tenter.launch.local.job_processes`); the launcher (``tenter run``) is the parent that
does not. Cancelling signals the launcher, which stops the job as Ctrl-C does and writes its
summary; processes without a launcher (it was killed) are stopped directly.
"""

from __future__ import annotations

import contextlib
import signal

import psutil

from tenter.launch.api import JobStatus
from tenter.launch.local import STOP_GRACE_S, job_processes
from tenter.launch.plan import Plan

CANCEL_TIMEOUT_S = STOP_GRACE_S + 20.0
"""The launcher's own grace period for its workers, plus writing the summary."""


def process_status(plan: Plan) -> JobStatus:
    procs = job_processes(plan.job_id)
    if procs:
        return JobStatus(True, f"RUNNING ({len(procs)} processes on this machine)")
    return JobStatus(
        False, "ENDED without a summary: no process of the job is left (its launcher was killed)"
    )


def _launchers(procs: list[psutil.Process]) -> list[psutil.Process]:
    pids = {p.pid for p in procs}
    found: dict[int, psutil.Process] = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            parent = proc.parent()
            if parent is not None and parent.pid not in pids and parent.pid != 1:
                found[parent.pid] = parent
    return list(found.values())


def stop_processes(plan: Plan) -> str:
    procs = job_processes(plan.job_id)
    if not procs:
        return f"job {plan.job_id} has no process left to stop"
    launchers = _launchers(procs)
    targets = launchers or procs
    for proc in targets:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(targets, timeout=CANCEL_TIMEOUT_S)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    who = "its launcher" if launchers else f"{len(procs)} processes (no launcher left)"
    return f"cancelled job {plan.job_id}: stopped {who}"
