"""What one host reports: ``agent-result.json`` in its host directory. Its agent writes it
(:mod:`tenter.launch.agent`), or, for mpirun's ranks, which have no agent, the mpi launcher
from what mpirun saw; the launcher reads it
(:func:`tenter.launch.diagnosis.root_cause.collect_failures`). One writer and one reader of the
format, here."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from tenter.jobdir.layout import AGENT_RESULT_FILE, write_atomic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerFailure:
    rank: int
    """The job-wide rank (:meth:`tenter.contract.plan.Plan.job_rank`)."""
    local_rank: int
    pid: int
    exit_code: int
    """The worker's exit status; minus the signal's number for a worker killed by one."""
    timestamp: float
    error_file: str


class HostState(str, Enum):
    """How a host's agent ended (written as its value)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    """By a signal."""
    PREEMPTED = "PREEMPTED"
    """Its workers ended after the preemption's SIGTERM (``failures``: those that ended
    badly)."""
    ERROR = "ERROR"
    """The agent itself failed."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AgentResult:
    state: HostState
    failures: list[WorkerFailure]
    message: str = ""


JOINED_TOO_LATE = "the job ended before this host entered it"
"""A SUCCEEDED host's message: it joined (``tenter join``) as the job ended, and the other
hosts finished and closed the rendezvous before it got in."""


def result_path(host_dir: str) -> Path:
    return Path(host_dir) / AGENT_RESULT_FILE


def write_result(host_dir: str, result: AgentResult) -> None:
    """Write ``result`` atomically: the launcher never reads half a report."""
    try:
        write_atomic(result_path(host_dir), json.dumps(asdict(result)))
    except OSError:  # a full disk: the launcher reports the silent exit status instead
        logger.exception("could not write %s", AGENT_RESULT_FILE)


def read_result(host_dir: str) -> AgentResult | None:
    """The host's report; None if it wrote none (it was stopped, or killed)."""
    path = result_path(host_dir)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    failures = [WorkerFailure(**f) for f in data["failures"]]
    return AgentResult(HostState(data["state"]), failures, data["message"])
