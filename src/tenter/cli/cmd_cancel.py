"""``tenter cancel JOB``: stop a running job, on any backend (as Ctrl-C on ``tenter run``
would: every rank stops, the summary says it was interrupted).

``tenter cancel --preempt JOB``: preempt it instead (as SIGTERM to ``tenter run`` would): every
rank stops at its next step boundary after a final checkpoint, within the spec's
``checkpoint.preemption_grace``; the job ends as preempted (exit 75) and a new run resumes it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "cancel",
        help="stop a running job",
        description="Stop a running job: its launcher on this machine, scancel on Slurm, "
        "the job object on Kubernetes.",
    )
    parser.add_argument(
        "job", metavar="JOB", help="a job id (under $TENTER_HOME/jobs) or its directory"
    )
    parser.add_argument(
        "--preempt",
        action="store_true",
        help="stop at the next step boundary after a final checkpoint (checkpoint."
        "preemption_grace), as SIGTERM to `tenter run` does; the job ends as preempted (75)",
    )
    parser.set_defaults(func=cancel)


def cancel(args: argparse.Namespace) -> int:
    from tenter.jobdir.lookup import open_handle
    from tenter.jobdir.results import read_result
    from tenter.launch.api import get_backend

    handle = open_handle(args.job)
    result = read_result(Path(handle.job_dir))
    if result is not None:  # its summary says how it ended (its backend sees no process)
        print(f"job {handle.job_id} is not running; it ended:\n{result.summary}")
        return 0
    backend = get_backend(handle.backend)
    status = backend.status(handle)
    if not status.running:
        print(f"job {handle.job_id} is not running: {status.text}")
        return 0
    print(backend.preempt(handle) if args.preempt else backend.cancel(handle))
    return 0
