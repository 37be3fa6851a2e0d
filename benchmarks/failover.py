"""Failover time: from a worker's SIGKILL to training resumed, tenter against torchrun.

    python benchmarks/failover.py [--reps 3]

Both run examples/elastic/train.py (checkpoints every 10 steps) on 2 hosts x 2 processes with
one restart allowed; on the first attempt rank 1 SIGKILLs itself right after the checkpoint
of step 20 (tests/launch/scripts/kill_after_checkpoint.py). Measured: from the kill to the
first training step completed after the restart (rank 0). torchrun runs as two agents with a
c10d rendezvous, as on two hosts. Runs alternate so that load from elsewhere hits both.

Plain torchrun (its agents share rank 0's store across rendezvous rounds) hangs in the
restarted round: the new workers read the previous round's gloo addresses. tenter sets
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for restartable jobs; "torchrun (fresh store)" is
torchrun with that same setting, the like-for-like anchor of the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _torchrun

REPO = Path(__file__).resolve().parents[1]
WRAPPER = str(REPO / "tests/launch/scripts/kill_after_checkpoint.py")
TRAIN = str(REPO / "examples/elastic/train.py")


RUN_TIMEOUT_S = 90.0
"""A run that takes longer has hung (torchrun with its shared store can: see below) and
counts as failed."""


def run_tenter(env: dict[str, str], spec: Path) -> int:
    try:
        return subprocess.run(
            [sys.executable, "-m", "tenter", "run", str(spec)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=RUN_TIMEOUT_S,
        ).returncode
    except subprocess.TimeoutExpired:  # run() has killed it; the launcher's sweep is gone too
        return 124


def run_torchrun(env: dict[str, str], ckpt: Path, share_store: bool) -> int:
    if not share_store:
        env = {**env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    script = [WRAPPER, TRAIN, "--checkpoint_dir", str(ckpt)]
    return _torchrun.run_torchrun(script, env, max_restarts=1, timeout=RUN_TIMEOUT_S)


def measure(times: Path) -> float | None:
    try:
        return float((times / "resumed").read_text()) - float((times / "killed").read_text())
    except OSError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"tenter": [], "torchrun": [], "torchrun (fresh store)": []}
    failures: dict[str, int] = dict.fromkeys(results, 0)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name in results:
                times = Path(tmp) / f"{name}-{rep}"
                times.mkdir()
                env = {
                    **os.environ,
                    "TENTER_HOME": str(Path(tmp) / "home"),
                    "OMP_NUM_THREADS": "1",
                    "KILL_AT_STEPS": "20",
                    "KILL_RANK": "1",
                    "TIMES_DIR": str(times),
                }
                if name == "tenter":
                    spec = times / "job.yaml"
                    spec.write_text(
                        f"entry_point: {WRAPPER}\nargs: [{TRAIN}]\ninstance_count: 2\n"
                        "processes_per_host: 2\nelastic: {max_restarts: 1}\n"
                    )
                    code = run_tenter(env, spec)
                else:
                    code = run_torchrun(env, times / "ckpt", share_store=name == "torchrun")
                took = measure(times)
                print(f"  run {rep + 1} {name}: exit {code}, resumed after {took} s", flush=True)
                if code != 0 or took is None:
                    failures[name] += 1
                else:
                    results[name].append(took)
    print("SIGKILL of rank 1 after the checkpoint of step 20 -> first step after the restart")
    for name, values in results.items():
        runs = " ".join(f"{v:.2f}" for v in values)
        med = f"{statistics.median(values):6.2f} s" if values else "   n/a  "
        print(f"  {name:24s} {med}  ({runs}; {failures[name]} failed runs)")
    if results["tenter"] and results["torchrun (fresh store)"]:
        ratio = statistics.median(results["tenter"]) / statistics.median(
            results["torchrun (fresh store)"]
        )
        print(f"  ratio tenter / torchrun (fresh store): {ratio:.2f}")


if __name__ == "__main__":
    main()
