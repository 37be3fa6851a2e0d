"""The worker side of warm workers: a spare that waits for its rank, then becomes it.

A warm worker is ``python -m tenter.runtime.bootstrap --warm``, started by its host's agent
before it is needed (see :mod:`tenter.launch.warm`). Its bootstrap imports torch, then reads
one :class:`Handoff` from its stdin: the environment, working directory, output files and
bootstrap arguments the agent would have given a fresh worker. It takes them over here and
the bootstrap runs the script as a fresh worker would: what a restart saves is interpreter
start-up and ``import torch`` (seconds), which the spare paid while the job was running.

Taken over exactly: ``os.environ`` (the C environment too; ``tempfile`` reads ``TMPDIR``
again), the working directory, stdin
(``/dev/null``, as the agent's own), stdout and stderr (the rank's files, truncated as the
agent's ``open(path, "w")`` does), and, by the bootstrap, ``sys.argv`` and ``sys.path[0]``.
The process is the one the agent started, so ``os.getpid()``, signals, the exit status,
the parent-death signal and the session are a fresh worker's; its title (``ps``,
``/proc/PID/cmdline``) is the user's command line, as a fresh worker's (the bootstrap sets it).
What differs: the process's initial environment as the kernel shows it
(``/proc/PID/environ``) is the spare's, and modules the bootstrap
imports (torch) were imported before the rank's variables were set; the agent only hands a
spare a rank whose variables differ from its own in ones read after start-up
(:data:`tenter.launch.warm.PER_WORKER`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass

WAIT_FLAG = "--warm"
"""``python -m tenter.runtime.bootstrap --warm [MODULE...]``: import the modules, then wait
for a handoff on stdin."""

PRELOAD = ("tenter.runtime.api", "tenter.checkpoint")
"""What spares that wait for a restart import besides what the bootstrap imports (torch):
tenter's worker-side API and its checkpointing (which imports torch.distributed.checkpoint,
a second or two). They read nothing of the environment at import; a script that imports them
finds them loaded, one that does not has them in ``sys.modules`` all the same. The spares of
a job's start import nothing more: they are needed at once, by scripts that may not."""


TITLE_ROOM = " " * 4096
"""A spare's last argument: room for the title of the worker it becomes. A process title is
written over the process's arguments (``/proc/PID/cmdline``); the bootstrap keeps it within
them, leaving ``/proc/PID/environ`` whole (tenter finds a job's processes by it)."""


def preload(modules: list[str]) -> None:
    for module in modules:
        if module.strip():  # not the TITLE_ROOM
            importlib.import_module(module)


@dataclass(frozen=True)
class Handoff:
    """What the agent gives a fresh worker, given to a waiting one instead."""

    argv: list[str]
    """The bootstrap's arguments: ``SCRIPT ARGS...`` or ``-m MODULE ARGS...``."""
    env: dict[str, str]
    cwd: str
    stdout: str | None
    """The file the rank's stdout goes to (None: keep the spare's, the agent's)."""
    stderr: str | None

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes) -> Handoff:
        return cls(**json.loads(data))


def receive(fd: int = 0) -> Handoff | None:
    """Block until the agent sends a handoff and closes the pipe; None when it closes the
    pipe without one (the pool is closing, or the agent died)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    data = b"".join(chunks)
    return Handoff.decode(data) if data else None


def _redirect(fd: int, path: str | None) -> None:
    if path is None:
        return
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(target, fd)
    os.close(target)


def become(handoff: Handoff) -> list[str]:
    """Take over the rank's environment, directory and files; return the bootstrap's args."""
    sys.stdout.flush()
    sys.stderr.flush()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    _redirect(1, handoff.stdout)
    _redirect(2, handoff.stderr)
    os.environ.clear()  # os.environ's clear and update also set the C environment
    os.environ.update(handoff.env)
    tempfile.tempdir = None  # the rank's TMPDIR from now on, not the spare's
    os.chdir(handoff.cwd)
    return handoff.argv
