from __future__ import annotations

import pytest
import torch

from tenter.runtime.data import per_rank_batch_size, shard_batch


def test_shard_batch_gives_each_rank_its_contiguous_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    x, y = torch.arange(8), torch.arange(8) * 10
    sx, sy = shard_batch((x, y))
    assert sx.tolist() == [4, 5] and sy.tolist() == [40, 50]


def test_per_rank_batch_size_raises_if_the_global_batch_does_not_divide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="64 is not divisible by the world size 3"):
        per_rank_batch_size(64)


def test_mpi_ranks_are_read_when_torchrun_variables_are_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tenter.runtime import api

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "5")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    assert (api.rank(), api.world_size()) == (5, 8)
