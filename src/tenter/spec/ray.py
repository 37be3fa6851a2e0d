"""``ray``: where a job runs on a Ray cluster (``backend: ray``).

ray:
  address: 127.0.0.1:6379        # an existing cluster's GCS; default: a local cluster tenter
                                 # starts for the job (one Ray node per host) and stops after it
  resources_per_host: {CPU: 2}   # each host's placement-group bundle, beside tenter's own
  job_name: nightly              # what Ray calls the placement group (default: the job id)
"""

from __future__ import annotations

from pydantic import Field

from tenter.spec.base import StrictModel


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
