"""Warm workers: per host, one spare worker process per local rank, torch already imported.

A worker's start is mostly interpreter start-up and ``import torch``: seconds, paid again by
every worker of a host at every restart. The agent keeps ``procs_per_host`` spares instead
(``python -m tenter.runtime.bootstrap --warm``, started as a fresh worker would be: its own
session, SIGKILLed with the agent), and hands each new worker's environment, directory,
files and arguments to a spare (:mod:`tenter.runtime.warm`), which becomes that worker.

Spares are separate processes that import torch themselves, not forks of a process that
did: torch's thread pools (OpenMP, gloo) do not survive a fork.

Spares are SIGKILLed when their pool closes (one may still be importing torch), so nothing
runs their ``atexit``: their temporary directory (``TMPDIR``) is the pool's own, removed with
it. torch 2.7's ``torch.distributed.checkpoint`` (:data:`PRELOAD`) creates one at import
(``torch.distributed.nn.jit.instantiator``), which only ``atexit`` removes.

A worker is started fresh (the slow way, with the same result) when no spare can stand in
for it: warm workers are off (see :func:`enabled`), the command is not tenter's
bootstrap under this Python, the working directory differs, or the environment differs from
the spare's in a variable that may be read at start-up (only :data:`PER_WORKER` may
differ).

Spares never delay a start. Where the machine has :data:`CPUS_PER_WORKER` CPUs per worker
(:func:`early`), the pool is filled as the agent starts, before it imports torch itself: the
spares' imports run beside the agent's, and the first workers are spares. Elsewhere it is
first filled :data:`REFILL_DELAY_S` after the job's first workers started (fresh). Spares
used are replaced as long after the restarted workers started, and run at
:data:`SPARE_NICE` (on a machine with few cores, importing torch competes with the workers'
first steps); a worker that was such a spare keeps that niceness: lowering it again needs a
privilege agents do not have, and all of a host's restarted workers share it. The first
spares run at the agent's niceness: no worker runs yet to give way to.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tenter.contract.worker import BOOTSTRAP
from tenter.launch.processes import worker_preexec
from tenter.runtime.warm import PRELOAD, TITLE_ROOM, WAIT_FLAG, Handoff

logger = logging.getLogger(__name__)

ENABLED_ENV = "TENTER_WARM_WORKERS"
"""``0`` starts every worker fresh, ``1`` keeps spares; unset (the default), spares are kept
where the machine has the CPUs for them (:func:`enabled`)."""

CPUS_PER_WORKER = 2
"""The CPUs a machine needs per worker for spares to pay: a worker's and its spare's. With
fewer, a spare importing torch (seconds of CPU, 1 s after every start) takes them from the
workers' own start: on a 2-CPU machine a no-op job of 2 x 2 workers took 11.2 s with spares
and 7.1 s without (``benchmarks/launch_overhead.py``), a 27% longer test suite."""

PER_WORKER = frozenset(
    {
        # torchrun's per-rank variables (tenter.contract.torchrun), read by the script or
        # by torch.distributed when the script calls it, never at import.
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "LOCAL_WORLD_SIZE",
        "WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        # tenter's agent: read by the bootstrap after the handoff.
        "TORCHELASTIC_ERROR_FILE",
        "TENTER_WATCH_FILE",
    }
)
"""The variables in which a rank's environment may differ from its spare's."""

REFILL_DELAY_S = 1.0
"""Long enough for the workers that took spares to be past their start (which the
measure of a restart, the first step after it, includes); short enough that a pool emptied
by a job's start is full again when its first failure comes."""

SPARE_NICE = 5
"""Added to a spare's niceness: while it imports torch, the running workers come first."""

PIPE_SIZE = 1 << 20
"""The handoff (mostly the environment) must fit in the pipe: the agent never waits for a
spare that is still importing torch."""


def _cpus_to_spare(workers_here: int) -> bool:
    return len(os.sched_getaffinity(0)) >= CPUS_PER_WORKER * workers_here


def enabled(workers_here: int) -> bool:
    """Whether to keep spares for ``workers_here`` workers that share this machine's CPUs:
    as :data:`ENABLED_ENV` says, else if the CPUs this process may use are at least
    :data:`CPUS_PER_WORKER` per worker (a GPU host's are: 8 workers, 96 or more CPUs)."""
    setting = os.environ.get(ENABLED_ENV, "")
    if setting:
        return setting != "0"
    return _cpus_to_spare(workers_here)


def early(workers_here: int) -> bool:
    """Whether the first workers are spares, started with the agent: only where spares are
    kept and the CPUs are there for them, whatever :data:`ENABLED_ENV` forces (without the
    CPUs, the spares' imports would compete with the agent's and delay the first start)."""
    return enabled(workers_here) and _cpus_to_spare(workers_here)


@dataclass
class Spare:
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    cwd: str


def differing(a: Mapping[str, str], b: Mapping[str, str]) -> set[str]:
    """The variables set in only one of ``a`` and ``b``, or set to different values."""
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


def _lost(spare: Spare) -> None:
    spare.proc.wait()
    logger.warning(
        "warm worker %d exited while waiting (status %s)", spare.proc.pid, spare.proc.returncode
    )


class WarmPool:
    """The spares of one host. All methods run on the agent's main thread: a spare's
    parent-death signal fires when the thread that started it ends."""

    def __init__(
        self,
        python: str,
        size: int,
        env: Mapping[str, str],
        cwd: str,
        workers_here: int,
        tmp_dir: Path,
    ) -> None:
        self.command = [python, "-m", BOOTSTRAP]
        """The workers a spare can become: ``COMMAND SCRIPT|-m MODULE [ARGS...]``."""
        self._size = size
        self._env, self._cwd = dict(env), cwd
        """What every spare starts with: the workers' environment but the per-rank
        variables, and their working directory."""
        self._tmp_dir = tmp_dir
        """The spares' ``TMPDIR`` until they become workers; the pool's to remove."""
        self._spares: list[Spare] = []
        self._refill_at = math.inf  # not before the first workers started
        self._workers_here = workers_here

    @classmethod
    def for_workers(
        cls,
        command: Sequence[str],
        size: int,
        env: Mapping[str, str],
        cwd: str,
        workers_here: int,
        tmp_dir: Path,
    ) -> WarmPool | None:
        """The pool of ``size`` spares for workers that run ``command``, with ``tmp_dir``
        (created on the first start, removed on :meth:`close`) as their temporary directory;
        None if they cannot be warm or warm workers are off for ``workers_here`` workers on
        this machine."""
        if list(command[1:3]) != ["-m", BOOTSTRAP]:
            return None
        if not enabled(workers_here):
            logger.info(
                "warm workers off (%s=%s, %d workers on %d CPUs): workers start fresh",
                ENABLED_ENV,
                os.environ.get(ENABLED_ENV, "unset"),
                workers_here,
                len(os.sched_getaffinity(0)),
            )
            return None
        return cls(command[0], size, env, cwd, workers_here, tmp_dir)

    def fill_first(self) -> None:
        """Start the spares now, for the first workers, where :func:`early` says so (the
        agent calls this before it imports torch)."""
        if early(self._workers_here):
            logger.info("starting %d warm workers for the first start", self._size)
            self.fill(nice=0)

    def fill_later(self) -> None:
        """Fill the pool :data:`REFILL_DELAY_S` from now (the workers just started)."""
        self._refill_at = min(self._refill_at, time.monotonic() + REFILL_DELAY_S)

    def fill(self, preload: Sequence[str] = PRELOAD, nice: int = SPARE_NICE) -> None:
        """Start spares up to the pool's size, at ``nice`` above the agent, importing
        ``preload`` while they wait; replace any that died waiting."""
        for spare in [s for s in self._spares if s.proc.poll() is not None]:
            _lost(spare)
            self._spares.remove(spare)
        while len(self._spares) < self._size:
            self._spares.append(self._start(preload, nice))

    def fill_when_due(self) -> None:
        """Called often: refill once the workers that took spares have had their start."""
        if time.monotonic() >= self._refill_at:
            self.fill()

    def _start(self, preload: Sequence[str], nice: int) -> Spare:
        self._tmp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        proc = subprocess.Popen(
            [*self.command, WAIT_FLAG, *preload, TITLE_ROOM],
            env={**self._env, "TMPDIR": str(self._tmp_dir)},  # the handoff's env replaces it
            cwd=self._cwd,
            stdin=subprocess.PIPE,  # the handoff; stdout and stderr: the agent's log
            start_new_session=True,  # as a fresh worker's: the agent signals its group
            preexec_fn=worker_preexec(nice=nice),
        )
        assert proc.stdin is not None
        fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        return Spare(proc, self._env, self._cwd)

    def take(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdout: str | None,
        stderr: str | None,
    ) -> subprocess.Popen[bytes] | None:
        """A spare become the worker ``args`` with ``env`` (the complete environment) in
        ``cwd``, or None when none can stand in for it: start it fresh then."""
        command = self.command
        if list(args[: len(command)]) != command:
            return None
        while self._spares:
            spare = self._spares.pop(0)
            if spare.proc.poll() is not None:
                _lost(spare)
                continue
            extra = differing(spare.env, env) - PER_WORKER
            if spare.cwd != cwd or extra:
                logger.info("no warm worker: the worker's %s differs", sorted(extra) or "cwd")
                self._spares.append(spare)
                return None
            handoff = Handoff(list(args[len(command) :]), dict(env), cwd, stdout, stderr)
            assert spare.proc.stdin is not None
            try:
                spare.proc.stdin.write(handoff.encode())
                spare.proc.stdin.close()
            except BrokenPipeError:  # it died after the poll above
                with contextlib.suppress(BrokenPipeError):  # closes the pipe all the same
                    spare.proc.stdin.close()
                _lost(spare)
                continue
            self._refill_at = time.monotonic() + REFILL_DELAY_S
            return spare.proc
        return None

    def close(self) -> None:
        """Stop the spares: nothing of the job is left after its agent."""
        for spare in self._spares:
            spare.proc.kill()
        for spare in self._spares:
            spare.proc.wait()
            if spare.proc.stdin is not None:
                spare.proc.stdin.close()
        self._spares.clear()
        # The workers that were spares have ended too (the agent closes the pool last).
        shutil.rmtree(self._tmp_dir, ignore_errors=True)
        with contextlib.suppress(OSError):  # the job's other hosts may still have theirs
            self._tmp_dir.parent.rmdir()
