"""Start-up slower than the job's hang_timeout (as importing a large library or loading a
dataset is), then a few all_reduces: a healthy job."""

import time

import torch
import torch.distributed as dist

time.sleep(6)  # the start-up being modelled, not a synchronisation
dist.init_process_group("gloo")
t = torch.ones(1)
for _ in range(5):
    dist.all_reduce(t)
print(f"finished {t.item()}")
dist.destroy_process_group()
