"""A plain torchrun-style worker: reads only RANK/WORLD_SIZE/LOCAL_RANK and torch's env://.
Records what it was given (environment, argv) for the test to compare with the plan."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
out = Path(os.environ["SM_OUTPUT_DATA_DIR"]) / f"rank-{rank}.json"
out.write_text(json.dumps({"env": dict(os.environ), "argv": sys.argv[1:], "cwd": os.getcwd()}))
print(f"MASTER={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")

dist.init_process_group("gloo")
total = torch.tensor([float(rank)])
dist.all_reduce(total)
assert total.item() == world * (world - 1) / 2, total
print(f"rank {rank} of {world} on {os.environ['SM_CURRENT_HOST']}: all_reduce ok")
dist.destroy_process_group()
