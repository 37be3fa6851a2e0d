"""``tenter status JOB``: where a job is now, on any backend.

A finished job's outcome is its ``summary.json``; a job still going is asked of its backend
(its processes on this machine for local and mpi jobs; squeue/scontrol/sacct for Slurm).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tenter.cli.options import EXIT_USAGE, stderr


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "status",
        help="show where a job is now",
        description="Show a job's state: running (and where), or its outcome once it ended.",
    )
    parser.add_argument(
        "job", metavar="JOB", help="a job id (under $TENTER_HOME/jobs) or its directory"
    )
    parser.set_defaults(func=show_status)


def show_status(args: argparse.Namespace) -> int:
    from tenter.launch.jobs import controllable_backend, is_running, open_job

    job_dir, plan = open_job(args.job)
    if not is_running(job_dir):
        result = json.loads((job_dir / "summary.json").read_text())
        state = "SUCCEEDED" if result["exit_code"] == 0 else f"FAILED (exit {result['exit_code']})"
        print(f"job {plan.job_id}: {state} (backend {plan.backend})")
        print(result["summary"])
        return 0
    backend = controllable_backend(plan)
    if backend is None:
        stderr.print(f"[bold red]error:[/] the {plan.backend} backend cannot report a job's state")
        return EXIT_USAGE
    print(f"job {plan.job_id}: {backend.status(plan).text} (backend {plan.backend})")
    return 0
