"""Which device a rank uses, as a pure function of what it sees: CUDA only when the rank has a
GPU of its own (tenter.device(), tenter.init()'s backend and tenter.parallel's mesh), never
ranks sharing one (NCCL's "Duplicate GPU detected"), a clear error for a CUDA mesh without."""

from __future__ import annotations

import pytest

from tenter.parallel import mesh_device_type
from tenter.runtime.api import own_gpu


@pytest.mark.parametrize(
    ("cuda", "visible", "local_rank", "local_world", "expected"),
    [
        (True, 1, 0, 1, 0),  # one GPU, one rank
        (True, 8, 3, 8, 3),  # a node's GPUs, torchrun's layout
        (True, 2, 1, 2, 1),  # a simulated host's slice: cuda:LOCAL_RANK
        (True, 1, 0, 2, None),  # two ranks, one GPU: neither takes it
        (True, 1, 1, 2, None),
        (True, 4, 0, 8, None),
        (True, 0, 0, 1, None),  # CUDA_VISIBLE_DEVICES="" (too few GPUs for the job)
        (False, 8, 0, 1, None),  # no CUDA (a CPU torch, no driver)
    ],
)
def test_own_gpu_is_the_local_rank_if_every_local_rank_has_one(
    cuda: bool, visible: int, local_rank: int, local_world: int, expected: int | None
) -> None:
    assert own_gpu(cuda, visible, local_rank, local_world) == expected


@pytest.mark.parametrize(
    ("requested", "cuda", "visible", "local_world", "expected"),
    [
        (None, True, 2, 2, "cuda"),
        (None, True, 1, 2, "cpu"),
        (None, False, 0, 1, "cpu"),
        ("cpu", True, 2, 2, "cpu"),
        ("cuda", True, 2, 2, "cuda"),
    ],
)
def test_mesh_device_type_is_cuda_only_if_the_rank_has_a_gpu_of_its_own(
    requested: str | None, cuda: bool, visible: int, local_world: int, expected: str
) -> None:
    got = mesh_device_type(
        requested,
        cuda_available=cuda,
        visible_gpus=visible,
        local_rank=0,
        local_world_size=local_world,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("cuda", "visible", "why"),
    [
        (True, 1, "4 ranks on this host and 1 visible GPUs"),
        (False, 0, "CUDA is not available"),
    ],
)
def test_mesh_device_type_raises_if_cuda_is_asked_for_without_a_gpu_per_rank(
    cuda: bool, visible: int, why: str
) -> None:
    with pytest.raises(ValueError, match=r"^device_type='cuda' needs a GPU per rank") as e:
        mesh_device_type(
            "cuda", cuda_available=cuda, visible_gpus=visible, local_rank=0, local_world_size=4
        )
    assert f"({why})" in str(e.value)
