"""Every rank says "ready world W rank R attempt A", then all-reduces in a loop until every
rank sees the file FINISH_FILE in the same step (the test creates it): a job that goes on
through membership changes until the test ends it. With FAIL_ONCE_RANK=R, rank R of the first
attempt exits 3 once ready (a restart follows where the job has restarts)."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"ready world {world} rank {rank} attempt {attempt}", flush=True)
if attempt == "0" and os.environ.get("FAIL_ONCE_RANK") == str(rank):
    sys.exit(3)
finish = Path(os.environ["FINISH_FILE"])
seen = torch.zeros(1)
while seen.item() < world:
    seen.fill_(float(finish.exists()))
    dist.all_reduce(seen)  # ends the loop on every rank in the same step
    time.sleep(0.05)  # the job's own pace: leave the 2 cores to the launcher and the test
print(f"done world {world} rank {rank}")
dist.destroy_process_group()
