"""tenter: one job spec and one tool for distributed PyTorch training.

The names a training script uses are importable from here (``tenter.init()``,
``tenter.rank()``, ``tenter.shard_batch(...)``, ``tenter.Estimator``...). They load on first
use, so that ``import tenter`` and the ``tenter`` CLI start without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "init": "tenter.runtime.api",
    "rank": "tenter.runtime.api",
    "local_rank": "tenter.runtime.api",
    "world_size": "tenter.runtime.api",
    "local_world_size": "tenter.runtime.api",
    "host": "tenter.runtime.api",
    "device": "tenter.runtime.api",
    "is_main": "tenter.runtime.api",
    "print0": "tenter.runtime.api",
    "preempted": "tenter.runtime.preemption",
    "shard_batch": "tenter.runtime.data",
    "per_rank_batch_size": "tenter.runtime.data",
    "sampler": "tenter.runtime.data",
    "Estimator": "tenter.estimator",
    "JobFailedError": "tenter.launch.api",
    "report": "tenter.monitor.reporter",
}

SUBPACKAGES = ("checkpoint", "parallel")
"""``tenter.checkpoint.Checkpointer(...)`` works after a plain ``import tenter``."""

__all__ = ["__version__", *_LAZY, *SUBPACKAGES]


def __getattr__(name: str) -> Any:
    if name in SUBPACKAGES:
        return importlib.import_module(f"tenter.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tenter' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)
