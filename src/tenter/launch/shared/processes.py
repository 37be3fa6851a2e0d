"""The processes of a job that runs on this machine (local and mpi backends): finding them,
their status, starting and stopping them.

Every process of such a job carries ``TENTER_JOB_ID`` in its environment, including workers
whose agent died (they run in sessions of their own); the launcher is the parent that does
not. Cancelling signals the launcher, which stops the job as Ctrl-C does (SIGINT) or
preempts it (SIGTERM) and writes its summary; processes without a launcher (it was killed)
are stopped directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import BinaryIO

import psutil

from tenter.runtime.parent_death import dies_with_parent
from tenter.spec.errors import counted

STOP_GRACE_S = float(os.environ.get("TENTER_STOP_GRACE_S", "10"))
"""How long stopped workers get to exit after SIGTERM before SIGKILL (the launcher's and each
agent's: agents inherit the launcher's environment). Scripts that save a checkpoint on SIGTERM
may need more; tests need less."""
CANCEL_TIMEOUT_S = STOP_GRACE_S + 20.0
"""The launcher's own grace period for its workers, plus writing the summary."""
AGENT_REPORT_S = 1.0
"""How long an agent takes, past the grace period, to kill its workers and write its result."""


WORKER_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)
"""Signals a worker starts with at their default disposition, as torchrun's workers do: an
agent started in the background by a shell inherits SIGINT and SIGQUIT ignored, and an
ignored signal stays ignored across ``exec``."""


def stat_fields(path: str) -> list[bytes]:
    """The fields of a ``/proc/.../stat`` line after the command's name, which may hold spaces
    and parentheses: ``[0]`` is the state (proc(5)'s field 3), ``[11]``/``[12]`` utime/stime,
    ``[19]`` starttime. One read: psutil reads three files for what a pass needs of this one."""
    with open(path, "rb") as stat:
        return stat.read().rpartition(b")")[2].split()


def worker_preexec(starter: int | None = None) -> Callable[[], None]:
    """The ``preexec_fn`` of a worker (or a warm template): default dispositions for the stop
    signals, and the kernel's SIGKILL when its agent (this process, or ``starter``) dies."""
    dies = dies_with_parent(signal.SIGKILL, starter=starter)

    def prepare() -> None:
        for sig in WORKER_DEFAULT_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        dies()

    return prepare


def env_of(proc: psutil.Process, name: str) -> str | None:
    try:
        return proc.environ().get(name)
    except psutil.Error:
        return None


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every process of this job but this one."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid != os.getpid() and env_of(proc, "TENTER_JOB_ID") == job_id:
            found.append(proc)
    return found


def kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL ``procs``, wait until they have ended and reap those that are this process's
    children. A zombie has ended (:func:`wait_ended`): the orphans of a killed process (a
    warm template's workers) stay zombies where the machine's init does not reap them, and
    :func:`psutil.wait_procs` would wait its whole timeout for each."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    wait_ended(procs, timeout=STOP_GRACE_S)
    for proc in procs:
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if proc.ppid() == os.getpid():
                os.waitpid(proc.pid, os.WNOHANG)


def wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` seconds for ``procs`` to end; those still running.

    Ended includes a zombie: a process that is not our child stays one until its own parent
    reaps it, which a parent that waits on us (``tenter cancel`` run from a script) does only
    after we return. :func:`psutil.wait_procs` counts a zombie as running."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        running = [p for p in procs if _running(p)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.2)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # another user's process still there: running, as far as we know
        return proc.is_running()


def process_count(job_id: str) -> int:
    return len(job_processes(job_id))


def process_identity(pid: int) -> str:
    """``pid@start time``: names one process for good (a pid alone may be reused)."""
    return f"{pid}@{psutil.Process(pid).create_time()}"


def alive(identity: str) -> psutil.Process | None:
    """The process :func:`process_identity` named, if it still runs."""
    pid, _, started = identity.partition("@")
    try:
        proc = psutil.Process(int(pid))
        if str(proc.create_time()) == started and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except (psutil.Error, ValueError):
        pass
    return None


def stop_job(
    job_id: str,
    launcher: psutil.Process | None,
    launcher_signal: signal.Signals = signal.SIGINT,
    grace_s: float = 0.0,
) -> str:
    """Stop a job from outside: ``launcher_signal`` to its launcher (SIGINT: it stops the
    hosts in order; SIGTERM: it preempts the job, within ``grace_s``; either way it writes
    the summary), else SIGTERM to its processes; SIGKILL what is left after the grace period."""
    procs = job_processes(job_id)
    if launcher is None and not procs:
        return f"job {job_id} has no process left to stop"
    targets = [launcher] if launcher is not None else procs
    sig = launcher_signal if launcher is not None else signal.SIGTERM
    for proc in targets:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    kill_all(wait_ended(targets, timeout=CANCEL_TIMEOUT_S + grace_s))
    who = (
        "its launcher"
        if launcher is not None
        else f"{counted(len(procs), 'process')} (no launcher left)"
    )
    verb = "preempted" if sig == signal.SIGTERM and launcher is not None else "cancelled"
    return f"{verb} job {job_id}: stopped {who}"


def start_process(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    log: BinaryIO,
    death_signal: signal.Signals = signal.SIGTERM,
) -> subprocess.Popen[bytes]:
    """A process of the launcher's: in a session of its own, its output in ``log``, sent
    ``death_signal`` by the kernel when the launcher dies (see
    :meth:`tenter.launch.launcher.supervisor.Supervisor.spawn`)."""
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


def stop_launched(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the launcher's own processes (agents, mpirun) and wait for them to end."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    # The agents give their workers the same grace, then SIGKILL them and report: wait for
    # that report rather than kill the agents at the very moment they escalate.
    deadline = time.monotonic() + STOP_GRACE_S + AGENT_REPORT_S
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
