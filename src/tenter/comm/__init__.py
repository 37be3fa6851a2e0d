"""``tenter.comm``: a torch.distributed backend with shared-memory collectives.

Importing this package registers the backend ``"tenter"``::

    import tenter.comm                       # registers backend "tenter"
    dist.init_process_group("tenter")        # under tenter run, torchrun or mp.spawn
    model = DistributedDataParallel(model)   # unchanged; FSDP2's fully_shard too

Within a host, CPU tensors move through POSIX shared memory (``/dev/shm``) with no
socket in the data path; across hosts, AllReduce is hierarchical (shared memory within
each host, gloo among one leader per host) and the other collectives use gloo. CUDA
tensors go to NCCL, so one ``init_process_group("tenter")`` serves a mixed CPU/GPU
program. See ``docs/comm.md`` for algorithms, tuning variables and limits.
"""

from __future__ import annotations

from tenter.comm.backend import BACKEND_NAME, TenterProcessGroup, register
from tenter.comm.errors import (
    CollectiveMismatchError,
    CommError,
    CommPeerDiedError,
    CommPlatformError,
    CommShutdownError,
    CommTimeoutError,
)
from tenter.comm.work import TenterWork

register()

__all__ = [
    "BACKEND_NAME",
    "CollectiveMismatchError",
    "CommError",
    "CommPeerDiedError",
    "CommPlatformError",
    "CommShutdownError",
    "CommTimeoutError",
    "TenterProcessGroup",
    "TenterWork",
    "register",
]
