"""On the first attempt rank 1 kills itself (SIGKILL) after a barrier; later attempts finish.
Each rank of each attempt records what it saw in the job's output folder."""

import os
import signal
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), dist.get_rank()
if attempt == 0 and rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
print(
    f"attempt {attempt} rank {rank} world {dist.get_world_size()} host {os.environ['TENTER_HOST']}"
)
dist.barrier()
out = Path(os.environ["TENTER_JOB_DIR"]) / "seen"
out.mkdir(exist_ok=True)
(out / f"{attempt}-{rank}").write_text(os.environ["TENTER_HOST"])
dist.destroy_process_group()
