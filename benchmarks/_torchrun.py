"""The torchrun side of the launcher benchmarks: a job on two simulated hosts, run as two
torchrun agents on this machine that meet through a c10d rendezvous, as they would on two
hosts (what `tenter run --hosts 2` is compared with)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_two_ranks(argv: Sequence[str], job_dir: str) -> int:
    """``argv --rank R`` for ranks 0 and 1, as a launcher would start them (env://, one thread
    each, ``TENTER_JOB_DIR``); the worst exit status."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
        "TENTER_JOB_DIR": job_dir,
    }
    ranks = [
        subprocess.Popen([*argv, "--rank", str(r)], env={**env, "RANK": str(r)}) for r in range(2)
    ]
    return max(p.wait() for p in ranks)


def run_agents(
    script: list[str],
    env: dict[str, str],
    *,
    max_restarts: int = 0,
    nnodes: str = "2",
    agent_flags: Sequence[Sequence[str]] = ((), ()),
    logs: Sequence[Path] = (),
    timeout: float | None = None,
) -> list[int]:
    """Run ``script`` (path and arguments) on 2 hosts x 2 processes (``nnodes``: torchrun's
    ``MIN:MAX``; ``agent_flags``: more flags for each agent); the exit codes of the two
    agents, whose output goes to ``logs`` (default: nowhere). Past ``timeout`` seconds the
    agents are stopped and the codes are 124, as timeout(1) says."""
    port, run_id = free_port(), f"bench{time.time_ns()}"
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        "--nproc-per-node=2",
        f"--max-restarts={max_restarts}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run_id}",
    ]
    outs: list[IO[bytes] | int] = (
        [open(log, "wb") for log in logs] if logs else [subprocess.DEVNULL] * 2  # noqa: SIM115
    )
    # torchrun leaves its log directory (torchelastic_*) in its TMPDIR: one that goes with it.
    tmp = tempfile.TemporaryDirectory(prefix="torchrun-")
    agents = [
        subprocess.Popen(
            [*argv, *flags, *script],
            env={**env, "TMPDIR": tmp.name},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        for out, flags in zip(outs, agent_flags, strict=True)
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        codes = [
            agent.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            for agent in agents
        ]
    except subprocess.TimeoutExpired:
        codes = [124, 124]
    finally:
        # Interrupted (Ctrl-C, an error): SIGTERM makes an agent stop its workers first.
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
                agent.wait()
        for out in outs:
            if not isinstance(out, int):
                out.close()
        tmp.cleanup()
    return codes


def run_torchrun(
    script: list[str], env: dict[str, str], *, max_restarts: int = 0, timeout: float | None = None
) -> int:
    """:func:`run_agents` at full size: the first nonzero exit code of the agents, or 0."""
    codes = run_agents(script, env, max_restarts=max_restarts, timeout=timeout)
    return next((code for code in codes if code), 0)
