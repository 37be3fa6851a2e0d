"""Endpoints a job's process learns at run time and publishes for the others, in the job
directory (one file each, written whole or not at all)::

    <job_dir>/rdzv-port         ADDR:PORT of the job's store, where the first host's agent
                                serves it (a Slurm job's first node; a local job of fixed
                                membership), on a port the kernel picked
    <job_dir>/lighthouse-port   ADDR:PORT of torchft's lighthouse (the local launcher's, a Slurm
                                job's first node's): its agents resolve ${lighthouse_port}

Files rather than a store: they are what the store's clients need to find it, and the job
directory is on every host (a Slurm job's is on a shared file system).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tenter.jobdir.layout import LIGHTHOUSE_PORT_FILE, RDZV_PORT_FILE, write_atomic

STORE = RDZV_PORT_FILE
LIGHTHOUSE = LIGHTHOUSE_PORT_FILE
POLL_S = 0.01
"""How often a waiting host looks for the file (a ``stat``)."""


def publish(job_dir: str | os.PathLike[str], name: str, addr: str, port: int) -> None:
    write_atomic(Path(job_dir) / name, f"{addr}:{port}\n")


def published(job_dir: str | os.PathLike[str], name: str) -> str | None:
    """``ADDR:PORT``, once published."""
    path = Path(job_dir) / name
    return path.read_text().strip() if path.exists() else None


def wait_for(job_dir: str | os.PathLike[str], name: str, timeout_s: float) -> tuple[str, int]:
    """``(ADDR, PORT)`` once published; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (endpoint := published(job_dir, name)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the first host did not publish {name} in {job_dir} within {timeout_s:.0f} s"
            )
        time.sleep(POLL_S)  # another host's process writes it; nothing to be notified by
    addr, _, port = endpoint.rpartition(":")
    return addr, int(port)
