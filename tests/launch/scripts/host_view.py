"""What a worker sees of its host: ``host_view.py OUT_DIR`` writes ``OUT_DIR/rank-<RANK>.json``
with its hostname, interfaces, environment, the addresses the job's host names resolve to,
the shared-memory segments it has mapped (each as the device and inode of its file, which
name it whatever its name) and ``/dev/shm``'s device; it first checks an all_reduce over the
job's process group (``tenter.init()``: the spec's process_group_backend) across every host."""

import json
import os
import socket
import sys
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

import tenter

tenter.init()
rank, size = dist.get_rank(), dist.get_world_size()
total = torch.full((1000,), float(rank + 1))
dist.all_reduce(total)
assert total.eq(size * (size + 1) / 2).all(), total[:4]
# The segment is mapped (and its name already unlinked) while the group lives.
segments = sorted(
    {
        f"{line.split()[3]}:{line.split()[4]}"
        for line in Path("/proc/self/maps").read_text().splitlines()
        if " /dev/shm/" in line
    }
)
record = {
    "hostname": socket.gethostname(),
    "interfaces": {
        name: [a.address for a in addrs if a.family == socket.AF_INET]
        for name, addrs in psutil.net_if_addrs().items()
    },
    "env": dict(os.environ),
    "resolves": {name: socket.gethostbyname(name) for name in json.loads(os.environ["SM_HOSTS"])},
    "segments": segments,
    "shm_device": os.stat("/dev/shm").st_dev,
}
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
(out / f"rank-{rank}.json").write_text(json.dumps(record))
dist.barrier()
print(f"rank {rank} on {record['hostname']}")
