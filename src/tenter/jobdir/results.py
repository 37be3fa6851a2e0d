"""A job's outcome: :class:`JobResult` (``summary.json``) and its :class:`Failure` records."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from tenter.errors import ExitCode
from tenter.jobdir.layout import SUMMARY_FILE, write_atomic


class JobState(str, Enum):
    """A job's state (as TorchX's ``AppState``), written as its value (``summary.json``'s
    ``state``); also why the launcher stopped a job early."""

    RUNNING = "running"
    """No summary yet."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    """Stopped by a cancel (Ctrl-C, ``tenter cancel``), or a preemption without a final
    checkpoint."""
    PREEMPTED = "preempted"
    """Stopped by a preemption, after a final checkpoint: run it again to resume."""
    MAX_RUN = "max_run"
    HANG = "hang"

    def __str__(self) -> str:
        return self.value


STATES: dict[int, JobState] = {
    ExitCode.OK: JobState.SUCCEEDED,
    ExitCode.INTERRUPTED: JobState.INTERRUPTED,
    ExitCode.PREEMPTED: JobState.PREEMPTED,
    ExitCode.MAX_RUN: JobState.MAX_RUN,
    ExitCode.HANG: JobState.HANG,
}
"""``summary.json``'s ``state`` by the job's exit code; any other code: ``failed``."""


@dataclass(frozen=True)
class Failure:
    """One rank (or pod) that did not finish successfully."""

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
    """The job's exit code in :class:`tenter.errors.ExitCode`'s table."""
    duration_s: float
    hosts: int
    procs_per_host: int
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    summary: str = ""
    """The end-of-job report (root cause first when it failed)."""
    rdzv_endpoint: str = ""
    """Where the rendezvous store listened (released when the job ended)."""
    goodput: dict[str, Any] = field(default_factory=dict)
    """The goodput ledger at the job's end (tenter.goodput: parts, goodput, lost steps)."""
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    """The ranks found persistently slower than the others (tenter.goodput.stragglers)."""
    replicas: dict[str, Any] = field(default_factory=dict)
    """The data-parallel replicas' comparisons (tenter.runtime.replicas): ``agreed_steps``,
    and each divergence (step, ranks, text); empty if none was made."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def state(self) -> JobState:
        """Any but RUNNING."""
        return STATES.get(self.exit_code, JobState.FAILED)

    @property
    def root_cause(self) -> Failure | None:
        primary = [f for f in self.failures if not f.secondary] or self.failures
        return min(primary, key=lambda f: f.timestamp) if primary else None

    def to_json(self) -> str:
        return json.dumps({"state": self.state, **dataclasses.asdict(self)}, indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobResult:
        failures = [Failure(**f) for f in data.get("failures", [])]
        fields = {k: v for k, v in data.items() if k != "state"}  # derived from exit_code
        return cls(**{**fields, "failures": failures})


def write_result(job_dir: Path, result: JobResult) -> None:
    write_atomic(job_dir / SUMMARY_FILE, result.to_json())


def read_result(job_dir: Path) -> JobResult | None:
    """The job's result, or None while it has none (it runs, or its launcher was killed)."""
    path = job_dir / SUMMARY_FILE
    if not path.exists():
        return None
    return JobResult.from_dict(json.loads(path.read_text()))
