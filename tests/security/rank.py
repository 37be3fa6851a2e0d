"""A rank of the security suite's job: says the hash of the secret it was given (never the
value), keeps a checkpoint, says it is ready, then runs until the test releases it."""

import hashlib
import os
import sys
import time
from pathlib import Path

rank = os.environ["RANK"]
digest = hashlib.sha256(os.environ.get("HF_TOKEN", "").encode()).hexdigest()
print(f"secret-sha256 {rank} {digest}", flush=True)
checkpoints = Path(os.environ["TENTER_CHECKPOINT_DIR"])
(checkpoints / f"rank-{rank}.ckpt").write_bytes(b"weights")
print("ready", flush=True)
deadline = time.monotonic() + 120  # a test that never releases it still ends
release = Path(os.environ["RELEASE_FILE"])
while not release.exists():
    if time.monotonic() > deadline:
        sys.exit("never released")
    time.sleep(0.1)  # the job's own pace, not a synchronisation
