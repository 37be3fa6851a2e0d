"""Rank 3 fails at step 3 of an all_reduce loop: FAIL_MODE=raise raises, =kill SIGKILLs itself,
=exit137 exits with status 137 (what shells show for SIGKILL) without any signal."""

import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
for step in range(1000):
    dist.all_reduce(t)
    if step == 3 and os.environ["RANK"] == "3":
        if os.environ["FAIL_MODE"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ["FAIL_MODE"] == "exit137":
            os._exit(137)
        raise ValueError(f"boom at step {step}")
