"""The doctor's types: a check, what it is run against, and what it returns."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenter.doctor.system import System
from tenter.spec.catalog import InstanceType


class Status(enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    """Not relevant to this host or job (e.g. the NCCL check of a CPU job)."""


@dataclass(frozen=True)
class CheckResult:
    """What one check found on one host, and the one-line fix when it is not a pass."""

    status: Status
    found: str
    remedy: str = ""

    @classmethod
    def ok(cls, found: str) -> CheckResult:
        return cls(Status.PASS, found)

    @classmethod
    def warn(cls, found: str, remedy: str) -> CheckResult:
        return cls(Status.WARN, found, remedy)

    @classmethod
    def fail(cls, found: str, remedy: str) -> CheckResult:
        return cls(Status.FAIL, found, remedy)

    @classmethod
    def skip(cls, why: str) -> CheckResult:
        return cls(Status.SKIP, why)


@dataclass(frozen=True)
class JobContext:
    """What the checks need to know about the job; None when the doctor runs without one."""

    instance_type: InstanceType
    procs_per_host: int
    hosts: tuple[str, ...] = ()
    """Every host's address or name, as the processes will connect to it."""
    simulated: bool = True
    """All hosts are this machine (the local backend): loopback is the right network."""
    uses_mpi: bool = False
    """The job starts its processes with mpirun (distribution.mpi or smdistributed)."""
    rehearsal: bool = False
    """A catalog type's hosts simulated on this machine: as ``local``'s, its ranks get a GPU
    each where the machine's fit, else run on the CPU, and ``SM_NUM_GPUS`` says which."""
    output_dir: str = ""
    """Where the job's directory is made (empty: the default, ``$TENTER_HOME/jobs``)."""

    @property
    def gpu_job(self) -> bool:
        """The job asks for a GPU per process: a GPU instance type's own hosts or
        ``local_gpu``; not ``local`` nor a rehearsal, whose ranks run on the CPU where the
        GPUs are too few (:mod:`tenter.spec.gpus`)."""
        itype = self.instance_type
        return itype.gpus > 0 and itype.name != "local" and not self.rehearsal

    @property
    def efa(self) -> bool:
        return self.instance_type.efa > 0


@dataclass(frozen=True)
class Context:
    """What a check runs against: one host's system, and the job if there is one."""

    system: System
    job: JobContext | None = None


@dataclass(frozen=True)
class Check:
    """One unit of the doctor: a name, what it verifies, and the function that does it."""

    name: str
    description: str
    run: Callable[[Context], CheckResult]
    preflight: bool = True
    """Run before ``tenter run``: cheap, and able to find a problem that stops the job."""


@dataclass(frozen=True)
class Outcome:
    """One check's result on one host."""

    check: str
    description: str
    result: CheckResult


@dataclass(frozen=True)
class HostReport:
    """Every check's outcome on one host: the unit that backends send back and the host x
    check matrix is built from."""

    host: str
    outcomes: list[Outcome] = field(default_factory=list)

    def result(self, check: str) -> CheckResult | None:
        return next((o.result for o in self.outcomes if o.check == check), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "checks": [
                {
                    "check": o.check,
                    "description": o.description,
                    "status": o.result.status.value,
                    "found": o.result.found,
                    "remedy": o.result.remedy,
                }
                for o in self.outcomes
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostReport:
        """A report as :meth:`to_dict` wrote it (``tenter doctor --json`` on another host)."""
        return cls(
            data["host"],
            [
                Outcome(
                    c["check"],
                    c["description"],
                    CheckResult(Status(c["status"]), c["found"], c["remedy"]),
                )
                for c in data["checks"]
            ],
        )

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result.status is Status.FAIL]

    @property
    def warned(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result.status is Status.WARN]


def rehearsed(check: Callable[[Context], CheckResult]) -> Callable[[Context], CheckResult]:
    """``check`` as a rehearsal on this machine takes it: an EFA instance type's hosts
    simulated here meet over TCP on loopback (their ranks run gloo, or NCCL on one machine),
    so the fabric the real instances need is a warning, not a refusal. ``tenter run`` then
    starts what ``Estimator.fit`` starts: one job, one answer."""

    def taken(ctx: Context) -> CheckResult:
        result = check(ctx)
        if ctx.job is None or not ctx.job.rehearsal or result.status is not Status.FAIL:
            return result
        return CheckResult.warn(
            f"{result.found} (a rehearsal on this machine: its hosts meet over TCP; on "
            f"{ctx.job.instance_type.name} instances this would fail)",
            result.remedy,
        )

    return taken
