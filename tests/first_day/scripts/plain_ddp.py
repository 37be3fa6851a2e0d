"""A plain torchrun DDP script, no tenter import: steps of STEP_S seconds (a sleep standing
for the batch's work; rank SLOW_RANK's 40 % longer) until STOP_FILE exists (rank 0 looks
after each step and tells the others, so that every rank stops after the same step)."""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
slow = rank == int(os.environ.get("SLOW_RANK", "-1"))
step_s = float(os.environ.get("STEP_S", "0.05")) * (1.4 if slow else 1.0)
model = DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
stop = torch.zeros(1)
while not stop.item():
    time.sleep(step_s)
    optimizer.zero_grad()
    model(torch.ones(4, 8)).sum().backward()
    optimizer.step()
    stop[0] = float(rank == 0 and os.path.exists(os.environ["STOP_FILE"]))
    dist.all_reduce(stop)
dist.destroy_process_group()
