"""``tenter doctor``: is this host (or every host of a job) ready to train?

Each check looks at one thing (versions, GPUs, EFA and libfabric, hugepages and /dev/shm,
limits, network, MPI) and returns pass / warn / fail / skip with what it found and, when it is
not a pass, the one-line fix. Given a job, the checks judge the host against it: its
instance type (EFA or not, GPUDirect RDMA, GPUs) and its processes per host.

Used three ways:

- ``tenter doctor`` checks this host; ``tenter doctor job.yaml`` every host of the job (a host x
  check matrix marking hosts that differ from the others); ``--json`` for machines.
- :func:`preflight` runs the checks that can stop a job before ``tenter run`` starts it.
- :func:`run_checks` with a :class:`System` on a fake root tests every check without the
  hardware.
"""

from tenter.doctor.checks import CHECKS
from tenter.doctor.preflight import SKIP_WARNING, PreflightReport, preflight
from tenter.doctor.result import Check, CheckResult, Context, HostReport, JobContext, Status
from tenter.doctor.runner import check_job, job_context, run_checks
from tenter.doctor.system import System

__all__ = [
    "CHECKS",
    "SKIP_WARNING",
    "Check",
    "CheckResult",
    "Context",
    "HostReport",
    "JobContext",
    "PreflightReport",
    "Status",
    "System",
    "check_job",
    "job_context",
    "preflight",
    "run_checks",
]
