"""Data parallelism over the ``dp`` dimensions of the mesh, one function per technique.

Each pipeline stage is wrapped on its own, over the ranks that hold the same stage (its
data-parallel group). Both techniques are FSDP2 (``fully_shard``), because torch's pipeline
stages drive FSDP2's gradient reduction themselves: no reduction during the microbatches, one
after the last. ``DistributedDataParallel`` inside a pipeline stage gives wrong gradients or
an internal assert on torch 2.13 (its reducer tracks the microbatches' ``no_sync``
backwards badly), so replication is FSDP2 on a 2-D mesh whose shard dimension has one rank:
whole parameters on every replica, gradients averaged, the same arithmetic as DDP.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

__all__ = [
    "MixedPrecisionPolicy",
    "apply_ddp",
    "apply_fsdp",
    "average_over_dp",
    "mixed_precision_policy",
]

from tenter.parallel.mapping import MixedPrecision


def mixed_precision_policy(precision: MixedPrecision) -> MixedPrecisionPolicy | None:
    """FSDP2's policy: bf16 parameters and activations in compute, gradients reduced (and
    parameters kept) in fp32, as torchtitan's default; ``None`` for plain fp32."""
    if precision == "fp32":
        return None
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def apply_ddp(
    module: nn.Module,
    mesh: DeviceMesh,
    *,
    pipelined: bool,
    policy: MixedPrecisionPolicy | None = None,
) -> None:
    """Replicate ``module`` (in place) over the ``dp_replicate`` ranks of ``mesh``; gradients are
    averaged, so a replica's loss should be the mean over its share of the batch."""
    if mesh["dp_shard"].size() != 1:
        raise ValueError(
            f"data_parallel='ddp' cannot shard: the mesh has dp_shard "
            f"{mesh['dp_shard'].size()}; use data_parallel='fsdp'"
        )
    _fully_shard(module, mesh["dp_replicate", "dp_shard"], pipelined=pipelined, policy=policy)


def apply_fsdp(
    module: nn.Module,
    mesh: DeviceMesh,
    *,
    pipelined: bool,
    policy: MixedPrecisionPolicy | None = None,
) -> None:
    """Shard ``module`` (in place) over the ``dp_shard`` ranks of ``mesh`` (FSDP2), replicating over
    ``dp_replicate`` (HSDP) when that is more than 1. Each child block is its own unit, so
    only one block's parameters are gathered at a time."""
    _fully_shard(module, mesh["dp_replicate", "dp_shard"], pipelined=pipelined, policy=policy)


def _fully_shard(
    module: nn.Module,
    dp_mesh: DeviceMesh,
    *,
    pipelined: bool,
    policy: MixedPrecisionPolicy | None,
) -> None:
    # A pipeline stage runs forward once per microbatch: resharding after each would
    # all-gather the same parameters again for every microbatch (torchtitan does the same).
    reshard = not pipelined
    mp = policy or MixedPrecisionPolicy()
    for block in module.children():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(module, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=mp)


def average_over_dp(value: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
    """The mean of ``value`` over this rank's data-parallel group (replicas x shards)."""
    out = value.detach().clone()
    for name in ("dp_replicate", "dp_shard"):
        sub = mesh[name]
        if sub.size() > 1:
            dist.all_reduce(out, op=dist.ReduceOp.SUM, group=sub.get_group())
            out /= sub.size()
    return out
