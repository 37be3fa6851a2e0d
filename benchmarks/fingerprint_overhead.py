"""Cost of comparing the data-parallel replicas (tenter.runtime.replicas), against the same
job without it.

    python benchmarks/fingerprint_overhead.py [--steps 3000] [--every 100]

Two ranks over gloo, each with three identical DDP MLPs (256-1024-256, batch 64). The first
compares its replicas after every ``--every``-th of its steps (``TENTER_REPLICA_CHECK_EVERY``;
the default is tenter's), as the step counter does in a job (tenter.runtime.steps, here off
so that the counter's own cost, goodput_overhead.py's, is in neither); the other two do not.
Steps rotate between them, so that load from elsewhere hits all alike. Prints rank 0's mean
step time of each (B: checked, A and A': not), B / A, and A' / A: the noise of the comparison
on this machine (on a shared 2-core machine it is larger than the cost). So one comparison
(a fingerprint of every parameter and an all-gather) is also timed directly, in a loop: its
cost spread over ``--every`` steps, as a share of the mean step, is the figure to hold under
0.5 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from _rotating import rotate
from _torchrun import run_two_ranks


def rank_main(steps: int) -> None:
    import torch.distributed as dist

    from tenter.runtime.replicas import ReplicaCheck

    dist.init_process_group("gloo")
    names = ("checked", "plain", "control")
    checks: list[ReplicaCheck] = []

    def compare(model: Any, step: int) -> None:
        if not checks:
            checks.append(ReplicaCheck(model.module, model.process_group))
        checks[0].maybe(step)

    _, times = rotate(names, steps, compare)
    check = checks[0]
    rounds = 200
    started = time.perf_counter()
    for r in range(rounds):
        assert check.check(r) == []
    each_s = (time.perf_counter() - started) / rounds
    if dist.get_rank() == 0:
        checked, plain, control = (statistics.mean(times[n][10:]) * 1e3 for n in names)
        print(f"ranks: mean step without (A): {plain:.3f} ms, again without (A'): {control:.3f} ms")
        print(f"ranks: mean step with    (B): {checked:.3f} ms, compared every {check.every} steps")
        print(f"ranks: B / A: {checked / plain:.4f}; A' / A (noise): {control / plain:.4f}")
        share = each_s * 1e3 / (check.every * plain)
        print(
            f"ranks: one comparison: {each_s * 1e6:.0f} us = {each_s * 1e3 / plain:.1%} of a "
            f"step; every {check.every} steps: {share:.3%} of a step (target <= 0.5 %)"
        )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, help="steps between comparisons (tenter's default)")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.steps)
        return
    if args.every is not None:
        os.environ["TENTER_REPLICA_CHECK_EVERY"] = str(args.every)
    with tempfile.TemporaryDirectory() as job_dir:
        code = run_two_ranks([sys.executable, __file__, "--steps", str(args.steps)], job_dir)
    sys.exit(code)


if __name__ == "__main__":
    main()
