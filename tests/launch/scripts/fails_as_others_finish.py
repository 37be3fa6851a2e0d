"""On the first attempt rank 1 exits with status 3 once every other rank has finished (its
host's other rank included); later attempts finish. Each rank prints its attempt."""

import os
import sys
import time
from pathlib import Path

attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
done = Path(os.environ["TENTER_JOB_DIR"]) / f"done-{attempt}"
done.mkdir(exist_ok=True)
if attempt == "0" and rank == "1":
    others = int(os.environ["WORLD_SIZE"]) - 1
    deadline = time.monotonic() + 30
    while len(list(done.iterdir())) < others and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # their processes exit, and their agents see it
    sys.exit(3)
print(f"attempt {attempt} rank {rank} done")
(done / rank).touch()
