"""``tenter rehearse JOB.yaml --hosts 1024``: check a job's control plane at its size on this
machine before a large reservation (tenter's real launcher and agents, light ranks without
torch; docs/scale.md says what it proves and what not)."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from tenter.rehearsal.drive import Figures

BACKENDS = ("local", "slurm", "mpi")
"""Where a rehearsal runs (any other ``--backend`` is argparse's exit 2)."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "rehearse",
        help="rehearse a job's control plane at scale on this machine",
        description="Run the job's launcher, agents, hang report and ledger at the given size "
        "with light ranks (no torch, no GPU), inject a rank's kill, a host's loss and a hang, "
        "and print how long each took and what the control plane cost.",
    )
    parser.add_argument("spec", metavar="JOB.yaml", type=Path, help="the job's spec")
    parser.add_argument("--hosts", type=int, required=True, help="simulated hosts")
    parser.add_argument("--procs-per-host", type=int, default=8, help="ranks per host (8)")
    parser.add_argument("--step-s", type=float, default=0.5, help="a light rank's step (0.5 s)")
    parser.add_argument("--hang-timeout", type=int, default=10, help="seconds (10)")
    parser.add_argument(
        "--hosts-per-pack", type=int, default=64, help="local: agents per process (64)"
    )
    parser.add_argument(
        "--elastic",
        action="store_true",
        help="min_hosts one fewer than --hosts (through torch's rendezvous): adds a host's loss",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: this machine, agents in packs (default); slurm: sbatch to the cluster "
        "SLURM_CONF names, one real agent per node; mpi: Open MPI's mpirun starts every rank, "
        "no agents (a rank's kill ends the job)",
    )
    parser.add_argument(
        "--steady-s",
        type=float,
        default=5.0,
        help="seconds of steady state measured (5; 0: none)",
    )
    parser.add_argument(
        "--bound", type=float, default=120.0, help="seconds each phase may take at most (120)"
    )
    parser.set_defaults(func=rehearse)


def rehearse(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from tenter.errors import TenterError
    from tenter.launch.backends.mpi.backend import MpiBackend
    from tenter.launch.backends.slurm.backend import require_sbatch
    from tenter.rehearsal import mpi
    from tenter.rehearsal.drive import Rehearsal, RehearsalFailed
    from tenter.rehearsal.plan import rehearsal_plan
    from tenter.rehearsal.slurm import SlurmRehearsal
    from tenter.rehearsal.table import rows, scale_line

    for flag, value in (("--hosts", args.hosts), ("--procs-per-host", args.procs_per_host),
                        ("--hosts-per-pack", args.hosts_per_pack)):  # fmt: skip
        if value < 1 or (flag == "--hosts" and value < 2):
            least = 2 if flag == "--hosts" else 1
            raise TenterError(flag, f"{value} is too few", f"give at least {least}")
    if args.steady_s < 0:
        raise TenterError("--steady-s", f"{args.steady_s:g} is negative", "give 0 (none) or more")
    if args.backend == "mpi" and args.elastic:
        raise TenterError(
            "--elastic",
            "mpirun's world is fixed: no host's loss to rehearse on mpi",
            "drop --elastic, or rehearse --backend local",
        )
    if args.backend == "slurm":
        require_sbatch("--backend")
    plan_of = functools.partial(
        rehearsal_plan, args.spec, args.hosts, args.procs_per_host, args.step_s,
        args.hang_timeout, args.elastic, args.backend,
    )  # fmt: skip
    plan = plan_of()
    if args.backend == "mpi":
        MpiBackend().check_ready(plan)  # mpirun on PATH
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"rehearsing {args.hosts} hosts x {args.procs_per_host} ranks: {plan.job_dir}")
    steady = args.steady_s > 0
    run: Callable[[], Figures]
    if args.backend == "mpi":
        run = functools.partial(mpi.rehearse, plan, plan_of, args.bound, steady)
    elif args.backend == "slurm":
        run = SlurmRehearsal(plan, args.bound, args.steady_s).run
    else:
        run = Rehearsal(plan, args.hosts_per_pack, args.bound, steady, args.steady_s).run
    try:
        figures = run()
    except RehearsalFailed as e:
        console.print(f"[bold red]rehearsal failed:[/] {e}")
        return 1
    table = Table("", "measured", "target")
    for row in rows(figures, args.hang_timeout):
        table.add_row(*row)
    console.print(table)
    console.print(scale_line(figures))
    return 0
