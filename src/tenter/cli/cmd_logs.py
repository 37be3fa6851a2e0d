"""``tenter logs JOB [--ranks R,...] [--follow]``: a job's rank logs, tagged as ``tenter run``
shows them, on any backend (the job directory holds every rank's files, and Slurm jobs keep it
on their shared file system; Kubernetes jobs' come from the pods). ``--follow`` keeps printing
until the job ends."""

from __future__ import annotations

import argparse
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
            [
                Problem(
                    "--ranks", f"'{text}' is not a comma-separated list of ranks", "write e.g. 0,3"
                )
            ]
        ) from None


def show_logs(args: argparse.Namespace) -> int:
    from tenter.jobdir.lookup import open_handle
    from tenter.launch.api import get_backend

    handle = open_handle(args.job)
    backend = get_backend(handle.backend)
    stream = backend.logs(handle, _ranks(args.ranks), not args.no_tag, follow=args.follow).start()
    try:
        if args.follow:
            while backend.status(handle).running:
                time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        pass
    finally:
        stream.stop()
    return 0
