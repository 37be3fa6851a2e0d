"""Every rank says "ready world W rank R", then all-reduces in a loop until every rank sees
the file FINISH_FILE in the same step (the test creates it): a job that goes on through
membership changes until the test ends it."""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
print(f"ready world {world} rank {rank}", flush=True)
finish = Path(os.environ["FINISH_FILE"])
seen = torch.zeros(1)
while seen.item() < world:
    seen.fill_(float(finish.exists()))
    dist.all_reduce(seen)  # ends the loop on every rank in the same step
    time.sleep(0.05)  # the job's own pace: leave the 2 cores to the launcher and the test
print(f"done world {world} rank {rank}")
dist.destroy_process_group()
