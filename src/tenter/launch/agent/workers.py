"""The workers of one host for one rendezvous round: their start, their status, their stop.

Each worker is started exactly as the plan's rank entry says (the plan's command and working
directory, the host's environment plus the contract's per-rank variables, its output and
error files), in a session of its own (as torch's agent does: a stop reaches the worker's
whole process group), with default dispositions for the stop signals whatever the agent's own,
and SIGKILLed by the kernel if its agent dies. A warm spare (:mod:`tenter.launch.agent.spares`)
stands in for a fresh process when it can.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tenter.contract.torchrun import finished_marker
from tenter.jobdir.agent_result import WorkerFailure
from tenter.launch.agent.spares import WarmPool
from tenter.launch.agent.template import ForkedProcess
from tenter.launch.shared.processes import STOP_GRACE_S, worker_preexec
from tenter.launch.shared.signals import STOP_SIGNALS

STOP_POLL_S = 0.02
"""How often a stop checks whether the workers have exited."""


class GroupState(enum.Enum):
    HEALTHY = "healthy"
    """Every worker runs, or some finished and the others run."""
    SUCCEEDED = "succeeded"
    """Every worker exited 0 (or finished its script, then crashed at exit)."""
    FAILED = "failed"
    """At least one worker failed."""


@dataclass(frozen=True)
class WorkerEntry:
    """One worker as it is started: what the plan and the round say."""

    rank: int
    """The job-wide rank (names the files and the failure)."""
    local_rank: int
    argv: Sequence[str]
    env: Mapping[str, str]
    """The complete environment."""
    cwd: str
    stdout: str
    stderr: str
    error_file: str


@dataclass
class Worker:
    entry: WorkerEntry
    proc: subprocess.Popen[bytes] | ForkedProcess
    """A fresh worker is the agent's child; a warm one is its template's."""


def start_worker(entry: WorkerEntry, pool: WarmPool | None) -> Worker:
    """A warm spare become ``entry``'s worker, or a fresh process."""
    proc: subprocess.Popen[bytes] | ForkedProcess | None = (
        pool.take(entry.argv, entry.env, entry.cwd, entry.stdout, entry.stderr) if pool else None
    )
    if proc is None:
        with open(entry.stdout, "wb") as out, open(entry.stderr, "wb") as err:
            proc = subprocess.Popen(
                list(entry.argv),
                env=dict(entry.env),
                cwd=entry.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=worker_preexec(),
            )
    return Worker(entry, proc)


class WorkerGroup:
    """The workers this host runs in one round."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self.crashed_at_exit: list[WorkerFailure] = []
        """Workers that finished their script, then died in interpreter teardown (gloo's
        threads, a crash handler at exit): they did their work, so they do not fail the
        group; their real status is kept for the report, as a note."""

    def poll(self) -> tuple[GroupState, list[WorkerFailure]]:
        """The group's state, and its failed workers (when FAILED)."""
        failures = []
        running = False
        for worker in self.workers:
            code = worker.proc.poll()
            if code is None:
                running = True
            elif code != 0 and not self._finished_then_crashed(worker, code):
                failures.append(_failure(worker, code))
        if failures:
            return GroupState.FAILED, failures
        return (GroupState.HEALTHY if running else GroupState.SUCCEEDED), []

    def _finished_then_crashed(self, worker: Worker, code: int) -> bool:
        error_file = worker.entry.error_file
        if os.path.exists(error_file) or not os.path.exists(finished_marker(error_file)):
            return False
        if not any(f.pid == worker.proc.pid for f in self.crashed_at_exit):
            self.crashed_at_exit.append(_failure(worker, code))
        return True

    def stop(self, sig: signal.Signals, grace_s: float = STOP_GRACE_S) -> None:
        """``sig`` to every worker's process group, SIGKILL to what is left after
        ``grace_s``; returns once every worker has exited."""
        self._signal_all(sig)
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(STOP_POLL_S)
        self._signal_all(signal.SIGKILL)
        for worker in self.workers:
            worker.proc.wait()

    def running(self) -> bool:
        return any(w.proc.poll() is None for w in self.workers)

    def kill_rank(self, rank: int) -> int | None:
        """SIGKILL the worker of job-wide rank ``rank`` if this group runs it (its process, as
        a crash would end it); its pid."""
        for worker in self.workers:
            if worker.entry.rank == rank and worker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.proc.pid, signal.SIGKILL)
                return worker.proc.pid
        return None

    def ranks(self) -> list[int]:
        return [worker.entry.rank for worker in self.workers]

    def pass_on(self, sig: signal.Signals) -> None:
        """``sig`` to each worker's own process, as torchrun passes a SIGTERM on: not to its
        process group, whose other members (a data loader's workers) the rank itself stops,
        once it has used them for its last steps."""
        for worker in self.workers:
            if worker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(worker.proc.pid, sig)

    def _signal_all(self, sig: signal.Signals) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                # The worker leads its session's process group: its children go with it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(worker.proc.pid, sig)
                    # A stopped process (SIGSTOP, a debugger's) takes the signal only once
                    # continued, as kill(1) users and systemd know: else it held the stop
                    # for the whole grace period.
                    os.killpg(worker.proc.pid, signal.SIGCONT)


def stop_telling(group: WorkerGroup, sig: signal.Signals, stopping: Path) -> None:
    """Stop ``group``'s workers, telling them by the ``stopping`` marker that it is a stop,
    not a preemption; further stop signals are ignored meanwhile, so that the SIGKILL after
    the grace period is never skipped (a script that traps SIGTERM would otherwise outlive its
    agent)."""
    # Only the main thread can set handlers: agents run as threads of one process in a
    # rehearsal (tenter.rehearsal.pack), whose process takes the stop signals itself.
    on_main = threading.current_thread() is threading.main_thread()
    held = (*STOP_SIGNALS, signal.SIGALRM) if on_main else ()
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in held}
    stopping.parent.mkdir(exist_ok=True)
    stopping.touch()
    try:
        group.stop(sig)
    finally:
        stopping.unlink(missing_ok=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _failure(worker: Worker, code: int) -> WorkerFailure:
    error_file = worker.entry.error_file
    # The error file's mtime is when the exception was recorded, to the nanosecond: it tells
    # the first failure among ranks that failed within the same second.
    stamp = os.stat(error_file).st_mtime if os.path.exists(error_file) else time.time()
    return WorkerFailure(
        worker.entry.rank, worker.entry.local_rank, worker.proc.pid, code, stamp, error_file
    )
