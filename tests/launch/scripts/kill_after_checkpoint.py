"""Runs a training script (argv[1:]) unchanged, except that rank KILL_RANK SIGKILLs itself
right after step KILL_AT_STEPS[n] (and its checkpoint, if that step saves one) when its
host's worker group failed n times before: KILL_AT_STEPS="8,14" kills it once at step 8, and
once more, after the restart, at step 14.

With TIMES_DIR set it records when it killed itself, and when the first step after the
restart completed (for benchmarks/failover.py).
"""

import os
import runpy
import signal
import sys
import time
from pathlib import Path

from tenter.checkpoint import Checkpointer

# The failures of this host's worker group: the killer's host restarts because of the kill,
# so the count is the number of kills done (on other hosts it does not count their restarts).
failures = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
killer = os.environ["RANK"] == os.environ.get("KILL_RANK", "1")
kill_at = [int(step) for step in os.environ["KILL_AT_STEPS"].split(",")]
times = Path(os.environ["TIMES_DIR"]) if os.environ.get("TIMES_DIR") else None
original = Checkpointer.maybe_save


def maybe_save(self: Checkpointer, step: int) -> bool:
    saved = original(self, step)
    if killer and failures < len(kill_at) and step == kill_at[failures]:
        if times:
            (times / "killed").write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    if failures and times and os.environ["RANK"] == "0":
        resumed = times / "resumed"
        if not resumed.exists():
            resumed.write_text(repr(time.time()))
    return saved


Checkpointer.maybe_save = maybe_save
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
