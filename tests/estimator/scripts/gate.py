"""Prints a line, then waits until the test creates the file named by GATE_FILE (up to a
minute, then fails): a job that is still running when fit(wait=False) returns."""

import os
import sys
import time
from pathlib import Path

print("waiting at the gate", flush=True)
gate = Path(os.environ["GATE_FILE"])
deadline = time.monotonic() + 60
while not gate.exists():
    if time.monotonic() > deadline:
        sys.exit("the test never opened the gate")
    time.sleep(0.05)
print("through the gate", flush=True)
