"""DDP training whose collectives all come from C++ (the reducer's gradient all-reduce);
at step 5 rank FREEZE_RANK stops taking part (it blocks forever before its forward): the
others wait in the all-reduce of step 5."""

import os
import threading

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(8, 1))
for step in range(1, 1000):
    if step == 5 and os.environ["RANK"] == os.environ["FREEZE_RANK"]:
        threading.Event().wait()
    model(torch.ones(4, 8)).sum().backward()
