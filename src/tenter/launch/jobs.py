"""Finding a job's directory from what a user types: a job id, or the directory itself."""

from __future__ import annotations

import os
from pathlib import Path

from tenter.spec import Problem, SpecError


def tenter_home() -> Path:
    return Path(os.environ.get("TENTER_HOME") or Path.home() / ".tenter")


def find_job(job: str) -> Path:
    """The directory of ``job`` (an id under ``$TENTER_HOME/jobs``, or a path)."""
    for candidate in (Path(job), tenter_home() / "jobs" / job):
        if (candidate / "plan.json").is_file():
            return candidate.resolve()
    raise SpecError(
        [Problem("JOB", f"no job '{job}' in {tenter_home() / 'jobs'}; give a job id or directory")]
    )


def is_running(job_dir: Path) -> bool:
    """A job is finished once its launcher wrote the summary."""
    return not (job_dir / "summary.json").exists()
