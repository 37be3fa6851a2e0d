"""A training loop that calls ``Checkpointer.maybe_save`` at every step but never reads
``ckpt.preempted`` (the GPT example's old mistake): the Checkpointer must stop it after the
preemption's final checkpoint. Prints "ready" once it steps; nothing after its loop runs."""

import os
import time

import torch
import torch.distributed as dist
from torch import nn

import tenter
from tenter.checkpoint import Checkpointer

device = tenter.init()  # a GPU of the rank's own under local_gpu (tests/gpu)
model = nn.Linear(4, 4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt = Checkpointer(model, optimizer, every=1000)
step = ckpt.resume()
while True:
    dist.all_reduce(torch.ones(1, device=device))
    step += 1
    if step == 3:
        print(f"ready {os.environ['RANK']}", flush=True)
    time.sleep(0.01)  # a step's work; leaves the cores to the rest of the machine
    ckpt.maybe_save(step)
print("after the loop", flush=True)  # never: the loop never ends by itself
