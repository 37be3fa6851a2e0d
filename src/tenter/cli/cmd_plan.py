"""``tenter plan``: what would run, per host and rank, without running it.

The printed plan is the object the backend executes. ``--json`` prints all of it (each
rank's paths and torch variables as the formula that gives them: see
:meth:`tenter.contract.plan.Plan.to_json`); the text view shows the environment once for what
all processes share, then what differs per host and per rank; ``--rank N`` shows one rank's
whole environment, every variable it gets.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from tenter.cli.options import add_job_arguments, load_job
from tenter.contract.isolation import HOST_NIC, SWITCH_ADDR
from tenter.contract.placeholders import RDZV_PORT
from tenter.contract.plan import Plan
from tenter.spec import JobSpec, lookup
from tenter.spec.errors import Problem, SpecError, counted

LONG_VALUE = 100


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "plan",
        help="show what would run, per host and rank",
        description="Validate a job and print its plan: for every host and rank the command, "
        "working directory and environment. Nothing is created or started.",
    )
    add_job_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the complete plan as JSON")
    parser.add_argument(
        "--rank",
        type=int,
        metavar="N",
        help="print rank N's whole environment, every variable it gets, and its files",
    )
    parser.add_argument("--job-id", help="use this job id (default: a new one)")
    parser.add_argument(
        "--out", metavar="DIR", help="write the manifests there, one file each (kubernetes)"
    )
    parser.set_defaults(func=show_plan)


def show_plan(args: argparse.Namespace) -> int:
    spec = load_job(args)
    from tenter.launch import api

    request = api.dryrun(spec, args.job_id)
    if args.out:
        for path in request.write(Path(args.out)):
            print(path)
        return 0
    if args.json:
        print(request.to_json())
    elif args.rank is not None and request.plan is not None:
        print(render_rank(request.plan, args.rank))
    elif request.plan is not None:
        print(render(request.plan))
        if spec.distribution.model_parallel is not None:
            print(_parallel_layout(spec, request.plan.world_size))
    else:
        print(request)
    return 0


def _parallel_layout(spec: JobSpec, world_size: int) -> str:
    from tenter.parallel.mapping import from_distribution, layout

    return "\nmodel parallelism:\n" + layout(from_distribution(spec.distribution), world_size)


def _short(value: str) -> str:
    return value if len(value) <= LONG_VALUE else value[:LONG_VALUE] + "... (see --json)"


def _env_lines(
    env: dict[str, str], indent: str, figures: dict[str, tuple[str, int]] | None = None
) -> list[str]:
    """``K=V`` lines; where a variable's value differs from its catalog figure
    (:func:`_type_figures`), the line says both."""
    lines = []
    for k, v in sorted(env.items()):
        line = f"{indent}{k}={_short(v)}"
        name, figure = (figures or {}).get(k, ("", v))
        if str(figure) != v:
            line += f"  ({name} has {figure}; this machine's share: {v})"
        lines.append(line)
    return lines


def _type_figures(plan: Plan) -> dict[str, tuple[str, int]]:
    """A catalog type's GPUs and cores, which a simulated host's ``SM_NUM_GPUS`` and
    ``SM_NUM_CPUS`` replace with its share of this machine."""
    itype = lookup(plan.instance_type)
    if itype is None or itype.is_local:
        return {}
    name = itype.sagemaker_name
    return {"SM_NUM_GPUS": (name, itype.gpus), "SM_NUM_CPUS": (name, itype.cpus)}


SECRET_SHOWN = "<secret: this environment's value at launch>"
"""What ``tenter plan`` shows for a secret: its value is taken when the job starts."""


def render_command(argv: list[str]) -> str:
    """An argv as a shell command, one option per line (mpirun's can be hundreds long)."""
    lines = [shlex.quote(argv[0])]
    for arg in argv[1:]:
        if arg in ("-x", "-np", ":") or arg.startswith("--"):
            lines.append("  " + shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return " \\\n".join(lines)


def render(plan: Plan) -> str:
    figures = _type_figures(plan)
    envs = [plan.process_env(h, r) for h in plan.hosts for r in h.ranks]
    common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    lines = [
        f"job         {plan.job_id}  (backend {plan.backend})",
        f"size        {counted(len(plan.hosts), 'host')} x "
        f"{counted(plan.procs_per_host, 'process')} = {counted(plan.world_size, 'rank')}",
        f"directory   {plan.job_dir}",
        f"command     {shlex.join(plan.command)}",
        f"cwd         {plan.cwd}",
        f"rendezvous  c10d store at {plan.rdzv_endpoint} ({RDZV_PORT}: a free port chosen "
        "at launch)",
    ]
    if plan.replica_groups:
        lines.append(
            f"replicas    {plan.replica_groups} groups of {plan.hosts_per_group} hosts, each its "
            f"own rendezvous and restarts; min_replicas {plan.min_replicas}; torchft lighthouse "
            f"at {plan.lighthouse}"
        )
    if plan.isolation != "none":
        lines.append(
            f"isolation   {plan.isolation}: each host in namespaces of its own (hostname, "
            f"{HOST_NIC}, /dev/shm) on a private bridge at {SWITCH_ADDR}"
        )
    if plan.gpu_note:
        lines.append(f"gpus        {plan.gpu_note}")
    elif any(host.gpus for host in plan.hosts):
        lines.append("gpus        one per rank: each host sees its own as cuda:0, cuda:1, ...")
    if plan.max_run:
        lines.append(f"max run     {plan.max_run} s")
    if plan.launcher:
        lines += ["", "launcher:", render_command(plan.launcher)]
    for name, text in sorted(plan.files.items()):
        lines += ["", f"file {name}:", text.rstrip("\n")]
    lines += [
        "",
        f"environment of every process ({plan.pass_environment} of the submitting shell's "
        "under it: pass_environment):",
        *_env_lines(common, "  ", figures),
    ]
    lines += [f"  {name}={SECRET_SHOWN}" for name in plan.secrets]
    for host in plan.hosts:
        group = f"  replica group {host.replica_group}" if plan.replica_groups else ""
        gpus = "" if host.gpus is None else f"  GPUs {','.join(host.gpus) or 'none'}"
        lines += ["", f"host {host.name} ({host.addr})  {host.dir}{group}{gpus}"]
        own = {k: v for k, v in plan.host_env(host).items() if k not in common}
        lines += _env_lines(own, "  ", figures)
        for rank in host.ranks:
            own = {k: v for k, v in rank.env.items() if k not in common}
            lines.append(f"  rank {rank.rank} (local {rank.local_rank}):")
            lines += _env_lines(own, "    ")
    return "\n".join(lines)


def render_rank(plan: Plan, rank: int) -> str:
    """Rank ``rank``'s part of the plan whole: its host, command, files and every variable of
    its environment (values in full, placeholders as the launch fills them in)."""
    for host in plan.hosts:
        for planned in host.ranks:
            if planned.rank == rank:
                env = plan.process_env(host, planned)
                return "\n".join(
                    [
                        f"rank {rank} (local {planned.local_rank}) on host {host.name} "
                        f"({host.addr}) of job {plan.job_id}",
                        f"command     {shlex.join(plan.command)}",
                        f"cwd         {plan.cwd}",
                        f"stdout      {planned.stdout}",
                        f"stderr      {planned.stderr}",
                        f"error file  {planned.error_file}",
                        f"environment ({counted(len(env) + len(plan.secrets), 'variable')}):",
                        *(f"  {k}={v}" for k, v in sorted(env.items())),
                        *(f"  {name}={SECRET_SHOWN}" for name in plan.secrets),
                    ]
                )
    last = plan.world_size - 1
    raise SpecError(
        [Problem("--rank", f"this job has no rank {rank}", f"give a rank from 0 to {last}")]
    )
