"""What isolated hosts cost: the same jobs with ``--isolation network`` and without, in one run.

    python benchmarks/isolation_overhead.py [--reps 3] [--epochs 2]

1. The digits example (2 hosts x 2 processes, ``--hp epochs=N``): wall time from starting
   ``tenter run`` to its exit, which includes making and removing the host network.
2. ``tenter perf all_reduce`` on 2 hosts x 2 processes (gloo): the time of a small (8 B) and
   a large (16 MiB) all_reduce and the average busbw. Without isolation the hosts' traffic
   goes over loopback; with it, over veth pairs and a bridge, in and out of namespaces.

Runs are interleaved (none, network, none, ...) so that load from elsewhere on the machine
affects both; medians of the repetitions and their ratio (network / none) are printed.
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

from tenter.perf.results_json import read_results

REPO = Path(__file__).resolve().parents[1]
MODES = ("none", "network")
SMALL, LARGE = 8, 16 << 20


def tenter(*args: str, env: dict[str, str]) -> float:
    """Wall seconds of one ``tenter`` command (which must succeed)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tenter", *args], env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"tenter {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return took


def digits(mode: str, epochs: int, env: dict[str, str]) -> float:
    job = str(REPO / "examples/digits/job.yaml")
    return tenter("run", job, "--isolation", mode, "--hp", f"epochs={epochs}", env=env)


def all_reduce(mode: str, results: Path, env: dict[str, str]) -> dict[str, float]:
    flags = ["-b", str(SMALL), "-e", str(LARGE), "-f", str(LARGE // SMALL), "-n", "20", "-w", "5"]
    hosts = ["--hosts", "2", "--procs-per-host", "2", "--isolation", mode]
    tenter("perf", "all_reduce", *flags, *hosts, "-J", str(results), env=env)
    log = read_results(results)
    rows = {row.size: row for row in log.rows}

    def time_us(size: int) -> float:
        half = rows[size].out_of_place
        assert half is not None
        return half.time_us

    return {
        f"{SMALL} B (us)": time_us(SMALL),
        f"{LARGE >> 20} MiB (us)": time_us(LARGE),
        "avg busbw (GB/s)": log.avg_busbw,
    }


def show(title: str, runs: dict[str, list[float]]) -> None:
    median = {mode: statistics.median(values) for mode, values in runs.items()}
    print(f"  {title}")
    for mode, values in runs.items():
        every = " ".join(f"{v:.3g}" for v in values)
        print(f"    {mode:8s} {median[mode]:10.4g}   ({every})")
    print(f"    ratio network/none: {median['network'] / median['none']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    wall: dict[str, list[float]] = {mode: [] for mode in MODES}
    perf: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TENTER_HOME": tmp}
        for rep in range(args.reps):
            for mode in MODES:
                wall[mode].append(digits(mode, args.epochs, env))
                # A new file each time: like nccl-tests, -J never overwrites one.
                figures = all_reduce(mode, Path(tmp) / f"all_reduce-{mode}-{rep}.json", env)
                for name, value in figures.items():
                    perf.setdefault(name, {m: [] for m in MODES})[mode].append(value)
    print(f"isolation overhead, 2 hosts x 2 processes, {args.reps} repetitions (median; all runs)")
    show(f"digits job, {args.epochs} epochs: wall time (s)", wall)
    for name, runs in perf.items():
        show(f"tenter perf all_reduce, {name}", runs)


if __name__ == "__main__":
    main()
