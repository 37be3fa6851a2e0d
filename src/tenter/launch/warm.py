"""Warm workers: per host, one spare worker process per local rank, torch already imported.

A worker's start is mostly interpreter start-up and ``import torch``: seconds, paid again by
every worker of a host at every restart. The agent keeps ``procs_per_host`` spares instead
(``python -m tenter.runtime.bootstrap --warm``, started as a fresh worker would be: its own
session, SIGKILLed with the agent), and hands each new worker's environment, directory,
files and arguments to a spare (:mod:`tenter.runtime.warm`), which becomes that worker.

Spares are separate processes that import torch themselves, not forks of a process that
did: torch's thread pools (OpenMP, gloo) do not survive a fork.

A worker is started fresh (the slow way, with the same result) when no spare can stand in
for it: warm workers are off (``TENTER_WARM_WORKERS=0``), the command is not tenter's
bootstrap under this Python, the working directory differs, or the environment differs from
the spare's in a variable that may be read at start-up (only :data:`PER_WORKER` may
differ). Spares used are replaced once the restarted workers had :data:`REFILL_DELAY_S` to
start (on a machine with few cores, importing torch competes with their first steps), or at
once when the workers restart before that.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tenter.contract.worker import BOOTSTRAP
from tenter.launch.processes import dies_with_parent
from tenter.runtime.warm import PRELOAD, WAIT_FLAG, Handoff

logger = logging.getLogger(__name__)

ENABLED_ENV = "TENTER_WARM_WORKERS"
"""``0`` starts every worker fresh; anything else (the default) uses warm workers."""

PER_WORKER = frozenset(
    {
        # torch elastic's LocalElasticAgent._start_workers, read by the script or by
        # torch.distributed when the script calls it, never at import.
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

PIPE_SIZE = 1 << 20
"""The handoff (mostly the environment) must fit in the pipe: the agent never waits for a
spare that is still importing torch."""


def enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "1") != "0"


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

    def __init__(self, python: str, size: int) -> None:
        self.command = [python, "-m", BOOTSTRAP]
        """The workers a spare can become: ``COMMAND SCRIPT|-m MODULE [ARGS...]``."""
        self._size = size
        self._spares: list[Spare] = []
        self._refill_at = 0.0

    @classmethod
    def for_workers(cls, command: Sequence[str], size: int) -> WarmPool | None:
        """The pool for workers that run ``command``; None if they cannot be warm."""
        if not enabled() or list(command[1:3]) != ["-m", BOOTSTRAP]:
            return None
        return cls(command[0], size)

    def fill(self, preload: Sequence[str] = PRELOAD) -> None:
        """Start spares up to the pool's size, importing ``preload`` while they wait; replace
        any that died waiting."""
        for spare in [s for s in self._spares if s.proc.poll() is not None]:
            _lost(spare)
            self._spares.remove(spare)
        while len(self._spares) < self._size:
            self._spares.append(self._start(preload))

    def fill_when_due(self) -> None:
        """Called often: refill once the workers that took spares have had their start."""
        if time.monotonic() >= self._refill_at:
            self.fill()

    def _start(self, preload: Sequence[str]) -> Spare:
        env, cwd = dict(os.environ), os.getcwd()
        proc = subprocess.Popen(
            [*self.command, WAIT_FLAG, *preload],
            env=env,
            stdin=subprocess.PIPE,  # the handoff; stdout and stderr: the agent's log
            start_new_session=True,  # as a fresh worker's: the agent signals its group
            preexec_fn=dies_with_parent(signal.SIGKILL),
        )
        assert proc.stdin is not None
        fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        return Spare(proc, env, cwd)

    def take(
        self, args: Sequence[str], env: Mapping[str, str], stdout: str | None, stderr: str | None
    ) -> subprocess.Popen[bytes] | None:
        """A spare become the worker ``args`` with ``env`` (the complete environment), or
        None when none can stand in for it: start it fresh then."""
        command = self.command
        if list(args[: len(command)]) != command:
            return None
        cwd = os.getcwd()
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
