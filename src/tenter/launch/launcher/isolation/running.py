"""Finding a running local job from another process (``tenter fault``, ``tenter doctor --job``),
with the errors a user sees when it is not one."""

from __future__ import annotations

from pathlib import Path

from tenter.contract.plan import Plan, read_plan
from tenter.errors import JobNotFoundError, TenterError
from tenter.jobdir.lookup import find_job, is_running

ISOLATION_FIX = "run the job with `--isolation network` (or `isolation: network` in its spec)"


def running_local_job(
    job: str | Path, doing: str, isolated: bool, backends: tuple[str, ...] = ("local",)
) -> tuple[Path, Plan]:
    """The directory and plan of ``job``, a running job of one of ``backends`` (with isolated
    hosts if ``isolated``); else the error, naming what the user wanted to do (``doing``)."""
    job_dir = find_job(str(job))
    plan = read_plan(job_dir)
    if plan.backend not in backends:
        raise TenterError(
            "JOB",
            f"job {plan.job_id} runs on the {plan.backend} backend: cannot {doing} it",
            f"give a job of the {' or '.join(backends)} backend",
        )
    if isolated and plan.isolation != "network":
        raise TenterError(
            "JOB",
            f"job {plan.job_id} does not isolate its hosts (isolation: {plan.isolation}): "
            f"they share this machine's network, so tenter cannot {doing} them one by one",
            ISOLATION_FIX,
        )
    if not is_running(job_dir):
        raise JobNotFoundError(
            "JOB", f"job {plan.job_id} has finished: nothing to {doing}", "give a running job"
        )
    return job_dir, plan
