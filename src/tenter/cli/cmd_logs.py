"""``tenter logs JOB [--ranks R,...] [--follow]``: a job's rank logs, tagged as ``tenter run``
shows them, on any backend (the job directory holds every rank's files; Slurm jobs keep it on
their shared file system). ``--follow`` keeps printing until the job ends."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from tenter.spec import Problem, SpecError

FOLLOW_POLL_S = 0.5


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "logs",
        help="print a job's rank logs",
        description="Print the output of a job's ranks, tagged [host,rank]<stream>:.",
    )
    parser.add_argument(
        "job", metavar="JOB", help="a job id (under $TENTER_HOME/jobs) or its directory"
    )
    parser.add_argument("--ranks", metavar="R[,R...]", help="only these ranks (default: all)")
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job ends"
    )
    parser.add_argument(
        "--no-tag", action="store_true", help="do not prefix lines with [host,rank]"
    )
    parser.set_defaults(func=show_logs)


def _ranks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(r) for r in text.split(",")]
    except ValueError:
        raise SpecError(
            [Problem("--ranks", f"'{text}' is not a comma-separated list of ranks, e.g. 0,3")]
        ) from None


def show_logs(args: argparse.Namespace) -> int:
    from tenter.launch.console import ConsoleTail
    from tenter.launch.jobs import controllable_backend, is_running, open_job

    job_dir, plan = open_job(args.job)
    ranks = _ranks(args.ranks)
    plan = dataclasses.replace(
        plan,
        console_ranks=ranks,
        tag_output=not args.no_tag,
    )
    tail = ConsoleTail(plan).start()
    try:
        if args.follow:
            backend = controllable_backend(plan)
            while is_running(job_dir) and (backend is None or backend.status(plan).running):
                time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        pass
    finally:
        tail.stop()
    return 0
