"""Says it is ready, then runs until the file RELEASE_FILE exists (the test creates it): a
one-rank job whose end the test decides."""

import os
import time
from pathlib import Path

print("ready", flush=True)
release = Path(os.environ["RELEASE_FILE"])
while not release.exists():
    time.sleep(0.1)  # the job's own pace, not a synchronisation
print("released")
