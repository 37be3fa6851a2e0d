"""Stragglers named with no code change: a 4-rank DDP job where one rank sleeps 30 % longer
per step, and balanced runs of the same job, in the same run.

    python benchmarks/straggler_detection.py [--balanced 10] [--steps 40]

The job: tests/goodput/scripts/ddp_steps.py (a DDP model, a 50 ms sleep per step standing for
data loading and compute, ``tenter.report`` after each step) on 2 hosts x 2 processes under
``tenter run``, the spec's default straggler rule. Prints the step at which tenter named the
slow rank (target: within 20 steps) and the stragglers it named in each balanced run (target:
none). The anchor is the rule of step times (``tenter report``'s: a rank whose median time
between reports is above 1.2x the job's median), on the same runs' reports: in lock-step
training every rank waits for the slowest, so it sees nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "goodput" / "scripts" / "ddp_steps.py"


def run_job(
    work: Path, name: str, steps: int, slow: bool
) -> tuple[list[dict[str, object]], set[int]]:
    """(tenter's stragglers, the step-time rule's) of one run."""
    from tenter.jobdir.progress import read_progress
    from tenter.monitor.job_report import stragglers, summarise_ranks

    environment = {"STEPS": str(steps), "REPORT": "1"}
    if slow:
        environment |= {"SLOW_RANK": "2", "SLOW_EXTRA": "0.3"}
    spec = {
        "name": name,
        "entry_point": str(SCRIPT),
        "instance_count": 2,
        "processes_per_host": 2,
        "environment": environment,
        "output_dir": str(work / name),
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "TENTER_HOME": str(work / "home")}
    tenter = [sys.executable, "-m", "tenter", "run", str(path)]
    subprocess.run(tenter, env=env, check=True, capture_output=True, timeout=600)
    (job_dir,) = (work / name).iterdir()
    named = json.loads((job_dir / "summary.json").read_text())["stragglers"]
    by_step_time = stragglers(summarise_ranks(read_progress(job_dir), [], {}))
    return named, by_step_time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--balanced", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stragglers-") as tmp:
        named, anchor = run_job(Path(tmp), "slow", args.steps, slow=True)
        at = [int(str(s["step"])) for s in named if s["rank"] == 2]
        print(f"straggler_detection slow run: tenter named {[s['text'] for s in named]}")
        print(
            f"  rank 2 named at step {at[0] if at else None} (target <= 20); "
            f"step-time rule (anchor) named ranks {sorted(anchor)}"
        )
        ok = bool(at) and at[0] <= 20 and [s["rank"] for s in named] == [2]
        false_reports = anchor_reports = 0
        for i in range(args.balanced):
            named, anchor = run_job(Path(tmp), f"balanced-{i}", args.steps, slow=False)
            false_reports += len(named)
            anchor_reports += len(anchor)
            print(
                f"straggler_detection balanced run {i}: tenter named {[s['rank'] for s in named]}, "
                f"step-time rule {sorted(anchor)}"
            )
    print(
        f"straggler_detection false reports over {args.balanced} balanced runs: tenter "
        f"{false_reports} (target 0), step-time rule {anchor_reports}"
    )
    return 0 if ok and not false_reports else 1


if __name__ == "__main__":
    sys.exit(main())
