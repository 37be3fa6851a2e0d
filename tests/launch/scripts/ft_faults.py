"""Runs a torchft training script (argv[1:]) unchanged, except at one step of one replica
group, right after that group committed it (``tenter.runtime.ft.Progress.step``):

- FT_KILL_GROUP, FT_KILL_AT: the group's worker SIGKILLs itself (first attempt only);
- FT_PAUSE_GROUP, FT_PAUSE_AT, FT_PAUSE_DIR: the group's worker prints "paused after step N"
  and waits for DIR/go (a test does something to the job meanwhile, at a known step).
"""

import os
import runpy
import signal
import sys
import time
from pathlib import Path

from tenter.runtime import ft

first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
original = ft.Progress.step


def at(prefix: str, step: int) -> bool:
    return os.environ.get(f"{prefix}_GROUP") == str(ft.replica_group()) and os.environ.get(
        f"{prefix}_AT"
    ) == str(step)


def step(self: ft.Progress) -> None:
    original(self)
    done = self._manager.current_step()
    if first_attempt and at("FT_KILL", done):
        os.kill(os.getpid(), signal.SIGKILL)
    if at("FT_PAUSE", done):
        print(f"paused after step {done}", flush=True)
        go = Path(os.environ["FT_PAUSE_DIR"]) / "go"
        while not go.exists():  # the test's signal, after what it did
            time.sleep(0.05)


ft.Progress.step = step  # type: ignore[method-assign]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
