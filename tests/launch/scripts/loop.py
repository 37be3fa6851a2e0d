"""Every rank all-reduces in a loop, announcing step 5 and its pid; with DDP=1 each step is a
DistributedDataParallel forward and backward (its all-reduce is issued from C++). With
STALL_RANK set, that rank stops taking part after step 5 (it blocks outside any collective)."""

import os
import threading

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
t = torch.ones(4)
for step in range(100000):
    if step == 5:
        print(f"step 5 rank {rank} pid {os.getpid()}", flush=True)
        if os.environ.get("STALL_RANK") == str(rank):
            threading.Event().wait()
    if os.environ.get("DDP") == "1":
        model(t).sum().backward()
    else:
        dist.all_reduce(t)
