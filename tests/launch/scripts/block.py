"""Every rank says it is ready, then blocks forever: the launcher has to stop it."""

import os
import threading

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
print(f"MASTER={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
print(f"ready {os.environ['RANK']}", flush=True)
threading.Event().wait()
