"""Run many ``tenter perf`` configurations in one process group (one torchrun launch):
``torchrun ... matrix.py OUT_DIR 'all_reduce -b 8 -e 1K' 'alltoall -d int64' ...``.

Rank 0 writes each configuration's output to OUT_DIR/<i>.txt and its exit status (or the
PerfError message) to OUT_DIR/<i>.json. Launching once keeps the tests fast.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from tenter.perf import harness
from tenter.perf.collectives import COLLECTIVES
from tenter.perf.options import options_from_args
from tenter.perf.worker import build_parser
from tenter.runtime import api as runtime

out_dir = Path(sys.argv[1])
runtime.init("gloo")
try:
    for i, config in enumerate(sys.argv[2:]):
        args = build_parser().parse_args(shlex.split(config))
        opts = options_from_args(args.collective, args)
        out = io.StringIO()
        try:
            result = {
                "exit": harness.run(COLLECTIVES[opts.collective], opts, torch.device("cpu"), out)
            }
        except harness.PerfError as e:
            result = {"error": str(e)}
        if dist.get_rank() == 0:
            (out_dir / f"{i}.txt").write_text(out.getvalue())
            (out_dir / f"{i}.json").write_text(json.dumps(result))
finally:
    dist.destroy_process_group()
