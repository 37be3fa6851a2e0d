"""The control plane at scale: ``python benchmarks/control_plane_scale.py --hosts 16,64,256,1024``.

Runs ``tenter rehearse``'s phases (:mod:`tenter.rehearsal.drive`: tenter's real launcher and
agents, light torch-free ranks) at each size, prints each size's table and one line
``scale hosts=H ranks=R first_step_s=... store_requests_per_host=...``, then each figure's slope
(log-log, between consecutive sizes: 1.0 is linear), and, beside it, torch's own anchor at the
same size: N ``TCPStore`` clients of one store in this process connecting and each setting
and reading one key. Ends with an extrapolation to 4,000 and 16,000 hosts from the serial
parts (store requests, the launcher's CPU), assuming each host's agent has cores of its own.
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


def figures_of(f: Figures) -> dict[str, float]:
    counted = {"store_requests_per_host": f.worst_phase_requests()} if f.store_requests else {}
    return {**f.seconds, **f.steady, **counted}


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
        f = measure(hosts, args.procs_per_host, args.bound, args.backend)
        if f is None:
            break
        for what, value, target in rows(f, HANG_TIMEOUT):
            print(f"  {what:55} {value:>18} {target}")
        print(scale_line(f), flush=True)
        measured[hosts] = figures_of(f)
    for hosts in measured:  # after the rehearsals: torch's import is not in their RSS
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
    if len(sizes) >= 2:
        a, b = sizes[-2], sizes[-1]
        print("extrapolation (each agent on cores of its own; the store and launcher serial):")
        for key in ("store_requests_per_host", "launcher_core", "status_s"):
            if key not in measured[b]:  # mpi: no agents, no store requests counted
                continue
            rate = slope((a, measured[a][key]), (b, measured[b][key]))
            for hosts in EXTRAPOLATE:
                value = measured[b][key] * (hosts / b) ** rate
                print(f"  {key} at {hosts} hosts: {value:.3g} (slope {rate:.2f} from {a}->{b})")
            total = measured[b][key] * b if key == "store_requests_per_host" else None
            if total is not None:
                print(f"  store requests in the worst phase at {b} hosts: {total:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
