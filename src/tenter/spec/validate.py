"""Cross-field rules of a job spec, checked before anything is created or launched.

:func:`check` returns every error and every warning at once (:func:`tenter.spec.parse.parse`
turns raw YAML/flag/Estimator data into the :class:`JobSpec` it checks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from tenter.spec import catalog, gpus, limits
from tenter.spec.backend_rules import backend_problems
from tenter.spec.backends import ISOLATING_BACKENDS, KNOWN_BACKENDS
from tenter.spec.errors import (
    Problem,
    SpecError,
    did_you_mean,
)
from tenter.spec.job import JobSpec
from tenter.spec.limits import key_path
from tenter.spec.secrets import VARIABLE_NAME, credential_warnings, secret_problems

# Set per rank by the launcher; a user value would be silently overwritten.
_RESERVED_ENV = re.compile(
    r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT"
    r"|TORCHELASTIC_.*|SM_.*)$"
)
TENTER_OWNED_ENV = {
    "TENTER_CHECKPOINT_DIR": "checkpoint.dir in the spec, or --checkpoint-dir",
    "TENTER_CHECKPOINT_EVERY": "checkpoint.every in the spec",
    "TENTER_CHECKPOINT_KEEP": "checkpoint.keep in the spec",
    "TENTER_PREEMPTION_GRACE": "checkpoint.preemption_grace in the spec",
    "TENTER_JOB_DIR": "output_dir in the spec, or --output-dir",
    "TENTER_JOB_ID": "name in the spec, or --name",
    "TENTER_NUM_HOSTS": "instance_count in the spec, or --hosts",
    "TENTER_PG_BACKEND": "process_group_backend in the spec",
    "TENTER_DISTRIBUTION": "distribution in the spec",
    "TENTER_MIN_REPLICAS": "fault_tolerance.min_replicas in the spec",
    "TENTER_HOST": "",
    "TENTER_HOST_INDEX": "",
    "TENTER_HOST_ADDR": "",
    "TENTER_RANK_LOGS": "",
    "TENTER_RANK_WATCH": "elastic.hang_timeout in the spec",
    "TENTER_WATCH_FILE": "elastic.hang_timeout in the spec",
}
"""The variables tenter sets for every process from the spec (a user value would be silently
overwritten), and the field that sets each."""
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def processes_per_host(spec: JobSpec, itype: catalog.InstanceType) -> int:
    """The effective processes per host: the spec's, MPI's, or one per GPU (1 without GPUs).

    Simulated hosts of a ``local`` type share this machine's GPUs: each host's share counts."""
    shared = itype.is_local and spec.backend == "local"
    per_host = itype.gpus // planned_hosts(spec) if shared else itype.gpus
    return spec.processes_per_host or spec.distribution.mpi.processes_per_host or max(1, per_host)


def planned_hosts(spec: JobSpec) -> int:
    """Every host the job may have: its hosts, and those an elastic job may add."""
    return max(spec.instance_count, spec.elastic.max_hosts or 0)


def _gpu_problems(spec: JobSpec, itype: catalog.InstanceType, procs: int) -> list[Problem]:
    """A job that asks for a GPU per rank (``local_gpu``; a catalog GPU type) and has more
    ranks than GPUs; a ``local`` job is never refused: its ranks then run on the CPU."""
    if itype.is_local:
        why = gpus.refusal(
            itype.gpus,
            planned_hosts(spec) if spec.backend == "local" else 1,
            procs,
            required=itype.name == gpus.GPU_INSTANCE_TYPE,
        )
        return [] if why is None else [Problem("processes_per_host", *why)]
    if itype.gpus > 0 and procs > itype.gpus:
        return [
            Problem(
                "processes_per_host",
                f"{procs} processes per host exceed the {itype.gpus} GPUs of {itype.name}",
                f"use at most {itype.gpus} (one process per GPU)",
            )
        ]
    return []


def _environment_problems(
    environment: dict[str, str], parent: str = "environment"
) -> list[Problem]:
    out = []
    for key in environment:
        path = key_path(parent, key)
        if not VARIABLE_NAME.match(key):
            out.append(
                Problem(
                    path,
                    "is not a variable name (SageMaker's rule; '=' would split it, and job "
                    "scripts export it)",
                    "use letters, digits and '_', not starting with a digit",
                )
            )
        elif owned := _owned_problem(path, key):
            out.append(owned)
    return out


def _runtime_env_problems(env_vars: dict[str, str], environment: dict[str, str]) -> list[Problem]:
    """``ray.runtime_env.env_vars`` reach the ranks as ``environment`` does (the plan shows
    them there): the same rules, and one value for a name given in both."""
    parent = "ray.runtime_env.env_vars"
    out = _environment_problems(env_vars, parent)
    for key in env_vars.keys() & environment.keys():
        if env_vars[key] != environment[key]:
            out.append(
                Problem(
                    key_path(parent, key),
                    f"is also environment.{key}, with another value",
                    "give the variable in one of the two",
                )
            )
    return out


def _owned_problem(path: str, name: str) -> Problem | None:
    """The error of a variable ``name`` (an environment value's, a secret's) that tenter or
    torch sets for every process: a user value would be silently overwritten."""
    if TENTER_OWNED_ENV.get(name):
        return Problem(
            path,
            "is set by tenter for every process from the spec",
            f"set {TENTER_OWNED_ENV[name]} instead",
        )
    if _RESERVED_ENV.match(name) or name in TENTER_OWNED_ENV:
        return Problem(
            path, "is set by tenter for every process and cannot be overridden", "remove it"
        )
    return None


def _owned_secret_problems(secrets: Iterable[str]) -> list[Problem]:
    """A secret named like one of tenter's or torch's variables would not reach the ranks
    (tenter's value wins), or would change what tenter does (any ``TENTER_*``)."""
    out = []
    for name in secrets:
        path = key_path("secrets", name)
        if owned := _owned_problem(path, name):
            out.append(owned)
        elif name.startswith("TENTER_"):
            out.append(
                Problem(path, "TENTER_* names are tenter's own", "give the secret another name")
            )
    return out


def _utf8_size(texts: Iterable[str]) -> int:
    return sum(len(t.encode(errors="surrogatepass")) + 1 for t in texts)  # +1: the C string's NUL


def _size_problems(spec: JobSpec) -> list[Problem]:
    """What a process could not be given (Linux caps its arguments plus environment at
    ARG_MAX, 2 MiB), or what no cluster of this design holds."""
    sizes = (
        ("args", _utf8_size([*(spec.command or []), *spec.args]), limits.MAX_ARGS_BYTES),
        (
            "environment",
            _utf8_size(f"{k}={v}" for k, v in spec.environment.items()),
            limits.MAX_ENVIRONMENT_BYTES,
        ),
        (
            "hyperparameters",
            len(json.dumps(spec.hyperparameters).encode()),
            limits.MAX_HYPERPARAMETERS_BYTES,
        ),
    )
    out = [
        Problem(
            path,
            f"holds {size:,} bytes; at most {limit:,} fit in a process's arguments and "
            "environment beside tenter's",
            "pass large data as a file (a channel)",
        )
        for path, size, limit in sizes
        if size > limit
    ]
    for path, hosts in (
        ("instance_count", spec.instance_count),
        ("elastic.max_hosts", spec.elastic.max_hosts or 0),
    ):
        if spec.isolation != "none" and hosts > limits.MAX_ISOLATED_HOSTS:
            out.append(
                Problem(
                    path,
                    f"{hosts:,} hosts exceed the {limits.MAX_ISOLATED_HOSTS} isolated hosts "
                    "that fit the address range (198.18.100.1 to 198.18.255.1)",
                    "use fewer",
                )
            )
        elif hosts > limits.MAX_HOSTS:
            out.append(
                Problem(
                    path,
                    f"{hosts:,} hosts exceed the {limits.MAX_HOSTS:,} a job may have (the "
                    "SageMaker contract lists every host in SM_TRAINING_ENV, one variable that "
                    "Linux caps at 128 KiB)",
                    "use fewer",
                )
            )
        elif spec.backend == "local" and hosts > limits.MAX_SIMULATED_HOSTS:
            out.append(
                Problem(
                    path,
                    f"{hosts:,} hosts exceed the {limits.MAX_SIMULATED_HOSTS} the local backend "
                    "simulates on this machine",
                    "use fewer, or a cluster backend (mpi, slurm, kubernetes)",
                )
            )
    return out


def _max_processes(itype: catalog.InstanceType) -> int:
    """Worker processes a host of ``itype`` can run, by its memory."""
    return max(1, int(itype.memory_gib / limits.WORKER_MEMORY_GIB))


def _capacity_problems(spec: JobSpec, itype: catalog.InstanceType, procs: int) -> list[Problem]:
    """Refuse more processes than a host can run, before any starts (the preflight, which
    checks the same, can be skipped). The local backend runs every host on this machine."""
    if spec.backend == "local":
        host, count, what = catalog.detect_local(), procs * spec.instance_count, "this machine"
        counted = "instance_count x processes_per_host"
    else:
        host, count, what = itype, procs, f"one {itype.name} host"
        counted = "processes_per_host"
    most = _max_processes(host)
    if count <= most:
        return []
    return [
        Problem(
            "processes_per_host",
            f"{count:,} processes ({counted}) on {what} exceed the {most:,} its "
            f"{host.memory_gib:g} GiB of memory can run (a worker needs "
            f"{limits.WORKER_MEMORY_GIB * 1024:g} MiB at the least)",
            "use fewer",
        )
    ]


def check(spec: JobSpec, errors: list[Problem] | None = None) -> list[Problem]:
    """Raise SpecError listing every error (``errors`` found earlier, and these rules');
    return the warnings.

    Paths in ``spec`` are expected absolute (the loaders resolve them).
    """
    prior = errors or []
    errors = []
    warnings: list[Problem] = []

    errors += _entry_problems(spec)
    errors += _input_problems(spec)
    errors += _environment_problems(spec.environment)
    errors += _runtime_env_problems(spec.ray.runtime_env.env_vars, spec.environment)
    errors += secret_problems(spec.secrets, spec.environment, spec.backend)
    errors += _owned_secret_problems(spec.secrets)
    warnings += credential_warnings(spec.environment)
    errors += _size_problems(spec)
    errors += _backend_choice_problems(spec)
    itype = catalog.lookup(spec.instance_type)
    if itype is None:
        errors.append(Problem("instance_type", *catalog.unknown_type(spec.instance_type)))
    else:
        type_errors, type_warnings = _problems_on_type(spec, itype)
        errors += type_errors
        warnings += type_warnings
    # A value removed for a structural error was checked again with its default: a rule
    # that fails on that default repeats the same field, so only the first report stays.
    known_bad = {p.path for p in prior}
    errors = [*prior, *(p for p in errors if p.path not in known_bad)]
    if errors:
        raise SpecError(errors)
    return warnings


def _entry_problems(spec: JobSpec) -> list[Problem]:
    """One entry (script, module or command), and the script in ``source_dir``."""
    errors: list[Problem] = []
    entries = [n for n in ("entry_point", "module", "command") if getattr(spec, n) is not None]
    if not entries:
        errors.append(
            Problem("entry_point", "is required", "set entry_point (a script), module or command")
        )
    elif len(entries) > 1:
        errors.append(Problem(entries[1], f"cannot be combined with {entries[0]}", "keep one"))

    source_dir = Path(spec.source_dir)
    if not source_dir.is_dir():
        errors.append(
            Problem("source_dir", f"'{source_dir}' is not a directory", "give an existing folder")
        )
    elif spec.entry_point is not None and not (source_dir / spec.entry_point).is_file():
        script = source_dir / spec.entry_point
        errors.append(
            Problem(
                "entry_point",
                f"'{spec.entry_point}' is a directory, not a script"
                if script.is_dir()
                else f"'{spec.entry_point}' does not exist in source_dir '{source_dir}'",
                "check the name, or set source_dir to the folder that contains it (to run a "
                "job again, give `tenter run` its job directory)",
            )
        )
    if spec.command is not None and not spec.command:
        errors.append(Problem("command", "is empty", "give the executable and its arguments"))
    return errors


def _input_problems(spec: JobSpec) -> list[Problem]:
    """The channels' names and paths, the hyperparameters' names."""
    errors: list[Problem] = []
    for name, path in spec.channels.items():
        if not _CHANNEL_NAME.match(name):
            errors.append(
                Problem(
                    f"channels.{name}",
                    "is not a channel name",
                    "use letters, digits, '.', '_', '-'",
                )
            )
        if not Path(path).exists():
            errors.append(
                Problem(f"channels.{name}", f"'{path}' does not exist", "give an existing path")
            )

    for key in spec.hyperparameters:
        if not key or re.search(r"[\s=]", key):
            errors.append(
                Problem(
                    f"hyperparameters.{key!r}",
                    "is empty or holds a space or '='",
                    "name it without spaces or '='",
                )
            )
    return errors


def _backend_choice_problems(spec: JobSpec) -> list[Problem]:
    """A known backend, and isolation only where the hosts are simulated."""
    errors: list[Problem] = []
    if spec.backend not in KNOWN_BACKENDS:
        errors.append(
            Problem(
                "backend",
                f"'{spec.backend}' is not a launch backend",
                f"choose one of: {', '.join(KNOWN_BACKENDS)}."
                f"{did_you_mean(spec.backend, KNOWN_BACKENDS)}",
            )
        )

    if spec.isolation != "none" and spec.backend not in ISOLATING_BACKENDS:
        errors.append(
            Problem(
                "isolation",
                f"{spec.isolation} needs hosts simulated on this machine, and the "
                f"{spec.backend} backend runs on its own hosts",
                f"use backend: {' or '.join(ISOLATING_BACKENDS)}, or isolation: none",
            )
        )
    return errors


def _problems_on_type(
    spec: JobSpec, itype: catalog.InstanceType
) -> tuple[list[Problem], list[Problem]]:
    """The rules that need the instance type: processes, GPUs, capacity, the distribution,
    the backend's, elastic and fault tolerance, the ranks to show; errors and warnings."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    mpi_pph = spec.distribution.mpi.processes_per_host
    if spec.processes_per_host and mpi_pph and spec.processes_per_host != mpi_pph:
        errors.append(
            Problem(
                "processes_per_host",
                f"{spec.processes_per_host} differs from distribution.mpi.processes_per_host "
                f"({mpi_pph})",
                "set one of them",
            )
        )
    procs = processes_per_host(spec, itype)
    world = procs * spec.instance_count
    errors += _gpu_problems(spec, itype, procs)
    if spec.process_group_backend == "nccl" and itype.gpus == 0:
        errors.append(
            Problem(
                "process_group_backend",
                f"nccl needs GPUs and {itype.name} has none",
                "use tenter or gloo for CPU tensors (or auto)",
            )
        )
    errors += _capacity_problems(spec, itype, procs)
    if itype.is_local and itype.gpus == 0 and world > itype.cpus:
        warnings.append(
            Problem(
                "processes_per_host",
                f"{procs} per host x {spec.instance_count} hosts = {world} processes on "
                f"{itype.cpus} CPU cores: they will share cores, "
                "and run slower than on separate hosts",
                "use fewer processes or hosts to give each its own core",
            )
        )
    errors += spec.distribution.problems(world)
    backend_errors, backend_warnings = backend_problems(spec, itype)
    errors += backend_errors
    warnings += backend_warnings
    errors += spec.elastic.problems(spec.instance_count)
    if spec.fault_tolerance is not None:
        errors += spec.fault_tolerance.problems(
            spec.instance_count,
            spec.backend,
            model_parallel=spec.distribution.model_parallel is not None,
            elastic_hosts=spec.elastic.min_hosts is not None or spec.elastic.max_hosts is not None,
        )
    for rank in spec.logs.ranks or []:
        if rank >= world:
            errors.append(
                Problem(
                    "logs.ranks",
                    f"rank {rank} does not exist in a world of {world}",
                    f"list ranks 0 to {world - 1}",
                )
            )
    return errors, warnings
