"""Waiting for processes to end, as `tenter cancel` does for a launcher it did not start."""

from __future__ import annotations

import subprocess
import sys

import psutil

from tenter.launch.shared.processes import wait_ended


def test_a_zombie_counts_as_ended_and_a_running_process_does_not() -> None:
    # A launcher that ended stays a zombie until its own parent (here this test, as a script
    # that runs `tenter run` and then `tenter cancel` would be) reaps it.
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        zombie = psutil.Process(ended.pid)
        assert wait_ended([zombie], timeout=60) == []
        assert zombie.status() == psutil.STATUS_ZOMBIE  # not reaped: only its parent may
        still = psutil.Process(running.pid)
        assert wait_ended([zombie, still], timeout=0.2) == [still]
    finally:
        running.kill()
        running.wait(timeout=60)
        ended.wait(timeout=60)
