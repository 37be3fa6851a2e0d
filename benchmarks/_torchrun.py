"""The torchrun side of the launcher benchmarks: a job on two simulated hosts, run as two
torchrun agents on this machine that meet through a c10d rendezvous, as they would on two
hosts (what `tenter run --hosts 2` is compared with)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_torchrun(
    script: list[str], env: dict[str, str], *, max_restarts: int = 0, timeout: float | None = None
) -> int:
    """Run ``script`` (path and arguments) on 2 hosts x 2 processes; return the first nonzero
    exit code of the two agents, or 0. Past ``timeout`` seconds the agents are stopped and
    the run counts as failed (exit code 124, as timeout(1) says)."""
    port, run_id = free_port(), f"bench{time.time_ns()}"
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        str(max_restarts),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        run_id,
        *script,
    ]
    agents = [
        subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        codes = [
            agent.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            for agent in agents
        ]
    except subprocess.TimeoutExpired:
        codes = [124]
    finally:
        # Interrupted (Ctrl-C, an error): SIGTERM makes an agent stop its workers first.
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
                agent.wait()
    return next((code for code in codes if code), 0)
