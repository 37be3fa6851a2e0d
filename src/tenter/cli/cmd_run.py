"""``tenter run``: run a job and wait for it.

tenter run job.yaml
tenter run --hosts 2 --procs-per-host 4 train.py -- --epochs 3 --lr 0.1
tenter run -m mypkg.train --hosts 2
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from tenter.cli.options import (
    SPEC_SUFFIXES,
    add_job_arguments,
    load_job,
    record_spec,
    recorded_job,
)
from tenter.cli.parsing import EXIT_USAGE, FlagParser, stderr
from tenter.jobdir import private


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run a job and wait for it",
        description="Run a job (a spec file, or a script with flags) and wait for it. Every "
        "rank's output is shown tagged [host,rank]; when any rank fails, every rank stops "
        "and the summary names the first failure with its traceback.",
    )
    add_job_arguments(parser)
    _add_run_options(parser)
    parser.set_defaults(func=run)


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """How ``tenter run`` runs and shows the job: options of tenter's, never a script's."""
    parser.add_argument(
        "--skip-preflight",
        action="store_true",
        help="start even if the preflight checks of the hosts fail",
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="return once the job started (every backend); then use `tenter status|logs|cancel "
        "JOB`",
    )
    monitor = parser.add_argument_group("monitoring")
    monitor.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw the live per-rank table (default: when the console is a terminal)",
    )
    monitor.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics there"
    )
    monitor.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="address of the metrics endpoint (default: loopback only)",
    )


class _RunOptions(argparse.ArgumentParser):
    """The run options alone, leaving the script's arguments (FlagParser would refuse them)."""

    error = FlagParser.error


def take_run_options(args: argparse.Namespace) -> None:
    """``tenter run train.py --epochs 3 --detach``: the arguments after a script are the
    script's (torchrun's rule), except ``tenter run``'s own options (``--detach``, ``--live``,
    ``--metrics-port``...), which no torchrun command line has and which a user who puts them
    there means for tenter: they are taken as tenter's, with a note. After ``--`` everything is
    the script's (``tenter run train.py -- --detach``)."""
    if args.module or args.target is None or args.target.endswith(SPEC_SUFFIXES):
        return  # after a spec file every flag is tenter's; after -m MODULE, see FlagParser
    if recorded_job(args.target) is not None:
        return  # a job directory: as a spec file
    rest = list(args.args)
    split = rest.index("--") if "--" in rest else len(rest)
    late = _RunOptions(prog="tenter run", add_help=False, allow_abbrev=False)
    _add_run_options(late)
    taken, script_args = late.parse_known_args(rest[:split])
    defaults = late.parse_args([])
    flags = {key: value for key, value in vars(taken).items() if value != getattr(defaults, key)}
    if not flags:
        return
    for key, value in flags.items():
        setattr(args, key, value)
    args.args = script_args + rest[split:]
    named = ", ".join(f"--{key.replace('_', '-')}" for key in flags)
    stderr.print(
        f"[yellow]note:[/] {escape(named)} after the script is tenter's (`tenter run` options "
        f"are never passed on); to pass it to the script, put it after --: "
        f"{escape(f'tenter run {args.target} -- ...')}"
    )


def run(args: argparse.Namespace) -> int:
    take_run_options(args)
    spec = load_job(args)
    from tenter import session
    from tenter.doctor import SKIP_WARNING, preflight
    from tenter.jobdir.results import JobState
    from tenter.launch import api

    request = api.dryrun(spec)
    watch = dataclasses.replace(
        session.Watch.of(spec),
        live=args.live,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
    )
    session.check_watch(api.get_backend(spec.backend), watch)
    if args.skip_preflight:
        stderr.print(SKIP_WARNING)
    elif request.plan is not None:  # the checks look at this machine: not for Kubernetes pods
        checked = preflight(spec, request.plan)
        checked.render(stderr)
        if checked.blocking:
            return EXIT_USAGE
    # This process writes the job's files too (the plan, events, the summary).
    private.enter(spec.output_group or "")
    handle, view = session.submit(request, watch, detach=args.detach)
    record_spec(spec, handle.job_dir)
    if args.detach:
        print(handle.job_id)
        stderr.print(
            f"started {handle.job_id} ({handle.backend} backend); follow it with "
            f"`tenter logs {handle.job_id} --follow`, see it with `tenter status "
            f"{handle.job_id}`, stop it with `tenter cancel {handle.job_id}`"
        )
        return 0
    result = session.follow(handle, watch, view)
    style = "green" if result.ok else "bold red"
    stderr.print(f"[{style}]{escape(result.summary)}[/]")
    if result.state in (JobState.PREEMPTED, JobState.INTERRUPTED) and request.plan is not None:
        resume = resume_command(request.plan.checkpoint_dir)
        if resume:
            stderr.print(escape(resume))
    return result.exit_code


def resume_command(checkpoint_dir: str) -> str:
    """The line that tells how to resume a stopped job: the same command, run again where
    it was run (the job's identity: tenter.contract.planner.job_identity); empty when the job
    left no checkpoint to resume from."""
    if not any(Path(checkpoint_dir).glob("*")):
        return ""
    command = shlex.join(["tenter", *sys.argv[1:]])
    here = shlex.quote(os.getcwd())
    return f"to resume from {checkpoint_dir}, run the same command again: cd {here} && {command}"
