"""``tenter.checkpoint``: crash-safe checkpoints and automatic resume.

::

    sampler = tenter.checkpoint.ResumableSampler(tenter.sampler(train, seed=0))
    ckpt = tenter.checkpoint.Checkpointer(model, optimizer, scheduler, sampler=sampler,
                                          every=50, keep=3)
    step = ckpt.resume()          # 0 on a fresh start; else everything is restored
    ...
    ckpt.maybe_save(step)         # after each step: saves every 50
    if ckpt.preempted:            # SIGTERM: the final checkpoint is saved; end the loop
        break

See ``docs/checkpoint.md`` for the layout on disk, the commit protocol and the guarantees.
"""

from __future__ import annotations

from tenter.checkpoint.checkpointer import Checkpointer
from tenter.checkpoint.errors import CheckpointError, CheckpointMismatchError
from tenter.checkpoint.settings import default_dir
from tenter.checkpoint.state import ResumableSampler

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "Checkpointer",
    "ResumableSampler",
    "default_dir",
]
