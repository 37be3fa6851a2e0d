"""A real etcd 3.4 (Debian's etcd-server) with the v2 API that torch's etcd rendezvous needs,
for the rendezvous tests: on this machine's loopback, or on a host of its own."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil

READY = "ready to serve client requests"
START_TIMEOUT_S = 30.0


@contextmanager
def etcd_server(
    data_dir: Path, addr: str, ports: tuple[int, int], enter: Sequence[str] = ()
) -> Iterator[str]:
    """etcd serving clients at ``addr:ports[0]`` (peers: ``ports[1]``), started through the
    argv prefix ``enter`` (a host's namespaces) and stopped after; yields its endpoint."""
    binary = shutil.which("etcd")
    assert binary, "etcd is missing: run scripts/install-system-deps.sh (Debian etcd-server)"
    client, peer = (f"http://{addr}:{port}" for port in ports)
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "etcd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *enter,
                binary,
                *("--data-dir", str(data_dir / "data"), "--name", "t"),
                *("--listen-client-urls", client, "--advertise-client-urls", client),
                *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                *("--initial-cluster", f"t={peer}", "--enable-v2"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY not in log.read_text(errors="replace"):
            assert proc.poll() is None, f"etcd exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"etcd did not start: {log.read_text()[-2000:]}"
            time.sleep(0.1)
        yield f"{addr}:{ports[0]}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == "zombie"
