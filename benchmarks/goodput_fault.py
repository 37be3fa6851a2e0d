"""The goodput ledger of a job with one worker killed and restarted, against the same job
without the fault, in the same run.

    python benchmarks/goodput_fault.py [--reps 1]

The job: examples/elastic/train.py (48 steps, checkpoints every 10) on 2 hosts x 1 process,
``elastic.max_restarts: 1``, under benchmarks/workloads/faulty.py, which logs every step of
every rank with its wall time; with the fault, rank 1 SIGKILLs itself at step 25 of its first
attempt (the job restarts from the checkpoint of step 20: steps 21-25 run twice). Each step
is made 100 ms longer (faulty.py's STEP_SLEEP_S), so that training is a visible share. tenter
counts the example's DDP steps itself (it does not call tenter.report).

Prints per run the ledger's wall time against the launcher's duration (``summary.json``'s
``duration_s``) and the parts' sum against the ledger's wall time (within 2 %), the ledger's
lost steps against the steps rank 0's log shows twice, and the goodput of each job with
their ratio (faulted / clean)::

    goodput_fault rep=0 run=fault wall_s=... parts_sum_s=... lost_steps=5 run_twice=5 ...
    goodput_fault rep=0 goodput faulted=... clean=... ratio=...
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "elastic" / "train.py"
FAULTY = REPO / "benchmarks" / "workloads" / "faulty.py"


def run_job(work: Path, fault: bool) -> dict[str, float]:
    """One ``tenter run``; returns its ledger's figures."""
    name = "fault" if fault else "clean"
    times = work / f"times-{name}"
    times.mkdir()
    spec = {
        "name": name,
        "entry_point": str(FAULTY),
        "args": [str(TRAIN), "--epochs", "3", "--checkpoint_every", "10"],
        "instance_count": 2,
        "processes_per_host": 1,
        "elastic": {"max_restarts": 1},
        "output_dir": str(work / f"jobs-{name}"),
        "environment": {
            "TIMES_DIR": str(times),
            "FAULT": "kill_worker",
            "FAULT_RANK": "1",
            "FAULT_STEP": "25" if fault else str(10**9),
            "STEP_SLEEP_S": "0.1",
        },
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "TENTER_HOME": str(work / "home")}
    tenter = [sys.executable, "-m", "tenter", "run", str(path)]
    subprocess.run(tenter, env=env, check=True, capture_output=True, timeout=600)
    (job_dir,) = (work / f"jobs-{name}").iterdir()
    summary = json.loads((job_dir / "summary.json").read_text())
    ledger = summary["goodput"]
    rank0 = [line.split()[1] for line in (times / "steps-0").read_text().splitlines()]
    run_twice = sum(n - 1 for n in collections.Counter(rank0).values())
    return {
        "wall_s": ledger["wall_s"],
        "duration_s": summary["duration_s"],
        "parts_sum_s": sum(ledger["parts"].values()),
        "lost_steps": ledger["lost_steps"],
        "run_twice": run_twice,
        "productive_steps": ledger["productive_steps"],
        "goodput": ledger["goodput"],
        **{f"{part}_s": seconds for part, seconds in ledger["parts"].items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    ok = True
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="goodput-fault-") as tmp:
            runs = {name: run_job(Path(tmp), name == "fault") for name in ("fault", "clean")}
        for name, r in runs.items():
            print(
                f"goodput_fault rep={rep} run={name} "
                + " ".join(
                    f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()
                )
            )
            adds_up = abs(r["parts_sum_s"] - r["wall_s"]) <= 0.02 * r["wall_s"]
            matches_launcher = abs(r["wall_s"] - r["duration_s"]) <= 0.02 * r["duration_s"]
            ok &= adds_up and matches_launcher and r["lost_steps"] == r["run_twice"]
            print(
                f"  parts add up to the wall time within 2 %: {adds_up}; ledger wall within "
                f"2 % of the launcher's duration: {matches_launcher}; lost steps "
                f"{r['lost_steps']} vs steps run twice (rank 0's log) {r['run_twice']}"
            )
        ratio = runs["fault"]["goodput"] / runs["clean"]["goodput"]
        print(
            f"goodput_fault rep={rep} goodput faulted={runs['fault']['goodput']:.4f} "
            f"clean={runs['clean']['goodput']:.4f} ratio={ratio:.3f}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
