"""``handle.json``: which backend holds a job and how to reach it there.

Every backend writes one when it submits, so ``tenter status|logs|cancel JOB`` work the same
on all of them, whether ``tenter run`` still follows the job or not (``--detach``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from tenter.jobdir.layout import HANDLE_FILE, write_atomic


@dataclass(frozen=True)
class JobHandle:
    backend: str
    job_id: str
    job_dir: str
    scheduler_id: str = ""
    """The backend's own id: the launcher process as ``pid@start time`` (local, mpi), the
    Slurm job id, or ``namespace/Kind/name`` on Kubernetes."""
    details: dict[str, str] = field(default_factory=dict)
    """What else the backend needs to reach the job (a kubeconfig context...)."""

    def write(self) -> None:
        write_atomic(Path(self.job_dir) / HANDLE_FILE, json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, job_dir: Path) -> JobHandle:
        return cls(**json.loads((job_dir / HANDLE_FILE).read_text()))
