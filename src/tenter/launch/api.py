"""The launch protocol: every backend turns a spec into a plan (pure) and executes it.

``run(spec)`` is ``backend.submit(backend.dryrun(spec))``, so what ``tenter plan`` prints is
what runs. Backends are found by name in a lazy registry: a backend's module (and any
heavy client library it needs) is imported only when that backend is used.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tenter.launch.plan import Plan
from tenter.spec import JobSpec

BACKENDS = {
    "local": "tenter.launch.local",
    "mpi": "tenter.launch.mpirun",
    "slurm": "tenter.launch.slurm",
    "kubernetes": "tenter.launch.kubernetes",
}
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


class Request(Protocol):
    """What a backend's dry run produces and its submit executes: a :class:`Plan` for the
    backends that run tenter's agents, manifests for Kubernetes. ``str()`` is what
    ``tenter plan`` prints, ``to_json()`` what ``--json`` prints."""

    backend: str
    job_id: str

    def to_json(self) -> str: ...


class Backend(Protocol):
    name: str

    def dryrun(self, spec: JobSpec, job_id: str) -> Request:
        """The exact request of ``spec``: pure, deterministic for a given job id."""
        ...

    def submit(self, request: Any) -> JobResult:
        """Execute a request this backend's dryrun made; blocks until the job ends."""
        ...


@dataclass(frozen=True)
class JobStatus:
    """Where a started job is now, as its backend sees it."""

    running: bool
    text: str
    """One line: ``RUNNING (Slurm job 12)``, ``running: 5 processes``..."""


@runtime_checkable
class ControllableBackend(Backend, Protocol):
    """A backend whose jobs ``tenter status`` and ``tenter cancel`` can reach by job id."""

    def status(self, plan: Plan) -> JobStatus:
        """The job's state now (``summary.json``, once written, is its outcome)."""
        ...

    def cancel(self, plan: Plan) -> str:
        """Stop the running job (as Ctrl-C on ``tenter run`` would); says what was done."""
        ...


@runtime_checkable
class DetachableBackend(Backend, Protocol):
    """A backend whose jobs outlive ``tenter run`` (a scheduler): ``tenter run --detach``."""

    def start(self, request: Any) -> str:
        """Submit the job and return at once with the scheduler's id for it."""
        ...


def get_backend(name: str) -> Backend:
    module = BACKENDS.get(name)
    if module is None:
        raise ValueError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")
    backend: Backend = importlib.import_module(module).create_backend()
    return backend


def dryrun(spec: JobSpec, job_id: str | None = None) -> Request:
    from tenter.launch.plan import new_job_id

    return get_backend(spec.backend).dryrun(spec, job_id or new_job_id(spec.name))


def submit(request: Request) -> JobResult:
    """Execute a request on its backend and return the result."""
    return get_backend(request.backend).submit(request)


def run(spec: JobSpec, job_id: str | None = None) -> JobResult:
    """Run a validated job and return its result (a failed job is a result, not an error)."""
    return submit(dryrun(spec, job_id))


def python_executable() -> str:
    return sys.executable
