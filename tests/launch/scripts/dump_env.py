"""A torchrun-style worker that records what it was given: ``dump_env.py OUT_DIR [ARGS...]``
writes ``OUT_DIR/rank-<RANK>.json`` (environment, cwd, argv) and prints one line per rank.
OUT_DIR is usually relative: where it lands shows the worker's working directory.
With ``--fail-once`` rank 1 of the first attempt exits with status 3 (to be restarted)."""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
record = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]}
(out / f"rank-{rank}.json").write_text(json.dumps(record))
print(f"hello from rank {rank}, attempt {attempt}")
# A group the script never destroys: tenter's bootstrap tears it down at exit.
dist.init_process_group("gloo")
dist.barrier()
if "--fail-once" in sys.argv and attempt == "0" and rank == "1":
    sys.exit(3)
