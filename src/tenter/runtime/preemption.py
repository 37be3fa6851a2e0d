"""Graceful preemption, on the ranks' side: has the job been asked to stop?

A request reaches a rank in one of two ways:

- the job directory's ``control/preempt`` file, written by tenter's launcher on SIGTERM or
  ``tenter cancel --preempt`` (local and mpi backends), and by a Slurm node's agent when
  Slurm sends it SIGTERM (``scancel``, a preemption);
- SIGTERM to the rank itself, where a scheduler signals every process of the job (Slurm's
  step) or a launcher forwards it (torchrun in a Kubernetes pod) - except while the rank's own
  agent is stopping it (a failure elsewhere, a restart, a cancel), which stays a stop.

Ranks see a request at different moments, yet must all stop at the same step: :meth:`agreed`
is one all-reduce (MAX) of each rank's view of a one-element flag, on the CPU (gloo), at every
step boundary. It is asynchronous: the flags sent at one call decide at the next, so that the
all-reduce's latency (a round trip between hosts, a wait for a rank that is descheduled) runs
during the step instead of adding to it; the ranks stop one step after the first of them saw
the request, all at the same step. It is on only under ``tenter run`` with
``checkpoint.preemption_grace`` > 0 (``TENTER_PREEMPTION_GRACE``); elsewhere nothing is
checked and SIGTERM is left alone.

:class:`tenter.checkpoint.Checkpointer` checks in ``maybe_save``; a script without one calls
:func:`preempted` at every step boundary on every rank.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist

from tenter.errors import ExitCode
from tenter.jobdir import control

GRACE_ENV = "TENTER_PREEMPTION_GRACE"


class Preempted(SystemExit):
    """Ends a rank that goes on after its preemption's final checkpoint (a loop that never
    reads ``Checkpointer.preempted``): raised at its next ``maybe_save``, so that it neither
    saves again nor runs out the grace period. Its status is the preemption's, 75; tenter's
    bootstrap ends the rank as finished (exit 0) and the job as preempted (75)."""

    def __init__(self, step: int) -> None:
        super().__init__(ExitCode.PREEMPTED)
        self.step = step


_signalled = False
"""This process received a SIGTERM that asks for a preemption."""


def enabled() -> bool:
    """Whether this job can be preempted gracefully (the same on every rank)."""
    grace = os.environ.get(GRACE_ENV, "")
    return bool(os.environ.get("TENTER_JOB_DIR")) and grace.isdigit() and int(grace) > 0


def _stopping() -> bool:
    """Whether this rank's agent is stopping it (a stop, not a preemption)."""
    job_dir, host = os.environ.get("TENTER_JOB_DIR", ""), os.environ.get("TENTER_HOST", "")
    return control.stopping_marker(job_dir, host).exists()


def _end_by_sigterm() -> None:
    """End this process by SIGTERM's default action, as without tenter's handler; from any
    thread (``signal.signal`` is the main thread's only, hence libc's ``signal``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal(signal.SIGTERM, None)  # None: SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _signalled
    if _stopping():
        _end_by_sigterm()
        return
    _signalled = True


_watching = False
"""This process's stops are watched for (:func:`_watch_for_stops`)."""


def _watch_for_stops() -> None:
    """End the rank at once when its agent stops it, even while the main thread waits in
    torch's C++ (a collective whose peer is gone, a store's ``wait``): Python runs a signal's
    handler only when the main thread returns to the interpreter, so a stop would otherwise
    last the agent's whole grace period (10 s) and end by SIGKILL. The interpreter's own C
    handler writes each signal's number to the wakeup fd at once; a thread reads it there.
    A script that sets a wakeup fd of its own (asyncio's signal handlers) replaces this one:
    its stops then wait for the main thread, as before. Once per process."""
    global _watching
    if _watching:
        return
    _watching = True
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def watch() -> None:
        while numbers := reader.recv(64):
            if signal.SIGTERM in numbers and _stopping():
                _end_by_sigterm()

    threading.Thread(target=watch, name="tenter-stop-watch", daemon=True).start()
    # A forked child (a data loader's worker) has no such thread: it gets no wakeup fd.
    os.register_at_fork(after_in_child=lambda: _no_wakeup_fd(reader, writer))


def _no_wakeup_fd(reader: socket.socket, writer: socket.socket) -> None:
    global _watching
    _watching = False
    if threading.current_thread() is threading.main_thread():
        signal.set_wakeup_fd(-1)
    reader.close()
    writer.close()


def _request_file() -> Path:
    return control.control_dir(os.environ["TENTER_JOB_DIR"]) / control.PREEMPT_REQUEST


def requested_here() -> bool:
    """This rank's own view: a SIGTERM, or the job directory's request (one ``stat``)."""
    return _signalled or _request_file().exists()


def _cpu_group() -> dist.ProcessGroup | None:
    """A group that all-reduces CPU tensors: the default one where it can (gloo, mpi,
    tenter's), else a gloo group of its own (NCCL alone would need a GPU tensor, and its
    ``.item()`` a stream sync at every step)."""
    backend = str(dist.get_backend())
    if "gloo" in backend or backend in ("mpi", "tenter"):
        return None
    group: dist.ProcessGroup = dist.new_group(backend="gloo")
    return group


class Preemption:
    """A job's preemption requests as one rank sees them. Build it on every rank at the same
    point (with a NCCL-only default group it makes a gloo group: a collective call)."""

    def __init__(self) -> None:
        self.on = enabled()
        self.stopped = False
        """Every rank agreed to stop (then :meth:`agreed` stays True, without collectives)."""
        self._distributed = self.on and dist.is_available() and dist.is_initialized()
        self._group = _cpu_group() if self._distributed else None
        self._in_flight: tuple[torch.Tensor, dist.Work] | None = None
        """The all-reduce of the previous call's flags, which decides at this call."""
        if self.on and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _on_sigterm)
            _watch_for_stops()

    def agreed(self) -> bool:
        """Collective (every rank, at the same step boundary): whether any rank saw a
        request; the same answer on every rank."""
        if not self.on or self.stopped:
            return self.stopped
        flag = torch.tensor([int(requested_here())], dtype=torch.int32)
        if not self._distributed:
            self.stopped = bool(flag.item())
            return self.stopped
        previous = self._in_flight
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        assert work is not None, "an asynchronous all-reduce returns its work"
        self._in_flight = (flag, work)
        if previous is not None:
            previous[1].wait()
            self.stopped = bool(previous[0].item())
        if self.stopped:
            self.close()
        return self.stopped

    def close(self) -> None:
        """Wait for the all-reduce in flight (before the process group goes)."""
        if self._in_flight is not None:
            self._in_flight[1].wait()
            self._in_flight = None

    def record(self, step: int | None, checkpoint: str | None) -> None:
        """Tell the launcher that this rank stopped for the preemption."""
        rank = dist.get_rank() if self._distributed else 0
        control.record_preempted(os.environ["TENTER_JOB_DIR"], rank, step, checkpoint)


_script_preemption: Preemption | None = None


def preempted() -> bool:
    """Whether the job was asked to stop (SIGTERM, ``tenter cancel --preempt``): call it at
    every step boundary on every rank (it is collective); on True, every rank got True at the
    same call: save what you need, then return from the script. False outside ``tenter run``.

    ::

        for step in range(start, steps):
            train_one_step()
            if tenter.preempted():
                save(step + 1)
                break
    """
    global _script_preemption
    if _script_preemption is None:
        _script_preemption = Preemption()
    if _script_preemption.stopped:
        return True
    if _script_preemption.agreed():
        _script_preemption.record(None, None)
    return _script_preemption.stopped
