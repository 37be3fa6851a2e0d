"""Cross-field rules of a job spec, checked before anything is created or launched.

:func:`check` returns every error and every warning at once; :func:`parse` turns raw
YAML/flag/Estimator data into a :class:`JobSpec`, translating pydantic's errors into
field-path problems with a did-you-mean for unknown keys.
"""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tenter.spec import catalog, gpus, limits
from tenter.spec.backend_rules import backend_problems
from tenter.spec.backends import ISOLATING_BACKENDS, KNOWN_BACKENDS
from tenter.spec.errors import (
    MAX_SHOWN,
    FieldError,
    Problem,
    SpecError,
    closest,
    did_you_mean,
    show,
)
from tenter.spec.job import JobSpec
from tenter.spec.limits import key_path

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
    "TENTER_WATCH_FILE": "elastic.hang_timeout in the spec",
}
"""The variables tenter sets for every process from the spec (a user value would be silently
overwritten), and the field that sets each."""
# SageMaker's rule for Environment keys: also what a shell can export (Slurm's batch script).
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def _names_of_fields(model: type[BaseModel]) -> list[list[str]]:
    """Each field's names: its own, then the other names it accepts (``hosts``)."""
    out = []
    for name, info in model.model_fields.items():
        choices = getattr(info.validation_alias, "choices", None) or ()
        out.append([name, *(c for c in choices if isinstance(c, str) and c != name)])
    return out


def _field_names(model: type[BaseModel]) -> list[str]:
    return [name for names in _names_of_fields(model) for name in names]


def without_other_names(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``data`` less the fields ``overrides`` sets under another name: ``--hosts 3`` (which
    sets instance_count) replaces a spec file's ``hosts: 2``."""
    drop = {
        name
        for names in _names_of_fields(JobSpec)
        if any(n in overrides for n in names)
        for name in names
        if name not in overrides
    }
    return {k: v for k, v in data.items() if k not in drop}


def _same_field_twice(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """Refuse a field set under two of its names (``hosts`` and ``instance_count``);
    ``data`` is returned without the second, so that the rest can still be checked."""
    problems = []
    for names in _names_of_fields(JobSpec):
        given = [n for n in names if n in data]
        for other in given[1:]:
            problems.append(
                Problem(
                    other,
                    f"is another name for {given[0]}, and both are set ({other}: "
                    f"{show(data[other])}, {given[0]}: {show(data[given[0]])})",
                    "keep one",
                )
            )
            data = {k: v for k, v in data.items() if k != other}
    return data, problems


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The spec model that holds the field at ``loc`` (for did-you-mean suggestions)."""
    model: type[BaseModel] = JobSpec
    for part in loc:
        info = model.model_fields.get(str(part))
        if info is None:
            return None
        candidates = [info.annotation]
        while candidates:
            annotation = candidates.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
                break
            if (
                isinstance(annotation, types.UnionType)
                or typing.get_origin(annotation) is typing.Union
            ):
                candidates += list(typing.get_args(annotation))
        else:
            return None
    return model


def _problem_from_pydantic(err: Any, *, suggest: bool = True) -> Problem:
    """A pydantic error as a Problem; ``suggest``: look for a did-you-mean (costly, and only
    the first few problems are shown)."""
    loc = tuple(err["loc"])
    path = ""
    for part in loc:
        path = key_path(path, part)
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1]) if suggest else None
        close = closest(str(loc[-1]), _field_names(parent)) if parent else None
        return Problem(path, "unknown field", f"rename it to '{close}'" if close else "remove it")
    if err["type"] == "missing":
        return Problem(path, "is required", f"set {path}")
    message = err["msg"]
    if err["type"] == "value_error":  # our validators' FieldError: its what and fix
        error = err.get("ctx", {}).get("error")
        fix = error.fix if isinstance(error, FieldError) else ""
        return Problem(path, message.removeprefix("Value error, "), fix)
    expected = message.removeprefix("Input should be ")
    if expected != message:  # pydantic's "Input should be a valid integer" and the like
        return Problem(path, f"{show(err['input'])} is not {expected}", f"make it {expected}")
    # The rest say "<String|List|...> should <have at most 64 characters>, <not 70>".
    should = message.partition(" should ")[2].partition(", not ")[0]
    return Problem(
        path,
        f"{show(err['input'])} is invalid: {message[0].lower()}{message[1:]}",
        f"make it {should}" if should else "",
    )


_SMP_PATH = ("distribution", "smdistributed", "modelparallel", "parameters")


def _rename_partitions(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """Accept SMP's old ``partitions`` name for ``pipeline_parallel_degree``, with a warning."""
    params: Any = data
    for key in _SMP_PATH:
        params = params.get(key) if isinstance(params, dict) else None
    if not isinstance(params, dict) or "partitions" not in params:
        return data, []
    path = ".".join(_SMP_PATH)
    if "pipeline_parallel_degree" in params:
        raise SpecError(
            [
                Problem(
                    f"{path}.partitions",
                    "is the old name of pipeline_parallel_degree, and both are set",
                    "keep only pipeline_parallel_degree",
                )
            ]
        )
    data = copy.deepcopy(data)
    target = data
    for key in _SMP_PATH:
        target = target[key]
    target["pipeline_parallel_degree"] = target.pop("partitions")
    return data, [
        Problem(f"{path}.partitions", "is deprecated", "rename it to pipeline_parallel_degree")
    ]


def _without(data: dict[str, Any], locs: list[tuple[int | str, ...]]) -> dict[str, Any]:
    """``data`` with the values at ``locs`` removed, so that the rest can still be checked."""
    data = copy.deepcopy(data)
    for loc in locs:
        parent: Any = data
        for part in loc[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            parent.pop(loc[-1], None)
    return data


def parse(data: dict[str, Any]) -> tuple[JobSpec, list[Problem], list[Problem]]:
    """Build a JobSpec from raw data; returns (spec, structural errors, warnings).

    On structural errors the spec is built without the offending values, so that the
    cross-field rules can still run and every problem is reported in one pass.
    """
    data, warnings = _rename_partitions(data)
    data, errors = _same_field_twice(data)
    try:
        return JobSpec.model_validate(data), errors, warnings
    except ValidationError as e:
        found = e.errors(include_url=False)  # the context: a FieldError, its fix
        errors += [
            _problem_from_pydantic(err, suggest=i < MAX_SHOWN) for i, err in enumerate(found)
        ]
        locs = [tuple(err["loc"]) for err in found]
    try:
        return JobSpec.model_validate(_without(data, locs)), errors, warnings
    except ValidationError:
        raise SpecError(errors) from None


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


def _environment_problems(environment: dict[str, str]) -> list[Problem]:
    out = []
    for key in environment:
        path = key_path("environment", key)
        if not _VARIABLE_NAME.match(key):
            out.append(
                Problem(
                    path,
                    "is not a variable name (SageMaker's rule; '=' would split it, and job "
                    "scripts export it)",
                    "use letters, digits and '_', not starting with a digit",
                )
            )
        elif TENTER_OWNED_ENV.get(key):
            out.append(
                Problem(
                    path,
                    "is set by tenter for every process from the spec",
                    f"set {TENTER_OWNED_ENV[key]} instead",
                )
            )
        elif _RESERVED_ENV.match(key) or key in TENTER_OWNED_ENV:
            out.append(
                Problem(
                    path, "is set by tenter for every process and cannot be overridden", "remove it"
                )
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
    errors += _environment_problems(spec.environment)
    errors += _size_problems(spec)

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

    itype = catalog.lookup(spec.instance_type)
    if itype is None:
        errors.append(Problem("instance_type", *catalog.unknown_type(spec.instance_type)))
    else:
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
                elastic_hosts=spec.elastic.min_hosts is not None
                or spec.elastic.max_hosts is not None,
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
    # A value removed for a structural error was checked again with its default: a rule
    # that fails on that default repeats the same field, so only the first report stays.
    known_bad = {p.path for p in prior}
    errors = [*prior, *(p for p in errors if p.path not in known_bad)]
    if errors:
        raise SpecError(errors)
    return warnings
