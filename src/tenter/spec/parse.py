"""Raw YAML/flag/Estimator data -> a :class:`JobSpec`: :func:`parse` translates pydantic's
errors into field-path problems with a did-you-mean for unknown keys, renames SMP's old
``partitions``, and reports a field given under two of its names. The cross-field rules are
:mod:`tenter.spec.validate`'s."""

from __future__ import annotations

import copy
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from tenter.spec.errors import (
    MAX_SHOWN,
    FieldError,
    Problem,
    SpecError,
    closest,
    show,
)
from tenter.spec.job import JobSpec
from tenter.spec.limits import key_path


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
