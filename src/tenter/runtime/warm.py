"""The worker side of warm workers: a template that forks spares, a spare that becomes its rank.

A host's warm workers come from one template, ``python -m tenter.runtime.bootstrap --warm
MODULE...`` or a fork of the agent that becomes what that command would be (see
:mod:`tenter.launch.agent.spares`). With torch imported, it :func:`serve` s the agent on its
stdin (a Unix ``SOCK_SEQPACKET`` socket; the messages are
:mod:`tenter.runtime.warm_protocol`'s): each ``fork`` request comes with the read end of a
pipe and is answered with the pid of a spare forked from the template, its imports done;
the template reaps its spares and tells the agent
each one's exit status (``exit PID CODE``, ``subprocess``'s codes); ``preload`` imports the
MODULEs (the agent asks once the job's first workers run). A spare reads one :class:`Handoff`
from its pipe: the environment, working directory, output files and bootstrap arguments the
agent would have given a fresh worker. It takes them over here and the bootstrap runs the script
as a fresh worker would: what a start saves is interpreter start-up and ``import torch``
(seconds, paid once per host by the template, not by every worker at every start).

Forking a process that imported torch is what a data loader does with its workers: torch's
thread pools (OpenMP, its intra- and inter-op pools, gloo's) are created at first use, which
the template never makes, and torch re-creates them in a forked child. The template forks
with one thread of its own; CUDA is never initialised in it. ``random`` is reseeded in each
fork by Python itself.

Taken over exactly: ``os.environ`` (the C environment too; ``tempfile`` reads ``TMPDIR``
again), the working directory, stdin
(``/dev/null``, as the agent's own), stdout and stderr (the rank's files, truncated as the
agent's ``open(path, "w")`` does), and, by the bootstrap, ``sys.argv`` and ``sys.path[0]``.
The spare leads a session of its own and is SIGKILLed when the template dies (which is
SIGKILLed when the agent dies); its exit status is the agent's through the template; its
title (``ps``, ``/proc/PID/cmdline``) is the user's command line, as a fresh worker's (the
bootstrap sets it). What differs: its parent is the template, not the agent; the process's
initial environment as the kernel shows it (``/proc/PID/environ``) is the template's (the
agent's, where the template is its fork), and modules the template imported (torch; the
agent's, where it is its fork) were imported before the rank's variables were set;
the agent only hands a spare a rank whose variables differ from its own in ones read after
start-up (:data:`tenter.launch.agent.spares.PER_WORKER`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import NoReturn

from tenter.runtime import warm_protocol as protocol
from tenter.runtime.parent_death import dies_with_parent

WAIT_FLAG = "--warm"
"""``python -m tenter.runtime.bootstrap --warm [MODULE...]``: a template (:func:`serve`)."""

PRELOAD = ("tenter.runtime.api", "tenter.checkpoint")
"""What the template imports besides what the bootstrap imports (torch), once the job's
first workers run, for the spares it forks after: tenter's worker-side API and its
checkpointing (which imports torch.distributed.checkpoint, a second or two). They read
nothing of the environment at import; a script that imports them finds them loaded, one that
does not has them in ``sys.modules`` all the same. The spares of a job's start are forked
before: they are needed at once, by scripts that may not."""


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


def serve(modules: list[str], control_fd: int = 0) -> Handoff | None:
    """Fork spares as the agent asks on ``control_fd``; return in each spare, with its
    handoff (None: no rank needed it). The template itself ends here, at the agent's SIGTERM
    or when it closes the socket: its spares still waiting end with it."""
    control = socket.socket(fileno=control_fd)
    children: set[int] = set()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to interrupt select()
    signal.set_wakeup_fd(wake_w)
    # The agent's stop, which must work while a preload import runs: Python runs the
    # handler between two bytecodes of the import.
    signal.signal(signal.SIGTERM, lambda *_: _end(children))
    while True:
        ready, _, _ = select.select([control.fileno(), wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 256):
                    pass
            _report_exits(control, children)
        if control.fileno() not in ready:
            continue
        request, fds, _, _ = socket.recv_fds(control, protocol.MAX_MESSAGE, 1)
        if not request:
            _end(children)
        if request == protocol.PRELOAD:
            preload(modules)
            continue
        gc.freeze()  # the forks' collections leave the template's objects (and pages) alone
        template = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM):  # as a fresh worker's
                signal.signal(sig, signal.SIG_DFL)
            for fd in (wake_r, wake_w):
                os.close(fd)
            control.close()
            os.dup2(fds[0], 0)
            os.close(fds[0])
            os.setsid()  # as a fresh worker: the agent signals its process group
            dies_with_parent(signal.SIGKILL, starter=template)()
            return receive()
        os.close(fds[0])
        children.add(pid)
        _tell(control, protocol.Forked(pid), children)


def _report_exits(control: socket.socket, children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        _tell(control, protocol.Exited(pid, code), children)


def _tell(
    control: socket.socket, report: protocol.Forked | protocol.Exited, children: set[int]
) -> None:
    try:
        control.send(protocol.encode(report))
    except OSError:  # the agent closed its end: the template is done
        _end(children)


def _end(children: set[int]) -> NoReturn:
    """The agent is done with the template: SIGKILL its spares still waiting, reap them (an
    orphan's zombie stays where the machine's init does not reap), and exit."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    os._exit(0)


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
