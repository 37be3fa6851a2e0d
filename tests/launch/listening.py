"""What a running job's processes listen on, and whether it is the job's own addresses: for
the tests that check each job kind's servers (tests/launch/agent/test_listening.py, the torchft
and security suites)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import subprocess
from pathlib import Path

import psutil

from tenter.jobdir import layout


def listening(procs: list[psutil.Process]) -> dict[str, list[str]]:
    """Process (name and pid) -> the addresses its TCP sockets listen on.

    Read with ``ss`` in each network namespace the processes are in: psutil reads the
    sockets of the caller's namespace only, and isolated hosts have their own."""
    names = {}
    namespaces: dict[int, int] = {}  # the namespace's inode -> a process in it
    for proc in procs:
        try:
            names[proc.pid] = " ".join(proc.cmdline()[:4])
            namespaces[os.stat(f"/proc/{proc.pid}/ns/net").st_ino] = proc.pid
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
    found: dict[str, list[str]] = {}
    for pid in namespaces.values():
        ss = ["nsenter", "--target", str(pid), "--net", "ss", "--no-header", "-ltnp"]
        table = subprocess.run(ss, capture_output=True, text=True, timeout=30, check=True)
        for line in table.stdout.splitlines():
            address = line.split()[3]
            for owner in {int(p) for p in re.findall(r"pid=(\d+)", line)} & names.keys():
                found.setdefault(f"{names[owner]} (pid {owner})", []).append(address)
    return found


def with_tenters_above(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` and tenter's processes above them: Slurm starts a node's agent (and the
    first node's rendezvous store) with Slurm's environment, which names no job."""
    found = {p.pid: p for p in procs}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            for parent in proc.parents():
                if any(arg.startswith("tenter.") for arg in parent.cmdline()):
                    found[parent.pid] = parent
    return list(found.values())


def _host(address: str) -> str:
    """``ss``'s ``127.0.0.1:PORT``, ``[::1]:PORT``, ``127.0.0.53%lo:PORT`` -> the address."""
    return address.rpartition(":")[0].strip("[]").partition("%")[0]


def everywhere(address: str) -> bool:
    """``ss``'s ``*:PORT``, ``0.0.0.0:PORT``, ``[::]:PORT``: all interfaces."""
    host = _host(address)
    return host == "*" or ipaddress.ip_address(host).is_unspecified


def own_addresses(job_dir: Path) -> set[str]:
    """The addresses the job's plan gives it: its hosts' (spares' too), the rendezvous
    store's (the bridge, for isolated hosts), torchft's lighthouse's."""
    plan = json.loads((job_dir / layout.PLAN_FILE).read_text())
    hosts = {h["addr"] for h in [*plan["hosts"], *plan.get("spare_hosts", [])]}
    endpoints = [plan["rdzv_endpoint"], plan.get("lighthouse", "").removeprefix("http://")]
    return hosts | {e.rpartition(":")[0].strip("[]") for e in endpoints if e}


def foreign(found: dict[str, list[str]], own: set[str]) -> dict[str, list[str]]:
    """The processes of ``found`` that listen on an address neither loopback nor ``own``."""

    def is_own(address: str) -> bool:
        host = _host(address)
        if host == "*":
            return False
        ip = ipaddress.ip_address(host)
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        return host in own or ip.is_loopback or bool(mapped and mapped.is_loopback)

    return {who: addrs for who, addrs in found.items() if not all(map(is_own, addrs))}
