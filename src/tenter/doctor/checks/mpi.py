"""MPI: ``mpirun`` and its implementation, for jobs that start their processes with it."""

from __future__ import annotations

import re

from tenter.doctor.result import Check, CheckResult, Context

# The first line each implementation prints for `mpirun --version`.
_IMPLEMENTATIONS = (
    ("Open MPI", re.compile(r"\(Open MPI\)\s*(\S+)")),
    ("Intel MPI", re.compile(r"Intel\(R\) MPI Library.*?Version\s+(\S+)")),
    ("MPICH", re.compile(r"HYDRA build details:\s*\n\s*Version:\s*(\S+)")),
)


def mpi_implementation(version_output: str) -> str:
    """``Open MPI 4.1.5``-style name of the implementation behind ``mpirun --version``."""
    for name, pattern in _IMPLEMENTATIONS:
        match = pattern.search(version_output)
        if match:
            return f"{name} {match.group(1)}"
    first = version_output.strip().splitlines()
    return f"unknown MPI ({first[0]})" if first else "unknown MPI"


def _mpirun(ctx: Context) -> CheckResult:
    job = ctx.job
    if job is not None and not job.uses_mpi:
        return CheckResult.skip("the job does not use MPI")
    out = ctx.system.run(["mpirun", "--version"])
    if out is None:
        if job is None:
            return CheckResult.ok("mpirun not found (only MPI jobs need it)")
        if job.simulated:
            return CheckResult.warn(
                "mpirun not found: the local backend starts MPI jobs' processes itself",
                "install Open MPI (e.g. the EFA installer's /opt/amazon/openmpi) before running "
                "on a cluster",
            )
        return CheckResult.fail(
            "mpirun not found on PATH, and the job uses MPI",
            "install Open MPI and put its bin folder on PATH (the EFA installer puts it in "
            "/opt/amazon/openmpi/bin)",
        )
    exe = ctx.system.which("mpirun")
    assert exe is not None, "run() found it"
    found = f"{ctx.system.display(exe)}: {mpi_implementation(out.stdout + out.stderr)}"
    if out.returncode != 0:
        return CheckResult.warn(
            f"{found}; `mpirun --version` exited {out.returncode}", "check the MPI installation"
        )
    return CheckResult.ok(found)


MPIRUN = Check("mpirun", "mpirun present, its implementation and version (MPI jobs)", _mpirun)
