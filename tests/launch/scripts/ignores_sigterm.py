"""Every rank ignores SIGTERM, says it is ready, then blocks forever: only the end of the
preemption's grace period (SIGKILL) stops it."""

import os
import signal
import threading

import torch.distributed as dist

signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("gloo")
dist.barrier()
print(f"ready {os.environ['RANK']}", flush=True)
threading.Event().wait()
