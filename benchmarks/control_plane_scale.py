"""The control plane at scale: ``python benchmarks/control_plane_scale.py --hosts 16,64,256,1024``.

Runs ``tenter rehearse``'s phases (:mod:`tenter.rehearsal.drive`: tenter's real launcher and
agents, light torch-free ranks) at each size, prints each size's table and one line
``scale hosts=H ranks=R first_step_s=... store_requests_per_host=...``, then each figure's slope
(log-log, between consecutive sizes: 1.0 is linear; the hang's is of the time past the hang
timeout), and, beside it, torch's own anchor at the
same size: N ``TCPStore`` clients of one store in this process connecting and each setting
and reading one key. Ends with an extrapolation to 4,000 and 16,000 hosts from the serial
parts (store requests, the launcher's CPU), assuming each host's agent has cores of its own.

``--backend slurm``: at each size, stands up the test suite's multi-node Slurm cluster
(tests/launch/slurm_cluster.py: slurmctld, one slurmd per host in a network namespace of its
own, munge; as root, with slurm-wlm and munge installed) and runs ``tenter rehearse --backend
slurm`` on its login node, as a user there would: one real agent process per node, light
ranks (:mod:`tenter.rehearsal.slurm`; no torch anchor: the local run has it).

``--backend mpi``: the same light ranks started by Open MPI's mpirun (:mod:`tenter.rehearsal.mpi`).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from tenter.cli.cmd_rehearse import BACKENDS
from tenter.rehearsal import mpi
from tenter.rehearsal.drive import Figures, Rehearsal, RehearsalFailed
from tenter.rehearsal.plan import rehearsal_plan
from tenter.rehearsal.table import rows, scale_line

SPEC = Path(__file__).parents[1] / "examples" / "digits" / "job.yaml"
HANG_TIMEOUT = 10
EXTRAPOLATE = (4000, 16000)


def torch_store_anchor(clients: int) -> float:
    """Seconds for ``clients`` TCPStore clients to connect to one store and set and get a key."""
    import datetime

    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    started = time.monotonic()
    stores = []
    for i in range(clients):
        client = TCPStore(
            "127.0.0.1", server.port, is_master=False, timeout=datetime.timedelta(seconds=60)
        )
        client.set(f"k{i}", "v")
        client.get(f"k{i}")
        stores.append(client)
    return time.monotonic() - started


def measure(hosts: int, procs: int, bound_s: float, backend: str) -> Figures | None:
    plan_of = functools.partial(
        rehearsal_plan, SPEC, hosts, procs, step_s=0.5, hang_timeout=HANG_TIMEOUT, backend=backend
    )
    plan = plan_of()
    try:
        if backend == "mpi":
            return mpi.rehearse(plan, plan_of, bound_s)
        return Rehearsal(plan, hosts_per_pack=64, bound_s=bound_s).run()
    except RehearsalFailed as e:
        print(f"hosts={hosts}: {e}")
        return None


def measure_on_slurm(hosts: int, procs: int, bound_s: float) -> dict[str, float] | None:
    """The rehearsal on ``hosts`` Slurm nodes of the test cluster, each offering ``procs``
    CPUs (8 tasks a node need 8); its table as printed, its scale line's figures."""
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the repository's tests package
    os.environ.setdefault("COLUMNS", "160")  # the table on one line a row
    from tests.launch.slurm_cluster import slurm_nodes

    with slurm_nodes(hosts, cpus=max(procs, os.cpu_count() or 1)) as cluster:
        done = cluster.tenter(
            "rehearse", str(SPEC), "--backend", "slurm", "--hosts", str(hosts),
            "--procs-per-host", str(procs), "--hang-timeout", str(HANG_TIMEOUT),
            "--bound", str(bound_s), timeout=6 * bound_s,
        )  # fmt: skip
    print(done.stdout, end="", flush=True)
    if done.returncode != 0:
        print(f"hosts={hosts}: {done.stderr.strip()[-2000:]}")
        return None
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("scale ")]
    figures = {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}
    return {k: v for k, v in figures.items() if not math.isnan(v) and k not in ("hosts", "ranks")}


def figures_of(f: Figures) -> dict[str, float]:
    seconds = dict(f.seconds)
    if "hang_named" in seconds:  # what grows with the size is what comes after the timeout
        seconds["hang_named"] -= HANG_TIMEOUT
    return {
        **seconds,
        **f.steady,
        **({"processes_per_host": f.processes_per_host} if f.processes_per_host else {}),
        **({"store_requests_per_host": f.worst_phase_requests()} if f.store_requests else {}),
    }


def slope(a: tuple[int, float], b: tuple[int, float]) -> float:
    (x0, y0), (x1, y1) = a, b
    if y0 <= 0 or y1 <= 0:
        return float("nan")
    return math.log(y1 / y0) / math.log(x1 / x0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="16,64,256,1024")
    parser.add_argument("--procs-per-host", type=int, default=8)
    parser.add_argument("--bound", type=float, default=180.0)
    parser.add_argument(
        "--backend", choices=BACKENDS, default="local", help="whose launcher (tenter rehearse's)"
    )
    args = parser.parse_args()
    if "TENTER_HOME" in os.environ:
        return run(args)
    with tempfile.TemporaryDirectory(prefix="tenter-scale-") as home:  # the job directories
        os.environ["TENTER_HOME"] = home
        return run(args)


def run(args: argparse.Namespace) -> int:
    measured: dict[int, dict[str, float]] = {}
    for hosts in (int(h) for h in args.hosts.split(",")):
        if args.backend == "slurm":
            on_slurm = measure_on_slurm(hosts, args.procs_per_host, args.bound)
            if on_slurm is None:
                break
            measured[hosts] = on_slurm
            continue
        f = measure(hosts, args.procs_per_host, args.bound, args.backend)
        if f is None:
            break
        for what, value, target in rows(f, HANG_TIMEOUT):
            print(f"  {what:55} {value:>18} {target}")
        print(scale_line(f), flush=True)
        measured[hosts] = figures_of(f)
    anchored = measured if args.backend == "local" else {}
    for hosts in anchored:  # after the rehearsals: torch's import is not in their RSS
        anchor = torch_store_anchor(hosts)
        print(f"torch anchor: {hosts} TCPStore clients connect + set + get: {anchor:.2f} s")
    sizes = sorted(measured)
    for a, b in itertools.pairwise(sizes):
        slopes = " ".join(
            f"{k}={slope((a, measured[a][k]), (b, measured[b][k])):.2f}"
            for k in measured[b]
            if k in measured[a]
        )
        print(f"slope hosts={a}->{b} {slopes}")
    if len(sizes) < 2:
        print("no extrapolation: fewer than two sizes ran")
        return 0
    extrapolate(measured, sizes[-2], sizes[-1])
    return 0


def extrapolate(measured: dict[int, dict[str, float]], a: int, b: int) -> None:
    """The serial parts at :data:`EXTRAPOLATE` hosts, on paper, from the slope between the
    two largest sizes that ran (``a`` < ``b``): a per-host figure's slope 0 is constant per
    host, O(hosts) in all; the launcher's, 1 is linear."""
    print(f"extrapolation from hosts={a}->{b} (each agent on cores of its own; serial parts):")
    # status's CPU seconds, not its wall time: on shared cores that is the wait for one (a
    # 64->128 run at load 200 gave a wall slope of 2.46 and 4.2e5 s at 16,000 hosts).
    for key in ("store_requests_per_host", "launcher_core", "status_cpu_s"):
        if key not in measured[a] or key not in measured[b]:
            continue
        rate = slope((a, measured[a][key]), (b, measured[b][key]))
        for hosts in EXTRAPOLATE:
            value = measured[b][key] * (hosts / b) ** rate
            total = f", {value * hosts:.3g} in all" if key == "store_requests_per_host" else ""
            print(f"  {key} at {hosts} hosts: {value:.3g}{total} (slope {rate:.2f})")


if __name__ == "__main__":
    sys.exit(main())
