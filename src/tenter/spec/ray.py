"""``ray``: where a job runs on a Ray cluster (``backend: ray``).

ray:
  address: 127.0.0.1:6379        # an existing cluster's GCS; default: a local cluster tenter
                                 # starts for the job (one Ray node per host) and stops after it
  resources_per_host: {CPU: 2}   # each host's placement-group bundle, beside tenter's own
  job_name: nightly              # what Ray calls the placement group (default: the job id)
  runtime_env:                   # Ray's runtime environment of the hosts' actors (and of the
    env_vars: {NCCL_DEBUG: INFO} # Ray job, with --detach): only env_vars
"""

from __future__ import annotations

from pydantic import Field

from tenter.spec.base import StrictModel


class RayRuntimeEnv(StrictModel):
    """Ray's ``runtime_env``, the keys tenter passes on. Only ``env_vars``: each host runs the
    plan's command with the plan's Python in the plan's directory, so Ray's ``working_dir``,
    ``pip``, ``conda`` or ``container`` would not be what runs (an unknown key is refused)."""

    env_vars: dict[str, str] = Field(default_factory=dict)
    """Variables of every rank, as ``environment`` (the plan shows them there), and of Ray's
    processes of the job: the hosts' actors and, with ``--detach``, the Ray job that runs the
    launcher. The rules of ``environment`` apply (tenter's own names are refused)."""


class RayOptions(StrictModel):
    address: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-]+:[0-9]{1,5}$")
    """``host:port`` of a running cluster's GCS (what ``ray start --head`` printed). Default:
    a cluster on this machine that tenter starts for the job, one Ray node per host, bound to
    127.0.0.1, and stops when the job ends."""
    resources_per_host: dict[str, float] = Field(default_factory=dict)
    """Ray resources each host's bundle reserves (``{CPU: 8, GPU: 8}``), beside the
    ``tenter_host_<i>`` resource that pins host ``i`` to its own node."""
    job_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-]+$", max_length=128)
    """What Ray calls the job's placement group (default: the tenter job id)."""
    runtime_env: RayRuntimeEnv = RayRuntimeEnv()
