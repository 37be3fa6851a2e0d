"""Cost of the goodput ledger and the straggler rule, against the same job without them.

    python benchmarks/goodput_overhead.py [--steps 2000] [--ranks 64] [--ledger-steps 2000]

On the ranks (what a step pays): two ranks over gloo, each with three identical DDP MLPs; the
first is counted by tenter's step counter exactly as in a job (tenter.runtime.steps: the
module hook, a gradient hook per parameter, a buffered line per step), the other two are not.
Steps rotate between them, so that load from elsewhere hits all alike. Prints rank 0's median
step time of each (B: counted, A and A': not), B / A, and A' / A: the noise of the comparison
on this machine (on a shared 2-core machine it is larger than the cost). So the counter's own
work per step is also timed directly: its hooks of one step (one forward hook, one gradient
hook per parameter, one buffered line), called in a loop, against the median step.

In the launcher (what the job directory's reader pays, off the ranks' critical path): one
ledger and straggler pass over ``--ranks`` ranks of ``--ledger-steps`` steps each, as the
launcher does every LEDGER_S seconds, against that interval: the share of one core it takes.
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

    from tenter.runtime import steps as step_counter

    dist.init_process_group("gloo")
    step_counter.install(os.environ["TENTER_JOB_DIR"], dist.get_rank())
    names = ("counted", "plain", "control")
    models, times = rotate(names, steps)
    if dist.get_rank() == 0:
        counted, plain, control = (statistics.median(times[n][10:]) * 1e3 for n in names)
        print(f"ranks: step time without (A): {plain:.3f} ms, again without (A'): {control:.3f} ms")
        print(f"ranks: step time with    (B): {counted:.3f} ms")
        print(f"ranks: B / A: {counted / plain:.4f}; A' / A (noise): {control / plain:.4f}")
        hooks_s = hook_cost(models["counted"])
        print(
            f"ranks: the counter's hooks of one step: {hooks_s * 1e6:.1f} us = "
            f"{hooks_s * 1e3 / plain:.3%} of a step (target < 1 %)"
        )
    dist.destroy_process_group()


def hook_cost(model: Any) -> float:
    """Seconds the step counter's hooks take per step of ``model`` (already counted)."""
    from tenter.runtime import steps as step_counter

    counter = step_counter._counter
    assert counter is not None
    params = [p for p in model.parameters() if p.requires_grad]
    rounds = 20_000
    started = time.perf_counter()
    for _ in range(rounds):
        counter._forward(model, (object(),))
        for p in params:
            counter._grad_ready(p)
    return (time.perf_counter() - started) / rounds


def launcher_pass(ranks: int, steps: int) -> None:
    from tenter.goodput.ledger import RunRecords, build_ledger
    from tenter.goodput.stragglers import StragglerRule, find_stragglers
    from tenter.launch.launcher.watchers.ledger import LEDGER_S

    reports = {
        r: [(100.0 + 0.1 * s + 0.001 * r, s) for s in range(1, steps + 1)] for r in range(ranks)
    }
    run = RunRecords("bench", 0.0, None, "running", reports)
    hosts = {r: f"algo-{r // 8 + 1}" for r in range(ranks)}
    passes = 3
    started = time.perf_counter()
    for _ in range(passes):
        build_ledger([run], now=100.0 + 0.1 * steps + 1)
        find_stragglers(reports, hosts, StragglerRule())
    each = (time.perf_counter() - started) / passes
    print(
        f"launcher: one ledger + straggler pass over {ranks} ranks x {steps} steps: "
        f"{each * 1e3:.1f} ms every {LEDGER_S:.0f} s = {each / LEDGER_S:.2%} of one core"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--ledger-steps", type=int, default=2000)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.steps)
        return
    # The step counter alone: its replica check has a benchmark of its own (rank 0's loop of
    # hooks alone would wait in that check's all-gather for rank 1).
    os.environ["TENTER_REPLICA_CHECK"] = "off"
    with tempfile.TemporaryDirectory() as job_dir:
        code = run_two_ranks([sys.executable, __file__, "--steps", str(args.steps)], job_dir)
    launcher_pass(args.ranks, args.ledger_steps)
    sys.exit(code)


if __name__ == "__main__":
    main()
