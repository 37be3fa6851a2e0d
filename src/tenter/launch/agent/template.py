"""A host's warm template as its agent sees it: the process (a fork of the agent, or a fresh
``python -m tenter.runtime.bootstrap --warm``), the socket the agent asks it over, and the
spares it forks (:class:`ForkedProcess`, the agent's worker handle). What the pool does with
them is :mod:`tenter.launch.agent.spares`; the template's own side is :mod:`tenter.runtime.warm`."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence

from tenter.launch.shared.processes import stat_fields, worker_preexec
from tenter.runtime import warm_protocol as protocol
from tenter.runtime.warm import TITLE_ROOM, WAIT_FLAG

logger = logging.getLogger(__name__)

PIPE_SIZE = 1 << 20
"""The handoff (mostly the environment) must fit in the pipe: the agent never waits for a
spare to read it."""


CLOSE_TIMEOUT_S = 5.0
"""How long a closing pool waits for its template to end its spares and exit (milliseconds:
the template does it in its SIGTERM handler, which runs even during an import)."""


class ForkedProcess:
    """A spare forked by the template, as the agent's worker handle: ``subprocess.Popen``'s
    ``pid``, ``poll`` and ``wait``, with its status as the template reports it."""

    def __init__(self, template: Template, handoff_fd: int) -> None:
        self._template = template
        self.handoff_fd: int | None = handoff_fd
        """The write end of the spare's handoff pipe, until the handoff is written."""
        self.known_pid: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        """The spare's pid (waits for the template to fork it: it may still import torch)."""
        while self.known_pid is None and self.returncode is None:
            self._template.pump(block=True)
        return self.known_pid if self.known_pid is not None else -1

    def poll(self) -> int | None:
        """As ``Popen.poll``: the status as soon as the process has ended, though the
        template may not have reaped it and told yet (the kernel shows it as a zombie)."""
        if self.returncode is None:
            self._template.pump(block=False)
        if self.returncode is None and self.known_pid is not None and _ended(self.known_pid):
            self.wait()  # the template's report is on its way
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._template.pump(block=True)
        return self.returncode

    def close_handoff(self) -> None:
        if self.handoff_fd is not None:
            os.close(self.handoff_fd)
            self.handoff_fd = None


class ForkedTemplate:
    """The template forked from the agent itself, as ``subprocess.Popen``'s ``pid``,
    ``poll``, ``wait``, ``terminate`` and ``kill`` (the agent is its parent)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._ended)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            readable, _, _ = select.select([self._ended], [], [], timeout)
            if not readable:
                raise subprocess.TimeoutExpired(["warm template"], timeout or 0)
        code = self.poll()
        assert code is not None, "a process whose pidfd is readable has ended"
        return code

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)  # not reaped yet: the pid is still the template's


class Template:
    """A host's template process and the spares it forked, seen from the agent. All methods
    run on the agent's main thread: the template's parent-death signal fires when the thread
    that started it ends."""

    def __init__(self, proc: subprocess.Popen[bytes] | ForkedTemplate, control: socket.socket):
        self.proc, self._control = proc, control
        self._unforked: list[ForkedProcess] = []
        """Requested, in order, not yet forked."""
        self._forked: dict[int, ForkedProcess] = {}
        self._preloaded = False

    @classmethod
    def started(
        cls, command: Sequence[str], preload: Sequence[str], env: Mapping[str, str], cwd: str
    ) -> Template:
        """A fresh template process: ``COMMAND --warm PRELOAD...``."""
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            proc = subprocess.Popen(
                [*command, WAIT_FLAG, *preload, TITLE_ROOM],
                env=dict(env),
                cwd=cwd,
                stdin=theirs.fileno(),  # requests; stdout and stderr: the agent's log
                start_new_session=True,
                preexec_fn=worker_preexec(),
            )
        logger.info("warm template started (pid %d)", proc.pid)
        return cls(proc, control)

    def fork(self) -> ForkedProcess:
        """A new spare (forked once the template's imports are done; this does not wait)."""
        read_end, write_end = os.pipe()
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        spare = ForkedProcess(self, write_end)
        try:
            socket.send_fds(self._control, [protocol.FORK], [read_end])
        except OSError:
            spare.returncode = -signal.SIGKILL  # the template died: as its spares would
            spare.close_handoff()
        else:
            self._unforked.append(spare)
        finally:
            os.close(read_end)
        return spare

    def preload(self) -> bool:
        """Have the template import its preload modules, once; whether it was asked now."""
        if self._preloaded:
            return False
        self._preloaded = True
        with contextlib.suppress(OSError):
            self._control.send(protocol.PRELOAD)
        return True

    def pump(self, block: bool) -> None:
        """Read what the template said: forked pids and exit statuses."""
        self._control.setblocking(block)
        while True:
            try:
                message = self._control.recv(protocol.MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                message = b""
            if not message:
                self._lost()
                return
            report = protocol.decode(message)
            if isinstance(report, protocol.Forked):
                spare = self._unforked.pop(0)
                spare.known_pid = report.pid
                self._forked[report.pid] = spare
            # Every child the template reports was forked at our request; a report for one
            # we no longer track (already ended by _lost) changes nothing.
            elif report.pid in self._forked:
                self._forked.pop(report.pid).returncode = report.code
            if block:
                return

    def _lost(self) -> None:
        """The template is gone: its spares died with it (the parent-death signal); their
        sessions are SIGKILLed all the same, for what they may have started."""
        for spare in [*self._unforked, *self._forked.values()]:
            if spare.known_pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(spare.known_pid, signal.SIGKILL)
            spare.returncode = -signal.SIGKILL
            spare.close_handoff()
        self._unforked.clear()
        self._forked.clear()

    def close(self) -> None:
        """End the template and every spare still waiting (what they ran has ended): at
        SIGTERM the template SIGKILLs and reaps them, then exits; SIGKILLed itself if it has
        not within :data:`CLOSE_TIMEOUT_S` (its spares then die with it, but as orphans,
        which stay zombies where the machine's init does not reap them)."""
        self.proc.terminate()
        self._control.close()
        try:
            self.proc.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._lost()


def _ended(pid: int) -> bool:
    """Whether ``pid`` is a zombie or gone: one read of its stat line (psutil reads
    three files, in every agent's pass over its spares)."""
    try:
        return stat_fields(f"/proc/{pid}/stat")[0] == b"Z"
    except FileNotFoundError:  # reaped: the report is on its way
        return True
    except (OSError, IndexError):
        return False


def become_template(control: socket.socket, env: Mapping[str, str], cwd: str, agent: int) -> None:
    """In the child of :meth:`WarmPool.fork_template`: become what a fresh template starts
    as (``Template.started``): requests on stdin, the template's environment and directory,
    a session of its own, the stop signals at their defaults (SIGINT at Python's
    KeyboardInterrupt, as a fresh interpreter sets it), SIGKILLed when the agent dies."""
    # setproctitle finds the memory it titles in at its first call, which fails once the
    # environment is replaced: make it now (the bootstrap titles the template again).
    from tenter.runtime.bootstrap import set_title  # torch: imported by the agent already

    set_title(f"{WAIT_FLAG} template")
    os.dup2(control.fileno(), 0)
    control.close()
    os.environ.clear()  # also the C environment
    os.environ.update(env)
    tempfile.tempdir = None
    os.chdir(cwd)
    os.setsid()
    worker_preexec(starter=agent)()
    signal.signal(signal.SIGINT, signal.default_int_handler)
