"""``tenter report JOB``: a finished (or running) job's throughput over time, utilisation
timeline and per-rank step times, as PNG plots and a Markdown page in ``<job_dir>/report/``.

The figures come from what the ranks reported (``tenter.report``) and, for CPU, memory and
GPU, from the launcher's samples (``metrics.jsonl``). See docs/monitor.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from tenter.deps import require


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "report",
        help="summarise a job: throughput, utilization, step times per rank (PNG + Markdown)",
        description="Write <job_dir>/report/report.md with plots of the job's throughput over "
        "time, each rank's utilization, and each rank's step times (stragglers stand out).",
    )
    parser.add_argument(
        "job", metavar="JOB", help="a job id (under $TENTER_HOME/jobs) or its directory"
    )
    parser.set_defaults(func=show_report)


def show_report(args: argparse.Namespace) -> int:
    require("matplotlib", "plot", "tenter report")
    from tenter.jobdir.lookup import find_job
    from tenter.monitor.job_report import write_report

    path = write_report(find_job(args.job))
    print(path)
    return 0
