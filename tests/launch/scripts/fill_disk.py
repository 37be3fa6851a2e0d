"""Rank 0 fills the disk its output directory is on (as a job writing too many checkpoints
does), then fails on the full disk; the other ranks wait for it."""

import os

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    chunk = b"\0" * (1 << 16)
    with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "fill"), "wb") as out:
        while True:
            out.write(chunk)
            out.flush()
dist.barrier()
