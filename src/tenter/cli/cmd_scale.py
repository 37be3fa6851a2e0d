"""``tenter scale job.yaml --hosts 1,2,3 [--procs-per-host M] [--epochs 1] [--out DIR]``:
run the same job at each size and compare its throughput with linear scaling.

Writes ``scale.md`` (a table: samples/s, step time, time per epoch, the ideal time, speedup
and scaling efficiency per size), ``scale.json`` and ``scale.png`` (measured time against the
ideal linear line, and efficiency per size). The script must report its progress with
``tenter.report(step=..., samples=...)``; see docs/monitor.md for how the figures are taken.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenter.deps import require
from tenter.spec import Problem, SpecError
from tenter.spec.errors import counted

if TYPE_CHECKING:
    from tenter.jobdir.results import JobResult


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "scale",
        help="run a job at several sizes; table and plot of time vs linear scaling",
        description="Run a job spec at each size in turn (any backend) and write a table and a "
        "plot of its time per epoch against ideal linear scaling, with the scaling efficiency.",
    )
    parser.add_argument("spec", metavar="SPEC", help="the job spec (.yaml)")
    parser.add_argument(
        "--hosts", metavar="N[,N...]", help="host counts to run, e.g. 1,2,3 (default: the spec's)"
    )
    parser.add_argument(
        "--procs-per-host",
        metavar="M[,M...]",
        help="processes per host, or a list to scale processes on one host count",
    )
    parser.add_argument(
        "--epochs", type=int, metavar="E", help="set the epochs hyperparameter of every run"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where to write scale.md/.json/.png (default: $TENTER_HOME/scale/<name>-<time>)",
    )
    parser.set_defaults(func=run_scale)


def _counts(text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise SpecError(
            [
                Problem(
                    flag,
                    f"'{text}' is not a comma-separated list of positive counts",
                    "write e.g. 1,2,4",
                )
            ]
        )
    return counts


def _sizes(args: argparse.Namespace) -> list[tuple[int | None, int | None]]:
    hosts = _counts(args.hosts, "--hosts")
    procs = _counts(args.procs_per_host, "--procs-per-host")
    if hosts and procs and len(hosts) > 1 and len(procs) > 1:
        raise SpecError(
            [
                Problem(
                    "--procs-per-host",
                    f"both --hosts ({args.hosts}) and --procs-per-host ({args.procs_per_host}) "
                    "are lists",
                    "scale one of them and give the other a single value",
                )
            ]
        )
    if not hosts and not (procs and len(procs) > 1):
        raise SpecError(
            [
                Problem(
                    "--hosts",
                    "gives no sizes to compare",
                    "give them, e.g. --hosts 1,2,3 (or --procs-per-host 1,2,4)",
                )
            ]
        )
    if hosts and len(hosts) > 1:
        return [(h, procs[0] if procs else None) for h in hosts]
    return [(hosts[0] if hosts else None, p) for p in procs or []]


def run_scale(args: argparse.Namespace) -> int:
    from tenter import session
    from tenter.cli.parsing import stderr
    from tenter.jobdir.lookup import tenter_home
    from tenter.monitor import scaling
    from tenter.spec import load_file

    # Checked before the first run: the plot is drawn only after every size has run.
    require("matplotlib", "plot", "tenter scale")
    sizes = _sizes(args)
    if args.epochs is not None and args.epochs < 1:
        raise SpecError(
            [
                Problem(
                    "--epochs",
                    f"{args.epochs} is not a positive number of epochs",
                    "give 1 or more",
                )
            ]
        )
    spec_path = Path(args.spec)
    if not spec_path.is_file():
        raise SpecError([Problem("SPEC", f"no spec file '{args.spec}'", "give a job spec (.yaml)")])
    specs = []
    for hosts, procs in sizes:  # every size is checked before the first runs
        overrides: dict[str, Any] = {}
        if hosts is not None:
            overrides["instance_count"] = hosts
        if procs is not None:
            overrides["processes_per_host"] = procs
        if args.epochs is not None:
            overrides["hyperparameters"] = {"epochs": args.epochs}
        spec, _ = load_file(spec_path, overrides)
        specs.append(spec)
    epochs = args.epochs or _int_or_none(specs[0].hyperparameters.get("epochs"))
    ran, measured = [], []
    for spec in specs:
        result = session.run(spec)
        stderr.print(result.summary)
        if not result.ok:
            stderr.print(f"[bold red]error:[/] the run at {_size(result)} failed; study stopped")
            return result.exit_code
        m = scaling.measure_job(result.job_dir)
        if m is None:
            stderr.print(
                f"[bold red]error:[/] the run at {_size(result)} reported no progress: call "
                "tenter.report(step=..., samples=...) every step (docs/monitor.md)"
            )
            return 1
        ran.append((result.hosts, result.procs_per_host, result.job_id, result.job_dir))
        measured.append(m)
    # The smallest run is the base of the comparison, whatever order the sizes came in.
    order = sorted(range(len(ran)), key=lambda i: ran[i][0] * ran[i][1])
    runs = scaling.compare([ran[i] for i in order], [measured[i] for i in order], epochs)
    name = specs[0].name
    out = (
        Path(args.out)
        if args.out
        else (tenter_home() / "scale" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    )
    files = scaling.write(runs, epochs, f"{name}: scaling", out)
    print(scaling.table(runs, epochs))
    for path in files:
        print(path)
    return 0


def _size(result: JobResult) -> str:
    return f"{counted(result.hosts, 'host')} x {counted(result.procs_per_host, 'process')}"


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None
