"""Launch overhead of `tenter run` against torchrun, measured in the same run.

    python benchmarks/launch_overhead.py [--reps 5]

1. Wall time from starting the launcher to all ranks done, for a no-op job
   (init_process_group + barrier) on 2 hosts x 2 processes: `tenter run --hosts 2
   --procs-per-host 2` against two torchrun agents (c10d rendezvous) started together; tenter
   as configured by default (workers forked from each host's warm template), and with warm
   workers off (``TENTER_WARM_WORKERS=0``: every worker a fresh process). Target: tenter /
   torchrun <= 0.5.
2. Time from a rank's failure (it records the time, then exits 3) to the launcher's exit.
   Target: <= 2 s. torchrun is measured the same way, for reference.

Runs are interleaved (tenter, torchrun, tenter, ...) so that load from elsewhere affects both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _torchrun

NOOP = str(Path(__file__).parent / "workloads" / "noop.py")
WARM_ENV = "TENTER_WARM_WORKERS"


def run_tenter(env: dict[str, str]) -> float:
    start = time.time()
    subprocess.run(
        [sys.executable, "-m", "tenter", "run", "--hosts", "2", "--procs-per-host", "2", NOOP],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.time() - start


def run_torchrun(env: dict[str, str]) -> float:
    start = time.time()
    _torchrun.run_torchrun([NOOP], env)
    return time.time() - start


def failure_to_exit(launch: str, env: dict[str, str], tmp: str) -> float:
    fail_file = os.path.join(tmp, f"fail-{time.time_ns()}")
    env = {**env, "FAIL_AT_FILE": fail_file}
    (run_tenter if launch == "tenter" else run_torchrun)(env)
    exited = time.time()
    return exited - float(Path(fail_file).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TENTER_HOME": tmp, "OMP_NUM_THREADS": "1"}
        variants = {"tenter": env, "tenter-cold": {**env, WARM_ENV: "0"}}
        times: dict[str, list[float]] = {name: [] for name in [*variants, "torchrun"]}
        fails: dict[str, list[float]] = {"tenter": [], "torchrun": []}
        for _ in range(args.reps):
            for name, variant in variants.items():
                times[name].append(run_tenter(variant))
            times["torchrun"].append(run_torchrun(env))
            fails["tenter"].append(failure_to_exit("tenter", env, tmp))
            fails["torchrun"].append(failure_to_exit("torchrun", env, tmp))
    med = {k: statistics.median(v) for k, v in times.items()}
    fmed = {k: statistics.median(v) for k, v in fails.items()}
    print(f"no-op job, 2 hosts x 2 processes, {args.reps} repetitions (median; all runs)")
    for name in times:
        runs = " ".join(f"{t:.2f}" for t in times[name])
        print(f"  {name:11s} {med[name]:6.2f} s   ({runs})")
    print(f"  (tenter: the default, warm workers; tenter-cold: {WARM_ENV}=0;")
    print(f"   {len(os.sched_getaffinity(0))} CPUs)")
    for name in variants:
        ratio = med[name] / med["torchrun"]
        print(f"  ratio {name}/torchrun: {ratio:.2f}   (target <= 0.5)")
    print("failure of one rank -> launcher exit (median; all runs)")
    for name in fails:
        runs = " ".join(f"{t:.2f}" for t in fails[name])
        print(f"  {name:9s} {fmed[name]:6.2f} s   ({runs})")
    print("  target for tenter: <= 2 s")


if __name__ == "__main__":
    main()
