"""The ranks as the Checkpointer sees them: this rank, the world, and the few collectives it
runs (one process without ``torch.distributed`` is a world of one)."""

from __future__ import annotations

from typing import Any, TypeVar

import torch.distributed as dist

T = TypeVar("T")


class Ranks:
    def __init__(self) -> None:
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def gather(self, value: T) -> list[T]:
        if not self.distributed:
            return [value]
        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value``, on every rank (so that every rank loads the same checkpoint)."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def failures(self, message: str | None) -> dict[int, str]:
        """Every rank's failure (``message``: this rank's, None if it did not fail), by rank:
        so that all ranks raise together, naming the ranks that failed."""
        return {rank: msg for rank, msg in enumerate(self.gather(message)) if msg is not None}
