"""tenter against Ray Train on the same local Ray cluster, the same DDP script, in one run.

    pip install 'tenter[raytrain]'    # Ray Train's own packages (pandas, pyarrow...)
    python benchmarks/ray_vs_train.py [--reps 3] [--hosts 2] [--workers-per-host 2]
                                      [--steps 60] [--checkpoint-every 10] [--kill-step 25]

One local Ray cluster (tenter's own: one node, its own raylet, per host, ``--num-cpus`` the
workers per host, token authentication) runs benchmarks/workloads/ray_ddp.py's loop (gloo,
CPU, a fixed seed, each step's batch from the seed, step and rank) in turn through:

- ``ray_train``: Ray Train's ``TorchTrainer`` (benchmarks/workloads/ray_train_driver.py, a
  driver process of its own), ``ScalingConfig(num_workers=hosts x workers)``,
  ``FailureConfig(max_failures=1)``, checkpoints by ``ray.train.report``, resumed from
  ``ray.train.get_checkpoint``;
- ``tenter``: ``tenter run`` of a ``backend: ray`` spec whose ``ray.address`` is that
  cluster, ``elastic.max_restarts: 1``, checkpoints by ``tenter.checkpoint.Checkpointer``.

In each run the last rank SIGKILLs itself at ``--kill-step``, once. Measured: ``launch_s``,
from starting the driver (``tenter run``, or the Ray Train driver script) to rank 0's first
step done; ``recover_s``, from the kill to rank 0's first step done after the restart;
``resumed_at``, the checkpoint's step it went on from; ``total_s``, the driver's whole run;
and whether the final parameters are bit for bit those of the first run (every run, either
system, trains the same model from the same seed). The runs alternate (ray_train, tenter,
ray_train, ...) so that load from elsewhere hits both. Nothing is left after: the cluster is
stopped and its directory removed, whatever the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from tenter.launch.backends.ray.cluster import LocalCluster, node_commands

WORKLOADS = Path(__file__).resolve().parent / "workloads"
SYSTEMS = ("ray_train", "tenter")
RUN_TIMEOUT_S = 300.0
"""A run that takes longer has hung and counts as failed."""
INSTALL = "pip install 'ray[train]=={}' (Ray Train beside this Ray), or 'tenter[raytrain]'"


@dataclass(frozen=True)
class Run:
    launch_s: float
    recover_s: float
    resumed_at: int
    total_s: float
    model: dict[str, torch.Tensor]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--workers-per-host", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--kill-step", type=int, default=25)
    args = parser.parse_args(argv)
    for name in ("reps", "hosts", "workers_per_host", "steps", "checkpoint_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not args.checkpoint_every <= args.kill_step < args.steps:
        parser.error(
            f"--kill-step {args.kill_step} must be from --checkpoint-every "
            f"({args.checkpoint_every}) to below --steps ({args.steps}), so that the killed "
            "run resumes from a checkpoint and trains again"
        )
    return args


def measure(steps_text: str, started: float, killed: float) -> tuple[float, float, int]:
    """launch_s, recover_s and resumed_at from rank 0's lines (``start <step> <time>`` at each
    start, ``step <step> <time>`` after each step): its first step done, and its first step done
    after the restart, which started from ``resumed_at``."""
    attempts: list[tuple[int, list[float]]] = []
    for kind, step, at in (line.split() for line in steps_text.splitlines()):
        if kind == "start":
            attempts.append((int(step), []))
        else:
            attempts[-1][1].append(float(at))
    if len(attempts) != 2:
        raise ValueError(f"rank 0 started {len(attempts)} times, not twice (once restarted)")
    (_, first), (resumed_at, second) = attempts
    return first[0] - started, second[0] - killed, resumed_at


def config(args: argparse.Namespace, work: Path) -> dict[str, object]:
    return {
        "seed": 0,
        "steps": args.steps,
        "checkpoint_every": args.checkpoint_every,
        "kill_step": args.kill_step,
        "kill_rank": args.hosts * args.workers_per_host - 1,
        "steps_file": str(work / "steps"),
        "kill_file": str(work / "killed"),
        "model_file": str(work / "model.pt"),
    }


def ray_train_command(args: argparse.Namespace, address: str, work: Path) -> list[str]:
    run_config = json.dumps(config(args, work))
    driver = str(WORKLOADS / "ray_train_driver.py")
    where = [address, str(work / "storage"), run_config]
    return [sys.executable, driver, *where, str(args.hosts), str(args.workers_per_host)]


def tenter_command(args: argparse.Namespace, address: str, work: Path) -> list[str]:
    spec = {
        "entry_point": str(WORKLOADS / "ray_ddp.py"),
        "backend": "ray",
        "instance_count": args.hosts,
        "processes_per_host": args.workers_per_host,
        "environment": {"RAY_DDP_CONFIG": json.dumps(config(args, work))},
        "elastic": {"max_restarts": 1},
        "ray": {"address": address, "resources_per_host": {"CPU": args.workers_per_host}},
    }
    (work / "job.yaml").write_text(yaml.safe_dump(spec))
    return [sys.executable, "-m", "tenter", "run", str(work / "job.yaml")]


def run(command: list[str], work: Path, env: dict[str, str]) -> Run:
    started = time.time()
    with open(work / "console.log", "wb") as log:
        done = subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S
        )
    total = time.time() - started
    if done.returncode != 0:
        tail = (work / "console.log").read_text()[-3000:]
        raise RuntimeError(f"{' '.join(command[:4])} exited {done.returncode}:\n{tail}")
    killed = float((work / "killed").read_text())
    launch, recover, resumed_at = measure((work / "steps").read_text(), started, killed)
    model = torch.load(work / "model.pt")
    return Run(launch, recover, resumed_at, total, model)


def differs(model: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """0.0 when bit for bit equal; else the largest absolute difference."""
    if all(torch.equal(model[k], reference[k]) for k in reference):
        return 0.0
    return max((model[k] - reference[k]).abs().max().item() for k in reference)


def table(runs: dict[str, list[Run]]) -> list[str]:
    reference = runs[SYSTEMS[0]][0].model
    lines = [f"  {'':10s} {'launch_s':>9s} {'recover_s':>10s} {'resumed_at':>11s} {'total_s':>8s}"]
    for name, done in runs.items():
        med = {
            field: statistics.median(getattr(r, field) for r in done)
            for field in ("launch_s", "recover_s", "total_s")
        }
        resumed = ",".join(sorted({str(r.resumed_at) for r in done}))
        lines.append(
            f"  {name:10s} {med['launch_s']:9.2f} {med['recover_s']:10.2f} {resumed:>11s} "
            f"{med['total_s']:8.2f}"
        )
        for field in ("launch_s", "recover_s"):
            lines.append(
                f"    {field} all runs: " + " ".join(f"{getattr(r, field):.2f}" for r in done)
            )
    for field in ("launch_s", "recover_s"):
        ratio = statistics.median(getattr(r, field) for r in runs["tenter"]) / statistics.median(
            getattr(r, field) for r in runs["ray_train"]
        )
        lines.append(f"  ratio tenter/ray_train {field}: {ratio:.2f}   (target <= 1)")
    diffs = [differs(r.model, reference) for done in runs.values() for r in done]
    same = sum(d == 0.0 for d in diffs)
    verdict = "identical" if same == len(diffs) else f"NOT identical (max |diff| {max(diffs):g})"
    lines.append(f"  final parameters: {verdict}: {same} of {len(diffs)} runs bit for bit equal")
    return lines


def main() -> int:
    args = parse_args()
    try:
        import ray.train.torch
    except ImportError as e:
        import ray

        install = INSTALL.format(ray.__version__)
        print(
            f"ray_vs_train: Ray Train cannot be imported ({e}); install it: {install}",
            file=sys.stderr,
        )
        return 2
    runs: dict[str, list[Run]] = {name: [] for name in SYSTEMS}
    commands = {"ray_train": ray_train_command, "tenter": tenter_command}
    with tempfile.TemporaryDirectory() as tmp:
        nodes = node_commands(args.hosts, str(Path(sys.executable).parent / "ray"))
        per_host = ["--num-cpus", str(args.workers_per_host)]
        cluster = LocalCluster.start([[*node, *per_host] for node in nodes], Path(tmp))
        env = {**os.environ, **cluster.auth_env, "TENTER_HOME": tmp, "OMP_NUM_THREADS": "1"}
        try:
            for rep in range(args.reps):
                for name in SYSTEMS:
                    work = Path(tmp) / f"{name}-{rep}"
                    work.mkdir()
                    runs[name].append(run(commands[name](args, cluster.address, work), work, env))
        finally:
            cluster.stop()
    hosts = f"{args.hosts} hosts x {args.workers_per_host} workers"
    print(
        f"ray_vs_train: {hosts}, {args.steps} steps, a checkpoint every "
        f"{args.checkpoint_every}, the last rank SIGKILLed at step {args.kill_step}; "
        f"{args.reps} repetitions (median; {len(os.sched_getaffinity(0))} CPUs)"
    )
    print("\n".join(table(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
