"""Says it is ready with its pid, then runs until RELEASE_FILE exists (the test creates it):
meanwhile the test reads the worker's process title. With FAIL_FIRST_ATTEMPT set, the first
attempt fails at once, so that the worker the test reads is a restarted one (warm, if the
job has spares)."""

import os
import sys
import time
from pathlib import Path

if os.environ.get("FAIL_FIRST_ATTEMPT") and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    sys.exit(3)
print(f"ready {os.getpid()}", flush=True)
release = Path(os.environ["RELEASE_FILE"])
while not release.exists():
    time.sleep(0.1)  # the job's own pace, not a synchronisation
