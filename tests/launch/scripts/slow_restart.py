"""A group restart slower than the job's hang_timeout: on the first attempt rank 1 kills itself
(SIGKILL) after a barrier while rank 0 ignores SIGTERM and stays, so that its host stops its
workers only after the stop grace period (SIGKILL). The second attempt finishes."""

import contextlib
import os
import signal
import threading

import torch.distributed as dist

dist.init_process_group("gloo")
attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), dist.get_rank()
if attempt == 0 and rank == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.barrier()
if attempt == 0:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    with contextlib.suppress(RuntimeError):
        dist.barrier()  # never completes: rank 1 is gone
    threading.Event().wait()  # the stubborn worker, until its agent's SIGKILL
dist.barrier()
print(f"finished attempt {attempt} rank {rank}")
dist.destroy_process_group()
