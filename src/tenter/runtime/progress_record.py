"""A rank's progress record (:mod:`tenter.runtime.watchdog` keeps it;
:mod:`tenter.launch.diagnosis.hang` reads it): one JSON line in a small memory-mapped file,
rewritten in place. Torch-free, so that the rehearsal's light ranks (:mod:`tenter.rehearsal.rank`)
write the very same record."""

from __future__ import annotations

import json
import mmap
import os
import time

RECORD_BYTES = 4096
STARTED, EXITING = "started", "exiting"
"""The states before any progress and after the last (tenter.launch.diagnosis.hang reads them)."""


class ProgressRecord:
    def __init__(self, path: str, recorder: bool = False) -> None:
        """``recorder``: whether the rank has a flight recorder to dump on the launcher's
        request (the hang report waits for the dumps of those ranks only)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, RECORD_BYTES)
        self._map = mmap.mmap(fd, RECORD_BYTES)
        os.close(fd)
        self.seq = 0
        self.step = 0
        self.op = ""
        self.sizes: list[list[int]] = []
        self.recorder = recorder
        self.write(STARTED)

    def write(self, state: str) -> None:
        data = json.dumps(
            {
                "pid": os.getpid(),
                "time": time.time(),
                "state": state,
                "op": self.op,
                "seq": self.seq,
                "sizes": self.sizes,
                "step": self.step,
                "recorder": self.recorder,
            }
        ).encode()[: RECORD_BYTES - 1]
        self._map[: len(data) + 1] = data + b"\n"
