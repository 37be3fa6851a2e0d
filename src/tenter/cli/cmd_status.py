"""``tenter status JOB``: where a job is now, on any backend.

A finished job's outcome is its ``summary.json``; a job still going is asked of its backend
through the handle in its job directory (its launcher and processes on this machine for local
and mpi jobs; squeue/scontrol/sacct for Slurm; the API server for Kubernetes), and its goodput
ledger (docs/goodput.md), the ranks' progress (:mod:`tenter.jobdir.progress`: reported, or
the DDP steps tenter counted) and the stragglers named so far are those its launcher last kept
(``goodput.json`` and ``progress.json``, every 2 s): reading them costs the same at 8 ranks as
at 8,000. Where the launcher is gone (killed, its processes left running) or has not kept them
yet, they are computed from every rank's records.

Only light modules are imported on this path (no spec models, no pydantic, no torch): the
command answers within a second at any size (tests/cli/test_status.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenter.jobdir.progress import ProgressSummary, kept_progress

if TYPE_CHECKING:
    from tenter.contract.plan import Plan
    from tenter.goodput.ledger import Ledger


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
    from tenter.goodput.ledger import NO_STEPS, summary_line
    from tenter.jobdir.lookup import open_handle
    from tenter.jobdir.results import JobResult, JobState, read_result
    from tenter.launch.api import get_backend
    from tenter.monitor.goodput_report import GoodputFeed

    handle = open_handle(args.job)
    job_dir = Path(handle.job_dir)

    def show_result(result: JobResult) -> int:
        ended = "PREEMPTED" if result.state == JobState.PREEMPTED else "FAILED"
        state = "SUCCEEDED" if result.ok else f"{ended} (exit {result.exit_code})"
        print(f"job {handle.job_id}: {state} (backend {handle.backend})")
        print(result.summary)
        return 0

    if (result := read_result(job_dir)) is not None:
        return show_result(result)
    status = get_backend(handle.backend).status(handle)
    if (result := read_result(job_dir)) is not None:
        return show_result(result)  # it ended while we asked
    print(f"job {handle.job_id}: {status.text} (backend {handle.backend})")
    if handle.backend == "kubernetes":  # a pod's records stay in its cluster, not the job dir
        return 0
    # mpirun's ranks meet without tenter's agents, which record the rounds.
    has_agents = status.running and handle.backend != "mpi"
    waiting = rendezvous_line(read_plan(handle.job_dir)) if has_agents else ""
    if waiting:
        print(waiting)
    feed = GoodputFeed(job_dir)
    ledger, progress = (feed.ledger(), kept_progress(job_dir)) if status.launcher else (None, None)
    if ledger is None or progress is None:
        ledger, progress = ledger_from_ranks(job_dir)
    print(summary_line(ledger, why_no_steps="no round formed yet" if waiting else NO_STEPS))
    print(progress.line())
    for text in feed.stragglers():
        print(f"straggler: {text}")
    return 0


def ledger_from_ranks(job_dir: Path) -> tuple[Ledger, ProgressSummary]:
    """The ledger and progress as of now, from every rank's records (what the launcher keeps,
    where there is no launcher to keep it)."""
    from tenter.goodput.keeper import LedgerKeeper

    keeper = LedgerKeeper(job_dir)
    return keeper.ledger(), ProgressSummary.of(keeper.reader.progress)


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
