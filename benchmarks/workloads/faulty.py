"""Runs a training script (argv[1:]) that uses ``tenter.checkpoint.Checkpointer`` unchanged,
except that every rank appends ``<wall time> <step>`` to ``$TIMES_DIR/steps-<rank>`` after
each step, and that rank FAULT_RANK, on reaching step FAULT_STEP the first time (no
``$TIMES_DIR/fault`` yet), records the time there and does FAULT (one of :data:`FAULTS`).
For benchmarks/recovery.py; the same under tenter and torchrun.
"""

import os
import runpy
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from tenter.checkpoint import Checkpointer


def kill_worker() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_host() -> None:
    """The host goes down: its agent (this worker's parent) and all of its workers at once."""
    agent = psutil.Process(os.getppid())
    for proc in [agent, *(p for p in agent.children() if p.pid != os.getpid())]:
        proc.kill()
    kill_worker()


FAULTS: dict[str, Callable[[], None]] = {"kill_worker": kill_worker, "kill_host": kill_host}

times = Path(os.environ["TIMES_DIR"])
rank = os.environ["RANK"]
steps = open(times / f"steps-{rank}", "a")  # noqa: SIM115 (open for the process's life)
fault_step = int(os.environ["FAULT_STEP"])
faulty = rank == os.environ["FAULT_RANK"] and not (times / "fault").exists()
original = Checkpointer.maybe_save


def maybe_save(self: Checkpointer, step: int) -> bool:
    saved = original(self, step)
    steps.write(f"{time.time()!r} {step}\n")
    steps.flush()
    if faulty and step == fault_step:
        (times / "fault").write_text(repr(time.time()))
        FAULTS[os.environ["FAULT"]]()
    return saved


Checkpointer.maybe_save = maybe_save  # type: ignore[method-assign]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
