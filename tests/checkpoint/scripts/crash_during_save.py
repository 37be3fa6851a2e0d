"""Save the checkpoint of step 2 into DIR and SIGKILL this process at POINT of the commit.

    python crash_during_save.py DIR POINT

DIR holds a checkpoint of step 1 of the same model (nn.Linear(4, 2)); the step-2 model is
all twos, so that whatever is loaded afterwards shows which checkpoint it came from.
"""

import os
import signal
import sys

import torch
from torch import nn

from tenter.checkpoint import Checkpointer, atomic


def crash_at(point: str) -> None:
    if point == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)


model = nn.Linear(4, 2)
with torch.no_grad():
    for p in model.parameters():
        p.fill_(2.0)
ckpt = Checkpointer(model, dir=sys.argv[1])
atomic.crash_hook = crash_at
ckpt.save(2)
