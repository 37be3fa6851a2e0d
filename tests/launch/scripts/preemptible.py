"""Steps (an all-reduce each) until the job is preempted, checking ``tenter.preempted()`` at
every step boundary as a script without a Checkpointer does."""

import os
import time

import torch
import torch.distributed as dist

import tenter

tenter.init()
step = 0
while not tenter.preempted():
    dist.all_reduce(torch.ones(1))
    step += 1
    if step == 3:
        print(f"ready {os.environ['RANK']}", flush=True)
    time.sleep(0.01)  # a step's work; leaves the cores to the rest of the machine
print(f"rank {os.environ['RANK']} stopped for the preemption after step {step}", flush=True)
dist.destroy_process_group()
