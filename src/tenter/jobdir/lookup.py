"""Finding a job from what a user types: a job id, or the directory itself."""

from __future__ import annotations

import os
from pathlib import Path

from tenter.errors import JobNotFoundError
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.layout import PLAN_FILE, SUMMARY_FILE


def tenter_home() -> Path:
    """Where tenter keeps job directories and caches: ``$TENTER_HOME``, else ``~/.tenter``."""
    return Path(os.environ.get("TENTER_HOME") or Path.home() / ".tenter")


def jobs_dir() -> Path:
    return tenter_home() / "jobs"


def find_job(job: str) -> Path:
    """The directory of ``job`` (an id under ``$TENTER_HOME/jobs``, or a path)."""
    for candidate in (Path(job), jobs_dir() / job):
        if (candidate / PLAN_FILE).is_file():  # every backend writes it first
            return candidate.resolve()
    raise JobNotFoundError(
        "JOB",
        f"no job '{job}' in {jobs_dir()}",
        "give a job id that `ls $TENTER_HOME/jobs` lists, or the job's directory",
    )


def open_handle(job: str) -> JobHandle:
    return JobHandle.read(find_job(job))


def is_running(job_dir: Path) -> bool:
    """A job is finished once its launcher wrote the summary."""
    return not (job_dir / SUMMARY_FILE).exists()
