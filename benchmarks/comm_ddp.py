"""DDP training step time with tenter.comm vs torch's DDP on gloo, in one run.

    .venv/bin/python benchmarks/comm_ddp.py [--nprocs 2] [--width 2048] [--steps 10]

A communication-heavy model: a wide MLP (``--layers`` x ``--width``^2 parameters, 67 MB
of fp32 gradients at the defaults) on a small batch, so the gradient all_reduce, not the
matmuls, dominates a step. Both runs use the same seed, data, bucket size and one
intra-op thread per rank; the script prints the median step time of each and the ratio,
and checks that both ends with the same parameters (to fp32 tolerance).
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


def _worker(rank: int, world: int, port: int, backend: str, args: Any, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    times = []
    for step in range(args.warmup + args.steps):
        x = torch.randn(args.batch, args.width, generator=g)
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


def measure(backend: str, args: Any) -> tuple[float, float]:
    out = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(
        _worker,
        args=(args.nprocs, _free_port(), backend, args, out),
        nprocs=args.nprocs,
        start_method="spawn",
    )
    median, checksum = out.get()
    return float(median), float(checksum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    params = args.layers * (args.width * args.width + args.width)
    print(f"wide MLP: {params / 1e6:.1f} M parameters, batch {args.batch}, {args.nprocs} ranks")
    gloo, gloo_sum = measure("gloo", args)
    tenter, tenter_sum = measure("tenter", args)
    print(f"DDP on gloo   : {gloo * 1e3:8.1f} ms/step")
    print(f"DDP on tenter : {tenter * 1e3:8.1f} ms/step")
    print(f"tenter / gloo : {tenter / gloo:8.3f}  (target <= 0.7)")
    same = abs(gloo_sum - tenter_sum) <= 1e-4 * max(1.0, abs(gloo_sum))
    print(f"parameters agree: {same} ({gloo_sum:.6f} vs {tenter_sum:.6f})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
