"""Flags shared by every command that takes a job: they mirror the spec's fields and
override a spec file's values."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from tenter.spec import JobSpec, Problem, SpecError, load, load_file

SPEC_SUFFIXES = (".yaml", ".yml")
EXIT_USAGE = 2
"""Bad input (flags, spec, a failed preflight): nothing was created and nothing launched."""

# soft_wrap: a log file or CI console must get the lines whole, not cut at 80 columns.
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(job_parser=parser)
    parser.add_argument(
        "target",
        nargs="?",
        metavar="SPEC|SCRIPT",
        help="a job spec (.yaml) or a Python script to run (with -m: omit; with --no-python: "
        "an executable)",
    )
    parser.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="after a script: its arguments; after a spec file: more flags, then `--` and the "
        "script's arguments",
    )
    job = parser.add_argument_group("job (each overrides the spec file's field)")
    job.add_argument("-m", "--module", help="run a Python module, as `python -m MODULE`")
    job.add_argument(
        "--no-python", action="store_true", help="SCRIPT is an executable, not a Python script"
    )
    job.add_argument("--hosts", type=int, metavar="N", help="number of hosts (instance_count)")
    job.add_argument("--procs-per-host", type=int, metavar="M", help="processes per host")
    job.add_argument("--instance-type", metavar="TYPE", help="e.g. local, ml.p4d.24xlarge")
    job.add_argument("--backend", metavar="NAME", help="where to run: local, mpi or slurm")
    job.add_argument("--name", metavar="NAME", help="job name (the job id starts with it)")
    job.add_argument("--source-dir", metavar="DIR", help="working directory of the processes")
    job.add_argument("--output-dir", metavar="DIR", help="where job directories are created")
    job.add_argument("--max-run", type=int, metavar="SECONDS", help="stop the job after this")
    job.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="environment variable"
    )
    job.add_argument(
        "--hp", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter"
    )
    job.add_argument(
        "--channel", action="append", default=[], metavar="NAME=PATH", help="input channel"
    )
    job.add_argument(
        "--ranks", metavar="R[,R...]", help="show only these ranks' output on the console"
    )
    job.add_argument("--no-tag", action="store_true", help="do not prefix lines with [host,rank]")


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise SpecError([Problem(flag, f"'{value}' is not KEY=VALUE")])
        out[key] = val
    return out


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def overrides_from(args: argparse.Namespace) -> dict[str, Any]:
    """The spec fields the flags set; paths absolute, as given relative to the cwd."""
    out: dict[str, Any] = {}
    simple = {
        "hosts": "instance_count",
        "procs_per_host": "processes_per_host",
        "instance_type": "instance_type",
        "backend": "backend",
        "name": "name",
        "max_run": "max_run",
    }
    for flag, field in simple.items():
        if getattr(args, flag) is not None:
            out[field] = getattr(args, flag)
    for flag, field in (("source_dir", "source_dir"), ("output_dir", "output_dir")):
        if getattr(args, flag):
            out[field] = _absolute(getattr(args, flag))
    if args.env:
        out["environment"] = _pairs(args.env, "--env")
    if args.hp:
        out["hyperparameters"] = _pairs(args.hp, "--hp")
    if args.channel:
        out["channels"] = {k: _absolute(v) for k, v in _pairs(args.channel, "--channel").items()}
    logs: dict[str, Any] = {}
    if args.ranks:
        try:
            logs["ranks"] = [int(r) for r in args.ranks.split(",")]
        except ValueError:
            raise SpecError(
                [Problem("--ranks", f"'{args.ranks}' is not a comma-separated list of ranks")]
            ) from None
    if args.no_tag:
        logs["tag"] = False
    if logs:
        out["logs"] = logs
    return out


def _entry_from(args: argparse.Namespace, script_args: list[str]) -> dict[str, Any]:
    """The entry point fields from SCRIPT / -m / --no-python."""
    if args.module:
        if args.target is not None:
            script_args = [args.target, *script_args]
        return {"module": args.module, "args": script_args}
    if args.target is None:
        raise SpecError([Problem("SPEC|SCRIPT", "give a job spec (.yaml), a script, or -m MODULE")])
    if args.no_python:
        return {"command": [args.target], "args": script_args}
    script = Path(args.target)
    if args.source_dir:
        return {"entry_point": args.target, "args": script_args}
    return {
        "entry_point": script.name,
        "source_dir": _absolute(str(script.parent)),
        "args": script_args,
    }


def _flags_after_spec(args: argparse.Namespace) -> list[str]:
    """``tenter run job.yaml --hosts 4 -- --x 1``: after a spec file come more tenter flags
    (merged into ``args``), then ``--`` and the script's arguments (returned)."""
    rest = list(args.args)
    split = rest.index("--") if "--" in rest else len(rest)
    flags, script_args = rest[:split], rest[split + 1 :]
    later = args.job_parser.parse_args(flags)
    if later.target is not None:
        raise SpecError(
            [
                Problem(
                    "SPEC", f"'{later.target}' follows the spec file: put script arguments after --"
                )
            ]
        )
    for key, value in vars(later).items():
        if isinstance(value, list) and key != "args":
            setattr(args, key, getattr(args, key) + value)
        elif value is not None and value is not False and value != []:  # 0 is a value
            setattr(args, key, value)
    return script_args


def load_job(args: argparse.Namespace) -> JobSpec:
    """The job the flags describe (a spec file and/or flags); prints the spec's warnings."""
    is_spec = bool(args.target and args.target.endswith(SPEC_SUFFIXES) and not args.module)
    if is_spec:
        script_args = _flags_after_spec(args)
    else:
        script_args = list(args.args)
        if script_args[:1] == ["--"]:
            script_args = script_args[1:]
    overrides = overrides_from(args)
    if is_spec:
        if script_args:
            overrides["args"] = script_args
        spec, warnings = load_file(Path(args.target), overrides)
    else:
        spec, warnings = load(_entry_from(args, script_args), Path.cwd(), overrides)
    for w in warnings:
        stderr.print(f"[yellow]warning:[/] {escape(str(w))}")
    return spec
