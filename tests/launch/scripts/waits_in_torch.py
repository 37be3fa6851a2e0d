"""Every rank arms tenter's preemption (its SIGTERM handler), says it is ready, then waits in
torch's C++ for a store key nobody sets: a Python signal handler cannot run until that wait
returns, as in a collective whose peer is gone."""

import datetime
import os

import torch.distributed as dist

import tenter

tenter.init()
tenter.preempted()  # arms the preemption's SIGTERM handler
store = dist.TCPStore(
    os.environ["MASTER_ADDR"],
    int(os.environ["MASTER_PORT"]),
    is_master=False,
    timeout=datetime.timedelta(seconds=600),
)
print(f"ready {os.environ['RANK']}", flush=True)
store.wait(["never set"])
