"""Like a script that saves a checkpoint on SIGTERM and never exits: it ignores SIGTERM, says
it is ready, and blocks forever. Only SIGKILL ends it."""

import os
import signal
import threading

import torch.distributed as dist

signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("gloo")
dist.barrier()
print(f"ready {os.environ['RANK']} pid {os.getpid()}", flush=True)
threading.Event().wait()
