"""The comm tests' worlds: :func:`tests.world.run_world` over the tenter backend, and the
shared-memory segments a world left behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import world
from tests.world import World

SHM = Path("/dev/shm")


def run_world(fn: Callable[..., Any], size: int, **kwargs: Any) -> World:
    """:func:`tests.world.run_world`, with ``backend="tenter"`` unless told otherwise."""
    return world.run_world(fn, size, **{"backend": "tenter", **kwargs})


def leftover_segments(job_id: str) -> list[str]:
    """tenter.comm names its segments after the job: those of world ``job_id`` still there."""
    return sorted(p.name for p in SHM.glob(f"tenter-{job_id}-*"))
