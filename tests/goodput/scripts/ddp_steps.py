"""A DDP job with no tenter call at all: STEPS steps of STEP_S seconds each (a sleep, so that
4 ranks do not compete for this machine's cores), rank SLOW_RANK sleeping SLOW_EXTRA (a
fraction) longer every step; REPORT=1 also calls tenter.report after each step."""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import tenter

dist.init_process_group("gloo")
rank = dist.get_rank()
step_s = float(os.environ.get("STEP_S", "0.05"))
extra = (
    float(os.environ.get("SLOW_EXTRA", "0"))
    if rank == int(os.environ.get("SLOW_RANK", "-1"))
    else 0.0
)
report = os.environ.get("REPORT") == "1"
model = DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, int(os.environ.get("STEPS", "40")) + 1):
    time.sleep(step_s * (1 + extra))  # loading and computing the batch
    optimizer.zero_grad()
    model(torch.ones(4, 8)).sum().backward()
    optimizer.step()
    if report:
        tenter.report(step=step, samples=4)
dist.destroy_process_group()
