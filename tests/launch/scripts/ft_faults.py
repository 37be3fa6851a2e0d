"""Runs a torchft training script (argv[1:]) unchanged, except right after one replica group
committed a set step, or the first step past it (a group that joins late heals to its peers'
step), in ``tenter.runtime.ft.Progress.step``:

- FT_KILL_GROUP, FT_KILL_AT: the group's worker SIGKILLs itself (first attempt only);
- FT_PAUSE_GROUP, FT_PAUSE_AT, FT_PAUSE_DIR: the group's worker prints "paused after step N"
  and waits for DIR/go (a test does something to the job meanwhile, at a known step), once,
  at the first step from FT_PAUSE_AT on that every replica group took part in;
- FT_ALONE_PACE_S: a step without every group takes this long at least (with min_replicas
  below the groups' count, a group starts training alone: the others join before the steps
  run out).
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
paused: list[int] = []


def at(prefix: str, step: int) -> bool:
    """This is the group, and the step is the one set for the fault, or past it."""
    return os.environ.get(f"{prefix}_GROUP") == str(ft.replica_group()) and step >= int(
        os.environ[f"{prefix}_AT"]
    )


def step(self: ft.Progress) -> None:
    original(self)
    done = self._manager.current_step()
    if first_attempt and at("FT_KILL", done):
        os.kill(os.getpid(), signal.SIGKILL)
    everyone = self._manager.num_participants() == int(os.environ["NUM_REPLICA_GROUPS"])
    if not everyone:
        time.sleep(float(os.environ.get("FT_ALONE_PACE_S", "0")))  # the job's pace
    if at("FT_PAUSE", done) and everyone and not paused:
        paused.append(done)
        print(f"paused after step {done}", flush=True)
        go = Path(os.environ["FT_PAUSE_DIR"]) / "go"
        while not go.exists():  # the test's signal, after what it did
            time.sleep(0.05)


ft.Progress.step = step  # type: ignore[method-assign]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
