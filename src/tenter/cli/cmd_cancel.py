"""``tenter cancel JOB``: stop a running job, on any backend (as Ctrl-C on ``tenter run``
would: every rank stops, the summary says it was interrupted)."""

from __future__ import annotations

import argparse
from typing import Any

from tenter.cli.options import EXIT_USAGE, stderr


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "cancel",
        help="stop a running job",
        description="Stop a running job: its launcher on this machine, or scancel on Slurm.",
    )
    parser.add_argument(
        "job", metavar="JOB", help="a job id (under $TENTER_HOME/jobs) or its directory"
    )
    parser.set_defaults(func=cancel)


def cancel(args: argparse.Namespace) -> int:
    from tenter.launch.jobs import controllable_backend, open_job

    _, plan = open_job(args.job)
    backend = controllable_backend(plan)
    if backend is None:
        stderr.print(f"[bold red]error:[/] the {plan.backend} backend cannot cancel a job")
        return EXIT_USAGE
    status = backend.status(plan)
    if not status.running:
        print(f"job {plan.job_id} is not running: {status.text}")
        return 0
    print(backend.cancel(plan))
    return 0
