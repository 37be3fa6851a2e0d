"""``tenter doctor``: check this host, or every host of a job, before training.

    tenter doctor                                   # this host
    tenter doctor --instance-type ml.p4d.24xlarge   # this host, as a p4d host of a job
    tenter doctor job.yaml                          # every host of the job: host x check matrix
    tenter doctor job.yaml --json
    tenter doctor --job JOB                         # inside every isolated host of a running
                                                    # job, and whether each reaches the others

Exit code: 0 when no check fails (warnings allowed), 1 when one fails, 2 for bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from tenter.cli.parsing import stderr
from tenter.errors import TenterError
from tenter.spec import Problem, SpecError, load_file, lookup
from tenter.spec.catalog import unknown_type
from tenter.spec.errors import FieldError

if TYPE_CHECKING:
    from tenter.doctor import Check, HostReport

EXIT_FAILED = 1


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check this host (or every host of a job) for what breaks distributed training",
        description="Run the doctor's checks (versions and NCCL, GPUs, EFA and libfabric, "
        "hugepages and /dev/shm, limits, network, MPI) and print pass/warn/fail with what was "
        "found and the fix. Given a job spec, check every host of the job against it.",
    )
    parser.add_argument("spec", nargs="?", metavar="SPEC", help="a job spec (.yaml)")
    parser.add_argument(
        "--instance-type",
        metavar="TYPE",
        help="judge this host as a host of that type (overrides the spec's instance_type)",
    )
    parser.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this check (repeatable)",
    )
    parser.add_argument(
        "--job",
        metavar="JOB",
        help="check every host of a running job with isolated hosts (--isolation network) "
        "from inside it, and that every host reaches every other on the interface gloo uses",
    )
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.set_defaults(func=doctor)


def doctor(args: argparse.Namespace) -> int:
    from tenter.doctor import CHECKS, JobContext, System, check_job, run_checks
    from tenter.doctor.checks import by_name

    try:
        checks = by_name(args.check) if args.check else CHECKS
    except FieldError as e:
        raise SpecError([Problem("--check", e.what, e.fix)]) from None
    itype = None
    if args.instance_type is not None:
        itype = lookup(args.instance_type)
        if itype is None:
            raise SpecError([Problem("--instance-type", *unknown_type(args.instance_type))])
    if args.job is not None:
        if args.spec is not None or args.instance_type is not None:
            flag = "SPEC" if args.spec is not None else "--instance-type"
            raise SpecError(
                [Problem("--job", "checks a running job's hosts as they are", f"drop {flag}")]
            )
        return _doctor_running_job(args.job, checks, args.json)
    if args.spec is None:
        job = JobContext(itype, procs_per_host=max(1, itype.gpus)) if itype else None
        reports = [run_checks(System(), job, checks)]
    else:
        overrides = {"instance_type": args.instance_type} if args.instance_type else {}
        spec, warnings = load_file(Path(args.spec), overrides)
        for w in warnings:
            stderr.print(f"[yellow]warning:[/] {escape(str(w))}", markup=True)
        from tenter.launch import api

        plan = api.dryrun(spec).plan
        if plan is None:
            raise SpecError(
                [
                    Problem(
                        "backend",
                        f"the doctor checks hosts that tenter starts its agents on; a "
                        f"{spec.backend} job's pods are not",
                        "run `tenter doctor` in its image",
                    )
                ]
            )
        reports = check_job(spec, plan, checks)

    return _show(reports, args.json)


def _doctor_running_job(job: str, checks: tuple[Check, ...], as_json: bool) -> int:
    from tenter.doctor.across import PER_HOST_VALUES, doctor_job
    from tenter.doctor.render import facts_table, reach_table
    from tenter.launch.launcher.isolation import attach
    from tenter.launch.launcher.isolation.running import running_local_job

    _, plan = running_local_job(job, "check the hosts of", isolated=True)
    try:
        found = doctor_job(attach(plan.job_dir), plan, checks)
    except OSError as e:  # a host's namespaces went with the job meanwhile
        raise TenterError(
            "JOB", f"cannot check the hosts of job {plan.job_id}: {e}", "check `tenter status JOB`"
        ) from e
    if not as_json:
        console = Console(highlight=False)
        console.print(facts_table(found.facts))
        console.print(reach_table(found.reachability))
    return _show(found.reports, as_json, PER_HOST_VALUES)


def _show(reports: list[HostReport], as_json: bool, by_status: frozenset[str] = frozenset()) -> int:
    """Print the reports (a table for one host, the host x check matrix for more); the exit
    code."""
    from tenter.doctor.render import differences, host_table, matrix, problems_table, to_json
    from tenter.doctor.result import Status

    failed = any(r.failed for r in reports)
    if as_json:
        print(to_json(reports))
        return EXIT_FAILED if failed else 0
    console = Console(highlight=False)
    if len(reports) == 1:
        console.print(host_table(reports[0]))
    else:
        console.print(matrix(reports, by_status))
        console.print(
            problems_table(reports, (Status.FAIL, Status.WARN), "what is not a pass, per host")
        )
        for d in differences(reports, by_status):
            console.print(
                f"[bold]{escape(d.host)}[/] differs on [bold]{d.check}[/]: "
                f"{d.result.status.value} ({escape(d.result.found)}) where most hosts have "
                f"{d.usual.status.value} ({escape(d.usual.found)})",
                markup=True,
            )
    if failed:
        console.print("[bold red]doctor: some checks fail[/] (see the fix column)")
    return EXIT_FAILED if failed else 0
