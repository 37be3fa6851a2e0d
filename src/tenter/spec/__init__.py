"""The job spec: what to run, on how many hosts and processes, distributed how.

Read it from YAML with :func:`load_file`, from a dict (CLI flags, the Python
``Estimator``) with :func:`load`; both validate every rule and raise
:class:`SpecError` listing all problems, or return the spec and its warnings.

The names below are imported when first used: the spec's models (pydantic) and the instance
catalog take most of a second to import, which commands that only read a job directory
(``tenter status``) and the light modules of this package (:mod:`tenter.spec.errors`) need not
pay for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenter.spec.catalog import InstanceType, lookup
    from tenter.spec.errors import Problem, SpecError
    from tenter.spec.job import JobSpec, LogOptions
    from tenter.spec.loading import load, load_file
    from tenter.spec.validate import processes_per_host

_HOMES = {
    "InstanceType": "tenter.spec.catalog",
    "lookup": "tenter.spec.catalog",
    "Problem": "tenter.spec.errors",
    "SpecError": "tenter.spec.errors",
    "JobSpec": "tenter.spec.job",
    "LogOptions": "tenter.spec.job",
    "load": "tenter.spec.loading",
    "load_file": "tenter.spec.loading",
    "processes_per_host": "tenter.spec.validate",
}
"""Each public name -> the module that defines it."""

__all__ = [
    "InstanceType",
    "JobSpec",
    "LogOptions",
    "Problem",
    "SpecError",
    "load",
    "load_file",
    "lookup",
    "processes_per_host",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'tenter.spec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
