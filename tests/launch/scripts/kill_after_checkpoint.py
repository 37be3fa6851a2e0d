"""Runs a training script (argv[1:]) unchanged, except that on the first attempt rank
KILL_RANK SIGKILLs itself right after step KILL_AT_STEP (and its checkpoint, if that step
saves one).

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

first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
killer = os.environ["RANK"] == os.environ.get("KILL_RANK", "1")
kill_at = int(os.environ["KILL_AT_STEP"])
times = Path(os.environ["TIMES_DIR"]) if os.environ.get("TIMES_DIR") else None
original = Checkpointer.maybe_save


def maybe_save(self: Checkpointer, step: int) -> bool:
    saved = original(self, step)
    if first_attempt and killer and step == kill_at:
        if times:
            (times / "killed").write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    if not first_attempt and times and os.environ["RANK"] == "0":
        resumed = times / "resumed"
        if not resumed.exists():
            resumed.write_text(repr(time.time()))
    return saved


Checkpointer.maybe_save = maybe_save
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
