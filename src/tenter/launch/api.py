"""The launch protocol: every backend turns a spec into a plan (pure) and executes it.

``run(spec)`` is ``backend.submit(backend.dryrun(spec))``, so what ``tenter plan`` prints is
what runs. Backends are found by name in a lazy registry: a backend's module (and any
heavy client library it needs) is imported only when that backend is used.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tenter.launch.plan import Plan
from tenter.spec import JobSpec

BACKENDS = {"local": "tenter.launch.local"}
"""Backend name -> module exposing ``create_backend() -> Backend``."""


@dataclass(frozen=True)
class Failure:
    """One rank that did not finish successfully."""

    host: str
    rank: int
    local_rank: int
    pid: int | None
    exit_code: int | None
    """The process's exit status; negative: killed by that signal."""
    timestamp: float
    message: str = ""
    traceback: str = ""
    stderr_tail: str = ""
    log: str = ""
    secondary: bool = False
    """A consequence of another failure (a peer's broken connection, tenter's own stop)."""


@dataclass(frozen=True)
class JobResult:
    job_id: str
    job_dir: str
    exit_code: int
    duration_s: float
    hosts: int
    procs_per_host: int
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    summary: str = ""
    """The end-of-job report (root cause first when it failed)."""
    rdzv_endpoint: str = ""
    """Where the rendezvous store listened (released when the job ended)."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def root_cause(self) -> Failure | None:
        primary = [f for f in self.failures if not f.secondary] or self.failures
        return min(primary, key=lambda f: f.timestamp) if primary else None


class JobFailedError(RuntimeError):
    """Raised by ``Estimator.fit`` (and ``run(..., check=True)``) when a job fails."""

    def __init__(self, result: JobResult, summary: str) -> None:
        self.result = result
        super().__init__(summary)


class Backend(Protocol):
    name: str

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        """The exact plan of ``spec``: pure, deterministic for a given job id."""
        ...

    def submit(self, plan: Plan) -> JobResult:
        """Execute ``plan``; blocks until the job ends."""
        ...


def get_backend(name: str) -> Backend:
    module = BACKENDS.get(name)
    if module is None:
        raise ValueError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")
    backend: Backend = importlib.import_module(module).create_backend()
    return backend


def tenter_home() -> Path:
    return Path(os.environ.get("TENTER_HOME") or Path.home() / ".tenter")


def dryrun(spec: JobSpec, job_id: str | None = None) -> Plan:
    from tenter.launch.plan import new_job_id

    return get_backend(spec.backend).dryrun(spec, job_id or new_job_id(spec.name))


def submit(plan: Plan) -> JobResult:
    """Execute a plan on its backend and return the result."""
    return get_backend(plan.backend).submit(plan)


def run(spec: JobSpec, job_id: str | None = None) -> JobResult:
    """Run a validated job and return its result (a failed job is a result, not an error)."""
    return submit(dryrun(spec, job_id))


def python_executable() -> str:
    return sys.executable
