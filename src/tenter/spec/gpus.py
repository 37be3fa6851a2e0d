"""Which GPUs of this machine the simulated hosts of a local job get.

Simulated hosts share one machine, and so its GPUs: each host gets a contiguous slice of
them, disjoint from the others', as its ``CUDA_VISIBLE_DEVICES``, so that a rank sees its GPU
as ``cuda:LOCAL_RANK``, as on a real node. The slice is decided here, before launch, from the
spec and the machine's visible GPUs: ``tenter plan`` shows it and the hosts run it.

The rules, for ``hosts x procs`` ranks on ``G`` visible GPUs:

- ``ranks <= G``: one GPU per rank, host ``i`` getting GPUs ``i*procs .. (i+1)*procs - 1``.
- ``ranks > G`` and the job asks for GPUs (``instance_type: local_gpu``, which
  ``--nproc-per-node gpu`` and ``tenter perf --device cuda`` set): refused before launch,
  saying how many ranks fit.
- ``ranks > G`` and the job does not ask (``local``): every rank runs without a GPU
  (``CUDA_VISIBLE_DEVICES=""``), as torchrun would run it on the CPU; the launcher says so once.
- ``G == 0``: nothing is set (the machine has no GPU to hand out).
"""

from __future__ import annotations

from dataclasses import dataclass

from tenter.errors import with_fix
from tenter.spec.errors import counted

GPU_INSTANCE_TYPE = "local_gpu"
"""The local instance type that asks for one GPU per rank."""


@dataclass(frozen=True)
class GpuPlacement:
    """The GPUs of each simulated host: ``hosts[i]`` lists host i's device ids."""

    hosts: tuple[tuple[str, ...], ...]
    """Per host, the ids (as ``CUDA_VISIBLE_DEVICES`` names them) of its GPUs."""
    machine_gpus: int
    """The GPUs visible on this machine."""

    @property
    def without_gpus(self) -> bool:
        """The machine has GPUs, but too few for one per rank: the ranks run on the CPU."""
        return self.machine_gpus > 0 and not any(self.hosts)

    def visible_devices(self, host: int) -> str | None:
        """Host ``host``'s ``CUDA_VISIBLE_DEVICES``; None: the machine has none to hand out."""
        if self.machine_gpus == 0:
            return None
        return ",".join(self.hosts[host])


class TooFewGpus(ValueError):
    """A job that asks for a GPU per rank has more ranks than the machine has GPUs."""


def place_gpus(visible: tuple[str, ...], hosts: int, procs: int, *, required: bool) -> GpuPlacement:
    """Slice the machine's ``visible`` GPUs over ``hosts`` simulated hosts of ``procs`` ranks.

    Raises :class:`TooFewGpus` when ``required`` and there is not one GPU per rank."""
    gpus = len(visible)
    why = refusal(gpus, hosts, procs, required=required)
    if why is not None:
        raise TooFewGpus(with_fix(*why))
    if hosts * procs <= gpus:
        return GpuPlacement(
            tuple(tuple(visible[h * procs : (h + 1) * procs]) for h in range(hosts)), gpus
        )
    return GpuPlacement(tuple(() for _ in range(hosts)), gpus)


def refusal(gpus: int, hosts: int, procs: int, *, required: bool) -> tuple[str, str] | None:
    """Why ``hosts x procs`` ranks cannot have ``gpus`` GPUs and what fits, or None:
    :func:`place_gpus`'s rule alone, in constant time (the spec check runs it on any input,
    however large)."""
    if not required or hosts * procs <= gpus:
        return None
    what = (
        f"{_ranks(hosts, procs)} = {counted(hosts * procs, 'rank needs', 'ranks need')} a GPU "
        f"each and this machine has {counted(gpus, 'GPU')}"
    )
    cpu = "instance_type: local (--instance-type local) runs them without GPUs"
    return what, cpu if gpus == 0 else f"{_fitting(gpus, hosts)} gives each rank one, or {cpu}"


def _ranks(hosts: int, procs: int) -> str:
    return f"{counted(hosts, 'host')} x {counted(procs, 'process')}"


def _fitting(gpus: int, hosts: int) -> str:
    """The largest job of ``hosts`` hosts (or fewer, with one process each) that fits."""
    if gpus >= hosts:
        return f"--procs-per-host {gpus // hosts} (processes_per_host: {gpus // hosts})"
    return f"--hosts {gpus} --procs-per-host 1"


def cpu_note(gpus: int, hosts: int, procs: int) -> str:
    """What the launcher says, once, when a job's ranks run without the machine's GPUs."""
    return (
        f"{_ranks(hosts, procs)} = {counted(hosts * procs, 'rank')} and {counted(gpus, 'GPU')} "
        f"on this machine: the ranks run without GPUs (CUDA_VISIBLE_DEVICES=''); "
        f"{_fitting(gpus, hosts)} gives each rank one"
    )
