"""Trains a small CUDA model ``--steps`` steps with a Checkpointer (every 2 steps) and writes
``OUT/run-<resumed step>.pt``: the parameters after the resume, then after training."""

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import tenter
from tenter.checkpoint import Checkpointer

ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("--steps", type=int)
args = ap.parse_args()
device = tenter.init()
assert device.type == "cuda", device
torch.manual_seed(0)
model = DistributedDataParallel(nn.Linear(16, 16).to(device))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
ckpt = Checkpointer(model, optimizer, every=2)
start = ckpt.resume()
resumed = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
for step in range(start, args.steps):
    model(torch.randn(8, 16, device=device)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    ckpt.maybe_save(step + 1)
    if ckpt.preempted:
        break
ckpt.close()
if tenter.is_main():
    args.out.mkdir(parents=True, exist_ok=True)
    final = model.module.state_dict()
    torch.save({"resumed": resumed, "final": final, "start": start}, args.out / f"run-{start}.pt")
