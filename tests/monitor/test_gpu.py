"""NVML: per-process GPU use when there are GPUs; a clean absence when there are none."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from tenter.monitor.gpu import GpuUsage, open_nvml


class FakeNvmlError(Exception):
    pass


def fake_nvml(
    devices: list[tuple[int, list[tuple[int, int | None]]]], fail: bool = False
) -> object:
    """pynvml's surface: ``devices`` = [(utilization %, [(pid, used memory)])]."""

    def init() -> None:
        if fail:
            raise FakeNvmlError("NVML Shared Library Not Found")

    return SimpleNamespace(
        NVMLError=FakeNvmlError,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=lambda i: devices[i],
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=h[0]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in h[1]
        ],
    )


def test_open_nvml_says_why_if_nvidia_ml_py_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert open_nvml() == (
        None,
        "no GPU metrics: nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    )


def test_open_nvml_says_why_if_there_is_no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([], fail=True))
    assert open_nvml() == (
        None,
        "no GPU metrics: NVML is not available (NVML Shared Library Not Found)",
    )


def test_open_nvml_gives_none_if_nvml_lists_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([]))
    assert open_nvml() == (None, "no GPU metrics: NVML found no GPU")


def test_usage_gives_each_process_its_memory_and_its_gpus_utilization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    devices = [(90, [(10, 2048), (11, 4096)]), (40, [(11, 1024), (99, 1)]), (5, [(12, None)])]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(devices))
    nvml, note = open_nvml()
    assert nvml is not None and note == "GPU metrics from NVML (3 GPUs)"
    assert nvml.usage([10, 11, 12]) == {
        10: GpuUsage(90.0, 2048),
        11: GpuUsage(90.0, 5120),  # on two GPUs: the busier one, both memories
        12: GpuUsage(5.0, 0),  # the driver did not account its memory
    }


@pytest.mark.cuda
def test_usage_sees_this_process_on_a_real_gpu() -> None:
    import os

    held = torch.ones(64 * 2**20, device="cuda")  # 256 MiB
    nvml, note = open_nvml()
    assert nvml is not None, note
    try:
        mine = nvml.usage([os.getpid()])[os.getpid()]
    finally:
        nvml.close()
    assert mine.memory_bytes >= held.numel() * 4
