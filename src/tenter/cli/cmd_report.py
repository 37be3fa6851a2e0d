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
    parser.add_argument(
        "--trace",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the timeline of each recovery (detection, stop, rendezvous, restart, "
        "checkpoint load, first step; one track per rank and agent) as a Chrome Trace Event "
        "file for Perfetto or chrome://tracing, to FILE (default: "
        "<job_dir>/report/recovery.trace.json), instead of the report",
    )
    parser.set_defaults(func=show_report)


def show_report(args: argparse.Namespace) -> int:
    if args.trace is not None:
        return show_trace(args.job, args.trace)
    require("matplotlib", "plot", "tenter report")
    from tenter.jobdir.lookup import find_job
    from tenter.monitor.job_report import write_report

    path = write_report(find_job(args.job))
    print(path)
    return 0


def show_trace(job: str, file: str) -> int:
    from pathlib import Path

    from tenter.jobdir.lookup import find_job
    from tenter.monitor.recovery_trace import summary_lines, write_trace

    path, recovered = write_trace(find_job(job), Path(file) if file else None)
    for line in summary_lines(recovered) or ["no recovery: the job was never restarted"]:
        print(line)
    print(path)
    return 0
