"""An MPIJob's launcher pod entry (:mod:`tenter.launch.kubernetes.mpi_launcher`): it serves the
ranks' store on the pod's address only, never on all interfaces, and runs mpirun with that
address and port in place; real Open MPI runs on this machine, a loopback address of its own
standing in for the pod's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tenter.contract.placeholders import MASTER_ADDR, MASTER_PORT
from tenter.launch.kubernetes.mpi_launcher import POD_IP_ENV

POD_IP = "127.0.0.2"
RANK = """
import datetime, os
import psutil
import torch.distributed as dist

store = dist.TCPStore(
    os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
    timeout=datetime.timedelta(seconds=60),
)
store.add("ranks", 1)
store.set(f"rank-{os.environ['OMPI_COMM_WORLD_RANK']}", "here")
store.wait(["rank-0", "rank-1"])  # both ranks added
launcher = next(
    p for p in psutil.Process().parents() if "mpi_launcher" in " ".join(p.cmdline())
)
listening = {c.laddr.ip for c in launcher.net_connections("tcp") if c.status == "LISTEN"}
rank = os.environ["OMPI_COMM_WORLD_RANK"]
with open(os.path.join(os.environ["OUT_DIR"], f"rank-{rank}"), "w") as out:
    out.write(f"rank {rank} of {os.environ['MASTER_ADDR']} store {store.add('ranks', 0)} "
              f"listening {sorted(listening)}")
"""


def _launch(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tenter.launch.kubernetes.mpi_launcher", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_mpirun_ranks_reach_the_store_served_on_the_pod_address_only(tmp_path: Path) -> None:
    rank = tmp_path / "rank.py"
    rank.write_text(RANK)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    argv = [
        "mpirun",
        *root,
        "--oversubscribe",
        "-np",
        "2",
        "-x",
        f"MASTER_ADDR={MASTER_ADDR}",
        "-x",
        f"MASTER_PORT={MASTER_PORT}",
        "-x",
        "OUT_DIR",
        sys.executable,
        str(rank),
    ]
    done = _launch(argv, {**os.environ, POD_IP_ENV: POD_IP, "OUT_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    # Each rank's own file: mpirun forwards the ranks' output in chunks that may interleave.
    lines = [(tmp_path / f"rank-{r}").read_text() for r in range(2)]
    assert lines == [f"rank {r} of {POD_IP} store 2 listening ['{POD_IP}']" for r in range(2)], (
        done.stdout
    )


def test_a_failing_mpirun_is_the_launchers_status(tmp_path: Path) -> None:
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    argv = ["mpirun", *root, "-np", "1", sys.executable, "-c", "raise SystemExit(7)"]
    done = _launch(argv, {**os.environ, POD_IP_ENV: POD_IP})
    assert done.returncode == 7, done.stderr


def test_without_the_pod_address_nothing_runs_and_the_error_says_what_to_set(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    env = {k: v for k, v in os.environ.items() if k != POD_IP_ENV}
    done = _launch(["touch", str(marker)], env)
    assert done.returncode == 2
    assert f"{POD_IP_ENV}=<the pod's address>" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()
