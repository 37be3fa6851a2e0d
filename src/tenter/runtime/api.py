"""What a training script calls: ``tenter.init()`` and who-am-I helpers.

They read the torchrun environment, so they work the same under ``tenter run``, torchrun,
and (through the ``OMPI_COMM_WORLD_*`` variables) mpirun. Outside any launcher they
describe a single process of rank 0.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

# mpirun exports these instead of torchrun's names.
_MPI_ENV = {
    "RANK": "OMPI_COMM_WORLD_RANK",
    "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
    "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
    "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE",
}


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name) or os.environ.get(_MPI_ENV.get(name, ""), "")
    return int(value) if value else default


def rank() -> int:
    """Global rank of this process."""
    return _env_int("RANK", 0)


def local_rank() -> int:
    """Rank of this process among the processes of its host."""
    return _env_int("LOCAL_RANK", 0)


def world_size() -> int:
    return _env_int("WORLD_SIZE", 1)


def local_world_size() -> int:
    return _env_int("LOCAL_WORLD_SIZE", 1)


def host() -> str:
    """The host's name: ``algo-N`` under tenter and SageMaker, else the machine's."""
    return os.environ.get("TENTER_HOST") or os.environ.get("SM_CURRENT_HOST") or os.uname().nodename


def is_main() -> bool:
    return rank() == 0


def print0(*args: Any, **kwargs: Any) -> None:
    """``print`` on rank 0 only."""
    if is_main():
        print(*args, **kwargs)


def own_gpu(
    cuda_available: bool, visible_gpus: int, local_rank: int, local_world_size: int
) -> int | None:
    """The index of this rank's own GPU, or None: run on the CPU.

    A rank has a GPU of its own when CUDA works and its visible devices hold one per local
    rank (tenter gives each simulated host its own as ``CUDA_VISIBLE_DEVICES``; torchrun's
    ranks see their node's). With fewer GPUs than local ranks, ranks sharing a GPU would make
    NCCL fail ("Duplicate GPU detected"), so none of them takes one: the job runs on the CPU,
    as the launcher said."""
    if not cuda_available or local_world_size > visible_gpus or local_rank >= visible_gpus:
        return None
    return local_rank


def _own_gpu() -> int | None:
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    return own_gpu(available, count, local_rank(), local_world_size())


def default_backend() -> str:
    """The job's choice (``TENTER_PG_BACKEND``), else NCCL for CUDA tensors with gloo for
    CPU tensors when this rank has a GPU of its own, else gloo."""
    chosen = os.environ.get("TENTER_PG_BACKEND")
    if chosen:
        return chosen
    return "cpu:gloo,cuda:nccl" if _own_gpu() is not None else "gloo"


def device() -> torch.device:
    """This rank's device: ``cuda:<local rank>`` when this rank has a GPU of its own
    (:func:`own_gpu`), else the CPU."""
    index = _own_gpu()
    return torch.device("cpu") if index is None else torch.device("cuda", index)


def init(backend: str | None = None, timeout: datetime.timedelta | None = None) -> torch.device:
    """Initialise the default process group for this job and return this rank's device.

    Sets the CUDA device first when the rank has a GPU of its own (:func:`device`). Idempotent.
    """
    dev = device()
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if dist.is_initialized():
        return dev
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        for torch_name, mpi_name in _MPI_ENV.items():
            os.environ.setdefault(torch_name, os.environ[mpi_name])
    backend = backend or default_backend()
    if "tenter" in backend:
        import tenter.comm  # noqa: F401  (registers the "tenter" backend with torch)
    if "RANK" not in os.environ:
        # A plain `python train.py`: a world of one, no rendezvous needed.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        kwargs: dict[str, Any] = {"timeout": timeout} if timeout else {}
        dist.init_process_group(backend, **kwargs)
    return dev
