"""Runs a training script (argv[1:]) unchanged, except that rank KILL_RANK SIGKILLs itself
right after step KILL_AT_STEPS[n] (and its checkpoint, if that step saves one) when its
host's worker group failed n times before: KILL_AT_STEPS="8,14" kills it once at step 8, and
once more, after the restart, at step 14.
"""

import os
import runpy
import signal
import sys

from tenter.checkpoint import Checkpointer

# The failures of this host's worker group: the killer's host restarts because of the kill,
# so the count is the number of kills done (on other hosts it does not count their restarts).
failures = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
killer = os.environ["RANK"] == os.environ.get("KILL_RANK", "1")
kill_at = [int(step) for step in os.environ["KILL_AT_STEPS"].split(",")]
original = Checkpointer.maybe_save


def maybe_save(self: Checkpointer, step: int) -> bool:
    saved = original(self, step)
    if killer and failures < len(kill_at) and step == kill_at[failures]:
        os.kill(os.getpid(), signal.SIGKILL)
    return saved


Checkpointer.maybe_save = maybe_save
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
