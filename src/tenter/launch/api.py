"""The backend protocol: every backend turns a spec into a request (pure) and runs it.

In the spirit of TorchX's scheduler API:

- ``dryrun(spec, job_id) -> request``: pure and deterministic; what ``tenter plan`` prints is
  exactly what ``submit`` executes (a :class:`~tenter.contract.plan.Plan` for the backends that
  run tenter's agents or mpirun, manifests for Kubernetes);
- ``submit(request, detach=...) -> handle``: returns at once; the job directory holds the
  request (``plan.json``) and the :class:`~tenter.jobdir.handle.JobHandle` (``handle.json``);
- ``wait(handle, stop)``: follow the job to its end (``stop`` set: cancel it first) and return
  its :class:`~tenter.jobdir.results.JobResult`, also written to ``summary.json``;
- ``status(handle)``, ``logs(handle, ...)``, ``cancel(handle)``, ``preempt(handle)``: by
  handle, from any process.

Backends are found by name in a lazy registry: a backend's module (and any heavy client
library it needs) is imported only when that backend is used. The console, the live view and
the metrics endpoint are not the backends' business: :mod:`tenter.session` puts them around
``wait`` for every backend that ``reports_progress``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tenter.errors import TenterError
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.results import JobResult
from tenter.spec.backends import KNOWN_BACKENDS

if TYPE_CHECKING:
    from tenter.contract.plan import Plan
    from tenter.spec import JobSpec

BACKENDS = {name: f"tenter.launch.backends.{name}" for name in KNOWN_BACKENDS}
"""Backend name (the spec's list) -> package exposing ``create_backend() -> Backend``."""


class JobFailedError(RuntimeError):
    """Raised by ``Estimator.fit`` when a job fails."""

    def __init__(self, result: JobResult, summary: str) -> None:
        self.result = result
        super().__init__(summary)


class Request(Protocol):
    """What a backend's dry run produces and its submit executes. ``str()`` is what
    ``tenter plan`` prints (for a Plan, :func:`tenter.cli.cmd_plan.render`), ``to_json()``
    what ``--json`` prints and the job directory keeps as ``plan.json``."""

    @property
    def backend(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def job_dir(self) -> str: ...

    @property
    def plan(self) -> Plan | None:
        """The plan of the hosts tenter starts its agents on (local, mpi, Slurm), which the
        doctor and the preflight check and the live view shows; None for Kubernetes, whose
        pods run torchrun in their image."""
        ...

    def to_json(self) -> str: ...

    def write(self, folder: Path) -> list[Path]:
        """``tenter plan --out``: write the request's files under ``folder``; their paths."""
        ...


@dataclass(frozen=True)
class JobStatus:
    """Where a started job is now, as its backend sees it."""

    running: bool
    text: str
    """One line: ``RUNNING (Slurm job 12)``, ``RUNNING (launcher pid 41, 5 processes on this
    machine)``..."""
    launcher: bool = True
    """While running: its launcher runs too, and keeps ``goodput.json`` and ``progress.json``
    (False: it was killed and its processes were left behind)."""


class LogStream(Protocol):
    """Prints a job's rank output as it arrives; ``stop()`` prints what is left and returns."""

    def start(self) -> LogStream: ...
    def stop(self) -> None: ...


class Backend(Protocol):
    name: str
    reports_progress: bool
    """The ranks' progress records reach this machine (the job directory is shared), so the
    live view, the metrics endpoint and hang detection work on this backend."""

    def dryrun(self, spec: JobSpec, job_id: str) -> Request:
        """The exact request of ``spec``: pure, deterministic for a given job id."""
        ...

    def submit(self, request: Request, *, detach: bool = False) -> JobHandle:
        """Start a request this backend's dryrun made; returns at once. ``detach``: the job
        must outlive this process (a local job gets a launcher process of its own)."""
        ...

    def wait(self, handle: JobHandle, stop: threading.Event) -> JobResult:
        """Follow the job until it ends; when ``stop`` is set, cancel it and wait for that."""
        ...

    def status(self, handle: JobHandle) -> JobStatus: ...

    def logs(
        self, handle: JobHandle, ranks: list[int] | None, tag: bool, follow: bool
    ) -> LogStream:
        """The job's output (``ranks`` None: every rank's; ``tag``: ``[host,rank]`` prefixes)."""
        ...

    def cancel(self, handle: JobHandle) -> str:
        """Stop the running job (as Ctrl-C on ``tenter run`` would); says what was done."""
        ...

    def preempt(self, handle: JobHandle) -> str:
        """Preempt the running job (as SIGTERM to ``tenter run`` would): every rank stops at a
        step boundary after a final checkpoint; says what was done. Raises
        :func:`scheduler_preempts`'s error where the job's scheduler does it."""
        ...


def scheduler_preempts(backend: str, job_id: str) -> TenterError:
    """``preempt`` of a backend whose scheduler preempts its jobs (Slurm, Kubernetes)."""
    return TenterError(
        "--preempt",
        f"the {backend} backend's jobs are preempted by their scheduler, whose SIGTERM "
        "(scancel, deleting the pods) each host turns into a preemption request",
        f"leave out --preempt: `tenter cancel {job_id}` sends it",
    )


@functools.cache
def get_backend(name: str) -> Backend:
    """The backend of this name; one per process, so that what ``submit`` started in this
    process, ``wait`` finds."""
    package = BACKENDS.get(name)
    if package is None:
        raise ValueError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")
    backend: Backend = importlib.import_module(package).create_backend()
    return backend


def dryrun(spec: JobSpec, job_id: str | None = None) -> Request:
    from tenter.contract.planner import new_job_id

    return get_backend(spec.backend).dryrun(spec, job_id or new_job_id(spec.name))


def python_executable() -> str:
    return sys.executable
