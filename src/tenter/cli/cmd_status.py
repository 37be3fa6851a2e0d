"""``tenter status JOB``: where a job is now, on any backend.

A finished job's outcome is its ``summary.json``; a job still going is asked of its backend
through the handle in its job directory (its launcher and processes on this machine for local
and mpi jobs; squeue/scontrol/sacct for Slurm; the API server for Kubernetes), and its goodput
ledger (docs/goodput.md), each rank's progress (:mod:`tenter.jobdir.progress`: reported, or
the DDP steps tenter counted) and the stragglers named so far are read from its records now.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenter.contract.plan import Plan


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
    from tenter.contract.plan import read_plan
    from tenter.goodput.ledger import summary_line
    from tenter.goodput.records import LedgerKeeper
    from tenter.jobdir.lookup import open_handle
    from tenter.jobdir.progress import progress_line
    from tenter.jobdir.results import JobResult, JobState, read_result
    from tenter.launch.api import get_backend
    from tenter.monitor.goodput_report import GoodputFeed

    handle = open_handle(args.job)

    def show_result(result: JobResult) -> int:
        ended = "PREEMPTED" if result.state == JobState.PREEMPTED else "FAILED"
        state = "SUCCEEDED" if result.ok else f"{ended} (exit {result.exit_code})"
        print(f"job {handle.job_id}: {state} (backend {handle.backend})")
        print(result.summary)
        return 0

    if (result := read_result(Path(handle.job_dir))) is not None:
        return show_result(result)
    status = get_backend(handle.backend).status(handle)
    if (result := read_result(Path(handle.job_dir))) is not None:
        return show_result(result)  # it ended while we asked
    print(f"job {handle.job_id}: {status.text} (backend {handle.backend})")
    if handle.backend == "kubernetes":  # a pod's records stay in its cluster, not the job dir
        return 0
    # mpirun's ranks meet without tenter's agents, which record the rounds.
    has_agents = status.running and handle.backend != "mpi"
    waiting = rendezvous_line(read_plan(handle.job_dir)) if has_agents else ""
    keeper = LedgerKeeper(handle.job_dir)
    if waiting:
        print(waiting)
        print(summary_line(keeper.ledger(), why_no_steps="no round formed yet"))
    else:
        print(summary_line(keeper.ledger()))
    print(progress_line(keeper.reader.progress))
    for text in GoodputFeed(Path(handle.job_dir)).stragglers():
        print(f"straggler: {text}")
    return 0


def rendezvous_line(plan: Plan) -> str:
    """Which hosts start or wait for a rendezvous round, and what the round waits for."""
    from tenter.jobdir.control import lost_hosts
    from tenter.jobdir.events import hosts_in_rendezvous

    lost = lost_hosts(plan.job_dir)
    waiting = hosts_in_rendezvous(plan.job_dir, [h.name for h in plan.hosts if h.name not in lost])
    if not waiting:
        return ""
    line = f"rendezvous: {', '.join(waiting)} starting or waiting for a round"
    if plan.min_hosts < plan.max_hosts:
        line += (
            f" (a round of fewer than max_hosts {plan.max_hosts} hosts forms "
            f"last_call_timeout {plan.last_call_timeout} s after its last host came)"
        )
    return line
