"""Loading a spec: YAML (``safe_load``) and overrides in, an absolute-path JobSpec out."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tenter.spec.errors import Problem, SpecError
from tenter.spec.job import JobSpec
from tenter.spec.validate import check, parse


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise SpecError([Problem("", f"cannot read the spec file '{path}': {e.strerror}")]) from e
    except yaml.YAMLError as e:
        raise SpecError([Problem("", f"'{path}' is not valid YAML: {e}")]) from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            [Problem("", f"'{path}' must hold a mapping of spec fields, not {type(data).__name__}")]
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


def _absolute(path: str, base_dir: Path) -> str:
    p = Path(path.removeprefix("file://")).expanduser()
    return str(p if p.is_absolute() else (base_dir / p).resolve())


def resolve_paths(spec: JobSpec, base_dir: Path) -> JobSpec:
    """Relative paths are relative to ``base_dir``: the spec file's folder, or the cwd."""
    return spec.model_copy(
        update={
            "source_dir": _absolute(spec.source_dir, base_dir),
            "channels": {k: _absolute(v, base_dir) for k, v in spec.channels.items()},
            "output_dir": _absolute(spec.output_dir, base_dir) if spec.output_dir else None,
            "checkpoint": spec.checkpoint.model_copy(
                update={"dir": _absolute(spec.checkpoint.dir, base_dir)}
            )
            if spec.checkpoint.dir
            else spec.checkpoint,
        }
    )


def load(
    data: dict[str, Any], base_dir: Path, overrides: dict[str, Any] | None = None
) -> tuple[JobSpec, list[Problem]]:
    """Parse, resolve and check a spec; returns it with its warnings, or raises SpecError."""
    spec, errors, warnings = parse(deep_merge(data, overrides or {}))
    spec = resolve_paths(spec, base_dir)
    return spec, warnings + check(spec, errors)


def load_file(path: Path, overrides: dict[str, Any] | None = None) -> tuple[JobSpec, list[Problem]]:
    return load(read_yaml(path), path.resolve().parent, overrides)
