"""init_process_group + barrier, then exit: the cost of launching and tearing down a job.
With FAIL_AT_FILE set, the last rank records the time and raises right after the barrier."""

import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
fail_file = os.environ.get("FAIL_AT_FILE")
if fail_file and int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
    with open(fail_file, "w") as f:
        f.write(repr(time.time()))
    raise SystemExit(3)
dist.barrier()
dist.destroy_process_group()
