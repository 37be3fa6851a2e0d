"""GPU utilisation and memory per process, through NVML (``pip install nvidia-ml-py``).

Optional: without the package, without a driver or without GPUs, :func:`open_nvml` returns
None with the reason and the live view simply has no GPU columns.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class GpuUsage:
    utilization_percent: float
    """The busy share of the GPU the process runs on (NVML counts the whole device)."""
    memory_bytes: int
    """GPU memory the process itself holds."""


class Nvml:
    """An initialised NVML with at least one GPU."""

    def __init__(self, nvml: ModuleType, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @property
    def device_count(self) -> int:
        return len(self._handles)

    def usage(self, pids: Iterable[int]) -> dict[int, GpuUsage]:
        """Usage of those of ``pids`` that hold memory on a GPU. A process on several GPUs
        gets the sum of its memory and its busiest GPU's utilisation."""
        wanted = set(pids)
        found: dict[int, GpuUsage] = {}
        nvml = self._nvml
        for handle in self._handles:
            try:
                busy = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError:
                continue  # a GPU that fell off the bus must not stop the view
            for proc in procs:
                if proc.pid not in wanted:
                    continue
                # None when the driver does not account per process (e.g. under MIG, or
                # without the permission).
                memory = int(proc.usedGpuMemory or 0)
                seen = found.get(proc.pid)
                if seen is not None:
                    busy = max(busy, seen.utilization_percent)
                    memory += seen.memory_bytes
                found[proc.pid] = GpuUsage(busy, memory)
        return found

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def open_nvml() -> tuple[Nvml | None, str]:
    """NVML when usable, else None; and in both cases a line saying which it is."""
    try:
        nvml = importlib.import_module("pynvml")  # the module nvidia-ml-py installs
    except ImportError:
        return None, "no GPU metrics: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return None, f"no GPU metrics: NVML is not available ({e})"
    try:
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    except nvml.NVMLError as e:
        nvml.nvmlShutdown()
        return None, f"no GPU metrics: NVML lists no GPU ({e})"
    if not handles:
        nvml.nvmlShutdown()
        return None, "no GPU metrics: NVML found no GPU"
    return Nvml(nvml, handles), f"GPU metrics from NVML ({len(handles)} GPUs)"
