"""What the ranks of the multi-rank preemption test run (see tests/world.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from tenter.checkpoint import Checkpointer
from tenter.runtime.preemption import Preempted


def sigterm_one_rank(rank: int, world_size: int, root: Path, signalled_at: int) -> dict[str, Any]:
    """Train until the Checkpointer says preempted; rank 1 alone gets a SIGTERM, after step
    ``signalled_at``. Returns the step this rank stopped at."""
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = Checkpointer(model, opt, dir=root / "ckpt", every=100)
    step = 0
    while not ckpt.preempted and step < 50:
        opt.zero_grad()
        model(torch.ones(8, 4)).sum().backward()
        opt.step()
        step += 1
        if rank == 1 and step == signalled_at:
            # The handler runs before os.kill returns: only this rank knows, at this step.
            os.kill(os.getpid(), signal.SIGTERM)
        ckpt.maybe_save(step)
    ckpt.close()
    return {"step": step, "preempted": ckpt.preempted}


def ignore_preempted(rank: int, world_size: int, root: Path, signalled_at: int) -> dict[str, Any]:
    """Call maybe_save at every step and never read ``preempted`` (rank 1 gets a SIGTERM after
    step ``signalled_at``): the Checkpointer ends the loop. Returns what stopped it."""
    model = DistributedDataParallel(nn.Linear(4, 2))
    ckpt = Checkpointer(model, dir=root / "ckpt", every=100)
    step = 0
    try:
        while step < 50:
            step += 1
            model(torch.ones(8, 4)).sum().backward()
            if rank == 1 and step == signalled_at:
                os.kill(os.getpid(), signal.SIGTERM)
            ckpt.maybe_save(step)
    except Preempted as stop:
        return {"step": stop.step, "code": stop.code, "preempted": ckpt.preempted}
    return {"step": step, "code": None, "preempted": ckpt.preempted}
