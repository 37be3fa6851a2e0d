"""The comm tests' worlds: :func:`tests.world.run_world` over the tenter backend, a world of
one rank in the test process, and the shared-memory segments a world left behind."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist

from tests import world
from tests.world import World

SHM = Path("/dev/shm")


def run_world(fn: Callable[..., Any], size: int, **kwargs: Any) -> World:
    """:func:`tests.world.run_world`, with ``backend="tenter"`` unless told otherwise."""
    return world.run_world(fn, size, **{"backend": "tenter", **kwargs})


def leftover_segments(job_id: str) -> list[str]:
    """tenter.comm names its segments after the job: those of world ``job_id`` still there."""
    return sorted(p.name for p in SHM.glob(f"tenter-{job_id}-*"))


@contextlib.contextmanager
def world_of_one() -> Iterator[None]:
    """The default group as ``tenter.init()`` makes it for a plain ``python train.py``: one
    rank, in this process (it needs no peer)."""
    import tenter.comm  # noqa: F401  # registers the backend

    dist.init_process_group(
        "tenter",
        store=dist.HashStore(),
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()
