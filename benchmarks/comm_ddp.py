"""DDP training step time with tenter.comm vs torch's DDP on gloo, in one run.

    .venv/bin/python benchmarks/comm_ddp.py [--models mlp embedding] [--nprocs 2] [--steps 10]

Two communication-heavy models, each with 16.8 M parameters (67 MB of fp32 gradients):

* ``mlp``: a wide MLP (``--layers`` x ``--width``^2) on a batch of 8. Its backward matmuls
  are memory-bound and take about half of gloo's step on the 2-core test machine, so the
  all_reduce is only part of the step.
* ``embedding``: a recommendation-style model, an ``EmbeddingBag`` table (``--rows`` x 64,
  dense gradients, as DDP reduces them) under a small MLP head. Its compute is a few
  lookups, so the gradient all_reduce dominates the step.

Both backends use the same seed, data, bucket size and one intra-op thread per rank; the
script prints the median step time of each, the ratio, and checks that both end with the
same parameters (to fp32 tolerance).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import tenter.comm  # noqa: F401  # registers "tenter"


class EmbeddingModel(torch.nn.Module):
    def __init__(self, rows: int, dim: int = 64) -> None:
        super().__init__()
        self.table = torch.nn.EmbeddingBag(rows, dim, mode="sum")
        self.head = torch.nn.Sequential(
            torch.nn.Linear(dim, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(ids))  # type: ignore[no-any-return]


def build(model: str, args: Any) -> tuple[torch.nn.Module, Any]:
    """The model and a function drawing one batch from a generator."""
    if model == "mlp":
        layers: list[torch.nn.Module] = []
        for _ in range(args.layers):
            layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers), lambda g: torch.randn(8, args.width, generator=g)
    return EmbeddingModel(args.rows), lambda g: torch.randint(0, args.rows, (64, 32), generator=g)


def _worker(
    rank: int, world: int, port: int, backend: str, model_name: str, args: Any, out: Any
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(0)
    module, batch = build(model_name, args)
    model = DistributedDataParallel(module)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    times = []
    for step in range(args.warmup + args.steps):
        x = batch(g)
        start = time.perf_counter()
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    checksum = sum(p.double().sum().item() for p in model.parameters())
    if rank == 0:
        out.put((statistics.median(times), checksum))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(backend: str, model: str, args: Any) -> tuple[float, float]:
    out = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(  # type: ignore[no-untyped-call]
        _worker,
        args=(args.nprocs, _free_port(), backend, model, args, out),
        nprocs=args.nprocs,
        start_method="spawn",
    )
    median, checksum = out.get()
    return float(median), float(checksum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models", nargs="+", choices=["mlp", "embedding"], default=["mlp", "embedding"]
    )
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=262144)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    all_agree = True
    for model in args.models:
        params = sum(p.numel() for p in build(model, args)[0].parameters())
        print(f"{model}: {params / 1e6:.1f} M parameters, {args.nprocs} ranks")
        gloo, gloo_sum = measure("gloo", model, args)
        tenter, tenter_sum = measure("tenter", model, args)
        print(f"  DDP on gloo   : {gloo * 1e3:8.1f} ms/step")
        print(f"  DDP on tenter : {tenter * 1e3:8.1f} ms/step")
        print(f"  tenter / gloo : {tenter / gloo:8.3f}  (target <= 0.7)")
        same = abs(gloo_sum - tenter_sum) <= 1e-4 * max(1.0, abs(gloo_sum))
        print(f"  parameters agree: {same} ({gloo_sum:.6f} vs {tenter_sum:.6f})")
        all_agree &= same
    return 0 if all_agree else 1


if __name__ == "__main__":
    sys.exit(main())
