"""``tenter run``: run a job and wait for it.

tenter run job.yaml
tenter run --hosts 2 --procs-per-host 4 train.py -- --epochs 3 --lr 0.1
tenter run -m mypkg.train --hosts 2
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from tenter.cli.options import EXIT_USAGE, add_job_arguments, load_job, stderr


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run a job and wait for it",
        description="Run a job (a spec file, or a script with flags) and wait for it. Every "
        "rank's output is shown tagged [host,rank]; when any rank fails, every rank stops "
        "and the summary names the first failure with its traceback.",
    )
    add_job_arguments(parser)
    parser.add_argument(
        "--skip-preflight",
        action="store_true",
        help="start even if the preflight checks of the hosts fail",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_job(args)
    from tenter.doctor import SKIP_WARNING, preflight
    from tenter.launch import api

    plan = api.dryrun(spec)
    if args.skip_preflight:
        stderr.print(SKIP_WARNING)
    else:
        checked = preflight(spec, plan)
        checked.render(stderr)
        if checked.blocking:
            return EXIT_USAGE
    result = api.submit(plan)
    style = "green" if result.ok else "bold red"
    stderr.print(f"[{style}]{escape(result.summary)}[/]")
    return result.exit_code
