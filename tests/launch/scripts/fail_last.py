"""The last rank raises at step 3 of an all_reduce loop (a job of any size fails there)."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
last = int(os.environ["WORLD_SIZE"]) - 1
for step in range(1000):
    dist.all_reduce(t)
    if step == 3 and int(os.environ["RANK"]) == last:
        raise ValueError(f"boom at step {step}")
