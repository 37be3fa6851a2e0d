"""Every doctor check, in the order reports show them.

A check is a :class:`~tenter.doctor.result.Check`: a name, a description and a function from
a :class:`~tenter.doctor.result.Context` to a :class:`~tenter.doctor.result.CheckResult`.
Adding one is a function in the module of its concern (or a new module) plus a line here.
"""

from __future__ import annotations

from tenter.doctor.checks import accelerators, fabric, memory, mpi, network, privacy, versions
from tenter.doctor.result import Check
from tenter.spec.errors import FieldError

CHECKS: tuple[Check, ...] = (
    versions.VERSIONS,
    versions.NCCL,
    accelerators.GPUS,
    fabric.EFA_DEVICES,
    fabric.LIBFABRIC,
    fabric.OFI_NCCL,
    fabric.FABRIC_ENV,
    memory.HUGEPAGES,
    memory.SHM,
    memory.MEMLOCK,
    memory.OPEN_FILES,
    network.INTERFACES,
    network.SOCKET_IFNAME,
    network.HOST_RESOLUTION,
    mpi.MPIRUN,
    privacy.OUTPUT_DIR,
)


def by_name(names: list[str]) -> tuple[Check, ...]:
    """The checks called ``names``; FieldError naming the unknown ones and the known."""
    known = {c.name: c for c in CHECKS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FieldError(
            f"unknown check(s) {', '.join(unknown)}", f"choose from: {', '.join(known)}"
        )
    return tuple(known[n] for n in names)
