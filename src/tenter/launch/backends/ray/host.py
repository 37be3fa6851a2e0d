"""What runs in the Ray actor of each host: tenter's own per-host agent
(:mod:`tenter.launch.agent`), started as the local backend starts it, and signalled on the
launcher's behalf. The actor is threaded (two calls at once): ``run`` waits for the agent
while ``signal`` reaches it."""

from __future__ import annotations

import signal
import subprocess

from tenter.launch.backends.ray.gpus import assigned_gpus_line
from tenter.launch.shared.processes import start_process


class HostAgent:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, argv: list[str], env: dict[str, str], cwd: str, log_path: str) -> int:
        """The agent's exit status (negative: the signal that killed it)."""
        with open(log_path, "ab") as log:
            log.write(assigned_gpus_line())
            # SIGTERM if this actor dies (a lost node): the agent stops its workers.
            self.proc = start_process(argv, env, cwd, log)
        return self.proc.wait()

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.Signals(signum))
