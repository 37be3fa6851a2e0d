"""Keeps all-reducing until the world has TARGET_WORLD ranks, then finishes: a job that only
succeeds once its membership changed (a host lost, or one joined)."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world, target = dist.get_world_size(), int(os.environ["TARGET_WORLD"])
print(f"ready world {world} rank {dist.get_rank()}", flush=True)
t = torch.ones(1)
while world != target:
    dist.all_reduce(t)  # until the membership change stops this attempt
    time.sleep(0.1)
print(f"done world {world} rank {dist.get_rank()}")
dist.destroy_process_group()
