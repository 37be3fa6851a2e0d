"""The run's state beyond the model and optimizer in a checkpoint: what every rank saves for
itself (its RNG states and data position, ``rank-<N>.pt``) and what rank 0 saves for all (the
step, the LR scheduler, the extras, in ``state.pt``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.optim.lr_scheduler import LRScheduler

from tenter.checkpoint.state import rng_state

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
"""Written by rank 0: step, scheduler, extras, and (replicated) model and optimizer."""


def rank_file(rank: int) -> str:
    return f"rank-{rank}.pt"


def own_state(sampler: Stateful | None) -> dict[str, Any]:
    """What every rank saves for itself: its RNG states and data position."""
    return {"rng": rng_state(), "sampler": sampler.state_dict() if sampler is not None else None}


def common_state(
    step: int, scheduler: LRScheduler | None, extras: dict[str, Any]
) -> dict[str, Any]:
    """What rank 0 saves for all: the step, the scheduler, the extras."""
    return {
        "step": step,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "extras": {k: v.state_dict() if isinstance(v, Stateful) else v for k, v in extras.items()},
    }


def restore_common(
    common: dict[str, Any], scheduler: LRScheduler | None, extras: dict[str, Any]
) -> None:
    """The scheduler's saved state, and the extras: through their ``load_state_dict`` where
    they have one, else the saved values put back into ``extras``."""
    if scheduler is not None:
        scheduler.load_state_dict(common["scheduler"])
    for key, value in common["extras"].items():
        current = extras.get(key)
        if isinstance(current, Stateful):
            current.load_state_dict(value)
        else:
            extras[key] = value


def read_own(path: Path, rank: int, saved_world: int) -> dict[str, Any]:
    """This rank's RNG states and data position; rank 0's when this rank did not exist
    when the checkpoint was saved (the world grew)."""
    own = path / rank_file(rank)
    if not own.exists():
        log.warning(
            "checkpoint %s was saved by %d ranks: rank %d restores rank 0's RNG states "
            "and data position",
            path,
            saved_world,
            rank,
        )
        own = path / rank_file(0)
    state: dict[str, Any] = torch.load(own, weights_only=False)
    return state
