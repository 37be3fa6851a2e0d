"""A compute-bound data-parallel workload for the scaling and overhead benchmarks.

An MLP (4 x 1024 wide) on random data: each step is ~100 MFLOP per sample against a 16 MB
gradient all-reduce, so one thread per rank spends nearly all its time in matmuls. The
dataset has a fixed size and the per-rank batch is fixed, so an epoch on 2 ranks has half
the steps of an epoch on 1: linear scaling halves the time per epoch.

Prints ``step time <ms>`` (rank 0: mean over the steps after the first ``--warmup``).
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import tenter

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--samples", type=int, default=4096, help="samples per epoch, all ranks")
parser.add_argument("--batch", type=int, default=64, help="per rank")
parser.add_argument("--warmup", type=int, default=3, help="steps left out of the step time")
parser.add_argument("--no-report", action="store_true", help="do not call tenter.report")
args = parser.parse_args()

tenter.init()
torch.manual_seed(0)
width = 1024
model = DistributedDataParallel(
    nn.Sequential(*(m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())))
)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(args.batch, width)
steps_per_epoch = args.samples // (args.batch * tenter.world_size())
total = args.epochs * steps_per_epoch
times = []
for step in range(1, total + 1):
    started = time.perf_counter()
    optimizer.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    value = loss.item()
    times.append(time.perf_counter() - started)
    if not args.no_report:
        tenter.report(step=step, samples=args.batch, loss=value, total_steps=total)
steady = times[args.warmup :] or times
tenter.print0(f"step time {1000 * sum(steady) / len(steady):.3f} ms over {len(steady)} steps")
dist.destroy_process_group()
