"""``<job_dir>/network.json``: a running job's host network, for other processes.

The launcher writes it once the network is up (and again when a host joins); ``tenter fault``,
``tenter doctor --job`` and tests re-open the network with :func:`attach` to enter a host or
cut it off. The record names each namespace holder by pid *and* start time: a holder that
died (the job ended) and whose pid was reused is not taken for the job's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tenter.errors import JobNotFoundError, TenterError
from tenter.jobdir.layout import NETWORK_FILE, write_atomic
from tenter.launch.launcher.isolation.network import HostNetwork, Namespaces
from tenter.launch.shared.processes import alive


def write(network: HostNetwork, job_dir: str) -> None:
    assert network.switch is not None, "record a started network"
    record: dict[str, Any] = {
        "user_namespace": network.user_namespace,
        "switch": _holder(network.switch),
        "hosts": {name: _holder(network.hosts[name]) for name in network.hostnames},
    }
    write_atomic(Path(job_dir) / NETWORK_FILE, json.dumps(record, indent=2))


def _holder(ns: Namespaces) -> dict[str, Any]:
    # The network namespace's inode: what `lsns` lists, so that a test can tell that this
    # job's namespaces are gone among those of other jobs.
    netns = os.stat(f"/proc/{ns.pid}/ns/net").st_ino
    return {"pid": ns.pid, "identity": ns.identity, "netns": netns}


def attach(job_dir: str | Path) -> HostNetwork:
    """The host network of the job in ``job_dir``, while it runs: it can enter, partition and
    heal hosts; its ``close()`` leaves the network to its launcher."""
    path = Path(job_dir) / NETWORK_FILE
    if not path.exists():
        raise TenterError(
            str(job_dir),
            "the job has no host network (it did not run with isolation: network)",
            "run the job with --isolation network (or isolation: network in the spec)",
        )
    record = json.loads(path.read_text())

    def holder(name: str, entry: dict[str, Any]) -> Namespaces:
        if alive(entry["identity"]) is None:
            raise JobNotFoundError(
                str(job_dir),
                f"the job's host network is gone ({name}'s namespaces ended with the job)",
                "start the job again; `tenter status JOB` says whether it runs",
            )
        return Namespaces(name, int(entry["pid"]), entry["identity"])

    hosts = {name: holder(name, entry) for name, entry in record["hosts"].items()}
    return HostNetwork(
        hostnames=list(hosts),
        user_namespace=bool(record["user_namespace"]),
        switch=holder("switch", record["switch"]),
        hosts=hosts,
        owner=False,
    )
