"""``tenter join JOB``: add a host to a running elastic job (scale out).

The job's launcher starts one more simulated host, which enters at the next rendezvous
round (the running hosts restart their workers to let it in), up to ``elastic.max_hosts``.
"""

from __future__ import annotations

import argparse
from typing import Any

from tenter.jobdir.control import request_join
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.lookup import find_job, is_running
from tenter.spec import Problem, SpecError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "join",
        help="add a host to a running elastic job",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument("job", metavar="JOB", help="job id or job directory")
    parser.add_argument("--hosts", type=int, default=1, metavar="N", help="hosts to add")
    parser.set_defaults(func=join)


def join(args: argparse.Namespace) -> int:
    job_dir = find_job(args.job)
    backend = JobHandle.read(job_dir).backend
    if backend != "local":
        raise SpecError(
            [
                Problem(
                    "JOB",
                    f"job {job_dir.name} runs on the {backend} backend; only local jobs grow",
                    "start the job with more hosts, or on backend local with elastic.max_hosts",
                )
            ]
        )
    if not is_running(job_dir):
        raise SpecError(
            [
                Problem(
                    "JOB",
                    f"job {job_dir.name} has finished; nothing can join it",
                    "give a running job (`tenter status` lists them)",
                )
            ]
        )
    if args.hosts < 1:
        raise SpecError([Problem("--hosts", f"{args.hosts} is fewer than 1", "give 1 or more")])
    for _ in range(args.hosts):
        request_join(job_dir)
    print(f"asked job {job_dir.name} for {args.hosts} more host(s)")
    return 0
