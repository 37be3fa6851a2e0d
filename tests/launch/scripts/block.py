"""Every rank says it is ready, then blocks forever: the launcher has to stop it."""

import os
import threading

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
print(f"MASTER={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
seen = os.environ.get("SEEN_BY_RANKS")  # tests/launch/ray: a Ray runtime_env's variable
print(f"ready {os.environ['RANK']}" + (f" SEEN_BY_RANKS={seen}" if seen else ""), flush=True)
threading.Event().wait()
