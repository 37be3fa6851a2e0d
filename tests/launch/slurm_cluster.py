"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd (Debian's
slurm-wlm and munge, installed by scripts/install-system-deps.sh), started as root.

Everything lives in a temporary directory: the generated slurm.conf (this node's real CPU
count and memory, proctrack/linuxproc and task/none, which need no cgroups; select/cons_tres),
munged's socket, the daemons' state, spool, pid and log files. Ports are picked free on the
loopback interface. ``SLURM_CONF`` points Slurm's commands (and tenter's) at it. On exit every
job is cancelled, the daemons are stopped and waited for, and the directory is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from tenter.contract.isolation import SWITCH_ADDR, etc_hosts, host_addr
from tenter.launch.launcher.isolation.hosts import files_only
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.runtime.parent_death import dies_with_parent
from tests.conftest import REPO, SCRIPTS, Finished, job_processes

MUNGE_KEY = Path("/etc/munge/munge.key")
SECOND_PARTITION, ACCOUNT = "second", "tenter-ml"
"""A partition besides the default one, and the only account allowed in it."""
JOB_SUBMIT_LUA = f"""
-- Only account {ACCOUNT} may use partition {SECOND_PARTITION}: a site policy, as clusters
-- enforce with job_submit.lua. (Partition AllowAccounts needs accounts that slurmdbd knows:
-- without it every job of the partition pends with "account not known".)
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.partition == "{SECOND_PARTITION}" and job_desc.account ~= "{ACCOUNT}" then
        slurm.log_user("partition {SECOND_PARTITION} needs --account={ACCOUNT}")
        return slurm.ESLURM_INVALID_ACCOUNT
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
"""
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    # The daemons take ports from their configuration file: the only way to give them one is
    # a number, so this is the one place a port is picked and then released.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def wait_until(
    what: str, condition: Callable[[], bool], log: Path | None = None, timeout: float = 120
) -> None:
    """Poll ``condition`` until it holds; a TimeoutError naming ``what`` (and the tail of
    ``log``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise TimeoutError(f"{what} within {timeout} s\n{tail}")
        time.sleep(0.1)


def _pid_of(pid_file: Path) -> psutil.Process | None:
    try:
        return psutil.Process(int(pid_file.read_text()))
    except (OSError, ValueError, psutil.Error):
        return None


@dataclass(frozen=True)
class Node:
    """A Slurm node (or the controller): its name and the address Slurm reaches it at."""

    name: str
    addr: str


def slurm_conf(
    root: Path,
    controller: Node,
    nodes: list[Node],
    cpus: int,
    memory_mb: int,
    ports: tuple[int, int],
    overrides: bool = False,
) -> str:
    """The cluster's slurm.conf; every slurmd file is per node (``%n``: its NodeName).
    ``overrides``: the nodes are what the file says, whatever this machine has (more CPUs)."""
    return "\n".join(
        [
            "ClusterName=tenter-test",
            f"SlurmctldHost={controller.name}({controller.addr})",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={ports[0]}",
            f"SlurmdPort={ports[1]}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool-%n'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            *(["SlurmdParameters=config_overrides"] if overrides else []),
            # The site's submission policy, next to this file (job_submit.lua).
            "JobSubmitPlugins=lua",
            *(
                f"NodeName={n.name} NodeAddr={n.addr} CPUs={cpus} RealMemory={memory_mb} "
                "State=UNKNOWN"
                for n in nodes
            ),
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            # A partition only the jobs of one account may use (job_submit.lua).
            f"PartitionName={SECOND_PARTITION} Nodes=ALL Default=NO MaxTime=INFINITE State=UP",
            "",
        ]
    )


def queue(env: dict[str, str]) -> list[str]:
    """The ids of every job Slurm still holds (pending, running or completing)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.split()


def _controller_pid_file(env: dict[str, str]) -> Path:
    return Path(env["SLURM_CONF"]).parent / "slurmctld.pid"


def _controller_answers(env: dict[str, str]) -> bool:
    done = subprocess.run(["squeue", "-h"], env=env, capture_output=True, timeout=60)
    return done.returncode == 0


def stop_controller(env: dict[str, str]) -> None:
    """Stop slurmctld (as an upgrade or a crash does) and wait until it is gone; slurmd and
    the running jobs stay."""
    proc = _pid_of(_controller_pid_file(env))
    assert proc is not None, "slurmctld is not running"
    proc.terminate()
    proc.wait(timeout=START_TIMEOUT_S)


def start_controller(env: dict[str, str]) -> None:
    """Start slurmctld again from its saved state and wait until it answers."""
    subprocess.run(["/usr/sbin/slurmctld"], env=env, check=True, timeout=60)
    log = Path(env["SLURM_CONF"]).parent / "slurmctld.log"
    wait_until("slurmctld did not answer after its restart", lambda: _controller_answers(env), log)


def _state_dirs() -> Path:
    """A fresh directory for one cluster's configuration, state, sockets and logs."""
    root = Path(tempfile.mkdtemp(prefix="tenter-slurm-", dir="/tmp"))
    root.chmod(0o755)  # munged refuses a socket in a directory others cannot traverse
    (root / "state").mkdir()
    munge_dir = root / "munge"
    munge_dir.mkdir()
    munge_dir.chmod(0o755)  # whatever the umask: munged checks the socket's folder too
    shutil.chown(munge_dir, "munge", "munge")
    return root


def _start_munged(root: Path) -> Path:
    """munged as the munge user, as its service does; it daemonises once ready. Its pid file."""
    munge_dir = root / "munge"
    pid_file = munge_dir / "munged.pid"
    subprocess.run(
        [
            *("runuser", "-u", "munge", "--", "/usr/sbin/munged"),
            f"--key-file={MUNGE_KEY}",
            f"--socket={munge_dir / 'munge.socket'}",
            f"--pid-file={pid_file}",
            f"--log-file={munge_dir / 'munged.log'}",
            f"--seed-file={munge_dir / 'seed'}",
        ],
        check=True,
        timeout=60,
    )
    return pid_file


def _stop(procs: list[psutil.Process]) -> None:
    """SIGTERM, a grace period, SIGKILL: and wait until every one is gone."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=30)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=10)


def _nodes_idle(sinfo: list[str], env: dict[str, str], count: int) -> Callable[[], bool]:
    def idle() -> bool:
        sinfo_nodes = [*sinfo, "-h", "-N", "-o", "%N %T"]
        out = subprocess.run(sinfo_nodes, env=env, capture_output=True, timeout=60)
        # A node is listed once per partition it is in.
        states = dict(line.split() for line in out.stdout.decode().splitlines() if line.strip())
        return list(states.values()) == ["idle"] * count

    return idle


@contextmanager
def slurm_cluster() -> Iterator[dict[str, str]]:
    """Start the cluster; yields the environment (SLURM_CONF) to run Slurm commands with."""
    root = _state_dirs()
    node = Node(socket.gethostname().split(".")[0], "127.0.0.1")
    memory_mb = psutil.virtual_memory().total // 2**20 - 512
    conf = root / "slurm.conf"
    ports = (_free_port(), _free_port())
    conf.write_text(slurm_conf(root, node, [node], os.cpu_count() or 1, memory_mb, ports))
    (root / "job_submit.lua").write_text(JOB_SUBMIT_LUA)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pid_files = [root / "munge" / "munged.pid", root / "slurmctld.pid"]
    pid_files.append(root / f"slurmd-{node.name}.pid")
    try:
        _start_munged(root)
        subprocess.run(["/usr/sbin/slurmctld", "-i"], env=env, check=True, timeout=60)
        subprocess.run(["/usr/sbin/slurmd", "-N", node.name], env=env, check=True, timeout=60)
        log = root / f"slurmd-{node.name}.log"
        wait_until("the Slurm node did not become idle", _nodes_idle(["sinfo"], env, 1), log)
        yield env
    finally:
        scancel = ["scancel", "--full", "-u", "root"]
        subprocess.run(scancel, env=env, capture_output=True, timeout=60)
        _stop([p for p in (_pid_of(f) for f in reversed(pid_files)) if p is not None])
        shutil.rmtree(root, ignore_errors=True)


# A cluster of several nodes, each in its own network namespace.

CONTROLLER = Node("switch", SWITCH_ADDR)
"""slurmctld runs on the switch's network (the login node): every node reaches it over the
bridge, and tenter and Slurm's commands run there too (:meth:`SlurmNodes.login`). The
machine's own network has no route to the hosts (HostNetwork creates nothing in it)."""
SLURMCTLD_PORT, SLURMD_PORT = 6817, 6818
"""Slurm's default ports: each daemon has a network of its own, so no port can be taken."""


@dataclass
class SlurmNodes:
    """A running multi-node cluster: its host network, nodes and Slurm environment."""

    net: HostNetwork
    nodes: list[Node]
    env: dict[str, str]
    root: Path

    def login(self, cwd: Path = REPO) -> list[str]:
        """The argv prefix that runs a command on the login node: the switch's network, and
        the cluster's names in ``/etc/hosts`` (in a mount namespace of the command's own)."""
        binds = [f"mount --bind {source} {target}" for target, source in self.net.etc.items()]
        return [
            *self.net.enter_switch(str(cwd)),
            *("unshare", "--mount", "--propagation", "private", "--"),
            *("sh", "-c", " && ".join([*binds, 'exec "$@"']), "login"),
        ]

    def tenter(self, *args: str, timeout: float = 180) -> Finished:
        """The tenter CLI on the login node, as a user there runs it."""
        done = subprocess.run(
            [*self.login(), sys.executable, "-m", "tenter", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env},
        )
        return Finished(done.returncode, done.stdout, done.stderr)

    def queue(self) -> list[str]:
        out = subprocess.run(
            [*self.login(), "squeue", "-h", "-o", "%i"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return out.stdout.split()

    def processes_on(self, node: str) -> list[psutil.Process]:
        """The processes in ``node``'s network namespace, less the one holding it."""
        holder = self.net.hosts[node].pid
        ns = os.readlink(f"/proc/{holder}/ns/net")
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if proc.pid != holder and os.readlink(f"/proc/{proc.pid}/ns/net") == ns:
                    found.append(proc)
        return found


def _etc_files(root: Path, hostnames: list[str]) -> dict[str, str]:
    """The cluster's ``/etc/hosts`` (every host's name at its address, as a cluster's DNS
    has it) and an ``nsswitch.conf`` that looks names up there only: the files every host
    and the login node see in place of this machine's."""
    files = {"/etc/hosts": etc_hosts(hostnames)}
    nsswitch = Path("/etc/nsswitch.conf")
    if nsswitch.exists():
        files[str(nsswitch)] = files_only(nsswitch.read_text())
    for target, text in files.items():
        (root / Path(target).name).write_text(text)
    return {target: str(root / Path(target).name) for target in files}


def _daemon(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A Slurm daemon in the foreground, stopped by the kernel if this process dies."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=dies_with_parent(signal.SIGTERM),
    )


@contextmanager
def slurm_nodes(
    count: int, others: Sequence[str] = (), cpus: int | None = None
) -> Iterator[SlurmNodes]:
    """``count`` Slurm nodes ``node-1`` ... on a HostNetwork: slurmctld on the switch, one
    slurmd per host (its own NodeName, NodeAddr, spool, pid and log files), one munged on
    this machine (its socket is a file: every namespace reaches it). ``others``: hosts of
    the same network that are no Slurm nodes (an etcd server's). ``cpus``: each node's, if
    more than this machine's (a job of 8 tasks a node asks for 8; the rehearsal's light ranks
    need little of one). Everything stops and goes on exit; a process left in a host's
    network is an error."""
    root = _state_dirs()
    hostnames = [*(f"node-{i + 1}" for i in range(count)), *others]
    nodes = [Node(name, host_addr(i)) for i, name in enumerate(hostnames[:count])]
    conf = root / "slurm.conf"
    # Each node offers this machine's cores (slurmd checks the configuration against them,
    # unless told the configuration overrides them).
    real = os.cpu_count() or 1
    ports = (SLURMCTLD_PORT, SLURMD_PORT)
    more = cpus is not None and cpus > real
    conf.write_text(slurm_conf(root, CONTROLLER, nodes, cpus or real, 1024, ports, more))
    (root / "job_submit.lua").write_text(JOB_SUBMIT_LUA)
    env = {"SLURM_CONF": str(conf), "PATH": os.environ["PATH"]}
    munged = _start_munged(root)
    daemons: list[subprocess.Popen[bytes]] = []
    net = HostNetwork(hostnames, etc=_etc_files(root, hostnames))
    cluster = SlurmNodes(net, nodes, env, root)
    try:
        net.start()
        daemons.append(_daemon([*net.enter_switch(), "/usr/sbin/slurmctld", "-D", "-i"], env))
        for node in nodes:
            slurmd = ["/usr/sbin/slurmd", "-D", "-N", node.name]
            daemons.append(_daemon([*net.enter(node.name), *slurmd], env))
        idle = _nodes_idle([*cluster.login(), "sinfo"], env, count)
        wait_until(f"{count} Slurm nodes did not become idle", idle, root / "slurmctld.log")
        yield cluster
    finally:
        subprocess.run([*cluster.login(), "scancel", "--full", "-u", "root"], env=env, timeout=60)
        with contextlib.suppress(TimeoutError):
            wait_until("the jobs did not leave the queue", lambda: cluster.queue() == [])
        _stop([psutil.Process(d.pid) for d in reversed(daemons) if d.poll() is None])
        for d in daemons:
            d.wait(timeout=60)
        left = {name: cluster.processes_on(name) for name in net.hosts}
        _stop([p for procs in left.values() for p in procs])
        net.close()
        _stop([p for p in [_pid_of(munged)] if p is not None])
        shutil.rmtree(root, ignore_errors=True)
    assert not any(left.values()), f"processes left on the nodes: {left}"


def cancel_when_ready(
    tenter: Callable[..., Finished], queue: Callable[[], list[str]], hosts: int, procs: int
) -> str:
    """Submit block.py on ``hosts`` x ``procs`` detached; once every rank says it is ready,
    ``tenter cancel`` it and wait until it left the queue as CANCELLED. Its logs.

    Slurm's SIGTERM is a preemption request to the job (docs/backends.md): block.py never
    checks for it, so the job stops once its ``preemption_grace`` is over, 2 s here."""
    spec = Path(os.environ["TENTER_HOME"]).parent / "cancelled-job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"entry_point": str(SCRIPTS / "block.py"), "checkpoint": {"preemption_grace": 2}}
        )
    )
    started = tenter(
        "run", str(spec), "--backend", "slurm", "--detach", "--hosts", str(hosts),
        "--procs-per-host", str(procs),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    job = started.stdout.strip()
    logs = Path(os.environ["TENTER_HOME"]) / "jobs" / job / "logs"
    ranks = [logs / f"rank-{r}.stdout" for r in range(hosts * procs)]
    wait_until(
        "every rank ready", lambda: all(p.exists() and "ready" in p.read_text() for p in ranks)
    )
    assert "RUNNING (Slurm job" in tenter("status", job).stdout
    cancelled = tenter("cancel", job)
    assert cancelled.returncode == 0 and "cancelled Slurm job" in cancelled.stdout
    wait_until("the job to leave the queue", lambda: queue() == [])
    assert "CANCELLED" in tenter("status", job).stdout
    wait_until("its processes to end", lambda: job_processes(job) == [])
    shown: str = tenter("logs", job).stdout
    return shown
