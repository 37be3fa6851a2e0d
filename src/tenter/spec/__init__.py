"""The job spec: what to run, on how many hosts and processes, distributed how.

Read it from YAML with :func:`load_file`, from a dict (CLI flags, the Python
``Estimator``) with :func:`load`; both validate every rule and raise
:class:`SpecError` listing all problems, or return the spec and its warnings.
"""

from tenter.spec.catalog import InstanceType, lookup
from tenter.spec.errors import Problem, SpecError
from tenter.spec.job import JobSpec, LogOptions
from tenter.spec.load import load, load_file
from tenter.spec.validate import processes_per_host

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
