"""The GPU rules of simulated hosts as pure functions: which GPUs each host gets, when a job is
refused, and the machine's GPUs as the catalog reads them (the driver's /proc listing,
narrowed by CUDA_VISIBLE_DEVICES). The same rules through the CLI: tests/cli/test_gpus_cli.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tenter.spec.catalog import detect_local
from tenter.spec.gpus import GpuPlacement, TooFewGpus, cpu_note, place_gpus

EIGHT = tuple(str(i) for i in range(8))


@pytest.mark.parametrize(
    ("hosts", "procs", "expected"),
    [
        (1, 1, (("0",),)),
        (1, 8, (EIGHT,)),
        (2, 4, (("0", "1", "2", "3"), ("4", "5", "6", "7"))),
        (2, 2, (("0", "1"), ("2", "3"))),
        (8, 1, tuple((i,) for i in EIGHT)),
    ],
)
def test_place_gpus_gives_each_host_a_contiguous_disjoint_slice_if_they_fit(
    hosts: int, procs: int, expected: tuple[tuple[str, ...], ...]
) -> None:
    for required in (True, False):
        placement = place_gpus(EIGHT, hosts, procs, required=required)
        assert placement == GpuPlacement(expected, 8)
        assert not placement.without_gpus
        assert [placement.visible_devices(h) for h in range(hosts)] == [
            ",".join(s) for s in expected
        ]


def test_place_gpus_keeps_the_ids_cuda_visible_devices_named() -> None:
    placement = place_gpus(("3", "5", "GPU-1a2b"), 3, 1, required=True)
    assert [placement.visible_devices(h) for h in range(3)] == ["3", "5", "GPU-1a2b"]


@pytest.mark.parametrize(
    ("gpus", "hosts", "procs", "message"),
    [
        (
            1,
            2,
            1,
            "2 hosts x 1 process = 2 ranks need a GPU each and this machine has 1 GPU. Fix: "
            "--hosts 1 --procs-per-host 1 gives each rank one, or instance_type: local "
            "(--instance-type local) runs them without GPUs",
        ),
        (
            8,
            2,
            8,
            "2 hosts x 8 processes = 16 ranks need a GPU each and this machine has 8 GPUs. Fix: "
            "--procs-per-host 4 (processes_per_host: 4) gives each rank one, or instance_type: "
            "local (--instance-type local) runs them without GPUs",
        ),
        (
            0,
            1,
            1,
            "1 host x 1 process = 1 rank needs a GPU each and this machine has 0 GPUs. Fix: "
            "instance_type: local (--instance-type local) runs them without GPUs",
        ),
    ],
)
def test_place_gpus_refuses_if_required_and_more_ranks_than_gpus(
    gpus: int, hosts: int, procs: int, message: str
) -> None:
    with pytest.raises(TooFewGpus) as e:
        place_gpus(EIGHT[:gpus], hosts, procs, required=True)
    assert str(e.value) == message


def test_place_gpus_runs_every_rank_without_gpus_if_not_required_and_too_few() -> None:
    placement = place_gpus(("0", "1"), 2, 2, required=False)
    assert placement.without_gpus
    assert [placement.visible_devices(h) for h in range(2)] == ["", ""]
    assert cpu_note(2, 2, 2) == (
        "2 hosts x 2 processes = 4 ranks and 2 GPUs on this machine: the ranks run without "
        "GPUs (CUDA_VISIBLE_DEVICES=''); --procs-per-host 1 (processes_per_host: 1) gives "
        "each rank one"
    )


def test_place_gpus_sets_nothing_if_the_machine_has_none() -> None:
    placement = place_gpus((), 2, 2, required=False)
    assert not placement.without_gpus
    assert placement.visible_devices(0) is None


def test_detect_local_counts_the_driver_listing_narrowed_by_cuda_visible_devices(
    fake_gpus: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpus(8)
    assert detect_local().gpu_ids == EIGHT
    assert detect_local("local_gpu").gpus == 8
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6, 7")
    assert detect_local().gpu_ids == ("6", "7")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_local().gpus == 0
    fake_gpus(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")  # more than the driver lists
    assert detect_local().gpu_ids == ("0",)
