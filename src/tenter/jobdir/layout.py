"""The job directory on disk::

<job_dir>/plan.json                  the request that ran (the plan; Kubernetes: the manifests)
<job_dir>/handle.json                which backend holds the job and its id there
<job_dir>/summary.json               outcome, duration, failures (written when the job ends)
<job_dir>/events.jsonl               rendezvous rounds and restarts, as the agents saw them
<job_dir>/checkpoints/               the job's checkpoints (unless the spec names a dir)
<job_dir>/logs/rank-<N>.stdout|.stderr|.error.json   (restarts: rank-<N>.<host>.attempt-<K>.*)
<job_dir>/logs/index.jsonl           which log files exist, for which rank, host and attempt
<job_dir>/hosts/<algo-N>/            one SageMaker /opt/ml tree per host:
    input/config/{resourceconfig,hyperparameters,inputdataconfig}.json
    input/data/<channel> -> your data (a link, not a copy)
    model/  output/data/  output/success|failure
    checkpoints -> the job's checkpoint directory (shared by all hosts)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

PLAN_FILE = "plan.json"
HANDLE_FILE = "handle.json"
SUMMARY_FILE = "summary.json"
LOGS_DIR = "logs"
HOST_SUBDIRS = (
    "input/config",
    "input/data",
    "model",
    "output/data",
    "output/intermediate",
)


class HostTree(Protocol):
    """What a host's ``/opt/ml`` tree is made of (the plan's HostPlan has these fields)."""

    @property
    def dir(self) -> str: ...
    @property
    def files(self) -> Mapping[str, str]: ...
    @property
    def links(self) -> Mapping[str, str]: ...


def create(job_dir: Path, hosts: Iterable[HostTree], shared_dirs: Iterable[str] = ()) -> None:
    """Create the job directory. Fails if it exists: a job id is never reused."""
    job_dir.mkdir(parents=True, exist_ok=False)
    (job_dir / LOGS_DIR).mkdir()
    for path in shared_dirs:
        Path(path).mkdir(parents=True, exist_ok=True)
    for host in hosts:
        create_host(host)


def create_host(host: HostTree) -> None:
    root = Path(host.dir)
    for sub in HOST_SUBDIRS:
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rel, content in host.files.items():
        (root / rel).write_text(content)
    for rel, target in host.links.items():
        os.symlink(target, root / rel)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` in one step: a reader sees the old file or the new one, never half."""
    write_atomic_bytes(path, text.encode())


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """:func:`write_atomic` of bytes."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise


def write_outcome(host_dir: str, failure: str | None) -> None:
    """SageMaker's ``output/success`` or ``output/failure`` (holding the reason)."""
    out = Path(host_dir) / "output"
    if failure is None:
        (out / "success").write_text("")
    else:
        (out / "failure").write_text(failure + "\n")
