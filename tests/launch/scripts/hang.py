"""Every rank all-reduces in a loop; at step 5 rank 3 stops taking part (it blocks forever
outside any collective): the others wait in all_reduce #6."""

import os
import threading

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
for step in range(1000):
    if step == 5 and os.environ["RANK"] == "3":
        threading.Event().wait()
    dist.all_reduce(t)
