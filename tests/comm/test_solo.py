"""A world of one rank (a plain ``python train.py`` under ``tenter.init()``): the one-host
route without shared memory, where every collective copies between the rank's own
tensors. Runs in the test process: a world of one needs no peer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from commworld import world_of_one

# torch 2.13 renamed these (the old names warn); older torch has only the old names.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@pytest.fixture
def solo() -> Iterator[None]:
    with world_of_one():
        yield


def test_collectives_copy_own_data_if_world_has_one_rank(solo: None) -> None:
    x = torch.arange(6.0).view(2, 3)
    t = x.clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    dist.broadcast(t, src=0)
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    assert torch.equal(t, x)
    outs = [torch.empty_like(x)]
    dist.all_gather(outs, x)
    whole = torch.empty(6)
    _all_gather_tensor(whole, x.view(-1))
    part = torch.empty(2, 3)
    dist.reduce_scatter(part, [x.clone()])
    scattered = torch.empty(2, 3)
    _reduce_scatter_tensor(scattered, x)
    gathered = [torch.empty_like(x)]
    dist.gather(x, gathered, dst=0)
    received = torch.empty_like(x)
    dist.scatter(received, [x.clone()], src=0)
    moved = torch.empty_like(x)
    dist.all_to_all_single(moved, x)
    moved_list = [torch.empty_like(x)]
    dist.all_to_all(moved_list, [x.clone()])
    dist.barrier()
    results = [outs[0], whole.view(2, 3), part, scattered, gathered[0], received, moved]
    for result in [*results, moved_list[0]]:
        assert torch.equal(result, x), result


def test_collective_raises_naming_the_problem_if_sizes_disagree(solo: None) -> None:
    with pytest.raises(
        ValueError,
        match=r"^tenter\.comm: all_gather_into_tensor: output has 5 elements, expected 1 x 6\.$",
    ):
        _all_gather_tensor(torch.empty(5), torch.ones(6))
