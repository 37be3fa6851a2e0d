"""torchft's lighthouse, a process of the launcher: it forms the quorum of replica groups at
every step (``fault_tolerance``; docs/fault_tolerance.md).

The launcher runs torchft's own lighthouse (``lighthouse_main``, what the
``torchft_lighthouse`` command runs) bound to the job's address (never all interfaces) on
port 0: the kernel picks a free port, which the lighthouse logs and the launcher reads back,
so no other job can hold it. If the lighthouse dies, the launcher starts it again on the same
port; the replica groups' managers reconnect at their next
quorum. Its log is ``logs/lighthouse.log`` in the job directory.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from tenter.errors import TenterError
from tenter.jobdir import layout, published
from tenter.launch.api import python_executable
from tenter.launch.shared.console import say
from tenter.launch.shared.processes import start_process

START_TIMEOUT_S = 30.0
"""How long the lighthouse may take to say where it listens (well under a second)."""
LISTENING = "torchft lighthouse listening on"
_LISTENING = re.compile(LISTENING.encode() + rb" \S+ port (\d+) ")


def _torchft_extension() -> ModuleType:
    """torchft's compiled module, loaded on its own. ``torchft_lighthouse`` imports it through
    the ``torchft`` package, which imports torch first: seconds of start-up, which a restarted
    lighthouse would add to every group's wait; loaded alone it takes a few milliseconds."""
    package = importlib.util.find_spec("torchft")
    assert package is not None and package.submodule_search_locations, "the spec check"
    folder = Path(package.submodule_search_locations[0])
    path = next(
        folder / f"_torchft{suffix}"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (folder / f"_torchft{suffix}").exists()
    )
    spec = importlib.util.spec_from_file_location("torchft._torchft", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Lighthouse:
    def __init__(
        self,
        job_dir: str,
        addr: str,
        min_replicas: int,
        heartbeat_ms: int,
        env: dict[str, str],
    ) -> None:
        self._log = layout.logs_dir(job_dir) / layout.LIGHTHOUSE_LOG
        self._addr, self._min_replicas, self._heartbeat_ms = addr, min_replicas, heartbeat_ms
        self._env = env
        """Marks the process as the job's (TENTER_JOB_ID), so the final sweep finds it."""
        self._cwd = job_dir
        self.port = 0
        self.restarts = 0
        self.enter: list[str] = []
        """The argv prefix that runs it where it listens (the switch of isolated hosts)."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"http://{self._addr}:{self.port}"

    def start(self) -> None:
        """Start it (on a port the kernel picks, the first time), wait until it listens, and
        publish where (:mod:`tenter.jobdir.published`)."""
        offset = self._log.stat().st_size if self._log.exists() else 0
        argv = [
            *self.enter,
            python_executable(),
            "-m",
            __name__,
            self._addr,
            str(self.port),
            str(self._min_replicas),
            str(self._heartbeat_ms),
        ]
        with open(self._log, "ab") as log:
            self._proc = start_process(argv, self._env, self._cwd, log)
        self.port = self._wait_listening(offset)
        # For the agents, which put its port in their workers' environment.
        published.publish(self._cwd, published.LIGHTHOUSE, self._addr, self.port)

    def _wait_listening(self, offset: int) -> int:
        """The port from the binary's "listening on" line (polled: it is a file we own)."""
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self._log, "rb") as log:
                log.seek(offset)
                match = _LISTENING.search(log.read())
            if match:
                return int(match.group(1))
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise TenterError(
            "fault_tolerance",
            f"torchft's lighthouse did not start on {self._addr}:{self.port or 'a free port'}",
            f"see {self._log}",
        )

    def keep_alive(self) -> None:
        """Start it again if it died (on its port: the groups' managers know that address)."""
        if self._proc is None or self._proc.poll() is None:
            return
        code = self._proc.returncode
        self.restarts += 1
        say(f"torchft lighthouse exited ({_status(code)}); restarting it at {self.address}")
        self.start()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def _status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"status {code}"


def main(argv: list[str]) -> None:
    """``python -m tenter.launch.launcher.lighthouse ADDR PORT MIN_REPLICAS HEARTBEAT_MS``: serve
    until killed (the launcher's SIGKILL, or the kernel's signal when the launcher dies)."""
    addr, port, min_replicas, heartbeat_ms = argv
    server = _torchft_extension().LighthouseServer(
        bind=f"{addr}:{port}",
        min_replicas=int(min_replicas),
        heartbeat_timeout_ms=int(heartbeat_ms),
    )
    # The server's own address names this machine's hostname; the port is what counts.
    # One write, ended by a space: the lighthouse's own log lines share the file.
    os.write(1, f"{LISTENING} {addr} port {server.address().rsplit(':', 1)[1]} \n".encode())
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.shutdown()


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    main(sys.argv[1:])
