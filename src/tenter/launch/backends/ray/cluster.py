"""A Ray cluster on this machine for one job: one Ray node (its own raylet) per host of the
job, all at 127.0.0.1, with Ray's token authentication on, started with ``ray start --block``
and stopped by signalling those processes, never by ``ray stop`` (which would stop every Ray
cluster of the machine).

The nodes share a temporary directory of their own (``--temp-dir``), removed with the
cluster; node ``i`` offers the resource ``tenter_host_<i>`` that pins host ``i`` to it. What
the job's plan shows (``tenter plan --backend ray``) holds ``${ray_port}`` and
``${ray_temp_dir}`` until the cluster starts.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tenter.contract.placeholders import resolve
from tenter.errors import BackendRefusedError
from tenter.launch.shared.processes import kill_all, start_process

RAY_PORT = "${ray_port}"
RAY_TEMP_DIR = "${ray_temp_dir}"
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
TOKEN_FILE = "auth_token"
NODE_HEALTH = {"RAY_health_check_period_ms": "100", "RAY_health_check_failure_threshold": "3"}
"""How soon the GCS calls a node whose raylet is gone dead (within a second, not Ray's default
15 s), so that its host counts as lost before its peers' broken collectives restart them into
a rendezvous round that would wait for it. A killed raylet refuses each check at once; a busy
one still has Ray's 10 s to answer each."""


def host_resource(index: int) -> str:
    """The Ray resource only host ``index``'s node has."""
    return f"tenter_host_{index}"


def node_commands(host_gpus: list[list[str]], ray_bin: str) -> list[list[str]]:
    """``ray start`` of each node (one per host, ``host_gpus[i]`` its GPUs): the head (host 0,
    which serves the GCS) first. Node ``i`` offers exactly host ``i``'s GPUs, as
    ``CUDA_VISIBLE_DEVICES`` names them, which Ray then hands out (``ray.get_gpu_ids()``)."""
    common = [
        "--block",
        "--node-ip-address",
        LOOPBACK,
        "--temp-dir",
        RAY_TEMP_DIR,
        "--disable-usage-stats",
        # The driver does not stream the workers' output (the agents write the job's logs).
        "--include-log-monitor=false",
        # Any free port for each node's dashboard agent (with ray[default]), not Ray's 52365
        # for every node of the machine.
        "--dashboard-agent-listen-port",
        "0",
    ]
    commands = []
    for index, gpus in enumerate(host_gpus):
        where = (
            ["--head", "--port", RAY_PORT, "--include-dashboard=false"]
            if index == 0
            else ["--address", f"{LOOPBACK}:{RAY_PORT}"]
        )
        resources = json.dumps({host_resource(index): 1}, separators=(",", ":"))
        # Declared, not detected: Ray would give every node all of this machine's GPUs.
        own_gpus = ["env", f"CUDA_VISIBLE_DEVICES={','.join(gpus)}"] if gpus else []
        argv = [ray_bin, "start", *where, *common, "--num-gpus", str(len(gpus))]
        commands.append([*own_gpus, *argv, "--resources", resources])
    return commands


def free_port() -> int:
    with socket.create_server((LOOPBACK, 0)) as probe:
        port: int = probe.getsockname()[1]
        return port


@dataclass
class LocalCluster:
    """The running nodes (their ``ray start --block`` processes) and their directory."""

    temp_dir: str
    address: str
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def auth_env(self) -> dict[str, str]:
        """Ray's token authentication, for the nodes and the driver: the token is in a file
        only this user reads (in the cluster's directory), not in any environment."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": f"{self.temp_dir}/{TOKEN_FILE}"}

    @classmethod
    def start(cls, commands: list[list[str]], log_dir: Path) -> LocalCluster:
        # In /tmp, whatever TMPDIR says: Ray's Unix sockets live under it, and a socket's path
        # may not exceed 107 bytes.
        temp_dir = tempfile.mkdtemp(prefix="tenter-ray-", dir="/tmp")
        port = free_port()
        values = {RAY_PORT: port, RAY_TEMP_DIR: temp_dir}
        cluster = cls(temp_dir, f"{LOOPBACK}:{port}")
        token = Path(temp_dir) / TOKEN_FILE
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
        try:
            # All at once: the other nodes wait for the head's GCS themselves.
            for index, argv in enumerate(commands):
                with open(log_dir / f"ray-node-{index}.log", "wb") as log:
                    # SIGTERM when the launcher dies: `ray start --block` then stops its node.
                    argv = [resolve(a, values) for a in argv]
                    # TMPDIR: what Ray's processes leave there (multiprocessing's pymp-*
                    # folders) goes with the cluster's directory.
                    env = {**cluster.auth_env, **NODE_HEALTH, "TMPDIR": temp_dir}
                    cluster.nodes.append(start_process(argv, env, "/", log))
            cluster._wait_for_head(log_dir)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _wait_for_head(self, log_dir: Path) -> None:
        host, port = self.address.split(":")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.nodes[0].poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 1):
                return
            time.sleep(0.2)
        raise BackendRefusedError(
            "ray.address",
            f"ray: the local cluster's head did not serve {self.address} within "
            f"{START_TIMEOUT_S:.0f} s",
            f"see {log_dir / 'ray-node-0.log'}; or give the address of a running cluster",
        )

    def stop(self) -> None:
        """Stop the nodes this job started (and any process left in their directory)."""
        for node in self.nodes:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
        for node in self.nodes:
            try:
                node.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
        kill_all(_processes_using(self.temp_dir))
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _processes_using(temp_dir: str) -> list[psutil.Process]:
    """Ray's processes of this cluster: each names its session directory in its arguments."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(temp_dir in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
    return found
