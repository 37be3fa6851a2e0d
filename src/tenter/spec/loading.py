"""Loading a spec: YAML (``safe_load``) and overrides in, an absolute-path JobSpec out."""

from __future__ import annotations

import copy
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from tenter.spec.errors import Problem, SpecError, clip, show
from tenter.spec.job import JobSpec
from tenter.spec.limits import (
    MAX_SPEC_BYTES,
    check_bounds,
    check_yaml_nesting,
    key_path,
    named_stream,
)
from tenter.spec.parse import parse, without_other_names
from tenter.spec.validate import check


class _SpecLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """``safe_load``'s loader (libyaml's where installed), refusing a key given twice:
    YAML itself keeps the last one silently, which hides the first from the user."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults` may be overridden
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):
                continue  # the base class reports it
            if key in first_line:
                raise SpecError(
                    [
                        Problem(
                            clip(str(key), 100),
                            f"is given twice (lines {first_line[key]} and {line}), and YAML "
                            "would silently keep the second",
                            "keep one",
                        )
                    ]
                )
            first_line[key] = line
        result: dict[Any, Any] = super().construct_mapping(node, deep)
        return result


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping of a spec file, read within the bounds of :mod:`tenter.spec.limits`."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise SpecError(
            [
                Problem(
                    "",
                    f"cannot read the spec file '{path}': {e.strerror}",
                    "give the path of a readable YAML file",
                )
            ]
        ) from e
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(
            [
                Problem(
                    "",
                    f"'{path}' is larger than {MAX_SPEC_BYTES // 2**20} MiB; a job spec is a few "
                    "KB",
                    "pass large data as a file (a channel), not in the spec",
                )
            ]
        )
    try:
        text = raw.decode("utf-8-sig")  # -sig: a byte-order mark, as some editors write
    except UnicodeDecodeError as e:
        raise SpecError(
            [
                Problem(
                    "",
                    f"'{path}' is not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start}): "
                    "a spec is YAML, which tenter reads as UTF-8",
                    "save it in that encoding",
                )
            ]
        ) from None
    try:
        check_yaml_nesting(text, path.name)
        data = yaml.load(named_stream(text, path.name), Loader=_SpecLoader)  # a safe loader
    except yaml.YAMLError as e:
        raise SpecError(
            [Problem("", f"'{path}' is not valid YAML: {e}", "correct the YAML at that line")]
        ) from None
    except SpecError:
        raise
    except (ValueError, OverflowError) as e:
        # A scalar YAML accepts but Python cannot build: an integer of over 4,300 digits
        # (Python's limit), a date such as 2024-13-45.
        raise SpecError(
            [
                Problem(
                    "",
                    f"'{path}' holds a value tenter cannot read: {e}",
                    "write the value as text (quote it)",
                )
            ]
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            [
                Problem(
                    "",
                    f"'{path}' must hold a mapping of spec fields, not {type(data).__name__}",
                    "write the spec as 'field: value' lines (e.g. entry_point: train.py)",
                )
            ]
        )
    return data


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, merging nested mappings key by key."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _absolute(path: str, base_dir: Path, field: str) -> str:
    try:
        p = Path(path.removeprefix("file://")).expanduser()
        return str(p if p.is_absolute() else (base_dir / p).resolve())
    except (RuntimeError, OSError) as e:
        # expanduser: `~user` of no such user; resolve: a symlink loop.
        raise SpecError(
            [Problem(field, f"{show(path)} cannot be made an absolute path ({e})", "fix the path")]
        ) from None


def resolve_paths(spec: JobSpec, base_dir: Path) -> JobSpec:
    """Relative paths are relative to ``base_dir``: the spec file's folder, or the cwd."""
    return spec.model_copy(
        update={
            "source_dir": _absolute(spec.source_dir, base_dir, "source_dir"),
            "channels": {
                k: _absolute(v, base_dir, key_path("channels", k)) for k, v in spec.channels.items()
            },
            "output_dir": _absolute(spec.output_dir, base_dir, "output_dir")
            if spec.output_dir
            else None,
            "checkpoint": spec.checkpoint.model_copy(
                update={"dir": _absolute(spec.checkpoint.dir, base_dir, "checkpoint.dir")}
            )
            if spec.checkpoint.dir
            else spec.checkpoint,
            "mpirun": spec.mpirun.model_copy(
                update={"hostfile": _absolute(spec.mpirun.hostfile, base_dir, "mpirun.hostfile")}
            )
            if spec.mpirun.hostfile
            else spec.mpirun,
        }
    )


def load(
    data: dict[str, Any], base_dir: Path, overrides: dict[str, Any] | None = None
) -> tuple[JobSpec, list[Problem]]:
    """Parse, resolve and check a spec; returns it with its warnings, or raises SpecError.

    ``overrides`` (the CLI's flags) replace the values of ``data`` (the spec file's).
    """
    overrides = overrides or {}
    # Bounded before anything copies or validates them: deepcopy and pydantic recurse.
    check_bounds(data)
    check_bounds(overrides)
    spec, errors, warnings = parse(deep_merge(without_other_names(data, overrides), overrides))
    spec = resolve_paths(spec, base_dir)
    return spec, warnings + check(spec, errors)


def load_file(path: Path, overrides: dict[str, Any] | None = None) -> tuple[JobSpec, list[Problem]]:
    return load(read_yaml(path), path.resolve().parent, overrides)
