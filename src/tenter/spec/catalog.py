"""The instance-type catalog: data in ``instance_types.yaml``, plus ``local`` (this machine)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psutil
import yaml

LOCAL_TYPES = ("local", "local_gpu")


@dataclass(frozen=True)
class InstanceType:
    """What one host of a given type offers."""

    name: str
    gpus: int
    cpus: int
    memory_gib: float
    gpu_model: str | None = None
    gpu_memory_gib: float | None = None
    efa: int = 0
    gpu_rdma: bool = False
    neuron_cores: int = 0
    gpu_ids: tuple[str, ...] = ()
    """This machine's visible GPUs (``local`` types), as ``CUDA_VISIBLE_DEVICES`` names them."""

    @property
    def is_local(self) -> bool:
        return self.name in LOCAL_TYPES

    @property
    def sagemaker_name(self) -> str:
        """The name SageMaker shows in resourceconfig.json (``ml.`` prefixed)."""
        return self.name if self.is_local else f"ml.{self.name}"


@functools.cache
def _catalog() -> dict[str, InstanceType]:
    text = resources.files("tenter.spec").joinpath("instance_types.yaml").read_text()
    return {
        name: InstanceType(name=name, **fields) for name, fields in yaml.safe_load(text).items()
    }


def known_types() -> list[str]:
    return [*LOCAL_TYPES, *(f"ml.{n}" for n in _catalog())]


def canonical_name(name: str) -> str:
    """``ml.p4d.24xlarge`` and ``p4d.24xlarge`` are the same type."""
    return name.removeprefix("ml.")


def lookup(name: str) -> InstanceType | None:
    """The catalog entry for ``name``, or None if the type is unknown."""
    if name in LOCAL_TYPES:
        return detect_local(name)
    return _catalog().get(canonical_name(name))


GPU_LISTING_ENV = "TENTER_NVIDIA_GPUS_DIR"
"""A test hook: a directory that stands in for the driver's ``/proc/driver/nvidia/gpus`` (one
entry per GPU), so that the GPU rules are tested on machines without GPUs."""


def _visible_gpus(proc_root: Path = Path("/proc")) -> tuple[str, ...]:
    """The GPUs the NVIDIA driver exposes, narrowed by CUDA_VISIBLE_DEVICES, as the ids a
    process's CUDA_VISIBLE_DEVICES names them by.

    Read from /proc rather than by importing torch: the CLI validates specs in
    well under a second, and importing torch costs more than that.
    """
    gpu_dir = Path(os.environ.get(GPU_LISTING_ENV) or proc_root / "driver" / "nvidia" / "gpus")
    count = len(list(gpu_dir.iterdir())) if gpu_dir.is_dir() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(str(i) for i in range(count))
    return tuple(d.strip() for d in visible.split(",") if d.strip())[:count]


def detect_local(name: str = "local") -> InstanceType:
    """This machine, described as an instance type."""
    gpu_ids = _visible_gpus()
    return InstanceType(
        name=name,
        gpus=len(gpu_ids),
        cpus=os.cpu_count() or 1,
        memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
        gpu_ids=gpu_ids,
    )
