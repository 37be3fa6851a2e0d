"""A torchrun script (no tenter imports) whose every attempt fails, on its two hosts by turns:
rank 1 (on algo-1) in the first attempt, rank 3 (on algo-2) in the second, and so on. Each rank
counts its own starts in STARTS_DIR (every rank starts once in each attempt); the failing rank
exits before it joins the process group, so that the others wait in init_process_group and
none fails with it."""

import os
import sys
from pathlib import Path

import torch.distributed as dist

rank = int(os.environ["RANK"])
starts = Path(os.environ["STARTS_DIR"]) / f"rank-{rank}"
attempt = len(starts.read_text().splitlines()) if starts.exists() else 0
with starts.open("a") as f:
    f.write("started\n")
print(f"rank {rank} attempt {attempt}", flush=True)
if rank == (1 if attempt % 2 == 0 else 3):
    sys.exit(1)
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
