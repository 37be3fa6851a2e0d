"""One rank of benchmarks/perf_harness_overhead.py: in one process group, alternately, tenter
perf's harness (all_reduce, float sum, the sizes of ``--maxbytes``) and torch's own eager loop
``for _ in range(n): dist.all_reduce(t)`` timed the same way (``-w`` warm-up calls, a barrier,
the wall clock from the first call to the device synchronisation after the last, divided by the
calls, averaged over ranks: nccl-tests' ``-a 1``). Rank 0 prints one JSON line per trial."""

from __future__ import annotations

import argparse
import io
import json
import time

import torch
import torch.distributed as dist

import tenter
from tenter.perf import harness
from tenter.perf.collectives import ALL_REDUCE
from tenter.perf.options import PerfOptions, parse_size
from tenter.perf.parse import parse_log


def eager_us(count: int, iters: int, warmup: int, device: torch.device) -> float:
    t = torch.zeros(count, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(t)
    sync(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    sync(device)
    mine = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(mine)
    return float(mine.item()) / dist.get_world_size() * 1e6


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--maxbytes", default="1K")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    device = tenter.init("nccl" if args.device == "cuda" else "gloo")
    if args.device == "cpu":
        device = torch.device("cpu")
    opts = PerfOptions(
        collective="all_reduce",
        minbytes=8,
        maxbytes=parse_size(args.maxbytes),
        stepfactor=2,
        iters=args.iters,
        warmup_iters=args.warmup,
        check=0,
        device=args.device,
    )
    for trial in range(args.trials):
        out = io.StringIO()
        harness.run(ALL_REDUCE, opts, device, out)
        eager = {
            size: eager_us(size // 4, args.iters, args.warmup, device) for size in opts.sizes()
        }
        if tenter.is_main():
            rows = parse_log(out.getvalue()).rows
            record = {
                str(row.size): {
                    "eager": eager[row.size],
                    "out_of_place": row.out_of_place.time_us if row.out_of_place else None,
                    "in_place": row.in_place.time_us if row.in_place else None,
                }
                for row in rows
            }
            print(json.dumps({"trial": trial, "sizes": record}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
