"""How the plan grows with the hosts: its JSON, mpirun's command line and the Kubernetes
manifests, and the seconds to plan, for ml.p5.48xlarge x 8 processes at 16 ... 1,024 hosts.

    python benchmarks/plan_scaling.py [--hosts 16,64,256,1024]

Targets (issue 41): at 1,024 hosts the Slurm plan (the ``plan.json`` every node reads) at most
1 MB and planned (and printed) in at most 0.5 s (the best of 3), each growing at most linearly:
the slope of log(figure) against log(hosts) between 256 and 1,024 hosts at most 1.1, printed
last; mpirun's command line well under Linux's ARG_MAX (2 MB); an MPIJob's object under the
API server's 1.5 MB. The anchor is the layout before the shared
environment (every host's whole environment in the plan and in mpirun's ``-x``), measured the
same way in the same run with the sources that ``--anchor`` names, up to 256 hosts (at 1,024
it takes ~1 GB). Exits 1 when a target is missed (the command line: half of ARG_MAX).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tenter.contract.plan import Plan
from tenter.launch import api
from tenter.spec import JobSpec, load

SCRIPT = Path(__file__).parent / "workloads" / "noop.py"
ARG_MAX = os.sysconf("SC_ARG_MAX")
PLAN_BYTES, PLAN_SECONDS, SLOPE = 1_000_000, 0.5, 1.1
REPEATS = 3
"""The seconds to plan are the best of this many (a 256-host plan takes ~0.03 s: one pause of
the machine's other work would bend the slope)."""
MPIJOB_BYTES = 1_500_000
"""The API server's limit on one object (etcd's request size)."""
MPI = {"mpi": {"enabled": True}}


def spec(backend: str, hosts: int, **fields: Any) -> JobSpec:
    job, _ = load(
        {
            "entry_point": SCRIPT.name,
            "source_dir": str(SCRIPT.parent),
            "backend": backend,
            "instance_type": "ml.p5.48xlarge",
            "hosts": hosts,
            "processes_per_host": 8,
            **({"kubernetes": {"image": "example.com/train:1"}} if backend == "kubernetes" else {}),
            **fields,
        },
        SCRIPT.parent,
    )
    return job


def timed(make: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = make()
    return result, time.perf_counter() - start


def measure(hosts: int) -> dict[str, float]:
    """One row: the Slurm plan's JSON and the seconds to plan and print it, mpirun's command
    line, the Kubernetes manifests of a PyTorchJob and of an MPIJob (bytes)."""
    job = spec("slurm", hosts)

    def plan_and_print() -> str:
        return api.dryrun(job, "bench-1").to_json()

    text, seconds = min((timed(plan_and_print) for _ in range(REPEATS)), key=lambda r: r[1])
    mpi = api.dryrun(spec("mpi", hosts), "bench-1")
    assert isinstance(mpi, Plan)
    k8s = api.dryrun(spec("kubernetes", hosts), "bench-1")
    mpijob = api.dryrun(spec("kubernetes", hosts, distribution=MPI), "bench-1")
    return {
        "plan": len(text),
        "seconds": seconds,
        "argv": sum(len(arg) + 1 for arg in mpi.launcher),
        "k8s": len(str(k8s)),
        "mpijob": len(str(mpijob)),
    }


def anchor(source: str, hosts: list[int]) -> dict[int, dict[str, float]]:
    """The same rows measured with another tenter's sources (the anchor: before the shared
    environment), in a process of its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--rows", ",".join(map(str, hosts))],
        env={**os.environ, "PYTHONPATH": source},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {int(k): v for k, v in json.loads(out).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="16,64,256,1024")
    parser.add_argument(
        "--anchor",
        metavar="SRC",
        help="the src/ of tenter before the change (git archive main src | tar -x -C DIR): "
        "measured up to --anchor-hosts, beside",
    )
    parser.add_argument("--anchor-hosts", type=int, default=256)
    parser.add_argument("--rows", help=argparse.SUPPRESS)  # the anchor's own process
    args = parser.parse_args()
    if args.rows:
        print(json.dumps({n: measure(int(n)) for n in args.rows.split(",")}))
        return 0
    hosts = [int(n) for n in args.hosts.split(",")]
    measure(1)  # the backends' imports, once
    before = (
        anchor(args.anchor, [n for n in hosts if n <= args.anchor_hosts]) if args.anchor else {}
    )
    missed = []
    rows: dict[int, dict[str, float]] = {}
    print(f"ARG_MAX {ARG_MAX:,}; ml.p5.48xlarge x 8 processes; sizes in bytes; before: --anchor")
    print(
        f"{'hosts':>6} {'slurm plan':>12} {'before':>13} {'seconds':>8} {'before':>8} "
        f"{'mpirun argv':>12} {'before':>13} {'k8s':>9} {'before':>9} "
        f"{'mpijob':>9} {'before':>12}"
    )
    for n in hosts:
        now, old = measure(n), before.get(n)
        rows[n] = now

        def beside(key: str, old: Any = old) -> str:
            if old is None:
                return "-"
            return f"{old[key]:,.3f}" if key == "seconds" else f"{old[key]:,.0f}"

        print(
            f"{n:>6} {now['plan']:>12,} {beside('plan'):>13} {now['seconds']:>8.3f} "
            f"{beside('seconds'):>8} {now['argv']:>12,} {beside('argv'):>13} "
            f"{now['k8s']:>9,} {beside('k8s'):>9} {now['mpijob']:>9,} {beside('mpijob'):>12}"
        )
        if n == 1024:
            if now["plan"] >= PLAN_BYTES or now["seconds"] >= PLAN_SECONDS:
                missed.append(f"plan {now['plan']:,} bytes in {now['seconds']:.2f} s")
            if now["argv"] >= ARG_MAX // 2:
                missed.append(f"mpirun argv {now['argv']:,} bytes (ARG_MAX {ARG_MAX:,})")
            if now["mpijob"] >= MPIJOB_BYTES:
                missed.append(f"MPIJob {now['mpijob']:,} bytes (the API server's limit 1.5 MB)")
    if 256 in rows and 1024 in rows:
        for key in ("plan", "seconds"):
            slope = math.log(rows[1024][key] / rows[256][key]) / math.log(4)
            print(f"slope of {key} between 256 and 1,024 hosts: {slope:.2f} (target <= {SLOPE})")
            if slope > SLOPE:
                missed.append(f"{key} grows with slope {slope:.2f} between 256 and 1,024 hosts")
    for miss in missed:
        print("MISSED:", miss, file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
