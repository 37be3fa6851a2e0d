"""What one host agent reports: ``agent-result.json`` in its host directory, which the
launcher reads (:func:`tenter.launch.report.collect_failures`)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from tenter.launch.report import AGENT_RESULT

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


@dataclass(frozen=True)
class AgentResult:
    state: str
    """SUCCEEDED, FAILED, STOPPED (by a signal) or ERROR (the agent itself failed)."""
    failures: list[WorkerFailure]
    message: str = ""


def write_result(host_dir: str, result: AgentResult) -> None:
    """Write ``result`` atomically: the launcher never reads half a report."""
    tmp = Path(host_dir) / f".{AGENT_RESULT}.tmp"
    try:
        tmp.write_text(json.dumps(asdict(result)))
        tmp.replace(Path(host_dir) / AGENT_RESULT)
    except OSError:  # a full disk: the launcher reports the silent exit status instead
        logger.exception("could not write %s", AGENT_RESULT)
        tmp.unlink(missing_ok=True)
