"""Flags shared by every command that takes a job: they mirror the spec's fields and
override a spec file's values."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from rich.markup import escape

from tenter.cli import torchrun_flags
from tenter.cli.parsing import stderr
from tenter.contract.plan import read_plan
from tenter.jobdir import layout
from tenter.spec import JobSpec, Problem, SpecError, load, load_file
from tenter.spec.loading import deep_merge

SPEC_SUFFIXES = (".yaml", ".yml")

SLURM_FLAGS = {
    "partition": "the partition to queue in (sbatch --partition)",
    "account": "the account charged (sbatch --account)",
    "qos": "the quality of service (sbatch --qos)",
}
"""The ``slurm`` block's fields most clusters ask for, as flags of the same names."""


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
        "--no-python",
        "--no_python",
        action="store_true",
        help="SCRIPT is an executable, not a Python script",
    )
    job.add_argument("--hosts", type=int, metavar="N", help="number of hosts (instance_count)")
    job.add_argument("--procs-per-host", type=int, metavar="M", help="processes per host")
    job.add_argument("--instance-type", metavar="TYPE", help="e.g. local, ml.p4d.24xlarge")
    job.add_argument(
        "--backend", metavar="NAME", help="where to run: local, mpi, slurm, kubernetes or ray"
    )
    job.add_argument(
        "--isolation",
        choices=("none", "network"),
        help="network: each host in namespaces of its own (own address, hostname, /dev/shm)",
    )
    job.add_argument("--name", metavar="NAME", help="job name (the job id starts with it)")
    job.add_argument("--source-dir", metavar="DIR", help="working directory of the processes")
    job.add_argument("--output-dir", metavar="DIR", help="where job directories are created")
    job.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="where the ranks keep their checkpoints (checkpoint.dir; default: one folder per "
        "job beside the job directories, so that running the job again resumes it)",
    )
    job.add_argument("--max-run", type=int, metavar="SECONDS", help="stop the job after this")
    job.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="environment variable"
    )
    job.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME",
        help="pass variable NAME from this environment to every process, its value written "
        "nowhere (the spec's secrets; the flags replace the spec's list)",
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
    cluster = parser.add_argument_group("cluster (the spec's slurm: and mpirun: blocks)")
    for flag, what in SLURM_FLAGS.items():
        cluster.add_argument(f"--{flag}", metavar=flag.upper(), help=f"slurm: {what}")
    cluster.add_argument(
        "--hostfile", metavar="FILE", help="mpi: Open MPI hostfile; the job's hosts are its first N"
    )
    torchrun_flags.add_torchrun_arguments(parser)


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise SpecError([Problem(flag, f"'{value}' is not KEY=VALUE", "write KEY=VALUE")])
        if key in out:  # as duplicate keys in a spec file: the last must not silently win
            raise SpecError(
                [Problem(flag, f"{key} is given twice ({key}={out[key]}, {value})", "give it once")]
            )
        out[key] = val
    return out


def _absolute(path: str, flag: str) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except RuntimeError as e:  # expanduser: "~nobody-such" names no user
        raise SpecError([Problem(flag, f"'{path}': {e}", "give an existing path")]) from None


def overrides_from(args: argparse.Namespace) -> dict[str, Any]:
    """The spec fields the flags set; paths absolute, as given relative to the cwd."""
    out: dict[str, Any] = {}
    simple = {
        "hosts": "instance_count",
        "procs_per_host": "processes_per_host",
        "instance_type": "instance_type",
        "backend": "backend",
        "isolation": "isolation",
        "name": "name",
        "max_run": "max_run",
    }
    for flag, field in simple.items():
        if getattr(args, flag) is not None:
            out[field] = getattr(args, flag)
    for flag, field in (("source_dir", "source_dir"), ("output_dir", "output_dir")):
        if getattr(args, flag):
            out[field] = _absolute(getattr(args, flag), f"--{flag.replace('_', '-')}")
    if args.checkpoint_dir:
        out["checkpoint"] = {"dir": _absolute(args.checkpoint_dir, "--checkpoint-dir")}
    slurm = {flag: getattr(args, flag) for flag in SLURM_FLAGS if getattr(args, flag)}
    if slurm:
        out["slurm"] = slurm
    if args.hostfile:
        out["mpirun"] = {"hostfile": _absolute(args.hostfile, "--hostfile")}
    if args.env:
        out["environment"] = _pairs(args.env, "--env")
    if args.secret:
        out["secrets"] = list(args.secret)
    if args.hp:
        out["hyperparameters"] = _pairs(args.hp, "--hp")
    if args.channel:
        channels = _pairs(args.channel, "--channel")
        out["channels"] = {k: _absolute(v, "--channel") for k, v in channels.items()}
    logs: dict[str, Any] = {}
    if args.ranks:
        try:
            logs["ranks"] = [int(r) for r in args.ranks.split(",")]
        except ValueError:
            raise SpecError(
                [
                    Problem(
                        "--ranks",
                        f"'{args.ranks}' is not a comma-separated list of ranks",
                        "write e.g. 0,3",
                    )
                ]
            ) from None
    if args.no_tag:
        logs["tag"] = False
    if logs:
        out["logs"] = logs
    return out


def _note(text: str) -> None:
    stderr.print(f"[yellow]note:[/] {escape(text)}")


def _entry_from(args: argparse.Namespace, script_args: list[str]) -> dict[str, Any]:
    """The entry point fields from SCRIPT / -m / --no-python."""
    if args.module:
        if args.target is not None:
            script_args = [args.target, *script_args]
        return {"module": args.module, "args": script_args}
    if args.target is None:
        raise SpecError(
            [
                Problem(
                    "SPEC|SCRIPT",
                    "is missing",
                    "give a job spec (.yaml), a script, or -m MODULE",
                )
            ]
        )
    if args.no_python:
        return {"command": [args.target], "args": script_args}
    if args.source_dir:
        return {"entry_point": args.target, "args": script_args}
    # As under torchrun, the processes start in the caller's working directory (relative
    # paths in the script's arguments mean what they mean here); the script is found
    # from there, or by its absolute path when it lies outside.
    script = Path(_absolute(args.target, "SCRIPT"))
    here = Path.cwd().resolve()
    return {
        "entry_point": str(script.relative_to(here) if script.is_relative_to(here) else script),
        "source_dir": str(here),
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
                    "SPEC",
                    f"'{later.target}' follows the spec file",
                    "put script arguments after --",
                )
            ]
        )
    for key, value in vars(later).items():
        if isinstance(value, list) and key != "args":
            setattr(args, key, getattr(args, key) + value)
        elif value is not None and value is not False and value != []:  # 0 is a value
            setattr(args, key, value)
    return script_args


def _hyperparameter_value(text: str) -> JsonValue:
    """A value given on the command line, as the spec would hold it: ``4000`` a number,
    ``true`` a boolean, anything that is not JSON the text itself."""
    try:
        value: JsonValue = json.loads(text)
    except ValueError:
        return text
    return value


def args_over_hyperparameters(spec: JobSpec) -> JobSpec:
    """``tenter run job.yaml -- --steps 4000`` where the spec's hyperparameters hold
    ``steps: 200``: the script's ``--steps`` replaces the hyperparameter (its argument, its
    ``SM_HP_STEPS``, hyperparameters.json), instead of reaching the script as
    ``--steps 200 --steps 4000``. Arguments that name no hyperparameter pass as they are."""
    hyperparameters = dict(spec.hyperparameters)
    rest: list[str] = []
    args = iter(spec.args)
    for arg in args:
        key, has_value, value = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or key not in hyperparameters:
            rest.append(arg)
            continue
        given = value if has_value else next(args, None)
        if given is None:  # a trailing --steps: the script's to refuse
            rest.append(arg)
            continue
        hyperparameters[key] = _hyperparameter_value(given)
    if rest == spec.args:
        return spec
    return spec.model_copy(update={"hyperparameters": hyperparameters, "args": rest})


def recorded_job(target: str | None) -> Path | None:
    """``target`` when it is a job directory (``tenter run JOB_DIR``: run that job again)."""
    if target is None or not (Path(target) / layout.PLAN_FILE).is_file():
        return None
    return Path(target).resolve()


def record_spec(spec: JobSpec, job_dir: str) -> None:
    """Keep ``spec`` in its job directory, for ``tenter run JOB_DIR``."""
    text = spec.model_dump_json(exclude_unset=True, by_alias=True)
    layout.write_atomic(Path(job_dir) / layout.SPEC_FILE, text)


def _recorded_spec(job_dir: Path) -> dict[str, Any]:
    """The spec ``job_dir``'s job ran, reading its checkpoints when it names none of its own:
    running a job again resumes where it stopped."""
    try:
        data: dict[str, Any] = json.loads((job_dir / layout.SPEC_FILE).read_text())
    except OSError:
        raise SpecError(
            [
                Problem(
                    "SPEC|SCRIPT",
                    f"the job directory {job_dir} records no {layout.SPEC_FILE} (jobs that "
                    "an older tenter or the Estimator started do not)",
                    "run its spec file or script again",
                )
            ]
        ) from None
    checkpoint = data.setdefault("checkpoint", {})
    checkpoint.setdefault("dir", read_plan(job_dir).checkpoint_dir or str(job_dir / "checkpoints"))
    return data


def load_job(args: argparse.Namespace) -> JobSpec:
    """The job the flags describe (a spec file, a job directory to run again, and/or flags);
    prints the spec's warnings."""
    job_dir = None if args.module else recorded_job(args.target)
    is_spec = job_dir is not None or bool(
        args.target and args.target.endswith(SPEC_SUFFIXES) and not args.module
    )
    if is_spec:
        script_args = _flags_after_spec(args)
    else:
        script_args = list(args.args)
        if script_args[:1] == ["--"]:
            script_args = script_args[1:]
    torchrun, notes = torchrun_flags.spec_overrides(args)
    overrides = deep_merge(overrides_from(args), torchrun)
    if script_args and is_spec:
        overrides["args"] = script_args

    def load_with(extra: dict[str, Any]) -> tuple[JobSpec, list[Problem]]:
        merged = deep_merge(overrides, extra)
        if job_dir is not None:
            return load(_recorded_spec(job_dir), job_dir, merged)
        if is_spec:
            return load_file(Path(args.target), merged)
        return load(_entry_from(args, script_args), Path.cwd(), merged)

    spec, warnings = load_with({})
    spec = args_over_hyperparameters(spec)
    # torchrun's console and `auto` flags count processes per host: known once loaded.
    console, more_notes = torchrun_flags.console_overrides(args, spec)
    if console:
        spec, warnings = load_with(console)
        spec = args_over_hyperparameters(spec)
    for note in notes + more_notes:
        _note(note)
    for w in warnings:
        stderr.print(f"[yellow]warning:[/] {escape(str(w))}")
    return spec
