"""Cost of the preemption check on the step time: ``Checkpointer.maybe_save`` under
``tenter run`` all-reduces one flag per call (the ranks agree on whether any saw a request).

    python benchmarks/preemption_check.py [--steps 2000]

Two ranks over gloo on this machine, a DDP MLP step (forward, backward, gradient all-reduce,
SGD) followed by ``maybe_save`` of a Checkpointer that never saves on its interval: with the
check off (``checkpoint.preemption_grace: 0``, A) and on (B), alternating step by step so that
load from elsewhere affects both alike. Prints rank 0's median step time of each, B / A, and
the check's own cost (one ``agreed()`` call, waiting for the previous one) against a step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from _torchrun import run_two_ranks


def rank_main(steps: int, ckpt_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from tenter.checkpoint import Checkpointer
    from tenter.runtime import preemption

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    checkers = {}
    for name, grace in (("off", "0"), ("on", "30")):
        os.environ[preemption.GRACE_ENV] = grace
        checkers[name] = Checkpointer(model, opt, dir=ckpt_dir, every=10**9)
    times: dict[str, list[float]] = {"off": [], "on": []}
    for step in range(1, steps + 1):
        name = ("off", "on")[step % 2]
        started = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        checkers[name].maybe_save(step)
        times[name].append(time.perf_counter() - started)
    check = checkers["on"]._preemption
    started = time.perf_counter()
    for _ in range(200):
        check.agreed()
    check_s = (time.perf_counter() - started) / 200
    if dist.get_rank() == 0:
        off, on = (statistics.median(times[n][10:]) * 1e3 for n in ("off", "on"))
        print(f"step time, check off (A): {off:.3f} ms")
        print(f"step time, check on  (B): {on:.3f} ms")
        print(f"B / A: {on / off:.4f}")
        print(f"one check (agreed()): {check_s * 1e6:.1f} us = {check_s * 1e3 / off:.2%} of a step")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.steps, args.dir)
        return
    with tempfile.TemporaryDirectory() as job_dir:
        argv = [sys.executable, __file__, "--steps", str(args.steps)]
        code = run_two_ranks([*argv, "--dir", os.path.join(job_dir, "ckpt")], job_dir)
    sys.exit(code)


if __name__ == "__main__":
    main()
