"""Runs a training script (argv[1:]) unchanged, except that at step PAUSE_AT_STEP (if set)
every rank says so and waits for the job's preemption request before that step's ``maybe_save``: the
request then lands at that step boundary, whatever the machine's speed."""

import os
import runpy
import sys
import time

from tenter.checkpoint import Checkpointer
from tenter.runtime.preemption import requested_here

pause_at = int(os.environ.get("PAUSE_AT_STEP", "0"))
original = Checkpointer.maybe_save


def maybe_save(self: Checkpointer, step: int) -> bool:
    if step == pause_at:
        print(f"paused at step {step}", flush=True)
        while not requested_here():
            time.sleep(0.05)
    return original(self, step)


Checkpointer.maybe_save = maybe_save
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
