"""Batch sharding: the global batch = hosts x processes per host x per-rank batch.

This is how the SageMaker data-parallel examples define the batch size: a job that
grows from 1 to N hosts keeps its global batch when each rank's share shrinks.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch.utils.data import Dataset, DistributedSampler

from tenter.runtime.api import rank, world_size

T = TypeVar("T", torch.Tensor, tuple[torch.Tensor, ...], list[torch.Tensor])


def per_rank_batch_size(global_batch_size: int) -> int:
    """This rank's share of ``global_batch_size``; it must divide evenly."""
    world = world_size()
    if global_batch_size % world:
        raise ValueError(
            f"the global batch size {global_batch_size} is not divisible by the world size "
            f"{world}; use a multiple of {world}"
        )
    return global_batch_size // world


def shard_batch(batch: T) -> T:
    """This rank's contiguous slice (along dim 0) of a global batch, or of each tensor of a
    tuple/list of tensors. The global batch size must be divisible by the world size."""
    if isinstance(batch, torch.Tensor):
        size = per_rank_batch_size(batch.shape[0])
        return batch[rank() * size : (rank() + 1) * size]
    return type(batch)(shard_batch(t) for t in batch)


def sampler(
    dataset: Dataset[Any], shuffle: bool = True, seed: int = 0, drop_last: bool = False
) -> DistributedSampler[Any]:
    """A DistributedSampler for this rank (call ``set_epoch`` each epoch when shuffling)."""
    return DistributedSampler(
        dataset,
        num_replicas=world_size(),
        rank=rank(),
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
    )
