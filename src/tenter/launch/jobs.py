"""Finding a job from what a user types (a job id, or the directory itself), and the
backend that can reach it: what ``tenter status|logs|cancel|join|report`` share."""

from __future__ import annotations

import os
from pathlib import Path

from tenter.launch.api import ControllableBackend, get_backend
from tenter.launch.plan import Plan
from tenter.spec import Problem, SpecError


def tenter_home() -> Path:
    """Where tenter keeps job directories and caches: ``$TENTER_HOME``, else ``~/.tenter``."""
    return Path(os.environ.get("TENTER_HOME") or Path.home() / ".tenter")


def find_job(job: str) -> Path:
    """The directory of ``job`` (an id under ``$TENTER_HOME/jobs``, or a path)."""
    for candidate in (Path(job), tenter_home() / "jobs" / job):
        if (candidate / "plan.json").is_file():
            return candidate.resolve()
    raise SpecError(
        [Problem("JOB", f"no job '{job}' in {tenter_home() / 'jobs'}; give a job id or directory")]
    )


def open_job(job: str) -> tuple[Path, Plan]:
    """The directory of ``job`` (as :func:`find_job` finds it) and the plan that ran there."""
    job_dir = find_job(job)
    return job_dir, Plan.from_json((job_dir / "plan.json").read_text())


def controllable_backend(plan: Plan) -> ControllableBackend | None:
    """The backend that ran ``plan`` if it can reach a started job by id (its status, a
    cancel); None for one that cannot, which callers report in their own words."""
    backend = get_backend(plan.backend)
    return backend if isinstance(backend, ControllableBackend) else None


def is_running(job_dir: Path) -> bool:
    """A job is finished once its launcher wrote the summary."""
    return not (job_dir / "summary.json").exists()
