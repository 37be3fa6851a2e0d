"""Does its work, then dies by SIGABRT during interpreter exit (as gloo's threads sometimes
make a script that never called destroy_process_group do).

Rank 1 finishes its script only once rank 0 has crashed and its agent has reaped it: the
agent sees a rank crash at exit while another rank is still at work (which it must not stop)."""

import atexit
import os
import signal
import time
from pathlib import Path

import psutil

rank = os.environ["RANK"]
rank0_pid = Path(os.environ["TENTER_JOB_DIR"]) / "rank-0.pid"
if rank == "0":
    rank0_pid.write_text(str(os.getpid()))
else:
    while not rank0_pid.exists():  # polls a file of this job only
        time.sleep(0.01)
    pid = int(rank0_pid.read_text())
    while psutil.pid_exists(pid):  # a zombie until its agent reaps it
        time.sleep(0.01)
atexit.register(lambda: os.kill(os.getpid(), signal.SIGABRT))
print(f"rank {rank} done", flush=True)
