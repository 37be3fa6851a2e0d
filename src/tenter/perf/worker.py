"""``python -m tenter.perf COLLECTIVE [flags]``: the benchmark process, one per rank.

Runs under any launcher that sets the torchrun environment (``tenter perf``, ``tenter run``,
torchrun, mpirun): it initialises the process group, runs the sweep, and exits 0, 1 when
any value was wrong, or 2 when the flags cannot work (every rank alike).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Mapping

import torch
import torch.distributed as dist

from tenter.perf import harness, resources
from tenter.perf.collectives import COLLECTIVES, Collective
from tenter.perf.options import add_flags, options_from_args
from tenter.runtime import api as runtime


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tenter.perf",
        description="One rank of an nccl-tests-style collective benchmark.",
    )
    parser.add_argument("collective", choices=sorted(COLLECTIVES))
    add_flags(parser)
    return parser


def main(argv: list[str] | None = None, collectives: Mapping[str, Collective] = COLLECTIVES) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        opts = options_from_args(args.collective, args)
    except ValueError as e:
        parser.error(str(e))
    if opts.device == "cuda" and runtime.device().type != "cuda":
        parser.error(
            "--device cuda: this rank has no GPU of its own (no CUDA device, or more ranks "
            "on this host than GPUs); pass --device cpu, or run one rank per GPU"
        )
    backend = opts.backend or ("nccl" if opts.device == "cuda" else "gloo")
    device = runtime.device() if opts.device == "cuda" else torch.device("cpu")
    before_init = resources.memory_in_use(device) if opts.memory_report else None
    # -T: nccl-tests aborts a collective that runs longer; torch's process-group timeout
    # does the same (the NCCL watchdog, gloo's per-operation timeout).
    timeout = datetime.timedelta(seconds=opts.timeout) if opts.timeout else None
    device = runtime.init(backend, timeout=timeout)
    if opts.device == "cpu":
        device = torch.device("cpu")
    try:
        return harness.run(collectives[opts.collective], opts, device, sys.stdout, before_init)
    except harness.PerfError as e:
        if dist.get_rank() == 0:
            print(f"tenter perf: error: {e}", file=sys.stderr)
        return 2
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
