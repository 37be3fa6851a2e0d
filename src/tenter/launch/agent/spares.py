"""Warm workers: per host, a template with torch imported, forking one spare per local rank.

A worker's start is mostly interpreter start-up and ``import torch``: seconds, paid by every
worker of a host at every start. The agent has one template per host instead (what ``python
-m tenter.runtime.bootstrap --warm`` is, started as a fresh worker would be: its own session,
SIGKILLed with the agent), which has torch imported once and forks ``procs_per_host`` spares on
request (milliseconds each); the agent hands each new worker's environment, directory, files
and arguments to a spare (:mod:`tenter.runtime.warm`), which becomes that worker. A spare
costs no CPU while it waits and shares the template's memory until it writes to it.

The template is a fork of the agent, made once the agent has imported torch and before it
starts any thread (:meth:`WarmPool.fork_template`): one import of torch per host; the first
workers are spares. A template started again (the first died), or one of an agent that runs
inside a Slurm node's entry (whose initial environment is Slurm's), is a fresh process,
started before the agent imports torch where it can be. The template, its socket and its
spares as the agent sees them are :mod:`tenter.launch.agent.template`. Used spares are forked
again at once; :data:`PRELOAD_DELAY_S` after the first workers started, the template also imports
:data:`tenter.runtime.warm.PRELOAD` (torch.distributed.checkpoint), for the spares it forks
from then on. The template's temporary directory (``TMPDIR``, which its spares keep until
they become workers) is the pool's own, removed with it: torch 2.7's
``torch.distributed.checkpoint`` creates one at import
(``torch.distributed.nn.jit.instantiator``), which only ``atexit`` removes, and the template
and its waiting spares are SIGKILLed when the pool closes.

A worker is started fresh (the slow way, with the same result) when no spare can stand in
for it: warm workers are off (:data:`ENABLED_ENV`), the command is not tenter's
bootstrap under this Python, the working directory differs, or the environment differs from
the template's in a variable that may be read at start-up (only :data:`PER_WORKER` may
differ).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tenter.contract.torchrun import per_worker_variables
from tenter.contract.worker import BOOTSTRAP
from tenter.launch.agent.template import (
    ForkedProcess,
    ForkedTemplate,
    Template,
    become_template,
)
from tenter.runtime.warm import PRELOAD, WAIT_FLAG, Handoff

logger = logging.getLogger(__name__)

ENABLED_ENV = "TENTER_WARM_WORKERS"
"""``0`` starts every worker fresh; unset or anything else, workers start from spares."""

PER_WORKER = per_worker_variables()
"""The variables in which a rank's environment may differ from its spare's: torchrun's
per-rank ones (read by the script or by torch.distributed when it is called, never at import)
and the agent's (read by the bootstrap after the handoff). Derived from the contract
(:func:`tenter.contract.torchrun.per_worker_variables`): a variable added there cannot turn
every warm start cold."""

PRELOAD_DELAY_S = 1.0
"""How long after the first workers started the template imports
:data:`tenter.runtime.warm.PRELOAD` (a second or two of CPU): long enough for those workers
to be past their start (which the measure of a restart, the first step after it, includes);
short enough for the spares a first failure takes to have it."""
SPARES_CHECK_S = 1.0
"""How often the agent looks for spares that died waiting (a read of each one's state): a
rare event, replaced within a second; every monitor pass was a third of an idle agent's CPU
(docs/scale.md)."""


def enabled() -> bool:
    """Whether workers start from spares (:data:`ENABLED_ENV`)."""
    return os.environ.get(ENABLED_ENV, "") != "0"


def differing(a: Mapping[str, str], b: Mapping[str, str]) -> set[str]:
    """The variables set in only one of ``a`` and ``b``, or set to different values."""
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


class WarmPool:
    """The spares of one host, forked by its template. All methods run on the agent's main
    thread (see :class:`Template`)."""

    def __init__(
        self,
        python: str,
        size: int,
        env: Mapping[str, str],
        cwd: str,
        tmp_dir: Path,
        preload: Sequence[str] = PRELOAD,
        preload_first: bool = False,
    ) -> None:
        self.command = [python, "-m", BOOTSTRAP]
        """The workers a spare can become: ``COMMAND SCRIPT|-m MODULE [ARGS...]``."""
        self._size = size
        self._env, self._cwd = dict(env), cwd
        """What the template starts with: the workers' environment but the per-rank
        variables, and their working directory."""
        self._tmp_dir = tmp_dir
        """The template's and its spares' ``TMPDIR`` (until they become workers); the
        pool's to remove."""
        self._preload = list(preload)
        self._preload_first = preload_first
        """Import the preload modules before the first spares are forked (a job that resumes
        from a checkpoint: every worker imports torch.distributed.checkpoint at once)."""
        self._template: Template | None = None
        self._spares: list[ForkedProcess] = []
        self._preload_at = math.inf  # not before the first workers started
        self._next_check = 0.0

    @classmethod
    def for_workers(
        cls,
        command: Sequence[str],
        size: int,
        env: Mapping[str, str],
        cwd: str,
        tmp_dir: Path,
        checkpoint_dir: str,
    ) -> WarmPool | None:
        """The pool of ``size`` spares for workers that run ``command``, with ``tmp_dir``
        (created on the first start, removed on :meth:`close`) as their temporary directory;
        None if they cannot be warm or warm workers are off. Where ``checkpoint_dir`` holds
        anything (the job resumes), the template imports its preload modules first."""
        if list(command[1:3]) != ["-m", BOOTSTRAP]:
            return None
        if not enabled():
            return None
        return cls(
            command[0], size, env, cwd, tmp_dir, preload_first=_holds_anything(checkpoint_dir)
        )

    def _template_env(self) -> dict[str, str]:
        """The template's environment (the handoff's replaces it in each spare)."""
        self._tmp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # A CUDA probe in the template (a module it imports calling torch.cuda.is_available())
        # asks NVML, not the CUDA driver, whose initialisation a fork would not survive.
        return {**self._env, "TMPDIR": str(self._tmp_dir), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}

    def fork_template(self) -> list[str] | None:
        """Make the template a fork of this process, the agent, once it has imported torch:
        one import of torch per host instead of two side by side. Call it before the agent
        starts any thread of its own, or configures logging: the template starts from this
        process as it is. Returns None in the agent; in the template, the bootstrap's
        arguments, for the caller to run and exit with (``sys.exit``: returning up through
        the caller's frames only, then the interpreter's exit as a fresh process's)."""
        env = self._template_env()
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        agent = os.getpid()
        pid = os.fork()
        if pid == 0:
            control.close()
            become_template(theirs, env, self._cwd, agent)
            return [WAIT_FLAG, *self._preload]
        theirs.close()
        self._template = Template(ForkedTemplate(pid), control)
        if self._preload_first:
            self._template.preload()  # the template reads it before the forks
        return None

    def forked_template(self) -> int | None:
        """The pid of the template, if it was forked from the agent."""
        proc = self._template.proc if self._template is not None else None
        return proc.pid if isinstance(proc, ForkedTemplate) else None

    def fill(self) -> None:
        """Start the template if it is not running, and have it fork spares up to the
        pool's size (replacing any that died waiting). A template started again (the first
        died) is a fresh process: by then the agent runs threads, which a fork would leave
        behind in a state of their own."""
        if self._template is None or self._template.proc.poll() is not None:
            if self._template is not None:
                logger.warning("warm template exited (status %s)", self._template.proc.returncode)
                self._template.close()
            env = self._template_env()
            self._template = Template.started(self.command, self._preload, env, self._cwd)
            self._spares.clear()
            if self._preload_first:
                self._template.preload()  # the template reads it before the forks
        for spare in [s for s in self._spares if s.poll() is not None]:
            logger.warning(
                "warm worker %s exited while waiting (status %s)", spare.known_pid, spare.returncode
            )
            self._spares.remove(spare)
        while len(self._spares) < self._size:
            self._spares.append(self._template.fork())

    def workers_started(self) -> None:
        """The workers just started (from spares or fresh): fork new spares now; import
        :data:`tenter.runtime.warm.PRELOAD` in the template :data:`PRELOAD_DELAY_S` later."""
        self.fill()
        self._preload_at = min(self._preload_at, time.monotonic() + PRELOAD_DELAY_S)

    def fill_when_due(self) -> None:
        """Called often: once the first workers are past their start, the template's
        preload, and spares that died waiting replaced."""
        now = time.monotonic()
        if now >= self._preload_at and now >= self._next_check:
            self._next_check = now + SPARES_CHECK_S
            self.preload()
            self.fill()

    def preload(self) -> None:
        """Have the template import its preload modules (once), and retire the spares it
        forked before: those forked after have the modules."""
        if self._template is not None and self._template.preload():
            logger.info("warm template imports %s; spares forked before are retired", self._preload)
            for spare in self._spares:
                spare.close_handoff()  # it reads no handoff and exits; the template reaps it
            self._spares.clear()
            self.fill()

    def take(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdout: str | None,
        stderr: str | None,
    ) -> ForkedProcess | None:
        """A spare become the worker ``args`` with ``env`` (the complete environment) in
        ``cwd``, or None when none can stand in for it: start it fresh then."""
        command = self.command
        if list(args[: len(command)]) != command:
            return None
        extra = differing(self._env, env) - PER_WORKER
        if self._cwd != cwd or extra:
            logger.info("no warm worker: the worker's %s differs", sorted(extra) or "cwd")
            return None
        handoff = Handoff(list(args[len(command) :]), dict(env), cwd, stdout, stderr).encode()
        while self._spares:
            spare = self._spares.pop(0)
            if spare.poll() is not None or spare.handoff_fd is None:
                continue
            try:
                os.write(spare.handoff_fd, handoff)  # fits the pipe: never blocks
            except BrokenPipeError:  # it died waiting
                continue
            finally:
                spare.close_handoff()
            return spare
        return None

    def close(self) -> None:
        """Stop the template and the spares still waiting: nothing of the job is left after
        its agent (which closes the pool last, once the workers that were spares ended)."""
        if self._template is not None:
            self._template.close()
        self._spares.clear()
        shutil.rmtree(self._tmp_dir, ignore_errors=True)
        with contextlib.suppress(OSError):  # the job's other hosts may still have theirs
            self._tmp_dir.parent.rmdir()


def _holds_anything(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(True for _ in entries)
    except OSError:  # not there (yet), or not readable from here
        return False
