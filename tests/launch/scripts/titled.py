"""Says it is ready with its pid, then runs until RELEASE_FILE exists (the test creates it):
meanwhile the test reads the worker's process title."""

import os
import time
from pathlib import Path

print(f"ready {os.getpid()}", flush=True)
release = Path(os.environ["RELEASE_FILE"])
while not release.exists():
    time.sleep(0.1)  # the job's own pace, not a synchronisation
