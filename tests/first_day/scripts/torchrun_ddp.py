"""A plain torchrun DDP script (no tenter import): trains a small linear model on gloo,
saying "ready" once it steps. ``--on-sigterm save DIR`` installs a SIGTERM handler that saves
the model into DIR and exits 0 (the usual torchrun pattern); ``--on-sigterm exit`` one that
exits 0 without saving; by default SIGTERM keeps its default action."""

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--on-sigterm", nargs="*", default=[])
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    print(f"rank {rank} got SIGTERM at {time.time():.3f}", flush=True)
    if args.on_sigterm[0] == "save" and rank == 0:
        folder = Path(args.on_sigterm[1])
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), folder / "model.pt")
    sys.exit(0)


if args.on_sigterm:
    signal.signal(signal.SIGTERM, on_sigterm)
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    if step == 5:
        print(f"ready {os.environ['RANK']}", flush=True)
    time.sleep(0.02)  # a step's work; leaves the cores to the rest of the machine
print(f"rank {rank} done", flush=True)
