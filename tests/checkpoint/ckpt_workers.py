"""What the ranks of the multi-rank checkpoint tests run (see tests/world.py).

Each function trains, saves, trains on, then restores into freshly initialised objects and
trains the same steps again; it returns the parameters at each point for the test to compare.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.5 has FSDP2 only under its private name
    from torch.distributed._composable.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tenter.checkpoint import Checkpointer, ResumableSampler
from tests.conftest import fill


def make_model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(7)
    return TensorDataset(torch.randn(48, 6, generator=g), torch.randn(48, 3, generator=g))


def local_params(model: nn.Module) -> list[torch.Tensor]:
    """This rank's parameters (its shard, for a sharded model), copied."""
    return [
        (p.to_local() if isinstance(p, DTensor) else p).detach().clone() for p in model.parameters()
    ]


def train(model: nn.Module, opt: torch.optim.Optimizer, batches: Any, steps: int) -> None:
    for _ in range(steps):
        x, y = next(batches)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def ddp_save_and_resume(rank: int, world_size: int, root: Path) -> dict[str, Any]:
    """DDP, one synchronous and one asynchronous checkpoint of step 3, then resume from
    the synchronous one in new objects, mid-epoch."""

    def build(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, Any, ResumableSampler]:
        model = DistributedDataParallel(make_model(seed))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        sampler = ResumableSampler(DistributedSampler(dataset(), world_size, rank, seed=3))
        return model, opt, sched, sampler

    model, opt, sched, sampler = build(seed=0)
    batches = iter(DataLoader(dataset(), batch_size=4, sampler=sampler))
    train(model, opt, batches, 3)
    Checkpointer(model, opt, sched, sampler=sampler, dir=root / "sync").save(3)
    background = Checkpointer(
        model, opt, sched, sampler=sampler, dir=root / "async", async_save=True
    )
    background.save(3)
    saved = local_params(model)
    train(model, opt, batches, 2)  # while the asynchronous save may still be writing
    background.close()
    expected = local_params(model)

    model, opt, sched, sampler = build(seed=1)
    step = Checkpointer(model, opt, sched, sampler=sampler, dir=root / "sync").resume()
    restored = local_params(model)
    train(model, opt, iter(DataLoader(dataset(), batch_size=4, sampler=sampler)), 2)
    return {
        "step": step,
        "saved": saved,
        "restored": restored,
        "expected": expected,
        "continued": local_params(model),
        "sampler": sampler.state_dict(),
    }


def fsdp_save_and_resume(rank: int, world_size: int, root: Path) -> dict[str, Any]:
    """FSDP2 (each rank holds half of every parameter): a synchronous and an asynchronous
    checkpoint through DCP, each restored into new sharded objects."""
    mesh = init_device_mesh("cpu", (world_size,))

    def build(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        model = make_model(seed)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    def batches() -> Any:
        g = torch.Generator().manual_seed(rank)
        while True:
            yield torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)

    model, opt = build(seed=0)
    data = batches()
    train(model, opt, data, 2)
    Checkpointer(model, opt, dir=root / "sync").save(2)
    background = Checkpointer(model, opt, dir=root / "async", async_save=True)
    background.save(2)
    saved = local_params(model)
    snapshot = [next(data) for _ in range(2)]
    train(model, opt, iter(snapshot), 2)
    background.close()
    result: dict[str, Any] = {"saved": saved, "expected": local_params(model)}
    for name in ("sync", "async"):
        model, opt = build(seed=1)
        result[f"{name}_step"] = Checkpointer(model, opt, dir=root / name).resume()
        result[f"{name}_restored"] = local_params(model)
        train(model, opt, iter(snapshot), 2)
        result[f"{name}_continued"] = local_params(model)
    return result


class NoSpaceOnRank1:
    """A data position whose state cannot be written on rank 1 (its disk full): the save's
    other files (DCP's shards) are written, and the ranks must still agree."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def state_dict(self) -> dict[str, Any]:
        if self.rank == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def full_disk(rank: int, world_size: int, disk: Path) -> dict[str, Any]:
    """DDP, then FSDP2 (through DCP), on ``disk``: saved at step 1; rank 1 fills the disk and
    the save of step 2 fails; rank 1 frees it and the save of step 3 succeeds; FSDP2's save of
    step 4 fails on rank 1 alone. What each save returned on this rank."""
    mesh = init_device_mesh("cpu", (world_size,))
    sharded = make_model(0)
    fully_shard(sharded, mesh=mesh)
    saved: dict[str, Any] = {}
    for name, model in (("ddp", DistributedDataParallel(make_model(0))), ("fsdp", sharded)):
        ckpt = Checkpointer(model, torch.optim.Adam(model.parameters()), dir=disk / name)
        saved[name] = [ckpt.save(1)]
        if rank == 1:
            fill(disk / "filler")
        dist.barrier()
        saved[name].append(ckpt.save(2))
        if rank == 1:
            (disk / "filler").unlink()
        dist.barrier()
        saved[name].append(ckpt.save(3))
    ckpt = Checkpointer(sharded, sampler=NoSpaceOnRank1(rank), dir=disk / "fsdp")
    saved["fsdp"].append(ckpt.save(4))
    return saved


def save_and_resume(rank: int, world_size: int, root: Path, disk: Path) -> dict[str, Any]:
    """Every scenario in one world: starting ranks is what costs time."""
    return {
        "ddp": ddp_save_and_resume(rank, world_size, root / "ddp"),
        "fsdp": fsdp_save_and_resume(rank, world_size, root / "fsdp"),
        "full_disk": full_disk(rank, world_size, disk),
    }
