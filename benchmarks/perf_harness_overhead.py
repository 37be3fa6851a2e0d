"""tenter perf's per-call cost at small sizes against torch's own eager loop (the anchor):
both in one job, side by side, timed the same way (benchmarks/workloads/perf_vs_eager.py).

    python benchmarks/perf_harness_overhead.py [--device cpu|cuda] [--ranks 2] [--maxbytes 1K]

Prints, per size, the median over trials of the eager loop's time per call, the harness's
(out-of-place and in-place halves), and the median of the trials' harness / eager (the two
are measured side by side, size by size, in each trial); exits 1 when a ratio exceeds
``--max-ratio`` (1.3). On the CPU the ranks use gloo; with ``--device cuda`` NCCL, one GPU per
rank (``instance_type: local_gpu``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

WORKLOAD = Path(__file__).parent / "workloads" / "perf_vs_eager.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--maxbytes", default="1K")
    parser.add_argument("--iters", default="200")
    parser.add_argument("--trials", default="5")
    parser.add_argument("--max-ratio", type=float, default=1.3)
    args = parser.parse_args()
    itype = "local_gpu" if args.device == "cuda" else "local"
    run = subprocess.run(
        [
            sys.executable, "-m", "tenter", "run", "--hosts", "1",
            "--procs-per-host", str(args.ranks), "--instance-type", itype, "--ranks", "0",
            str(WORKLOAD), "--device", args.device, "--maxbytes", args.maxbytes,
            "--iters", args.iters, "--trials", args.trials,
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if run.returncode != 0:
        print(run.stdout + run.stderr, file=sys.stderr)
        return run.returncode
    trials = [
        json.loads(line.split(": ", 1)[1]) for line in run.stdout.splitlines() if '"trial"' in line
    ]
    print(
        f"all_reduce, float sum, {args.ranks} ranks, {args.device}; median of {len(trials)} trials"
    )
    columns = ("size", "eager us", "perf oop us", "perf ip us", "oop/eager", "ip/eager")
    print(" ".join(f"{c:>11}" for c in columns))
    worst = 0.0
    for size in trials[0]["sizes"]:
        rows = [t["sizes"][size] for t in trials]
        eager, oop, ip = (
            statistics.median(r[k] for r in rows) for k in ("eager", "out_of_place", "in_place")
        )
        # The median of each trial's ratio: each trial measured the two side by side.
        oop_ratio, ip_ratio = (
            statistics.median(r[k] / r["eager"] for r in rows) for k in ("out_of_place", "in_place")
        )
        worst = max(worst, oop_ratio, ip_ratio)
        times = (f"{t:>11.1f}" for t in (eager, oop, ip))
        print(f"{size:>11}", *times, f"{oop_ratio:>11.2f}", f"{ip_ratio:>11.2f}")
    print(f"worst ratio {worst:.2f} (target <= {args.max_ratio})")
    return 0 if worst <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
