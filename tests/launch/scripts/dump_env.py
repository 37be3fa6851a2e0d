"""A torchrun-style worker that records what it was given: ``dump_env.py OUT_DIR [ARGS...]``
writes ``OUT_DIR/rank-<RANK>.json`` (environment, cwd, argv). OUT_DIR is usually relative:
where it lands shows the working directory the launcher gave the worker."""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
record = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]}
(out / f"rank-{os.environ['RANK']}.json").write_text(json.dumps(record))
# A group the script never destroys: tenter's bootstrap tears it down at exit.
dist.init_process_group("gloo")
dist.barrier()
