"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd (Debian's
slurm-wlm and munge, installed by scripts/install-system-deps.sh), started as root.

Everything lives in a temporary directory: the generated slurm.conf (this node's real CPU
count and memory, proctrack/linuxproc and task/none, which need no cgroups; select/cons_tres),
munged's socket, the daemons' state, spool, pid and log files. Ports are picked free on the
loopback interface. ``SLURM_CONF`` points Slurm's commands (and tenter's) at it. On exit every
job is cancelled, the daemons are stopped and waited for, and the directory is removed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

MUNGE_KEY = Path("/etc/munge/munge.key")
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    # The daemons take ports from their configuration file: the only way to give them one is
    # a number, so this is the one place a port is picked and then released.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _wait_until(what: str, condition: Callable[[], bool], log: Path | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise TimeoutError(f"{what} within {START_TIMEOUT_S} s\n{tail}")
        time.sleep(0.1)


def _pid_of(pid_file: Path) -> psutil.Process | None:
    try:
        return psutil.Process(int(pid_file.read_text()))
    except (OSError, ValueError, psutil.Error):
        return None


def slurm_conf(root: Path, node: str, cpus: int, memory_mb: int, ports: tuple[int, int]) -> str:
    return "\n".join(
        [
            "ClusterName=tenter-test",
            f"SlurmctldHost={node}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={ports[0]}",
            f"SlurmdPort={ports[1]}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def queue(env: dict[str, str]) -> list[str]:
    """The ids of every job Slurm still holds (pending, running or completing)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _controller_pid_file(env: dict[str, str]) -> Path:
    return Path(env["SLURM_CONF"]).parent / "slurmctld.pid"


def _controller_answers(env: dict[str, str]) -> bool:
    return subprocess.run(["squeue", "-h"], env=env, capture_output=True).returncode == 0


def stop_controller(env: dict[str, str]) -> None:
    """Stop slurmctld (as an upgrade or a crash does) and wait until it is gone; slurmd and
    the running jobs stay."""
    proc = _pid_of(_controller_pid_file(env))
    assert proc is not None, "slurmctld is not running"
    proc.terminate()
    proc.wait(timeout=START_TIMEOUT_S)


def start_controller(env: dict[str, str]) -> None:
    """Start slurmctld again from its saved state and wait until it answers."""
    subprocess.run(["/usr/sbin/slurmctld"], env=env, check=True)
    log = Path(env["SLURM_CONF"]).parent / "slurmctld.log"
    _wait_until("slurmctld did not answer after its restart", lambda: _controller_answers(env), log)


@contextmanager
def slurm_cluster() -> Iterator[dict[str, str]]:
    """Start the cluster; yields the environment (SLURM_CONF) to run Slurm commands with."""
    root = Path(tempfile.mkdtemp(prefix="tenter-slurm-", dir="/tmp"))
    root.chmod(0o755)  # munged refuses a socket in a directory others cannot traverse
    node = socket.gethostname().split(".")[0]
    memory_mb = psutil.virtual_memory().total // 2**20 - 512
    conf = root / "slurm.conf"
    conf.write_text(
        slurm_conf(root, node, os.cpu_count() or 1, memory_mb, (_free_port(), _free_port()))
    )
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    munge_dir = root / "munge"
    munge_dir.mkdir(mode=0o755)
    shutil.chown(munge_dir, "munge", "munge")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pid_files = [munge_dir / "munged.pid", root / "slurmctld.pid", root / "slurmd.pid"]
    try:
        # munged as the munge user, as its service does; it daemonises once ready.
        subprocess.run(
            [
                *("runuser", "-u", "munge", "--", "/usr/sbin/munged"),
                f"--key-file={MUNGE_KEY}",
                f"--socket={munge_dir / 'munge.socket'}",
                f"--pid-file={pid_files[0]}",
                f"--log-file={munge_dir / 'munged.log'}",
                f"--seed-file={munge_dir / 'seed'}",
            ],
            check=True,
        )
        subprocess.run(["/usr/sbin/slurmctld", "-i"], env=env, check=True)
        subprocess.run(["/usr/sbin/slurmd", "-N", node], env=env, check=True)

        def node_idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True
            )
            return out.stdout.strip() == "idle"

        _wait_until("the Slurm node did not become idle", node_idle, root / "slurmd.log")
        yield env
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        procs = [p for p in (_pid_of(f) for f in pid_files) if p is not None]
        for proc in reversed(procs):
            proc.terminate()
        _, alive = psutil.wait_procs(procs, timeout=30)
        for proc in alive:
            proc.kill()
        psutil.wait_procs(alive, timeout=10)
        shutil.rmtree(root, ignore_errors=True)
