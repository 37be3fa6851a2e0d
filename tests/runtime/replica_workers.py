"""Ranks of tests/runtime/test_replicas.py's HSDP world (tests/world.py runs them)."""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tenter.runtime.replicas import replicas_of


def hsdp_flip(rank: int, size: int) -> dict[str, object]:
    """HSDP on a 2 x 2 mesh (replicas {0, 2} and {1, 3} of each shard), compared, then again
    after rank 3 flips a bit of its shard; and FSDP over all 4 ranks, which has no replicas."""
    os.environ["TENTER_REPLICA_CHECK"] = "warn"
    torch.manual_seed(0)
    hsdp = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
    fully_shard(hsdp, mesh=init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard")))
    check = replicas_of(hsdp, sharded=True)
    assert check is not None
    agreed = check.check(1)
    if rank == 3:
        with torch.no_grad():
            shard = hsdp[0].weight.to_local()  # type: ignore[operator]
            shard.view(-1)[:1].view(torch.int32).bitwise_xor_(1)
    fsdp = nn.Linear(8, 8)
    fully_shard(fsdp, mesh=init_device_mesh("cpu", (size,)))
    return {"agreed": agreed, "diverged": check.check(2), "fsdp": replicas_of(fsdp, True)}
