"""torchft's lighthouse, a process of the launcher: it forms the quorum of replica groups at
every step (``fault_tolerance``; docs/fault_tolerance.md).

The launcher starts torchft's own ``torchft_lighthouse`` binary bound to the job's address
(never all interfaces) on port 0: the kernel picks a free port, which the binary logs and
the launcher reads back, so no other job can hold it. If the lighthouse dies, the launcher
starts it again on the same port; the replica groups' managers reconnect at their next
quorum. Its log is ``logs/lighthouse.log`` in the job directory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tenter.errors import MissingToolError, TenterError
from tenter.launch.console import say
from tenter.launch.supervisor import start_process

BINARY = "torchft_lighthouse"
LOG_NAME = "lighthouse.log"
START_TIMEOUT_S = 30.0
"""How long the binary may take to say where it listens (it takes milliseconds)."""
_LISTENING = re.compile(rb"Lighthouse listening on: \S+:(\d+)")


def binary() -> str:
    """The lighthouse of the torchft installed beside this Python (the wheel puts it in the
    environment's bin directory), else the first on PATH."""
    beside = Path(sys.executable).parent / BINARY
    found = str(beside) if beside.exists() else shutil.which(BINARY)
    if found is None:
        raise MissingToolError(
            "fault_tolerance", f"needs torchft's {BINARY}", "pip install 'tenter[ft]'"
        )
    return found


class Lighthouse:
    def __init__(
        self,
        job_dir: str,
        addr: str,
        min_replicas: int,
        heartbeat_ms: int,
        env: dict[str, str],
    ) -> None:
        self._log = Path(job_dir) / "logs" / LOG_NAME
        self._addr, self._min_replicas, self._heartbeat_ms = addr, min_replicas, heartbeat_ms
        self._env = env
        """Marks the process as the job's (TENTER_JOB_ID), so the final sweep finds it."""
        self._cwd = job_dir
        self.port = 0
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"http://{self._addr}:{self.port}"

    def start(self) -> None:
        """Start it (on a port the kernel picks, the first time) and wait until it listens."""
        offset = self._log.stat().st_size if self._log.exists() else 0
        argv = [
            binary(),
            "--bind",
            f"{self._addr}:{self.port}",
            "--min_replicas",
            str(self._min_replicas),
            "--heartbeat_timeout_ms",
            str(self._heartbeat_ms),
        ]
        with open(self._log, "ab") as log:
            self._proc = start_process(argv, self._env, self._cwd, log)
        self.port = self._wait_listening(offset)

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
