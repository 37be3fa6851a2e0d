"""The output directory, and the job directories made in it: checked before anything starts,
created whole or not at all, and removed again for a job that never started. Every backend that
keeps a job directory on this machine or a shared file system (local, mpi, Slurm) goes
through here."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.errors import TenterError
from tenter.jobdir import layout, membership, private

MIN_FREE_BYTES = 1 << 20
"""What a job directory needs at the least to start (plan, logs, summary)."""
OUTPUT_DIR_FIX = (
    "set output_dir (in the spec, or --output-dir) to a writable directory with free space"
)


def check_output_dir(job_dir: str) -> None:
    """Refuse, before anything starts, an output directory the job directory cannot be made
    in: a file in the way, a read-only or full file system (bad input, exit 2)."""
    output_dir = Path(job_dir).parent
    existing = output_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    problem = ""
    if not existing.is_dir():
        problem = f"{existing} is a file, not a directory"
    else:
        fs = os.statvfs(existing)
        if fs.f_flag & os.ST_RDONLY:
            problem = f"{existing} is on a read-only file system"
        elif not os.access(existing, os.W_OK | os.X_OK):
            problem = f"{existing} is not writable by this user"
        elif fs.f_bavail * fs.f_frsize < MIN_FREE_BYTES:
            problem = f"the file system of {existing} is full"
    if problem:
        raise TenterError(
            "output_dir",
            f"cannot create job directories in {output_dir}: {problem}",
            OUTPUT_DIR_FIX,
        )


def create_job_dir(plan: Plan) -> None:
    """Create the job directory, or none of it: an error here (the disk filled since the
    check) is bad input, not a traceback."""
    check_output_dir(plan.job_dir)
    if plan.output_group:
        private.group_id(plan.output_group)  # bad input before anything is made
    if Path(plan.job_dir).exists():
        raise FileExistsError(f"job directory {plan.job_dir} exists: a job id is never reused")
    try:
        layout.create(
            Path(plan.job_dir),
            [plan.host_tree(h) for h in plan.hosts],
            shared_dirs=[plan.checkpoint_dir],
            group=plan.output_group,
        )
        layout.write_atomic(Path(plan.job_dir) / layout.PLAN_FILE, plan.to_json())
        membership.record_launch(plan.job_dir, [h.name for h in plan.hosts])
    except OSError as e:
        discard_job_dir(plan)
        raise TenterError(
            "output_dir",
            f"cannot create the job directory {plan.job_dir}: {e.strerror}",
            OUTPUT_DIR_FIX,
        ) from e


def discard_job_dir(plan: Plan) -> None:
    """Undo :func:`create_job_dir` for a job that never started: its directory, and its
    checkpoint folder and the jobs' ``checkpoints`` folder above it when they are empty (an
    earlier run of the job, or anything else, left something there: kept)."""
    shutil.rmtree(plan.job_dir, ignore_errors=True)
    ours = Path(plan.job_dir).parent / layout.CHECKPOINTS_DIR  # a folder the user named: kept
    for folder in (Path(plan.checkpoint_dir), ours):
        if folder != ours and folder.parent != ours:
            break
        with contextlib.suppress(OSError):  # not empty, or not there: kept
            folder.rmdir()
