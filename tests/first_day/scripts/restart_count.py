"""A torchrun script (no tenter imports) that resumes when restarted: it prints its rank's
TORCHELASTIC_RESTART_COUNT; rank FAIL_RANK (default 1) exits 1 while that count is below
FAILURES (default 1), before it joins the process group, so that the other ranks wait in
init_process_group and none fails with it; then the ranks all-reduce until the world has
TARGET_WORLD ranks (default: the world they started in)."""

import os
import sys
import time

import torch
import torch.distributed as dist

rank, restarts = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"rank {rank} restart count {restarts}", flush=True)
if rank == int(os.environ.get("FAIL_RANK", "1")) and restarts < int(
    os.environ.get("FAILURES", "1")
):
    sys.exit(1)
dist.init_process_group("gloo")
world = dist.get_world_size()
target = int(os.environ.get("TARGET_WORLD", world))
print(f"ready world {world} rank {rank} restart count {restarts}", flush=True)
t = torch.ones(1)
while world != target:
    dist.all_reduce(t)  # until a host joins: its restart stops this attempt
    time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
